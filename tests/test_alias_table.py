"""Exactness of alias-table construction: the distribution each table encodes,
reconstructed bucket by bucket, against w / sum(w)."""
import pytest
import torch

import torch_wrs
from helpers import BUCKET, assert_encodes, table_mass, vose_table, weight_cases

CASES = weight_cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_encodes_weights(device, name):
    w = CASES[name].to(device)
    table = torch_wrs.alias_table(w)
    assert table.dtype == torch.int64 and table.shape == w.shape and table.device == w.device
    assert_encodes(table, w)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_every_float_dtype(device, dtype):
    g = torch.Generator().manual_seed(7)
    w = (torch.rand(6, 333, generator=g) ** 3).to(dtype)
    assert_encodes(torch_wrs.alias_table(w.to(device)), w)


def test_float32_extremes(device):
    g = torch.Generator().manual_seed(8)
    w = (10 ** (torch.rand(10_000, generator=g, dtype=torch.float64) * 60 - 30)).float()
    w[:10] = 1e-42  # float32 denormals
    assert_encodes(torch_wrs.alias_table(w.to(device)), w)


def test_batched_rows_of_different_sparsity(device):
    g = torch.Generator().manual_seed(9)
    w = torch.rand(4, 3, 2000, generator=g, dtype=torch.float64)
    w[0, 0, 1:] = 0  # one nonzero
    w[1, 1, torch.rand(2000, generator=g) < 0.99] = 0  # sparse
    w[2, 2] = 1.0  # all equal
    w[3, 0] = torch.arange(1, 2001, dtype=torch.float64).pow(-1.5)  # sorted power law
    table = torch_wrs.alias_table(w.to(device))
    assert table.shape == (4, 3, 2000)
    assert_encodes(table, w)


def test_many_small_rows(device):
    g = torch.Generator().manual_seed(10)
    w = torch.rand(5000, 7, generator=g)
    assert_encodes(torch_wrs.alias_table(w.to(device)), w)


def test_non_contiguous_input(device):
    g = torch.Generator().manual_seed(11)
    base = torch.rand(300, 40, generator=g, dtype=torch.float64).to(device)
    w = base.t()  # [40, 300], not contiguous
    assert not w.is_contiguous()
    table = torch_wrs.alias_table(w)
    assert torch.equal(table, torch_wrs.alias_table(w.contiguous()))
    assert_encodes(table, w)


def test_empty_batch(device):
    table = torch_wrs.alias_table(torch.rand(0, 5, device=device))
    assert table.shape == (0, 5) and table.dtype == torch.int64


@pytest.mark.parametrize("n", [1 << 24, (1 << 24) + 3])
def test_more_than_2_pow_24_categories(device, n):
    g = torch.Generator().manual_seed(12)
    w = torch.rand(n, generator=g)
    w[::5] = 0
    assert_encodes(torch_wrs.alias_table(w.to(device)), w)


def test_matches_sequential_vose(device):
    """Our table and a sequential Vose table (the textbook oracle) encode the same
    distribution. Light items (below one bucket) keep their own rounded mass in both, so
    they agree to one unit; heavy items collect the rounding of every bucket they fill,
    at most half a unit per bucket on each side."""
    for name in ["uniform_random", "zeros_mixed_in", "power_law_steep_sorted", "one_huge_item"]:
        w = CASES[name]
        n = len(w)
        ours = table_mass(torch_wrs.alias_table(w.to(device)).cpu())
        vose = table_mass(vose_table(w))
        light = w * n / w.sum() < 1
        diff = (ours - vose).abs()
        assert diff[light].max() <= 1, name
        assert diff[~light].sum() <= n, name


def test_probs_reconstruction_matches_masses(device):
    w = CASES["power_law_shuffled"].to(device)
    t = torch_wrs.AliasTable(w)
    expected = table_mass(t.table).double() / (w.shape[-1] * float(BUCKET))
    assert torch.equal(t.probs, expected)
    assert abs(t.probs.sum().item() - 1) < 1e-12


def test_cpu_result_does_not_depend_on_thread_count():
    w = CASES["not_power_of_two"].float()
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = torch_wrs.alias_table(w)
        torch.set_num_threads(max(2, threads))
        many = torch_wrs.alias_table(w)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, many)


@pytest.mark.parametrize("n", [2, 31, 256, 257, 288, 289, 576, 577, 1152, 1153, 2048, 2304, 2305, 4608, 4609, 6145])
def test_row_lengths_around_block_and_tile_sizes(device, n):
    """Rows built in one block (each block size) and rows built in tiles and sections."""
    g = torch.Generator().manual_seed(n)
    w = torch.rand(3, n, generator=g, dtype=torch.float64) ** 3
    w[1, torch.rand(n, generator=g) < 0.5] = 0
    w[2, :] = torch.arange(1, n + 1, dtype=torch.float64).pow(-1.2)  # sorted power law
    assert_encodes(torch_wrs.alias_table(w.to(device)), w)


def test_batched_long_rows(device):
    g = torch.Generator().manual_seed(13)
    w = torch.rand(5, 30_011, generator=g)
    w[0, 1:] = 0  # one nonzero item
    w[1, torch.rand(30_011, generator=g) < 0.999] = 0
    w[2, 17] = 1e6  # one huge item
    w[3] = torch.arange(1, 30_012, dtype=torch.float32).pow(-2.0)  # greedy packing fails here
    assert_encodes(torch_wrs.alias_table(w.to(device)), w)
