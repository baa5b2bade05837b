"""Alias tables: build once in O(N), then draw each sample with one 8-byte load."""
from typing import Optional

import torch

from . import _library  # noqa: F401  (registers torch.ops.wrs)

_BUCKET = 1 << 32


def alias_table(weights: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    """Builds one alias table per row of ``weights`` in O(N) (PSA+ on CUDA, parallel PSA on
    the CPU). Each weight is represented to within half of ``2**-32 / N`` in probability.

    Parameters
    ----------
    weights : Tensor
        ``[..., N]`` non-negative weights, any float dtype, any strides.
    validate : bool
        Raise for negative, NaN or inf weights and rows summing to zero. On CUDA that reads
        one word back (a sync); pass ``False`` inside CUDA graphs or hot loops. Invalid input
        then gives unspecified tables whose indices stay in range.

    Returns
    -------
    Tensor
        int64 ``[..., N]``: bucket k holds a 32-bit threshold in its low half and an alias
        index in its high half.

    Raises
    ------
    RuntimeError
        For a non-float or 0-d input, an empty last dimension, and (``validate=True``)
        invalid weights.

    Examples
    --------
    >>> table = torch_wrs.alias_table(torch.rand(8, 1000))
    >>> torch_wrs.alias_sample(table, 4).shape
    torch.Size([8, 4])
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
    """Draws ``num_samples`` indices per row of an alias table.

    Parameters
    ----------
    table : Tensor
        int64 ``[..., N]`` from :func:`alias_table`.
    num_samples : int
        Draws per row.
    ordered : bool
        ``True``: i.i.d. draws in order. ``False``: the same multiset law (the counts of each
        index are exactly multinomial) but the draws may come grouped by table section,
        several times faster for tables beyond a few MB; shuffle them if order matters.
    method : str
        ``"auto"`` (by table size and draws), ``"baseline"``, or the sectioned ``"cached"``
        and ``"shared"`` (``ordered=False`` only).
    dtype : torch.dtype, optional
        ``torch.int64`` (default) or ``torch.int32`` (half the bytes written).
    generator : torch.Generator, optional

    Returns
    -------
    Tensor
        ``[..., num_samples]`` indices in ``[0, N)``, whatever the table holds.

    Raises
    ------
    RuntimeError
        For a table that is not int64 or has no categories, ``num_samples < 0``, a ``dtype``
        other than int64 / int32, an unknown method, or a sectioned method with
        ``ordered=True``.

    Examples
    --------
    >>> table = torch_wrs.alias_table(torch.tensor([1.0, 2.0, 7.0]))
    >>> bag = torch_wrs.alias_sample(table, 1000, ordered=False)
    """
    return torch.ops.wrs.alias_sample(
        table, num_samples, ordered=ordered, method=method, dtype=dtype, generator=generator
    )


def alias_probs(table: torch.Tensor) -> torch.Tensor:
    """The distribution a table encodes, reconstructed exactly.

    Parameters
    ----------
    table : Tensor
        int64 ``[..., N]`` from :func:`alias_table`.

    Returns
    -------
    Tensor
        float64 ``[..., N]`` probabilities, each row summing to one.

    Raises
    ------
    RuntimeError
        For an index in the table outside ``[0, N)`` (from ``scatter_add_``).

    Examples
    --------
    >>> p = torch_wrs.alias_probs(torch_wrs.alias_table(torch.tensor([1.0, 3.0])))
    """
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

    Parameters
    ----------
    weights : Tensor
        ``[..., N]`` non-negative weights (see :func:`alias_table`).
    validate : bool
        As in :func:`alias_table`.

    Raises
    ------
    RuntimeError
        As :func:`alias_table`.

    Examples
    --------
    >>> t = AliasTable(torch.tensor([1.0, 2.0, 7.0]))
    >>> t.sample(5).shape
    torch.Size([5])
    >>> t.probs            # float64, what the table samples with
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
