"""Radix tree forests (Binder and Keller 2019): a monotone inverse CDF for quasi-Monte Carlo.

``u1 <= u2`` always gives ``i1 <= i2``, so low-discrepancy points (Sobol, lattices) keep
their uniformity after the mapping, which an alias table would scramble. Each lookup
costs O(1) on average (a guide-table load and about one tree node) and returns exactly
the index a binary search over the CDF would.
"""
from typing import Optional, Tuple

import torch

from . import _library  # noqa: F401  (registers torch.ops.wrs)

_ONE = 1 << 63  # probability 1 in the cdf's fixed point
_SATURATED = (1 << 63) - 1


class RadixForest:
    """Guide table plus radix tree forest for each row of ``weights`` (``[..., N]``, any float dtype).

    Attributes are the op's three tensors: ``cdf`` (int64 ``[..., N]``: ``cdf[i]`` is
    ``2**63`` times the probability mass before item ``i``, rounded down), ``guide``
    (int32 ``[..., cells]``) and ``nodes`` (int64 ``[..., N, 2]``: node ``j`` splits at
    key ``cdf[j]``, stored next to its two int32 children so a lookup step is one load).

    Parameters
    ----------
    weights : Tensor
        ``[..., N]`` non-negative weights, any float dtype.
    cells : int, optional
        Guide-table cells, a power of two (default: the one at or above ``N``).
    validate : bool
        As in :func:`radix_forest`.

    Raises
    ------
    RuntimeError
        As :func:`radix_forest`.

    Examples
    --------
    >>> f = RadixForest(torch.tensor([1.0, 0.0, 3.0]))
    >>> f.inverse_cdf(torch.tensor([0.0, 0.2, 0.25, 0.9])).tolist()
    [0, 0, 2, 2]
    """

    def __init__(
        self,
        weights: Optional[torch.Tensor],
        cells: Optional[int] = None,
        *,
        validate: bool = True,
        _parts: Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None,
    ):
        parts = torch.ops.wrs.radix_forest(weights, cells, validate=validate) if _parts is None else _parts
        self.cdf, self.guide, self.nodes = parts

    @property
    def num_categories(self) -> int:
        return self.cdf.shape[-1]

    @property
    def num_cells(self) -> int:
        return self.guide.shape[-1]

    @property
    def batch_shape(self) -> torch.Size:
        return self.cdf.shape[:-1]

    @property
    def device(self) -> torch.device:
        return self.cdf.device

    @property
    def probs(self) -> torch.Tensor:
        """float64 ``[..., N]``: the probabilities a uniform ``u`` selects each item with."""
        end = torch.full_like(self.cdf[..., :1], _SATURATED)
        upper = torch.cat([self.cdf[..., 1:], end], dim=-1)
        return (upper - self.cdf).to(torch.float64) / _ONE

    def inverse_cdf(self, u: torch.Tensor, row: Optional[torch.Tensor] = None, *, validate: bool = True) -> torch.Tensor:
        return inverse_cdf(self, u, row, validate=validate)

    def sample(self, num_samples: int, *, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        return radix_forest_sample(self, num_samples, generator=generator)

    def to(self, *args, **kwargs) -> "RadixForest":
        parts = tuple(t.to(*args, **kwargs) for t in (self.cdf, self.guide, self.nodes))
        if (parts[0].dtype, parts[1].dtype, parts[2].dtype) != (torch.int64, torch.int32, torch.int64):
            raise RuntimeError("RadixForest.to: a forest keeps its dtypes; change only the device")
        return RadixForest(None, _parts=parts)

    def __repr__(self) -> str:
        return (
            f"RadixForest(batch_shape={tuple(self.batch_shape)}, num_categories={self.num_categories}, "
            f"num_cells={self.num_cells}, device={self.device})"
        )


def radix_forest(weights: torch.Tensor, cells: Optional[int] = None, *, validate: bool = True) -> RadixForest:
    """Builds one forest per row of ``weights``; see :class:`RadixForest`.

    Parameters
    ----------
    weights : Tensor
        ``[..., N]`` non-negative weights, any float dtype. Zero weights are allowed and are
        never returned.
    cells : int, optional
        Guide-table cells, a power of two (default: the one at or above N).
    validate : bool
        Raise for negative, NaN or inf weights and rows summing to zero; on CUDA one word is
        read back (pass ``False`` in CUDA graphs).

    Returns
    -------
    RadixForest

    Raises
    ------
    RuntimeError
        For a non-float input, ``cells`` not a power of two, and (``validate=True``) invalid
        weights.

    Examples
    --------
    >>> f = torch_wrs.radix_forest(torch.rand(2, 1000))
    >>> f.sample(4).shape
    torch.Size([2, 4])
    """
    return RadixForest(weights, cells, validate=validate)


def inverse_cdf(
    forest: RadixForest, u: torch.Tensor, row: Optional[torch.Tensor] = None, *, validate: bool = True
) -> torch.Tensor:
    """Maps uniforms ``u`` in [0, 1] to item indices, monotonically: the largest i with
    ``cdf[i] <= floor(u * 2**63)``, as a binary search would return.

    Parameters
    ----------
    forest : RadixForest
    u : Tensor
        Any float dtype. One forest: any shape. A batch of forests ``[*batch, N]``: shape
        ``[*batch, S]``, or any shape with ``row``.
    row : Tensor, optional
        Integer, the shape of ``u``: the forest (index into the flattened batch) of each u.
    validate : bool
        Check that u lies in [0, 1] and rows are in range, with one host read.

    Returns
    -------
    Tensor
        int64 indices, the shape of ``u``.

    Raises
    ------
    RuntimeError
        For shapes that do not match and (``validate=True``) u outside [0, 1] or a row out
        of range.

    Examples
    --------
    >>> f = torch_wrs.radix_forest(torch.tensor([1.0, 0.0, 3.0]))
    >>> torch_wrs.inverse_cdf(f, torch.tensor([0.1, 0.5])).tolist()
    [0, 2]
    """
    return torch.ops.wrs.inverse_cdf(forest.cdf, forest.guide, forest.nodes, u, row, validate=validate)


def radix_forest_sample(
    forest: RadixForest, num_samples: int, *, generator: Optional[torch.Generator] = None
) -> torch.Tensor:
    """``num_samples`` i.i.d. draws per forest, from 63-bit Philox uniforms.

    Parameters
    ----------
    forest : RadixForest
    num_samples : int
    generator : torch.Generator, optional

    Returns
    -------
    Tensor
        int64 ``[*batch, num_samples]``.

    Raises
    ------
    RuntimeError
        For ``num_samples < 0``.

    Examples
    --------
    >>> idx = torch_wrs.radix_forest_sample(torch_wrs.radix_forest(torch.rand(100)), 10)
    """
    return torch.ops.wrs.radix_forest_sample(forest.cdf, forest.guide, forest.nodes, num_samples, generator=generator)


class RadixForest2D:
    """A two-dimensional distribution ``weights2d[r, c]`` sampled by inversion, as in the
    paper's image example: a forest over the row sums picks the row from ``u[..., 0]``,
    that row's conditional forest picks the column from ``u[..., 1]``. The map is monotone
    in each coordinate, so a 2-D low-discrepancy sequence stays well distributed.

    Parameters
    ----------
    weights2d : Tensor
        ``[rows, cols]`` non-negative weights.
    validate : bool
        As in :func:`radix_forest`.

    Raises
    ------
    RuntimeError
        For input that is not 2-D, and as :func:`radix_forest`.

    Examples
    --------
    >>> f = RadixForest2D(torch.rand(64, 64))
    >>> r, c = f.inverse_cdf(torch.quasirandom.SobolEngine(2).draw(1024))
    """

    def __init__(self, weights2d: torch.Tensor, *, validate: bool = True):
        if weights2d.dim() != 2:
            raise RuntimeError(f"RadixForest2D: weights2d must be 2-D [rows, cols], got shape {tuple(weights2d.shape)}")
        self.rows = RadixForest(weights2d.sum(-1, dtype=torch.float64), validate=validate)
        # An all-zero row is never picked; give it a valid conditional all the same.
        empty = (weights2d == 0).all(-1, keepdim=True)
        self.cols = RadixForest(weights2d.masked_fill(empty, 1), validate=validate)

    def inverse_cdf(self, u: torch.Tensor, *, validate: bool = True) -> Tuple[torch.Tensor, torch.Tensor]:
        if u.dim() < 1 or u.shape[-1] != 2:
            raise RuntimeError(f"RadixForest2D.inverse_cdf: u must have shape [..., 2], got {tuple(u.shape)}")
        row = self.rows.inverse_cdf(u[..., 0], validate=validate)
        col = self.cols.inverse_cdf(u[..., 1], row, validate=validate)
        return row, col

    def sample(self, num_samples: int, *, generator: Optional[torch.Generator] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        u = torch.rand(num_samples, 2, dtype=torch.float64, device=self.rows.device, generator=generator)
        return self.inverse_cdf(u, validate=False)


def sample_2d(
    weights2d: torch.Tensor,
    num_samples: Optional[int] = None,
    *,
    u: Optional[torch.Tensor] = None,
    generator: Optional[torch.Generator] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """(row, col) indices from ``weights2d`` by inversion (see :class:`RadixForest2D`).

    Parameters
    ----------
    weights2d : Tensor
        ``[rows, cols]`` non-negative weights.
    num_samples : int, optional
        Random uniforms to draw; exactly one of ``num_samples`` and ``u``.
    u : Tensor, optional
        ``[..., 2]`` uniforms, e.g. Sobol points.
    generator : torch.Generator, optional

    Returns
    -------
    (Tensor, Tensor)
        int64 row and column indices.

    Raises
    ------
    RuntimeError
        Unless exactly one of ``num_samples`` and ``u`` is given, and as
        :class:`RadixForest2D`.

    Examples
    --------
    >>> rows, cols = torch_wrs.sample_2d(torch.rand(32, 32), 1000)
    """
    forest = RadixForest2D(weights2d)
    if (u is None) == (num_samples is None):
        raise RuntimeError("sample_2d: pass exactly one of num_samples and u")
    return forest.inverse_cdf(u) if u is not None else forest.sample(num_samples, generator=generator)
