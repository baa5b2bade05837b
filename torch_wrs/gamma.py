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
    """``Gamma(alpha, 1)`` per element of ``alpha`` (any float dtype and shape; the
    arithmetic is float32, or float64 for float64 input).

    ``method`` picks the generator (all exact): ``"cheng_ga"``, ``"marsaglia_tsang"``,
    ``"ahrens_dieter_gc"``, ``"best_xg"``, ``"cheng_feast_gkm3"``; ``"auto"`` is the
    fastest measured. ``alpha < 1`` goes through ``Y * U**(1/alpha)`` in log space, so
    results underflow only where the true value is below the dtype's smallest number;
    ``log=True`` returns ``log X`` itself, exact for any ``alpha > 0``.

    ``alpha == 0`` gives 0 and ``alpha == inf`` gives inf. ``validate=True`` raises a
    RuntimeError for negative or NaN entries, which the generating kernel flags in its own
    pass (on CUDA, one 4-byte read back, skipped while a CUDA graph is being captured);
    with ``validate=False``, or under capture, such entries give NaN.

    Differentiable in ``alpha`` (implicit reparameterisation, as ``torch._standard_gamma``).
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
    """``Gamma(concentration, rate)``, broadcasting the two; differentiable in both."""
    if not (isinstance(rate, torch.Tensor) and rate.dtype == concentration.dtype
            and rate.device == concentration.device):
        rate = torch.as_tensor(rate, dtype=concentration.dtype, device=concentration.device)
    if rate.shape != concentration.shape:  # broadcast_shapes is Python: 8 us of a 3 us call
        concentration = concentration.expand(torch.broadcast_shapes(concentration.shape, rate.shape))
    return standard_gamma(concentration, validate=validate, generator=generator) / rate


def dirichlet(
    concentration: torch.Tensor, *, validate: bool = True, generator: Optional[torch.Generator] = None
) -> torch.Tensor:
    """Dirichlet rows over the last dimension of ``concentration`` (``[..., K]``),
    normalised in log space, so concentrations down to 1e-3 and below stay exact.
    Differentiable in ``concentration``. ``validate=True`` raises a RuntimeError for
    negative, NaN or inf entries and all-zero rows, found by one check of the output (on
    CUDA one read back, skipped while a CUDA graph is being captured, where such rows
    come out NaN)."""
    if direct_call(concentration):
        return _C.dirichlet(concentration, validate, generator)
    return _dirichlet(concentration, validate=validate, generator=generator)


def beta(
    a: torch.Tensor, b: torch.Tensor, *, validate: bool = True, generator: Optional[torch.Generator] = None
) -> torch.Tensor:
    """``Beta(a, b)``, broadcasting ``a`` and ``b``; exact for tiny ``a`` and ``b``.
    Differentiable in both."""
    if direct_call(a) and direct_call(b):
        return _C.beta(a, b, validate, generator)
    return _beta(a, b, validate=validate, generator=generator)
