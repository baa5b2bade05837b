"""Exactness of per-node alias tables over CSR (csr_alias_table): each row's table,
reconstructed bucket by bucket, against w / sum(w) of the row's edges. The degrees cover
every build path: rows inside one tile of the GPU build (2,304 edges), rows that cross
tiles at every offset, hubs over many tiles, empty and zero-sum rows in between."""
import pytest
import torch

import torch_wrs
from conftest import requires_cuda
from helpers import assert_csr_encodes, csr_from_degrees

TILE = 2304  # build_cuda.cu's kTile


def _check(degrees, device, weights="lognormal", seed=0, dtype=torch.float64, zero_rows=()):
    g = torch.Generator().manual_seed(seed)
    rowptr, col, w = csr_from_degrees(degrees, g, weights)
    w = w.to(dtype)
    for r in zero_rows:
        w[rowptr[r]:rowptr[r + 1]] = 0
    table = torch_wrs.graph.CSRAliasTable(rowptr.to(device), col.to(device), w.to(device)).table
    assert table.dtype == torch.int64 and table.shape == w.shape and table.device.type == device.type
    assert_csr_encodes(rowptr, table, w)
    return rowptr, table, w


@pytest.mark.parametrize("weights", ["lognormal", "uniform", "dominant"])
def test_degree_classes(device, weights):
    degrees = [1, 2, 17, 1000, 0, 3, TILE, 5000, 0, 0, 1, 40_000, 7]
    _check(degrees, device, weights)


def test_power_law_degrees_cross_tiles_everywhere(device):
    g = torch.Generator().manual_seed(3)
    degrees = (torch.rand(20_000, generator=g).pow(-1.2)).long().clamp(max=30_000)
    degrees[torch.rand(20_000, generator=g) < 0.3] = 0
    _check(degrees, device, "lognormal", seed=4)


@pytest.mark.parametrize("shift", [0, 1, TILE - 1])
def test_rows_on_tile_boundaries(device, shift):
    # Rows that start exactly at a tile, end exactly at one, or fill one.
    degrees = [shift, TILE, TILE, 2 * TILE, TILE - 1, 1, 3 * TILE + 1] if shift else [TILE, TILE, 2 * TILE, 1]
    _check([d for d in degrees if d >= 0], device, "lognormal", seed=5 + shift)


def test_hub_of_a_million_edges(device):
    _check([5, 1_000_000, 3], device, "lognormal", seed=6)


def test_zero_weights_and_zero_sum_rows(device):
    g = torch.Generator().manual_seed(7)
    degrees = [3, 5000, 4, 2500, 9]
    rowptr, col, w = csr_from_degrees(degrees, g)
    w[torch.rand(w.numel(), generator=g) < 0.5] = 0  # zero edges mixed in
    w[rowptr[1]:rowptr[2]] = 0  # a crossing row that sums to zero
    w[rowptr[4]:rowptr[5]] = 0
    table = torch_wrs.graph.CSRAliasTable(rowptr.to(device), col.to(device), w.to(device)).table
    assert_csr_encodes(rowptr, table, w)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_every_float_dtype(device, dtype):
    _check([1, 30, 3000, 2], device, "uniform", seed=8, dtype=dtype)


def test_many_empty_rows_between_edges(device):
    degrees = torch.zeros(100_000, dtype=torch.int64)
    degrees[[5, 50_000, 99_998]] = torch.tensor([3, 7000, 2])
    _check(degrees, device, seed=9)


def test_empty_graph_and_no_edges(device):
    table = torch.ops.wrs.csr_alias_table(torch.zeros(1, dtype=torch.int64, device=device),
                                          torch.empty(0, device=device))
    assert table.shape == (0,)
    table = torch.ops.wrs.csr_alias_table(torch.zeros(5, dtype=torch.int64, device=device),
                                          torch.empty(0, device=device))
    assert table.shape == (0,)


def test_int32_rowptr_and_col(device):
    g = torch.Generator().manual_seed(10)
    rowptr, col, w = csr_from_degrees([4, 0, 3000], g)
    t = torch_wrs.graph.CSRAliasTable(rowptr.int().to(device), col.int().to(device), w.to(device))
    assert t.rowptr.dtype == torch.int64 and t.col.dtype == torch.int32
    assert_csr_encodes(rowptr, t.table, w)


def test_non_contiguous_weight(device):
    g = torch.Generator().manual_seed(11)
    rowptr, col, w = csr_from_degrees([10, 2600, 1], g)
    wide = torch.stack([w, w], 1).to(device)
    table = torch_wrs.graph.CSRAliasTable(rowptr.to(device), col.to(device), wide[:, 1]).table
    assert_csr_encodes(rowptr, table, w)


def test_edge_probs_match_the_weights(device):
    g = torch.Generator().manual_seed(12)
    rowptr, col, w = csr_from_degrees([3, 0, 1, 4000], g)
    t = torch_wrs.graph.CSRAliasTable(rowptr.to(device), col.to(device), w.to(device))
    degree = rowptr[1:] - rowptr[:-1]
    rows = torch.repeat_interleave(torch.arange(4), degree)
    ref = w / torch.zeros(4, dtype=torch.float64).index_add_(0, rows, w)[rows]
    torch.testing.assert_close(t.edge_probs().cpu(), ref, rtol=1e-9, atol=2 ** -33)
    uniform = torch_wrs.graph.CSRAliasTable(rowptr.to(device), col.to(device))
    torch.testing.assert_close(uniform.edge_probs().cpu(), (1.0 / degree.double())[rows])


@requires_cuda
def test_cpu_and_cuda_encode_the_same_law():
    g = torch.Generator().manual_seed(13)
    rowptr, col, w = csr_from_degrees([5, 2000, 7000, 1, 0, 12], g, "dominant")
    cpu = torch_wrs.graph.CSRAliasTable(rowptr, col, w).edge_probs()
    cuda = torch_wrs.graph.CSRAliasTable(rowptr.cuda(), col.cuda(), w.cuda()).edge_probs().cpu()
    # Both within half a unit of 2^-32 of a bucket of w / sum(w), so within one of each other.
    degree = (rowptr[1:] - rowptr[:-1]).double()
    rows = torch.repeat_interleave(torch.arange(6), rowptr[1:] - rowptr[:-1])
    assert ((cpu - cuda).abs() * degree[rows] * 2 ** 32 <= 1 + 1e-12 * 2 ** 32 * degree[rows]).all()


@requires_cuda
def test_random_graphs_on_the_gpu():
    # Many shapes of tiles: the look-back, the crossing sums and the leftover sections.
    for seed in range(6):
        g = torch.Generator().manual_seed(100 + seed)
        n = int(torch.randint(1, 3000, (1,), generator=g))
        degrees = (torch.rand(n, generator=g).pow(-1.5)).long().clamp(max=20_000)
        degrees[torch.rand(n, generator=g) < 0.2] = 0
        _check(degrees, torch.device("cuda"), ["lognormal", "uniform", "dominant"][seed % 3], seed=200 + seed,
               zero_rows=[int(torch.randint(0, n, (1,), generator=g))])


def test_bad_input_raises(device):
    rowptr = torch.tensor([0, 2, 3], device=device)
    w = torch.tensor([1.0, 2.0, 3.0], device=device)
    build = torch.ops.wrs.csr_alias_table
    with pytest.raises(RuntimeError, match="rowptr must start at 0, never decrease"):
        build(torch.tensor([0, 3, 2], device=device), w)
    with pytest.raises(RuntimeError, match="rowptr must start at 0, never decrease"):
        build(torch.tensor([0, 2, 4], device=device), w)
    with pytest.raises(RuntimeError, match="weight contains a negative entry"):
        build(rowptr, torch.tensor([1.0, -2.0, 3.0], device=device))
    with pytest.raises(RuntimeError, match="weight contains NaN"):
        build(rowptr, torch.tensor([1.0, float("nan"), 3.0], device=device))
    with pytest.raises(RuntimeError, match="weight contains inf"):
        build(rowptr, torch.tensor([1.0, float("inf"), 3.0], device=device))
    with pytest.raises(RuntimeError, match="sum past float64's range"):
        build(rowptr, torch.tensor([1e308, 1e308, 3.0], dtype=torch.float64, device=device))
    with pytest.raises(RuntimeError, match="rowptr must be int64"):
        build(rowptr.int(), w)
    with pytest.raises(RuntimeError, match="weight must be a floating-point tensor"):
        build(rowptr, torch.tensor([1, 2, 3], device=device))
    with pytest.raises(RuntimeError, match="weight must be a 1-D tensor"):
        build(rowptr, w.reshape(1, 3))
    with pytest.raises(RuntimeError, match="CSRAliasTable: rowptr must be an int64 or int32 tensor"):
        torch_wrs.graph.CSRAliasTable(rowptr.float(), rowptr, w)


@requires_cuda
def test_validate_false_leaves_a_bad_rowptr_in_range():
    # Unchecked, a malformed rowptr gives an unspecified table, never an access out of range
    # (the CPU checks whatever validate says).
    build = torch.ops.wrs.csr_alias_table
    t = build(torch.tensor([0, 5, 1, 3], device="cuda"), torch.rand(3, device="cuda"), validate=False)
    torch.cuda.synchronize()
    assert t.shape == (3,)
