"""The fused labels and placement of sharded sampling in i.i.d. order
(torch.ops.wrs._ordered_labels, _ordered_place, _ordered_fill; csrc/distributed/place.h states the law):
each position's part follows the parts' weights, each block's counts are its labels', and
the placement puts part p's draws, in order, at the positions labelled p."""
import pytest
import torch

import torch_wrs
from helpers import g_test_pvalue

P_MIN = 1e-4


def _cdf(totals, device):
    t = torch.tensor(totals, dtype=torch.float64, device=device)
    return torch.cumsum(t, 0) / t.sum()


@pytest.mark.parametrize("count", [0, 1, 4097, 1_000_001])
def test_labels_follow_the_weights_and_blocks_count_them(device, count):
    totals = [3.0, 0.0, 1.0, 6.0, 0.5]
    labels, blocks = torch.ops.wrs._ordered_labels(_cdf(totals, device), count,
                                                   generator=torch.Generator(device).manual_seed(5))
    assert labels.dtype == torch.uint8 and labels.shape == (count,) and blocks.shape == (-(-count // 4096), 5)
    assert blocks.sum() == count
    for b in range(blocks.shape[0]):
        chunk = labels[b * 4096:(b + 1) * 4096].long()
        assert torch.equal(torch.bincount(chunk, minlength=5), blocks[b])
    assert not (labels == 1).any(), "a zero-weight part was labelled"
    if count > 1000:
        p = torch.tensor(totals, dtype=torch.float64) / sum(totals)
        assert g_test_pvalue(torch.bincount(labels.long().cpu(), minlength=5), p) > P_MIN


def test_labels_are_reproducible_and_seeded(device):
    cdf = _cdf([1.0, 1.0, 1.0], device)
    draw = lambda seed: torch.ops.wrs._ordered_labels(cdf, 10_000, generator=torch.Generator(device).manual_seed(seed))[0]
    assert torch.equal(draw(1), draw(1)) and not torch.equal(draw(1), draw(2))
    torch.manual_seed(3)
    a = torch.ops.wrs._ordered_labels(cdf, 10_000)[0]
    torch.manual_seed(3)
    assert torch.equal(a, torch.ops.wrs._ordered_labels(cdf, 10_000)[0])


def test_labels_with_many_parts_and_every_position_independent(device):
    """256 parts, the most a byte labels; pairs of neighbouring positions share a Philox
    block, so their labels are checked for independence too."""
    cdf = _cdf([1.0] * 256, device)
    labels, _ = torch.ops.wrs._ordered_labels(cdf, 1 << 21, generator=torch.Generator(device).manual_seed(8))
    lab = labels.long().cpu()
    assert g_test_pvalue(torch.bincount(lab, minlength=256), torch.full((256,), 1 / 256, dtype=torch.float64)) > P_MIN
    pairs = (lab[0::2] % 4) * 4 + lab[1::2] % 4
    assert g_test_pvalue(torch.bincount(pairs, minlength=16), torch.full((16,), 1 / 16, dtype=torch.float64)) > P_MIN


@pytest.mark.parametrize("parts", [1, 2, 3, 9, 256])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_place_puts_each_part_in_order_at_its_labels(device, parts, dtype):
    n = 3 * 4096 + 17
    labels = torch.randint(parts, (n,), generator=torch.Generator().manual_seed(parts)).to(torch.uint8)
    counts = torch.bincount(labels.long(), minlength=parts)
    grouped = torch.cat([torch.arange(int(c)) * 1000 + p for p, c in enumerate(counts)]).to(dtype)
    blocks = torch.stack([torch.bincount(labels[b:b + 4096].long(), minlength=parts) for b in range(0, n, 4096)])
    start = blocks.cumsum(0) - blocks + (counts.cumsum(0) - counts)
    out = torch.ops.wrs._ordered_place(grouped.to(device), labels.to(device), start.to(device)).cpu()
    assert out.dtype == dtype
    assert torch.equal(out.long() % 1000, labels.long())
    for p in range(parts):
        assert torch.equal(out[labels == p].long() // 1000, torch.arange(int(counts[p])))


def test_errors(device):
    cdf = _cdf([1.0, 2.0], device)
    with pytest.raises(RuntimeError, match="cdf must be 1-D float64"):
        torch.ops.wrs._ordered_labels(cdf.float(), 10)
    with pytest.raises(RuntimeError, match="1 to 256 parts"):
        torch.ops.wrs._ordered_labels(_cdf([1.0] * 257, device), 10)
    with pytest.raises(RuntimeError, match="count must be non-negative"):
        torch.ops.wrs._ordered_labels(cdf, -1)
    labels = torch.zeros(10, dtype=torch.uint8, device=device)
    start = torch.zeros(1, 2, dtype=torch.int64, device=device)
    with pytest.raises(RuntimeError, match="one length"):
        torch.ops.wrs._ordered_place(torch.zeros(9, dtype=torch.int64, device=device), labels, start)
    with pytest.raises(RuntimeError, match="labels must be uint8"):
        torch.ops.wrs._ordered_place(torch.zeros(10, dtype=torch.int64, device=device), labels.long(), start)
    with pytest.raises(RuntimeError, match="a row per block"):
        torch.ops.wrs._ordered_place(torch.zeros(10, dtype=torch.int64, device=device), labels, start.view(2, 1))


@pytest.mark.parametrize("own", [0, 2, -1])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_fill_places_the_received_and_draws_the_own_part_as_alias_sample(device, own, dtype):
    """Positions of other parts get their received draws in order plus the part's offset;
    positions labelled `own` get alias_sample's baseline draw of the same index from the
    own table, with the same generator state (so the own draws are i.i.d. in order)."""
    parts, n = 3, 3 * 4096 + 17
    labels = torch.randint(parts, (n,), generator=torch.Generator().manual_seed(4)).to(torch.uint8)
    blocks = torch.stack([torch.bincount(labels[b:b + 4096].long(), minlength=parts) for b in range(0, n, 4096)])
    if own >= 0:
        blocks[:, own] = 0
    counts = blocks.sum(0)
    received = torch.cat([torch.arange(int(c)) * 10 + p for p, c in enumerate(counts)]).to(dtype)
    start = blocks.cumsum(0) - blocks + (counts.cumsum(0) - counts)
    offsets = torch.tensor([0, 1 << 40, 5 << 40])
    w = torch.rand(5000, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    table = torch_wrs.alias_table(w.to(device)) if own >= 0 else torch.zeros(0, dtype=torch.int64, device=device)
    out = torch.ops.wrs._ordered_fill(received.to(device), labels.to(device), start.to(device), offsets.to(device),
                                      table, own, generator=torch.Generator(device).manual_seed(9)).cpu()
    assert out.dtype == torch.int64 and out.shape == (n,)
    lab = labels.long()
    for p in range(parts):
        if p == own:
            ref = torch.ops.wrs.alias_sample(table, n, generator=torch.Generator(device).manual_seed(9)).cpu()
            assert torch.equal(out[lab == p], ref[lab == p] + offsets[p])
        else:
            local = out[lab == p] - offsets[p]
            assert torch.equal(local % 10, torch.full_like(local, p))
            assert torch.equal(local // 10, torch.arange(int(counts[p])))


def test_fill_errors(device):
    labels = torch.zeros(10, dtype=torch.uint8, device=device)
    start = torch.zeros(1, 2, dtype=torch.int64, device=device)
    offsets = torch.zeros(2, dtype=torch.int64, device=device)
    table = torch_wrs.alias_table(torch.ones(4, device=device))
    rec = torch.zeros(10, dtype=torch.int32, device=device)
    fill = torch.ops.wrs._ordered_fill
    with pytest.raises(RuntimeError, match="received must be 1-D int32 or int64"):
        fill(rec.float(), labels, start, offsets, table, 0)
    with pytest.raises(RuntimeError, match="offsets must be int64 \\[parts\\]"):
        fill(rec, labels, start, offsets[:1], table, 0)
    with pytest.raises(RuntimeError, match="own must be a part or -1, got 2"):
        fill(rec, labels, start, offsets, table, 2)
    with pytest.raises(RuntimeError, match="table must be a non-empty 1-D int64 alias table"):
        fill(rec, labels, start, offsets, table[:0], 0)
    with pytest.raises(RuntimeError, match="a row per block"):
        fill(rec, labels, start.view(2, 1), offsets, table, 0)
