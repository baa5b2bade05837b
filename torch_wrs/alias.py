"""Alias tables: build once in O(N), then draw each sample with one 8-byte load."""
from typing import Optional

import torch

from . import _library  # noqa: F401  (registers torch.ops.wrs)

_BUCKET = 1 << 32


def alias_table(weights: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    """Builds one alias table per row of ``weights`` (shape ``[..., N]``, any float dtype).

    Returns an int64 tensor of the same shape: bucket ``k`` holds a 32-bit threshold in
    its low half and an alias index in its high half. Each weight is represented to
    within half of ``2**-32 / N`` in probability.

    ``validate=True`` raises a RuntimeError for negative, NaN or inf weights and for rows
    summing to zero. On CUDA that check reads one word back to the host (a sync); pass
    ``validate=False`` inside CUDA graphs or hot loops whose input is known to be valid.
    Invalid input with ``validate=False`` gives unspecified tables (indices stay in range).
    """
    return torch.ops.wrs.alias_table(weights, validate=validate)


def alias_sample(
    table: torch.Tensor,
    num_samples: int,
    *,
    ordered: bool = True,
    method: str = "auto",
    dtype: Optional[torch.dtype] = None,
    generator: Optional[torch.Generator] = None,
) -> torch.Tensor:
    """Draws ``num_samples`` indices per row of ``table``: ``[..., num_samples]``, int64 by
    default or ``dtype=torch.int32`` (half the bytes written).

    ``ordered=True`` gives i.i.d. draws in order. ``ordered=False`` gives the same multiset
    law (the counts of each index are exactly multinomial) but the draws may come grouped
    by table section, which is several times faster for tables beyond a few MB; shuffle
    them if order matters to you. ``method`` forces a sampler: ``"baseline"``, or the
    sectioned ``"cached"`` and ``"shared"`` (``ordered=False`` only); ``"auto"`` picks one
    from the table size and the number of samples.
    """
    return torch.ops.wrs.alias_sample(
        table, num_samples, ordered=ordered, method=method, dtype=dtype, generator=generator
    )


def alias_probs(table: torch.Tensor) -> torch.Tensor:
    """The distribution a table encodes, reconstructed exactly (float64, ``[..., N]``)."""
    n = table.shape[-1]
    threshold = (table & 0xFFFFFFFF).to(torch.float64)
    alias = table >> 32
    buckets = torch.arange(n, device=table.device).expand_as(table)
    mass = torch.zeros(table.shape, dtype=torch.float64, device=table.device)
    mass.scatter_add_(-1, buckets, threshold)
    mass.scatter_add_(-1, alias, _BUCKET - threshold)
    return mass / (n * float(_BUCKET))


class AliasTable:
    """Alias tables for the rows of ``weights``: build once, sample many times.

    >>> t = AliasTable(torch.tensor([1.0, 2.0, 7.0]))
    >>> t.sample(5).shape
    torch.Size([5])
    """

    def __init__(self, weights: torch.Tensor, *, validate: bool = True, _table: Optional[torch.Tensor] = None):
        self.table = alias_table(weights, validate=validate) if _table is None else _table

    @property
    def num_categories(self) -> int:
        return self.table.shape[-1]

    @property
    def device(self) -> torch.device:
        return self.table.device

    @property
    def batch_shape(self) -> torch.Size:
        return self.table.shape[:-1]

    @property
    def probs(self) -> torch.Tensor:
        """float64 ``[..., N]``: the probabilities the table samples with."""
        return alias_probs(self.table)

    def sample(
        self,
        num_samples: int,
        *,
        ordered: bool = True,
        method: str = "auto",
        dtype: Optional[torch.dtype] = None,
        generator: Optional[torch.Generator] = None,
    ) -> torch.Tensor:
        return alias_sample(self.table, num_samples, ordered=ordered, method=method, dtype=dtype, generator=generator)

    def to(self, *args, **kwargs) -> "AliasTable":
        table = self.table.to(*args, **kwargs)
        if table.dtype != torch.int64:
            raise RuntimeError("AliasTable.to: an alias table stays int64; change only the device")
        return AliasTable(None, _table=table)

    def __repr__(self) -> str:
        return f"AliasTable(batch_shape={tuple(self.batch_shape)}, num_categories={self.num_categories}, device={self.device})"
