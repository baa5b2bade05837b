"""The method tables (csrc/multinomial/dispatch_cpu.cpp, dispatch_cuda.cpp): which method a
call of each shape takes. The CUDA table is plain C++ built on every machine, so its routes
are asserted here without a GPU, for a GPU of 132 multiprocessors (H100 and H200); the
GPU tests named for a method assert the route of their own shapes too (helpers.assert_route).
Each rule is pinned on both sides of its threshold."""
import pytest
import torch

import torch_wrs  # noqa: F401  (registers torch.ops.wrs)
from torch_wrs.multinomial import _route

route = torch.ops.wrs._multinomial_route

# (rows, n, k, replacement, logits, float64, capturing) -> method, on CUDA with 132 SMs.
CUDA_ROUTES = [
    # One draw from a few items: a thread per row.
    ((1_000_003, 2, 1, True, False, False, False), "thread_topk"),
    ((1_000_003, 8, 1, True, True, False, False), "thread_topk"),
    ((1_000_003, 9, 1, True, False, False, False), "warp_rows"),
    # One draw from many logit rows of 129 to 4,096 items: a thread per row.
    ((65_536, 200, 1, False, True, False, False), "thread_topk"),
    ((65_536, 4096, 1, False, True, False, False), "thread_topk"),
    ((65_536, 128, 1, False, True, False, False), "warp_rows"),
    ((65_535, 200, 1, False, True, False, False), "warp_rows"),
    # Short rows: warp rows, up to 1,024 items (float64: 512) and 64 draws a row, or rows
    # of up to 32 items with up to 1,024 draws and 2^18 in the call.
    ((65_539, 1000, 1, True, False, False, False), "warp_rows"),
    ((4096, 1024, 64, True, False, False, False), "warp_rows"),
    ((4096, 1025, 64, True, False, False, False), "inverse_cdf"),
    ((4096, 512, 8, True, False, True, False), "warp_rows"),
    ((4096, 513, 8, True, False, True, False), "inverse_cdf"),
    ((3, 32, 1000, True, False, False, False), "warp_rows"),
    ((256, 32, 1024, True, False, False, False), "warp_rows"),
    ((257, 32, 1024, True, False, False, False), "alias_tables"),
    ((3, 33, 1000, True, False, False, False), "alias_tables"),
    # One draw: the race, up to 2^19 items (logits 2^22), or rows that are one chunk each.
    ((4, 131_072, 1, True, False, False, False), "race"),
    ((5, 131_072, 1, True, False, False, False), "inverse_cdf"),
    ((64, 32_000, 1, True, True, False, False), "race"),
    ((8, 300_000, 1, True, False, False, False), "inverse_cdf"),
    ((8, 300_000, 1, True, True, False, False), "race"),
    ((3800, 1100, 1, True, False, False, False), "race"),
    # One draw from many short logit rows: the warp top-k.
    ((8192, 1025, 1, True, True, False, False), "warp_topk"),
    ((2048, 1025, 1, True, True, False, False), "race"),
    ((2000, 2100, 1, True, False, False, False), "inverse_cdf"),
    ((2000, 2100, 1, True, True, False, False), "warp_topk"),
    # With replacement, longer rows: the inverse CDF while its blocks hold the draws.
    ((2000, 4096, 128, True, False, False, False), "inverse_cdf"),
    ((20_000, 4096, 128, True, False, False, False), "inverse_cdf"),
    ((20_000, 4096, 129, True, False, False, False), "cdf_search"),
    ((20_000, 2000, 129, True, False, False, False), "alias_tables"),
    ((8, 32_000, 1024, True, False, False, False), "inverse_cdf"),
    ((8, 32_000, 1025, True, False, False, False), "cdf_search"),
    ((1, 128_256, 128, True, True, False, False), "inverse_cdf"),
    # More draws: a stored CDF where few per item or few in all over long rows, else tables.
    ((2200, 3000, 150, True, False, False, False), "cdf_search"),
    ((4096, 4000, 200, True, False, False, False), "cdf_search"),
    ((4096, 3000, 200, True, False, False, False), "alias_tables"),
    ((1, 32_000, 1 << 20, True, False, False, False), "cdf_search"),
    ((128, 20_000, 1 << 15, True, False, False, False), "alias_tables"),
    ((64, 16_384, 1 << 15, True, False, False, False), "cdf_search"),
    ((64, 16_383, 1 << 15, True, False, False, False), "alias_tables"),
    ((4096, 1000, 65, True, False, False, False), "alias_tables"),
    # Without replacement: a thread per row for up to 8 draws from short rows or many rows.
    ((100, 32, 8, False, False, False, False), "thread_topk"),
    ((100, 32, 9, False, False, False, False), "warp_topk"),
    ((65_536, 300, 2, False, False, False, False), "thread_topk"),
    ((65_535, 300, 2, False, False, False, False), "warp_topk"),
    # The floor top-k: 1,000 to 32,768 items, longer rows only from more rows.
    ((200, 1000, 64, False, False, False, False), "floor_topk"),
    ((200, 999, 64, False, False, False, False), "warp_topk"),
    ((8, 8192, 33, False, True, False, False), "floor_topk"),
    ((31, 16_384, 17, False, False, False, False), "two_pass_topk"),
    ((32, 16_384, 17, False, False, False, False), "floor_topk"),
    ((128, 32_768, 64, False, False, False, False), "floor_topk"),
    ((127, 32_768, 64, False, False, False, False), "two_pass_topk"),
    # Two passes over long rows, by class; else one pass of warp lists up to 64 draws.
    ((64, 300_000, 2, False, False, False, False), "two_pass_topk"),
    ((64, 300_000, 2, False, True, False, False), "warp_topk"),
    ((1, 32_000, 8, False, False, False, False), "two_pass_topk"),
    ((1, 32_000, 8, False, True, False, False), "warp_topk"),
    ((1, 32_000, 16, False, True, False, False), "two_pass_topk"),
    ((1000, 40_000, 8, False, False, False, False), "warp_topk"),
    ((1000, 40_000, 33, False, False, False, False), "two_pass_topk"),
    ((1_100, 40_000, 64, False, False, False, False), "two_pass_topk"),
    ((300, 70_000, 8, False, False, False, False), "two_pass_topk"),
    ((300, 70_000, 8, False, True, False, False), "warp_topk"),
    # More than 64 draws: every key and torch.topk; under capture, chunk maxima over long rows.
    ((4, 3000, 65, False, False, False, False), "keys_topk"),
    ((8, 1 << 24, 1024, False, False, False, False), "keys_topk"),
    ((8, 1 << 24, 1024, False, False, False, True), "chunk_max_topk"),
    ((64, 1 << 20, 1024, False, False, False, True), "chunk_max_topk"),
    ((63, 1 << 20, 1024, False, False, False, True), "keys_topk"),
]

# (rows, n, k, replacement) -> method on the CPU.
CPU_ROUTES = [
    ((4, 100, 3, False), "race_keys"),
    ((4, 100, 1, False), "row_points"),
    ((1, 1000, 65_536, True), "alias_tables"),
    ((1, 16_384, 65_536, True), "row_prefix"),
    ((1, 16_383, 65_536, True), "alias_tables"),
    ((1, 32_000, 8, True), "chunk_bounds"),
    ((1, 32_000, 32, True), "chunk_points"),
    ((15, 40_000, 8, True), "chunk_bounds"),
    ((16, 40_000, 8, True), "row_bounds"),
    ((1, 16_384, 8, True), "row_bounds"),
    ((1, 16_385, 16, True), "chunk_bounds"),
    ((1, 16_385, 17, True), "chunk_points"),
    ((64, 8192, 4, True), "row_bounds"),
    ((64, 8191, 4, True), "row_points"),
    ((64, 18, 2, True), "row_prefix"),
    ((64, 1000, 63, True), "row_prefix"),
    ((64, 1000, 62, True), "row_points"),
    ((64, 1000, 50, True), "row_points"),
]


@pytest.mark.parametrize("shape,method", CUDA_ROUTES, ids=lambda v: str(v))
def test_cuda_route(shape, method):
    rows, n, k, replacement, logits, float64, capturing = shape
    assert route("cuda", rows, n, k, replacement, logits=logits, float64=float64, capturing=capturing, sms=132) == method


@pytest.mark.parametrize("shape,method", CPU_ROUTES, ids=lambda v: str(v))
def test_cpu_route(shape, method):
    rows, n, k, replacement = shape
    assert route("cpu", rows, n, k, replacement) == method
    assert route("cpu", rows, n, k, replacement, logits=True) == method  # the CPU table ignores the input's kind


def test_every_method_has_a_route():
    assert {m for _, m in CUDA_ROUTES} == {"thread_topk", "warp_rows", "race", "inverse_cdf", "cdf_search",
                                           "alias_tables", "floor_topk", "two_pass_topk", "warp_topk",
                                           "chunk_max_topk", "keys_topk"}
    assert {m for _, m in CPU_ROUTES} == {"alias_tables", "chunk_bounds", "chunk_points", "row_bounds", "row_prefix",
                                          "row_points", "race_keys"}


def test_fewer_multiprocessors_cut_rows_into_fewer_chunks():
    """The inverse CDF's chunks fill the GPU (16 blocks an SM): where 132 SMs cut 64 rows of
    32,000 into chunks, a GPU of 4 SMs takes a block per row, which holds 128 draws at most."""
    assert route("cuda", 64, 32_000, 200, True, sms=132) == "inverse_cdf"
    assert route("cuda", 64, 32_000, 200, True, sms=4) == "cdf_search"


def test_route_of_a_tensor_on_the_cpu():
    x = torch.rand(64, 8192)
    assert _route(x, 4, True) == "row_bounds"
    assert _route(x, 4, False) == "race_keys"


def test_route_errors():
    with pytest.raises(RuntimeError, match="device must be"):
        route("mps", 1, 10, 1, True)
    with pytest.raises(RuntimeError, match="must be positive"):
        route("cpu", 0, 10, 1, True)
    with pytest.raises(RuntimeError, match="sms must be positive"):
        route("cuda", 1, 10, 1, True, sms=0)
