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
    """Same contract as ``torch.multinomial``, without its 2**24-category limit, with
    float64 sums, and capturable in CUDA graphs.

    With replacement every method samples the alias tables' quantized law (each
    probability within ``2**-33 / N`` of ``w / W``, zero weights never drawn); without, the
    ``num_samples`` largest race keys ``w / E``, ``E ~ Exp(1)``, in decreasing order (the
    order sequential draws would give). The method is chosen per shape, by one table per
    device (``csrc/multinomial/dispatch_cpu.cpp``, ``dispatch_cuda.cpp``).

    Parameters
    ----------
    input : Tensor
        1-D ``[N]`` or 2-D ``[B, N]`` non-negative weights, any float dtype.
    num_samples : int
        Draws per row (at most ``N`` without replacement).
    replacement : bool
        Draw with replacement.
    generator : torch.Generator, optional
    out : Tensor, optional
        int64 tensor to write the result into (resized as torch does).

    Returns
    -------
    Tensor
        int64 ``[..., num_samples]`` category indices.

    Raises
    ------
    RuntimeError
        With torch's texts, for ``num_samples <= 0``, ``num_samples > N`` without
        replacement, negative, inf or NaN weights, a zero-sum row, and (without
        replacement) a row with fewer than ``num_samples`` nonzero weights. On CUDA the
        value checks cost one 4-byte read back, skipped while the stream is capturing a
        CUDA graph: under capture invalid input raises nothing and gives indices that are
        in range but meaningless.

    Examples
    --------
    >>> idx = torch_wrs.multinomial(torch.rand(4, 1000), 8, replacement=True)
    >>> perm = torch_wrs.multinomial(torch.ones(10), 10)   # a uniform permutation
    """
    if out is not None:  # torch's checks on out, before any on the input's values
        torch._check(out.device == input.device, lambda: (
            "Expected all tensors to be on the same device, but found at least two devices, "
            f"{out.device} and {input.device}!"))
        torch._check(out.dtype == torch.int64, lambda: f"multinomial expects Long tensor out, got: {_dtype_name(out.dtype)}")
    if direct_call(input):
        result = _C.multinomial(input, num_samples, replacement, generator)
    else:
        result = _multinomial(input, num_samples, replacement, generator=generator)
    if out is None:
        return result
    out.resize_(result.shape)
    return out.copy_(result)


def _dtype_name(dtype):
    """torch's C++ name of a dtype (Float, Long, ...), as its error texts print it."""
    return torch.empty((), dtype=dtype, device="meta").type().rsplit(".", 1)[-1].replace("Tensor", "")


def _route(input: torch.Tensor, num_samples: int, replacement: bool = False, *, logits: bool = False) -> str:
    """The method that ``multinomial`` (or, with ``logits=True``, the categorical sampler from
    logits) takes for ``input`` on its device, by the method tables in
    ``csrc/multinomial/dispatch_cpu.cpp`` and ``dispatch_cuda.cpp``: for tests and the docs.
    """
    rows = input.numel() // input.shape[-1] if input.dim() and input.shape[-1] else 0
    n = input.shape[-1] if input.dim() else 1
    if input.device.type == "cuda":
        sms = torch.cuda.get_device_properties(input.device).multi_processor_count
        capturing = torch.cuda.is_current_stream_capturing()
        return torch.ops.wrs._multinomial_route("cuda", max(rows, 1), max(n, 1), num_samples, replacement,
                                                logits=logits, float64=input.dtype == torch.float64,
                                                capturing=capturing, sms=sms)
    return torch.ops.wrs._multinomial_route("cpu", max(rows, 1), max(n, 1), num_samples, replacement, logits=logits,
                                            float64=input.dtype == torch.float64)


def _categorical_logits(
    logits: torch.Tensor,
    num_samples: int = 1,
    *,
    temperature: float = 1.0,
    replacement: bool = True,
    generator: Optional[torch.Generator] = None,
) -> torch.Tensor:
    """What ``distributions.Categorical`` draws from logits (``torch_wrs.sample_logits`` is the
    public sampler, ``torch_wrs/llm.py``). Draws ``num_samples`` category indices per row from
    ``softmax(logits / temperature)``
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
    """How many of ``total_count`` i.i.d. draws from ``w / W`` fall on each category, without
    drawing them (what ``torch.distributions.Multinomial`` samples). Exact: category i takes
    ``Binomial(draws left, w_i / weight left)`` with exact binomial deviates, in float64.

    Parameters
    ----------
    weights : Tensor
        ``[..., M]`` non-negative weights, any float dtype.
    total_count : int
        Draws per row.
    generator : torch.Generator, optional

    Returns
    -------
    Tensor
        int64 ``[..., M]``, each row summing to ``total_count``; zero weights get zero.

    Raises
    ------
    RuntimeError
        For negative, NaN or inf weights and zero-sum rows (on CUDA with one 4-byte read
        back, skipped under CUDA-graph capture, where such rows get all-zero counts).

    Examples
    --------
    >>> counts = torch_wrs.multinomial_counts(torch.tensor([1.0, 2.0, 7.0]), 1000)
    """
    return _multinomial_counts(weights, total_count, generator=generator)
