"""Gamma, Dirichlet and Beta variates: exact rejection generators that stay correct for
tiny shapes (log-space boost) and carry the reparameterised gradient in alpha."""
from typing import Optional

import torch

from ._library import _C, direct_call

# The overloads themselves: no lookup per call.
_standard_gamma = torch.ops.wrs.standard_gamma.default
_dirichlet = torch.ops.wrs.dirichlet.default
_beta = torch.ops.wrs.beta.default

METHODS = ("auto", "cheng_ga", "marsaglia_tsang", "ahrens_dieter_gc", "best_xg", "cheng_feast_gkm3")


def standard_gamma(
    alpha: torch.Tensor,
    method: str = "auto",
    *,
    log: bool = False,
    validate: bool = True,
    generator: Optional[torch.Generator] = None,
) -> torch.Tensor:
    """``Gamma(alpha, 1)`` per element of ``alpha``.

    All generators are exact rejection samplers. ``alpha < 1`` goes through
    ``Y * U**(1/alpha)`` in log space, so results underflow only where the true value is
    below the dtype's smallest number. Differentiable in ``alpha`` (implicit
    reparameterisation, as ``torch._standard_gamma``).

    Parameters
    ----------
    alpha : Tensor
        Shapes, any float dtype and shape; arithmetic in float32, or float64 for float64.
        ``0`` gives 0 and ``inf`` gives inf.
    method : str
        ``"auto"`` (the fastest measured), ``"cheng_ga"``, ``"marsaglia_tsang"``,
        ``"ahrens_dieter_gc"``, ``"best_xg"`` or ``"cheng_feast_gkm3"``.
    log : bool
        Return ``log X``, exact for any ``alpha > 0``.
    validate : bool
        Raise for negative or NaN ``alpha``, flagged by the generating kernel (on CUDA one
        4-byte read back, skipped under CUDA-graph capture); otherwise such entries give NaN.
    generator : torch.Generator, optional

    Returns
    -------
    Tensor
        Same shape and dtype as ``alpha``.

    Raises
    ------
    RuntimeError
        For a non-float ``alpha``, an unknown ``method``, and (``validate=True``) negative or
        NaN entries.

    Examples
    --------
    >>> x = torch_wrs.standard_gamma(torch.full((1000,), 0.5))
    >>> lx = torch_wrs.standard_gamma(torch.full((1000,), 0.001), log=True)  # no underflow
    """
    if direct_call(alpha):
        return _C.standard_gamma(alpha, method, log, validate, generator)
    return _standard_gamma(alpha, method, log=log, validate=validate, generator=generator)


def gamma(
    concentration: torch.Tensor,
    rate: torch.Tensor,
    *,
    validate: bool = True,
    generator: Optional[torch.Generator] = None,
) -> torch.Tensor:
    """``Gamma(concentration, rate)``, broadcasting the two; differentiable in both.

    Parameters
    ----------
    concentration : Tensor
        Shapes ``> 0``, any float dtype.
    rate : Tensor or float
        Rates, broadcast against ``concentration``.
    validate, generator
        As in :func:`standard_gamma`.

    Returns
    -------
    Tensor
        ``standard_gamma(concentration) / rate``, of the broadcast shape.

    Raises
    ------
    RuntimeError
        As :func:`standard_gamma`, and for shapes that do not broadcast.

    Examples
    --------
    >>> x = torch_wrs.gamma(torch.tensor([2.0, 3.0]), torch.tensor(0.5))
    """
    if not (isinstance(rate, torch.Tensor) and rate.dtype == concentration.dtype
            and rate.device == concentration.device):
        rate = torch.as_tensor(rate, dtype=concentration.dtype, device=concentration.device)
    if rate.shape != concentration.shape:  # broadcast_shapes is Python: 8 us of a 3 us call
        concentration = concentration.expand(torch.broadcast_shapes(concentration.shape, rate.shape))
    return standard_gamma(concentration, validate=validate, generator=generator) / rate


def dirichlet(
    concentration: torch.Tensor, *, validate: bool = True, generator: Optional[torch.Generator] = None
) -> torch.Tensor:
    """Dirichlet rows over the last dimension of ``concentration``, normalised in log space,
    so concentrations down to 1e-3 and below stay exact (rows may hold exact zeros; the
    ``distributions.Dirichlet`` drop-in clamps as torch does). Differentiable.

    Parameters
    ----------
    concentration : Tensor
        ``[..., K]``, any float dtype, entries ``>= 0`` with a positive entry in each row.
    validate : bool
        Raise for negative, NaN or inf entries and all-zero rows, found by one check of the
        output (on CUDA one read back, skipped under CUDA-graph capture, where such rows
        come out NaN).
    generator : torch.Generator, optional

    Returns
    -------
    Tensor
        Same shape and dtype; each row sums to one.

    Raises
    ------
    RuntimeError
        For a non-float input and (``validate=True``) invalid rows.

    Examples
    --------
    >>> theta = torch_wrs.dirichlet(torch.full((4, 100), 0.01))
    """
    if direct_call(concentration):
        return _C.dirichlet(concentration, validate, generator)
    return _dirichlet(concentration, validate=validate, generator=generator)


def beta(
    a: torch.Tensor, b: torch.Tensor, *, validate: bool = True, generator: Optional[torch.Generator] = None
) -> torch.Tensor:
    """``Beta(a, b)``, broadcasting ``a`` and ``b``; exact for tiny ``a`` and ``b`` (samples may be
    exactly 0 or 1; the ``distributions.Beta`` drop-in clamps as torch does). Differentiable
    in both.

    Parameters
    ----------
    a, b : Tensor
        Concentrations ``> 0``, any float dtype, broadcast together.
    validate : bool
        Raise for negative or NaN entries (on CUDA one read back, skipped under capture).
    generator : torch.Generator, optional

    Returns
    -------
    Tensor
        The broadcast shape, the promoted dtype.

    Raises
    ------
    RuntimeError
        For non-float inputs, shapes that do not broadcast, and (``validate=True``) invalid
        entries.

    Examples
    --------
    >>> x = torch_wrs.beta(torch.tensor(0.5), torch.tensor([1.0, 2.0, 3.0]))
    """
    if direct_call(a) and direct_call(b):
        return _C.beta(a, b, validate, generator)
    return _beta(a, b, validate=validate, generator=generator)
