"""Radix forests as PyTorch machinery sees them (opcheck, torch.compile, TorchScript,
CUDA graphs) and bad input: a RuntimeError naming the argument, before any kernel."""
import os

import pytest
import torch

import torch_wrs
from conftest import requires_cuda

ARTIFACTS = os.path.join(os.path.dirname(__file__), "cpp", "artifacts")
OPCHECK_SEEDED = ("test_schema", "test_autograd_registration", "test_faketensor")


def test_opcheck(device):
    w = torch.rand(3, 100, device=device)
    w[:, ::5] = 0
    torch.library.opcheck(torch.ops.wrs.radix_forest.default, (w,), {"validate": True})
    torch.library.opcheck(torch.ops.wrs.radix_forest.default, (w.double()[:, ::2], 16), {"validate": False})
    cdf, guide, nodes = torch.ops.wrs.radix_forest(w)
    u = torch.rand(3, 40, device=device)
    torch.library.opcheck(torch.ops.wrs.inverse_cdf.default, (cdf, guide, nodes, u))
    row = torch.randint(0, 3, (7, 5), device=device)
    torch.library.opcheck(torch.ops.wrs.inverse_cdf.default, (cdf, guide, nodes, torch.rand(7, 5, device=device), row),
                          {"validate": False})
    torch.library.opcheck(torch.ops.wrs.radix_forest_sample.default, (cdf, guide, nodes, 17), test_utils=OPCHECK_SEEDED)


def test_compile_fullgraph(device):
    def draw(weights, u):
        cdf, guide, nodes = torch.ops.wrs.radix_forest(weights, validate=False)
        i = torch.ops.wrs.inverse_cdf(cdf, guide, nodes, u, validate=False)
        return i + 0, torch.ops.wrs.radix_forest_sample(cdf, guide, nodes, 1000) + 0

    compiled = torch.compile(draw, fullgraph=True)
    w = torch.rand(4, 50, device=device)
    w[:, ::2] = 0
    u = torch.rand(4, 300, device=device)
    i, s = compiled(w, u)
    assert torch.equal(i, torch_wrs.RadixForest(w).inverse_cdf(u))
    assert s.shape == (4, 1000) and (s % 2 == 1).all(), "zero-weight (even) items were drawn"


class RadixSampler(torch.nn.Module):
    """What a C++ LibTorch user would load: build a forest and sample it."""

    def forward(self, weights: torch.Tensor, num_samples: int) -> torch.Tensor:
        cdf, guide, nodes = torch.ops.wrs.radix_forest(weights)
        return torch.ops.wrs.radix_forest_sample(cdf, guide, nodes, num_samples)


def test_torchscript_roundtrip_and_export_for_cpp(tmp_path):
    module = torch.jit.script(RadixSampler())
    weights = torch.tensor([0.0, 1.0, 2.0, 0.0, 5.0, 0.5])
    torch.manual_seed(1234)
    expected = module(weights, 100_000)
    path = tmp_path / "radix_module.pt"
    module.save(str(path))
    loaded = torch.jit.load(str(path))
    torch.manual_seed(1234)
    assert torch.equal(loaded(weights, 100_000), expected)
    # tests/cpp (ctest) loads this file, seeds 1234 and must draw `expected` exactly.
    sampler = RadixSampler()
    sampler.register_buffer("weights", weights)
    sampler.register_buffer("expected", expected)
    os.makedirs(ARTIFACTS, exist_ok=True)
    torch.jit.save(torch.jit.script(sampler), os.path.join(ARTIFACTS, "radix_module.pt"))


@requires_cuda
def test_cuda_graph_replay():
    w = torch.rand(300, device="cuda")
    w[::3] = 0
    u = torch.rand(10_000, device="cuda")
    f = torch_wrs.RadixForest(w)
    f.sample(10)  # warm up
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g = torch_wrs.RadixForest(w, validate=False)
        looked_up = g.inverse_cdf(u, validate=False)
        drawn = g.sample(100_000)
    graph.replay()
    first = drawn.clone()
    assert torch.equal(looked_up, f.inverse_cdf(u))
    graph.replay()
    assert not torch.equal(first, drawn), "replay drew the same samples again"
    assert (drawn % 3 != 0).all() and (first % 3 != 0).all()
    with pytest.raises(RuntimeError, match="pass validate=False when capturing"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            f.inverse_cdf(u)


@pytest.mark.parametrize("value,message", [
    (-1.0, "weights contains a negative entry"),
    (float("nan"), "weights contains NaN"),
    (float("inf"), "weights contains inf"),
    (0.0, "weights has a row that sums to zero"),
])
def test_bad_weights(device, value, message):
    w = torch.rand(3, 100, device=device)
    w[1, 17] = value
    if value == 0.0:
        w[1] = 0
    with pytest.raises(RuntimeError, match=message):
        torch_wrs.RadixForest(w)


def test_bad_arguments(device):
    w = torch.rand(3, 10, device=device)
    with pytest.raises(RuntimeError, match="weights must have at least one category"):
        torch_wrs.RadixForest(torch.rand(3, 0, device=device))
    with pytest.raises(RuntimeError, match="weights must be a floating-point tensor"):
        torch_wrs.RadixForest(torch.ones(10, dtype=torch.int64, device=device))
    for cells in (0, 3, 1 << 31):
        with pytest.raises(RuntimeError, match="cells must be a power of two"):
            torch_wrs.RadixForest(w, cells)
    f = torch_wrs.RadixForest(w)
    for bad, message in [
        (torch.tensor([[0.5, 1.5]] * 3, device=device), r"u must lie in \[0, 1\]"),
        (torch.tensor([[0.5, float("nan")]] * 3, device=device), r"u must lie in \[0, 1\]"),
        (torch.tensor([[-0.1]] * 3, device=device), r"u must lie in \[0, 1\]"),
        (torch.rand(2, 4, device=device), r"u must have shape \[\*batch, S\]"),
        (torch.ones(3, 4, dtype=torch.int64, device=device), "u must be a floating-point tensor"),
    ]:
        with pytest.raises(RuntimeError, match=message):
            f.inverse_cdf(bad)
    with pytest.raises(RuntimeError, match=r"row has an entry outside \[0, 3\)"):
        f.inverse_cdf(torch.rand(5, device=device), torch.tensor([0, 1, 2, 3, 0], device=device))
    with pytest.raises(RuntimeError, match="row must have u's shape"):
        f.inverse_cdf(torch.rand(5, device=device), torch.zeros(4, dtype=torch.int64, device=device))
    with pytest.raises(RuntimeError, match="num_samples must be non-negative"):
        f.sample(-1)
    with pytest.raises(RuntimeError, match="must be the int64, int32, int64 tensors"):
        torch.ops.wrs.inverse_cdf(f.cdf, f.guide.long(), f.nodes, torch.rand(3, 2, device=device))
    with pytest.raises(RuntimeError, match="must share their batch shape"):
        torch.ops.wrs.inverse_cdf(f.cdf[:2], f.guide, f.nodes, torch.rand(2, 2, device=device))
    with pytest.raises(RuntimeError, match="power-of-two number of cells"):
        torch.ops.wrs.radix_forest_sample(f.cdf, f.guide[:, :3], f.nodes, 4)
    with pytest.raises(RuntimeError, match="RadixForest2D: weights2d must be 2-D"):
        torch_wrs.RadixForest2D(torch.rand(10, device=device))
    with pytest.raises(RuntimeError, match="pass exactly one of num_samples and u"):
        torch_wrs.sample_2d(torch.rand(3, 3, device=device))


@requires_cuda
def test_errors_leave_the_cuda_context_usable():
    w = torch.rand(100, device="cuda")
    f = torch_wrs.RadixForest(w)
    with pytest.raises(RuntimeError):
        f.inverse_cdf(torch.full((10,), 2.0, device="cuda"))
    # Without validation, out-of-range u is clamped: indices stay in range.
    i = f.inverse_cdf(torch.tensor([-1.0, 2.0, float("nan")], device="cuda"), validate=False)
    assert i.tolist() == [0, 99, 0]
    assert f.sample(1000).max() < 100
