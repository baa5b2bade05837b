"""Diagnostics of radix forests for the benchmark and the tests (not part of the API):
memory loads per lookup, and the weight distributions of the paper's Table 1."""
from typing import Tuple

import torch

from .radix_forest import _ONE, _SATURATED, RadixForest


def _cell_shift(forest: RadixForest) -> int:
    return 63 - (forest.num_cells.bit_length() - 1)


def search_loads(forest: RadixForest, u: torch.Tensor, method: str = "forest") -> Tuple[torch.Tensor, torch.Tensor]:
    """Memory loads per lookup (the guide entry plus each cdf value compared) and the index
    found, for one forest and float64 ``u``: ``method="forest"`` walks the radix trees as
    the kernels do; ``"bisect"`` is the cutpoint method with binary search over the items
    overlapping the cell (the paper's baseline). A diagnostic in plain torch, not fast."""
    if forest.cdf.dim() != 1:
        raise RuntimeError("search_loads: takes one forest (1-D cdf)")
    cdf, shift = forest.cdf, _cell_shift(forest)
    x = (u.to(torch.float64) * float(_ONE)).to(torch.int64)
    loads = torch.ones_like(x)
    if method == "forest":
        j = forest.guide[x >> shift].long()
        while (j >= 0).any():
            inner = j >= 0
            at = j[inner]
            children = forest.nodes[at, 1]
            left, right = (children << 32) >> 32, children >> 32  # the int32 halves, sign-extended
            j[inner] = torch.where(x[inner] < forest.nodes[at, 0], left, right)
            loads += inner.long()
        return loads, ~j
    if method != "bisect":
        raise RuntimeError(f"search_loads: method must be 'forest' or 'bisect', got '{method}'")
    cell = x >> shift
    lo = torch.searchsorted(cdf, cell << shift, right=True) - 1
    last_key = torch.where(cell + 1 < forest.num_cells, ((cell + 1) << shift) - 1, _SATURATED - 1)
    hi = torch.searchsorted(cdf, last_key, right=True) - 1
    while (lo < hi).any():
        active = lo < hi
        mid = (lo + hi + 1) // 2
        below = cdf[mid] <= x
        lo = torch.where(active & below, mid, lo)
        hi = torch.where(active & ~below, mid - 1, hi)
        loads += active.long()
    return loads, lo


def table1_weights(n: int = 100) -> dict:
    """The four distributions of the paper's Table 1 (Figure 12), float64 ``[n]``. "4 spikes":
    four items 100 times heavier than the uniform rest (about 0.2 each)."""
    i = torch.arange(n, dtype=torch.float64)
    spikes = torch.ones(n, dtype=torch.float64)
    spikes[torch.tensor([n // 8, 3 * n // 8, 5 * n // 8, 7 * n // 8])] = 100.0
    return {
        "i^20": (i + 1) ** 20,
        "(i mod 32 + 1)^25": (i % 32 + 1) ** 25,
        "(i mod 64 + 1)^35": (i % 64 + 1) ** 35,
        "4 spikes": spikes,
    }
