"""Sectioned sampling (ordered=False): the section counts are exactly multinomial
(binomial splits down a tree), the samples have the table's law, and the usual contract
(seeds, int32, batches, graphs) holds for both sectioned methods."""
import pytest
import scipy.stats
import torch

import torch_wrs
from conftest import requires_cuda
from helpers import g_test_pvalue

P_MIN = 1e-4
SECTION = {"shared": 6144, "cached": 16384}  # kSharedSectionBuckets, kCachedSectionBuckets
METHODS = list(SECTION)


def identity_table(n, device):
    """A valid table of the uniform law whose every bucket aliases itself, so a draw's
    value is the bucket it landed in and section counts can be read off the output."""
    k = torch.arange(n, dtype=torch.int64, device=device)
    return (k << 32) | 0xFFFFFFFF


def section_counts(samples, section, sections):
    """[..., sections] counts of each row's draws per section."""
    s = (samples // section).reshape(-1, samples.shape[-1])
    counts = torch.zeros(s.shape[0], sections, dtype=torch.int64, device=s.device)
    return counts.scatter_add_(1, s, torch.ones_like(s))


def three_section_calls(method, device, num_samples, calls, seed):
    """Section counts of `calls` independent draws from a row of two full sections and
    a short third one (so the tree's splits are uneven)."""
    size = SECTION[method]
    n = 2 * size + 4000
    table = identity_table(n, device)
    gen = torch.Generator(device).manual_seed(seed)
    out = torch.stack([torch_wrs.alias_sample(table, num_samples, ordered=False, method=method, generator=gen)
                       for _ in range(calls)])
    probs = torch.tensor([size, size, 4000], dtype=torch.float64) / n
    return section_counts(out, size, 3).cpu(), probs


@pytest.mark.parametrize("method", METHODS)
def test_small_counts_are_exactly_multinomial(method, device):
    """8 draws over 3 sections (the inversion branch of the binomial): the joint law of
    the 45 possible count vectors, from 20,000 calls, against the multinomial pmf."""
    counts, probs = three_section_calls(method, device, 8, 20_000, seed=21)
    cells = [(a, b, 8 - a - b) for a in range(9) for b in range(9 - a)]
    index = {c: i for i, c in enumerate(cells)}
    observed = torch.zeros(len(cells), dtype=torch.float64)
    for row in counts.tolist():
        observed[index[tuple(row)]] += 1
    pmf = torch.tensor([scipy.stats.multinomial.pmf(c, 8, probs.numpy()) for c in cells])
    assert g_test_pvalue(observed, pmf) > P_MIN


@pytest.mark.parametrize("method", METHODS)
def test_large_counts_are_exactly_binomial(method, device):
    """600 draws (the BTRS branch): each section's count over 20,000 calls against its
    binomial pmf; the first is the root's split, the last composes two splits."""
    counts, probs = three_section_calls(method, device, 600, 20_000, seed=22)
    for s in (0, 2):
        observed = torch.bincount(counts[:, s], minlength=601).double()
        pmf = torch.from_numpy(scipy.stats.binom.pmf(range(601), 600, float(probs[s])))
        assert g_test_pvalue(observed, pmf) > P_MIN


@pytest.mark.parametrize("name,weights", [
    ("power_law_with_zeros", lambda g: torch.arange(1, 40_778, dtype=torch.float64).pow(-1.0)[torch.randperm(40_777, generator=g)]
     * (torch.rand(40_777, generator=g) < 0.7)),
    ("uniform", lambda g: torch.rand(30_001, generator=g, dtype=torch.float64)),
])
@pytest.mark.parametrize("method", METHODS)
def test_law_of_the_samples(method, name, weights, device):
    g = torch.Generator().manual_seed(23)
    w = weights(g)
    table = torch_wrs.alias_table(w.to(device))
    num_samples = 100_000_000 if device.type == "cuda" else 2_000_000
    s = torch_wrs.alias_sample(table, num_samples, ordered=False, method=method,
                               generator=torch.Generator(device).manual_seed(24))
    assert g_test_pvalue(torch.bincount(s, minlength=len(w)), w) > P_MIN


@pytest.mark.parametrize("method", METHODS)
def test_batched_rows_and_int32(method, device):
    g = torch.Generator().manual_seed(25)
    w = torch.rand(3, 2 * SECTION[method] + 99, generator=g) ** 3
    w[1, ::3] = 0
    table = torch_wrs.alias_table(w.to(device))
    wide = torch_wrs.alias_sample(table, 400_000, ordered=False, method=method,
                                  generator=torch.Generator(device).manual_seed(26))
    narrow = torch_wrs.alias_sample(table, 400_000, ordered=False, method=method, dtype=torch.int32,
                                    generator=torch.Generator(device).manual_seed(26))
    assert wide.shape == (3, 400_000) and narrow.dtype == torch.int32
    assert torch.equal(narrow.long(), wide)
    for r in range(3):
        assert g_test_pvalue(torch.bincount(wide[r].cpu(), minlength=w.shape[1]), w[r]) > P_MIN


def test_auto_groups_draws_by_section_only_when_unordered(device):
    n = 100_000
    table = identity_table(n, device)
    unordered = torch_wrs.alias_sample(table, 50_000, ordered=False)
    sections = unordered // SECTION["shared"]
    assert (sections[1:] >= sections[:-1]).all(), "auto did not take the sectioned path"
    ordered = torch_wrs.alias_sample(table, 50_000)
    assert not (ordered[1:] >= ordered[:-1]).all()
    # Few draws per bucket: the baseline serves ordered=False too (still a valid multiset).
    few = torch_wrs.alias_sample(table, 1000, ordered=False)
    assert not (few[1:] >= few[:-1]).all()


@pytest.mark.parametrize("method", METHODS)
def test_seeds_reproduce_and_differ(method, device):
    table = identity_table(3 * SECTION[method] + 5, device)

    def draw(seed):
        return torch_wrs.alias_sample(table, 100_001, ordered=False, method=method,
                                      generator=torch.Generator(device).manual_seed(seed))

    assert torch.equal(draw(7), draw(7))
    assert not torch.equal(draw(7), draw(8))
    torch.manual_seed(3)
    a = torch_wrs.alias_sample(table, 1000, ordered=False, method=method)
    b = torch_wrs.alias_sample(table, 1000, ordered=False, method=method)
    torch.manual_seed(3)
    assert torch.equal(a, torch_wrs.alias_sample(table, 1000, ordered=False, method=method))
    assert not torch.equal(a, b)


def test_sectioned_edge_cases(device):
    table = identity_table(SECTION["shared"] * 2, device)
    assert torch_wrs.alias_sample(table, 0, ordered=False, method="shared").shape == (0,)
    one = torch_wrs.alias_sample(table, 1, ordered=False, method="shared")
    assert one.shape == (1,) and 0 <= int(one) < SECTION["shared"] * 2
    small = identity_table(10, device)  # one short section
    s = torch_wrs.alias_sample(small, 1001, ordered=False, method="cached")
    assert s.min() >= 0 and s.max() < 10


def test_method_errors(device):
    table = identity_table(100, device)
    with pytest.raises(RuntimeError, match="ordered=False"):
        torch_wrs.alias_sample(table, 10, method="shared")
    with pytest.raises(RuntimeError, match="method must be"):
        torch_wrs.alias_sample(table, 10, ordered=False, method="fastest")


@requires_cuda
@pytest.mark.parametrize("method", METHODS)
def test_section_counts_at_1e9_draws(method):
    """100 calls of 1e7 draws over 9 sections: the pooled counts (1e9 draws) put a 1e-3
    relative bias in one section's probability at about 10 standard deviations, and the
    per-call statistics, summed, test the spread (chi-square with 800 degrees of freedom)."""
    size = SECTION[method]
    n = 8 * size + 100
    table = identity_table(n, "cuda")
    probs = torch.tensor([size] * 8 + [100], dtype=torch.float64) / n
    gen = torch.Generator("cuda").manual_seed(27)
    per_call = torch.stack([section_counts(torch_wrs.alias_sample(table, 10_000_000, ordered=False, method=method,
                                                                  generator=gen), size, 9)[0]
                            for _ in range(100)]).cpu().double()
    assert g_test_pvalue(per_call.sum(0), probs) > P_MIN
    expected = probs * 10_000_000
    chi2 = float(((per_call - expected) ** 2 / expected).sum())
    assert scipy.stats.chi2.sf(chi2, 800) > P_MIN and scipy.stats.chi2.cdf(chi2, 800) > P_MIN
    biased = probs.clone()
    biased[3] *= 1.001
    assert g_test_pvalue(per_call.sum(0), biased) < P_MIN


@requires_cuda
def test_cuda_graph_replay_sectioned():
    w = torch.rand(50_000, device="cuda")
    w[::4] = 0
    table = torch_wrs.alias_table(w)
    torch_wrs.alias_sample(table, 10, ordered=False, method="shared")  # warm up outside the capture
    torch_wrs.alias_sample(table, 10, ordered=False, method="cached")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        shared = torch_wrs.alias_sample(table, 1_000_000, ordered=False, method="shared")
        cached = torch_wrs.alias_sample(table, 1_000_000, ordered=False, method="cached")
    graph.replay()
    first = shared.clone(), cached.clone()
    graph.replay()
    for before, after in zip(first, (shared, cached)):
        assert not torch.equal(before, after)
        for s in (before, after):
            assert g_test_pvalue(torch.bincount(s.cpu(), minlength=50_000), w.cpu()) > P_MIN
