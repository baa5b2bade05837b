"""Drop-ins for torch.multinomial, and categorical sampling from logits."""
from typing import Optional

import torch

from ._library import _C, direct_call

# The overloads themselves: resolving the packet on every call costs microseconds that
# a small call would notice.
_multinomial = torch.ops.wrs.multinomial.default
_sample_logits = torch.ops.wrs.sample_logits.default
_multinomial_counts = torch.ops.wrs.multinomial_counts.default


def multinomial(
    input: torch.Tensor,
    num_samples: int,
    replacement: bool = False,
    *,
    generator: Optional[torch.Generator] = None,
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Same contract as ``torch.multinomial``: ``input`` is 1-D ``[N]`` or 2-D ``[B, N]``
    non-negative weights, the result is int64 ``[..., num_samples]`` of category indices
    (written into ``out`` when given, as torch does). Raises ``RuntimeError`` with torch's
    texts for ``num_samples <= 0``, ``num_samples > N`` without replacement, negative, inf
    or NaN weights, a zero-sum row, and (without replacement) a row with fewer than
    ``num_samples`` nonzero weights.

    Unlike torch it has no 2**24-category limit and sums in float64. With replacement
    every method samples the alias tables' quantized law (each probability within
    ``2**-33 / N`` of ``w / W``, zero weights never drawn); without, the ``num_samples``
    largest race keys ``w / E``, ``E ~ Exp(1)``, in decreasing order (the order sequential
    draws would give). The method is chosen per shape (csrc/multinomial/multinomial_cuda.cu,
    multinomial_cpu.cpp).

    On CUDA the value checks cost one 4-byte read back, skipped while the stream is
    capturing a CUDA graph: under capture, invalid input (negative, NaN or inf weights,
    zero-sum rows, too few nonzero weights) raises nothing and gives indices that are in
    range but meaningless.
    """
    if direct_call(input):
        result = _C.multinomial(input, num_samples, replacement, generator)
    else:
        result = _multinomial(input, num_samples, replacement, generator=generator)
    if out is None:
        return result
    torch._check(out.dtype == torch.int64, lambda: f"multinomial: out must be an int64 tensor, got {out.dtype}")
    out.resize_(result.shape)
    return out.copy_(result)


def sample_logits(
    logits: torch.Tensor,
    num_samples: int = 1,
    *,
    temperature: float = 1.0,
    replacement: bool = True,
    generator: Optional[torch.Generator] = None,
) -> torch.Tensor:
    """Draws ``num_samples`` category indices per row from ``softmax(logits / temperature)``
    over the last dimension, without writing the softmax: ``logits`` ``[..., V]`` of any
    float dtype gives int64 ``[..., num_samples]``.

    With replacement the law is the alias tables' quantized law of the softmax (weights
    ``exp(x / T - max)`` in float64, as ``multinomial``); without replacement the
    ``num_samples`` largest Gumbel keys ``x / T - log E``, which on CUDA also serve one draw
    per row from ``rows * V >= 2**21`` logits (the same law for one draw, within ``2**-49``
    in total variation: one read of the logits). ``-inf`` logits are never drawn;
    NaN or ``+inf`` logits and rows of only ``-inf`` raise ``RuntimeError`` (on CUDA with
    one 4-byte read back, skipped under CUDA-graph capture, as for ``multinomial``).
    """
    if direct_call(logits):
        return _C.sample_logits(logits, num_samples, temperature, replacement, generator)
    return _sample_logits(logits, num_samples, temperature=temperature, replacement=replacement, generator=generator)


def multinomial_counts(
    weights: torch.Tensor, total_count: int, *, generator: Optional[torch.Generator] = None
) -> torch.Tensor:
    """How many of ``total_count`` i.i.d. draws from ``w / W`` fall on each category, per row
    of ``weights`` ``[..., M]`` (any float dtype): int64 ``[..., M]``, each row summing to
    ``total_count``, without drawing the samples (what ``torch.distributions.Multinomial``
    samples). Exact: category i takes Binomial(draws left, w_i / weight left) with exact
    binomial deviates, in float64; zero weights get zero. Raises ``RuntimeError`` for
    negative, NaN or inf weights and zero-sum rows (on CUDA with one 4-byte read back,
    skipped under CUDA-graph capture, where such rows get all-zero counts).
    """
    return _multinomial_counts(weights, total_count, generator=generator)
