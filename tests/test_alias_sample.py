"""Sampling from alias tables: the law of the samples (G-tests with fixed seeds),
reproducibility, independence and CUDA-graph replay."""
import pytest
import torch

import torch_wrs
from conftest import requires_cuda
from helpers import assert_encodes, g_test_pvalue, table_mass

P_MIN = 1e-4  # fixed seeds make each test deterministic; this is its false-alarm rate


def _counts(samples, n):
    return torch.bincount(samples.reshape(-1), minlength=n)


def test_shape_dtype_range(device):
    w = torch.rand(2, 3, 50, device=device)
    s = torch_wrs.alias_sample(torch_wrs.alias_table(w), 77)
    assert s.shape == (2, 3, 77) and s.dtype == torch.int64 and s.device == w.device
    assert s.min() >= 0 and s.max() < 50


@pytest.mark.parametrize("name,weights", [
    ("uniform", lambda g: torch.rand(1000, generator=g)),
    ("power_law", lambda g: torch.arange(1, 10_001, dtype=torch.float64).pow(-1.0)[torch.randperm(10_000, generator=g)]),
    ("zeros_mixed_in", lambda g: torch.rand(500, generator=g) * (torch.rand(500, generator=g) < 0.3)),
    ("ten_items", lambda g: torch.tensor([1.0, 2, 3, 4, 5, 6, 7, 8, 9, 10])),
])
def test_g_test_cpu(name, weights):
    g = torch.Generator().manual_seed(100)
    w = weights(g)
    s = torch_wrs.alias_sample(torch_wrs.alias_table(w), 1_000_000, generator=torch.Generator().manual_seed(5))
    assert g_test_pvalue(_counts(s, len(w)), w) > P_MIN


def test_batched_rows_sample_their_own_table(device):
    g = torch.Generator().manual_seed(101)
    w = torch.rand(3, 4, 60, generator=g) ** 2
    w[1, 2, :30] = 0
    s = torch_wrs.alias_sample(torch_wrs.alias_table(w.to(device)), 200_000, generator=torch.Generator(device).manual_seed(6))
    for idx in [(0, 0), (1, 2), (2, 3)]:
        assert g_test_pvalue(_counts(s[idx].cpu(), 60), w[idx]) > P_MIN


def test_odd_sample_count_across_rows(device):
    w = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]], device=device)
    s = torch_wrs.alias_sample(torch_wrs.alias_table(w), 3)
    assert s.tolist() == [[0, 0, 0], [2, 2, 2]]


def test_int32_output_matches_int64(device):
    t = torch_wrs.alias_table(torch.rand(3, 777, device=device))
    wide = torch_wrs.alias_sample(t, 1001, generator=torch.Generator(device).manual_seed(4))
    narrow = torch_wrs.alias_sample(t, 1001, dtype=torch.int32, generator=torch.Generator(device).manual_seed(4))
    assert narrow.dtype == torch.int32 and narrow.shape == wide.shape
    assert torch.equal(narrow.long(), wide)


def test_zero_and_single_category(device):
    t = torch_wrs.alias_table(torch.ones(1, device=device))
    assert torch.equal(torch_wrs.alias_sample(t, 9), torch.zeros(9, dtype=torch.int64, device=device))
    assert torch_wrs.alias_sample(t, 0).shape == (0,)
    assert torch_wrs.alias_sample(torch_wrs.alias_table(torch.rand(0, 4, device=device)), 5).shape == (0, 5)


def test_non_contiguous_table(device):
    w = torch.rand(40, 30, device=device)
    table = torch_wrs.alias_table(w).t().contiguous().t()
    assert not table.is_contiguous()
    a = torch_wrs.alias_sample(table, 100, generator=torch.Generator(device).manual_seed(3))
    b = torch_wrs.alias_sample(table.contiguous(), 100, generator=torch.Generator(device).manual_seed(3))
    assert torch.equal(a, b)


def test_manual_seed_reproduces(device):
    t = torch_wrs.alias_table(torch.rand(1000, device=device))
    torch.manual_seed(42)
    a = torch_wrs.alias_sample(t, 10_001)
    b = torch_wrs.alias_sample(t, 10_001)
    torch.manual_seed(42)
    assert torch.equal(a, torch_wrs.alias_sample(t, 10_001))
    assert not torch.equal(a, b), "successive calls must draw fresh samples"


def test_generator_seeds(device):
    t = torch_wrs.alias_table(torch.rand(1000, device=device))
    same = [torch_wrs.alias_sample(t, 5000, generator=torch.Generator(device).manual_seed(9)) for _ in range(2)]
    other = torch_wrs.alias_sample(t, 5000, generator=torch.Generator(device).manual_seed(10))
    assert torch.equal(same[0], same[1])
    assert (same[0] != other).float().mean() > 0.9


def test_sample_is_independent_of_table_batch_layout(device):
    """A sample's stream is its position in the output, not the thread that drew it."""
    w = torch.rand(1, 500, device=device)
    t = torch_wrs.alias_table(w)
    a = torch_wrs.alias_sample(t, 4096, generator=torch.Generator(device).manual_seed(1))
    b = torch_wrs.alias_sample(t[0], 4096, generator=torch.Generator(device).manual_seed(1))
    assert torch.equal(a[0], b)


def _gpu_counts(table, n, num_samples, seed, chunk=100_000_000):
    """Counts of num_samples draws, in chunks of 1e8 so memory stays ~1 GB."""
    gen = torch.Generator("cuda").manual_seed(seed)
    counts = torch.zeros(n, dtype=torch.int64, device="cuda")
    for start in range(0, num_samples, chunk):
        counts += _counts(torch_wrs.alias_sample(table, min(chunk, num_samples - start), generator=gen), n)
    return counts


@requires_cuda
@pytest.mark.parametrize("name,weights,num_samples", [
    ("ten_items", lambda g: torch.arange(1, 11, dtype=torch.float64), 1_000_000_000),
    ("thousand_uniform", lambda g: torch.rand(1000, generator=g, dtype=torch.float64), 100_000_000),
    ("million_power_law", lambda g: torch.arange(1, 1_000_001, dtype=torch.float64).pow(-1.0)[torch.randperm(1_000_000, generator=g)], 100_000_000),
    ("zeros_mixed_in", lambda g: torch.rand(100_000, generator=g, dtype=torch.float64) * (torch.rand(100_000, generator=g) < 0.5), 100_000_000),
])
def test_g_test_gpu(name, weights, num_samples):
    g = torch.Generator().manual_seed(200)
    w = weights(g)
    t = torch_wrs.alias_table(w.cuda())
    assert g_test_pvalue(_gpu_counts(t, len(w), num_samples, seed=11), w) > P_MIN


@requires_cuda
def test_g_test_detects_a_1e3_bias():
    """Power of the ten-item test above: 1e9 samples put a 1e-3 relative bias on an item
    of probability 1/11 at 10 standard deviations, so the same counts must fail against
    weights biased that much."""
    w = torch.arange(1, 11, dtype=torch.float64)
    counts = _gpu_counts(torch_wrs.alias_table(w.cuda()), 10, 1_000_000_000, seed=11)
    assert g_test_pvalue(counts, w) > P_MIN
    biased = w.clone()
    biased[4] *= 1.001
    assert g_test_pvalue(counts, biased) < P_MIN


@requires_cuda
def test_cuda_graph_replay_draws_fresh_samples():
    w = torch.rand(64, device="cuda")
    w[::4] = 0
    static_w = w.clone()
    torch_wrs.alias_sample(torch_wrs.alias_table(static_w, validate=False), 10)  # warm up
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        table = torch_wrs.alias_table(static_w, validate=False)
        out = torch_wrs.alias_sample(table, 200_000)
    graph.replay()
    first = out.clone()
    graph.replay()
    second = out.clone()
    assert not torch.equal(first, second)
    for s in (first, second):
        assert g_test_pvalue(_counts(s.cpu(), 64), w.cpu()) > P_MIN


@requires_cuda
def test_validate_under_graph_capture_is_refused():
    w = torch.rand(64, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="validate=False"):
        with torch.cuda.graph(graph):
            torch_wrs.alias_table(w)


@requires_cuda
def test_cpu_and_cuda_tables_encode_the_same_distribution():
    """Both devices quantize each weight the same way, so light items (below one bucket)
    get the same mass to a unit; heavy items may differ by where each device's merge
    leaves the rounding remainder, within the bound assert_encodes checks on each."""
    g = torch.Generator().manual_seed(300)
    w = torch.rand(7, 20_000, generator=g) ** 4
    cpu = torch_wrs.alias_table(w)
    gpu = torch_wrs.alias_table(w.cuda()).cpu()
    assert_encodes(cpu, w)
    assert_encodes(gpu, w)
    units = w.double() / w.double().sum(-1, keepdim=True) * (20_000 * 2.0**32)
    light = units < 2**32 - 2
    assert (table_mass(cpu) - table_mass(gpu)).abs()[light].max() <= 1
