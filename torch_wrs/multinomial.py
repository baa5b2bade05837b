"""A drop-in for torch.multinomial."""
from typing import Optional

import torch

from . import _library  # noqa: F401  (registers torch.ops.wrs)


def multinomial(
    input: torch.Tensor, num_samples: int, replacement: bool = False, *, generator: Optional[torch.Generator] = None
) -> torch.Tensor:
    """Same contract as ``torch.multinomial``: ``input`` is 1-D ``[N]`` or 2-D ``[B, N]``
    non-negative weights, the result is int64 ``[..., num_samples]`` of category indices.
    Raises ``RuntimeError`` for ``num_samples <= 0``, ``num_samples > N`` without
    replacement, negative, inf or NaN weights, a zero-sum row, and (without replacement)
    a row with fewer than ``num_samples`` nonzero weights.

    Unlike torch it has no 2**24-category limit and sums in float64. With replacement it
    samples alias tables; without, it keeps the ``num_samples`` largest ``w / E`` with
    ``E ~ Exp(1)``, in decreasing order (the order sequential draws would give).

    Speed on an H200 (docs/benchmarks.md): with replacement 1.6-8x torch; without
    replacement still 2.5-3x slower than torch.
    """
    return torch.ops.wrs.multinomial(input, num_samples, replacement, generator=generator)
