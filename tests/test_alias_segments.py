"""torch.ops.wrs._alias_sample_segments: independent multisets from a run of buckets of
one table in one pass (the owner's side of sharded sampling). Each segment's draws follow
the law the run's buckets encode, reconstructed here from the table itself: bucket b,
chosen uniformly, keeps b with probability threshold / 2^32, else gives its alias."""
import pytest
import torch

import torch_wrs
from helpers import g_test_pvalue

P_MIN = 1e-4


def run_law(table, begin, end):
    """The law of a draw from buckets [begin, end) of a 1-D table, from its entries."""
    t = table[begin:end].cpu()
    keep = (t & 0xFFFFFFFF).double() / 2**32
    alias = t >> 32
    p = torch.zeros(table.numel(), dtype=torch.float64)
    p.index_add_(0, torch.arange(begin, end), keep)
    p.index_add_(0, alias, 1 - keep)
    return p / (end - begin)


def weights(n, seed=0):
    w = torch.rand(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) ** 3
    w[::5] = 0
    return w


@pytest.mark.parametrize("n,counts,begin,end", [
    (50_000, [300_000, 0, 200_000], 0, -1),        # several segments, one empty, the whole table
    (50_000, [150_000, 250_000], 7_001, 31_337),   # a run of buckets, unaligned
    (3_000, [40_000], 0, -1),                      # one section
])
def test_each_segment_follows_the_runs_law(device, n, counts, begin, end):
    w = weights(n)
    table = torch_wrs.alias_table(w.to(device))
    out = torch.ops.wrs._alias_sample_segments(table, counts, begin, end,
                                               generator=torch.Generator(device).manual_seed(1))
    assert out.shape == (sum(counts),) and out.dtype == torch.int64
    law = run_law(table, begin, n if end < 0 else end)
    if end < 0:  # the whole table encodes w / W
        torch.testing.assert_close(law, w / w.sum(), atol=1e-9, rtol=0)
    at = 0
    for c in counts:
        seg = out[at:at + c].cpu()
        at += c
        if c:
            assert g_test_pvalue(torch.bincount(seg, minlength=n), law) > P_MIN


def test_segments_are_independent_and_reproducible(device):
    """Two segments of one call: different draws, and coarse-bin counts of one uncorrelated
    with the other's over many calls; a seed gives the same draws again."""
    n = 40_000
    table = torch_wrs.alias_table(weights(n, 3).to(device))
    gen = torch.Generator(device).manual_seed(7)
    a = torch.ops.wrs._alias_sample_segments(table, [100_000, 100_000], generator=gen)
    b = torch.ops.wrs._alias_sample_segments(table, [100_000, 100_000],
                                             generator=torch.Generator(device).manual_seed(7))
    assert torch.equal(a, b)
    assert not torch.equal(a[:100_000].sort().values, a[100_000:].sort().values)
    # Each segment's count in the table's first half, over 400 calls of 2,000 draws a segment:
    # independent segments give a correlation within a few standard errors (1 / sqrt(400)).
    first, second = [], []
    for _ in range(400):
        d = torch.ops.wrs._alias_sample_segments(table, [2_000, 2_000], generator=gen).cpu()
        first.append(float((d[:2000] < n // 2).sum()))
        second.append(float((d[2000:] < n // 2).sum()))
    r = torch.corrcoef(torch.tensor([first, second]))[0, 1]
    assert abs(float(r)) < 4 / 20


def test_int32_empty_and_errors(device):
    table = torch_wrs.alias_table(weights(1000).to(device))
    out = torch.ops.wrs._alias_sample_segments(table, [5, 7], dtype=torch.int32)
    assert out.dtype == torch.int32 and out.shape == (12,) and int(out.min()) >= 0 and int(out.max()) < 1000
    assert torch.ops.wrs._alias_sample_segments(table, [0, 0]).shape == (0,)
    assert torch.ops.wrs._alias_sample_segments(table, [0], 10, 10).shape == (0,)
    with pytest.raises(RuntimeError, match="table must be a 1-D int64 table"):
        torch.ops.wrs._alias_sample_segments(table.view(10, 100), [5])
    with pytest.raises(RuntimeError, match="counts must hold 1 to 256 segments"):
        torch.ops.wrs._alias_sample_segments(table, [])
    with pytest.raises(RuntimeError, match="counts must be non-negative, got -1 for segment 1"):
        torch.ops.wrs._alias_sample_segments(table, [3, -1])
    with pytest.raises(RuntimeError, match=r"0 <= begin <= end <= 1000, got 5 and 2000"):
        torch.ops.wrs._alias_sample_segments(table, [3], 5, 2000)
    with pytest.raises(RuntimeError, match="ask for 3 draws from no buckets"):
        torch.ops.wrs._alias_sample_segments(table, [3], 10, 10)
