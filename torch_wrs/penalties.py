"""The pass engines run on logits before sampling: a structured-output token bitmask, banned
tokens, ``min_tokens`` EOS masking, a sparse logit bias, and repetition, frequency and
presence penalties, in vLLM's order (docs/llm.md states it beside Hugging Face's). One
kernel pass over the row and one over its id lists (torch.ops.wrs.penalize_logits,
csrc/llm/penalties.h); histories given as dense counts take torch ops."""
from typing import Optional, Tuple, Union

import torch

Number = Optional[Union[float, torch.Tensor]]


def _column(value, rows, device, name):
    """A per-row control as float32 [rows, 1]."""
    if isinstance(value, torch.Tensor):
        if value.numel() != rows or value.device != device:
            raise RuntimeError(f"process_logits: {name} must hold one value per row ({rows}) on {device}, "
                               f"got shape {tuple(value.shape)} on {value.device}")
        return value.reshape(rows, 1).float()
    return torch.full((rows, 1), float(value), device=device)


def _ids(ids, rows, name, device):
    """Padded id lists as int64 [rows, n] (a 1-D list applies to every row)."""
    if ids.device != device or ids.dtype not in (torch.int32, torch.int64):
        raise RuntimeError(f"process_logits: {name} must be an int32 or int64 tensor on {device}, "
                           f"got {ids.dtype} on {ids.device}")
    ids = ids.long()
    if ids.dim() == 1:
        return ids.expand(rows, -1)
    if ids.dim() != 2 or ids.shape[0] != rows:
        raise RuntimeError(f"process_logits: {name} must be [n] or [{rows}, n] (padded with -1), "
                           f"got {tuple(ids.shape)}")
    return ids


def _counts(ids, rows, vocab):
    """Token counts [rows, V] of padded id lists (-1 and ids out of range left out)."""
    slot = torch.where((ids >= 0) & (ids < vocab), ids, vocab)
    counts = torch.zeros(rows, vocab + 1, dtype=torch.float32, device=ids.device)
    return counts.scatter_add_(1, slot, torch.ones_like(slot, dtype=torch.float32))[:, :vocab]


def process_logits(
    logits: torch.Tensor,
    *,
    allowed_bitmask: Optional[torch.Tensor] = None,
    banned_ids: Optional[torch.Tensor] = None,
    min_tokens: Optional[Union[int, torch.Tensor]] = None,
    output_lengths: Optional[torch.Tensor] = None,
    eos_ids: Optional[torch.Tensor] = None,
    logit_bias: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
    output_ids: Optional[torch.Tensor] = None,
    output_counts: Optional[torch.Tensor] = None,
    prompt_ids: Optional[torch.Tensor] = None,
    prompt_counts: Optional[torch.Tensor] = None,
    repetition_penalty: Number = None,
    frequency_penalty: Number = None,
    presence_penalty: Number = None,
    validate: bool = True,
) -> torch.Tensor:
    """Logits after the per-request processing engines apply before sampling, in vLLM's order:
    the allowed-token bitmask, banned ids, ``min_tokens`` EOS masking, the logit bias, then
    the repetition, frequency and presence penalties. Every argument is optional and per
    row; rows are the leading dimensions flattened (B of them).

    Parameters
    ----------
    logits : Tensor
        ``[..., V]``, any float dtype.
    allowed_bitmask : Tensor, optional
        int32 ``[B, ceil(V / 32)]`` in xgrammar's and vLLM's layout: bit ``t % 32`` of word
        ``t // 32`` set allows token t; the others become ``-inf``.
    banned_ids : Tensor, optional
        Token ids set to ``-inf``: ``[n]`` for every row, or ``[B, n]`` padded with -1.
    min_tokens, output_lengths, eos_ids : optional
        Rows with ``output_lengths < min_tokens`` (ints or ``[B]``) get ``-inf`` at every id of
        ``eos_ids`` (``[n]`` or ``[B, n]`` padded with -1).
    logit_bias : (Tensor, Tensor), optional
        (ids, values): ``[B, n]`` ids padded with -1 (or ``[n]`` for every row) and the values
        added there.
    output_ids, output_counts : Tensor, optional
        The tokens generated so far: ``[B, L]`` ids padded with -1, or ``[B, V]`` counts.
        Frequency and presence penalties count these; the repetition penalty sees them too.
    prompt_ids, prompt_counts : Tensor, optional
        The prompt's tokens, likewise; only the repetition penalty sees them.
    repetition_penalty : float or Tensor, optional
        ``> 0``: a seen token's logit is divided by it where positive, multiplied where not
        (Hugging Face's and vLLM's definition); a row whose value is not > 0 becomes NaN, which
        the samplers treat as an invalid row.
    frequency_penalty, presence_penalty : float or Tensor, optional
        Subtract ``frequency_penalty x count`` and ``presence_penalty x (count > 0)``.
    validate : bool
        Read the id tensors back once and raise for ids out of ``[-1, V)``; with False
        (capturable, no host read) such ids are left out.

    Returns
    -------
    Tensor
        float32 ``[..., V]`` (engines sample from float32 logits).

    Raises
    ------
    RuntimeError
        Naming the argument: tensors of the wrong shape, dtype or device, a non-positive
        repetition penalty, ``min_tokens`` without ``output_lengths`` and ``eos_ids``, and
        (``validate``) ids out of range.

    Examples
    --------
    >>> logits = torch.randn(2, 1000)
    >>> history = torch.tensor([[5, 17, 17, -1], [3, -1, -1, -1]])
    >>> x = torch_wrs.process_logits(logits, output_ids=history, repetition_penalty=1.2,
    ...                              frequency_penalty=0.5, banned_ids=torch.tensor([0, 1]))
    >>> tokens = torch_wrs.sample_logits(x, temperature=0.7, top_p=0.9)
    """
    a = _arguments(logits, allowed_bitmask, banned_ids, min_tokens, output_lengths, eos_ids, logit_bias, output_ids,
                   output_counts, prompt_ids, prompt_counts, repetition_penalty, frequency_penalty, presence_penalty)
    x = torch.ops.wrs.penalize_logits(a["x2d"], **a["op"])
    if a["by_counts"]:  # dense histories: the penalties in torch ops
        x = _dense_penalties(x, a["rows"], a["vocab"], logits.device, output_ids, output_counts, prompt_ids,
                             prompt_counts, a["penalties"])
    if validate:
        _validate(a)
    return x.reshape(logits.shape)


# CUDA calls of fewer rows take process_logits first: at one row of 128,256 the plan's block
# (20 us of dependent phases) and the plan's reads cost more than the pass they save
# (docs/llm.md, "The pass before sampling").
_FUSE_MIN_ROWS = 64


def _fuses(logits: torch.Tensor) -> bool:
    """Whether sample_logits(process=...) applies the pass in the sampler's read of the row
    (the method table of the fused pass; every CPU call, CUDA calls of _FUSE_MIN_ROWS rows or
    more)."""
    rows = logits.numel() // max(1, logits.shape[-1]) if logits.dim() else 1
    return not logits.is_cuda or rows >= _FUSE_MIN_ROWS


def _plan(logits: torch.Tensor, validate: bool = True, **process) -> Optional[torch.Tensor]:
    """process_logits' keywords as a penalty plan (torch.ops.wrs.penalty_plan) that
    sample_llm applies in its read of the row, or None where the histories are dense counts
    (those take torch ops over a materialised row)."""
    if process.get("output_counts") is not None or process.get("prompt_counts") is not None:
        return None
    a = _arguments(logits, *(process.get(name) for name in _KEYWORDS))
    out = torch.ops.wrs.penalty_plan(a["x2d"], **a["op"])
    if validate:
        _validate(a)
    return out


_KEYWORDS = ("allowed_bitmask", "banned_ids", "min_tokens", "output_lengths", "eos_ids", "logit_bias", "output_ids",
             "output_counts", "prompt_ids", "prompt_counts", "repetition_penalty", "frequency_penalty",
             "presence_penalty")


def _arguments(logits, allowed_bitmask, banned_ids, min_tokens, output_lengths, eos_ids, logit_bias, output_ids,
               output_counts, prompt_ids, prompt_counts, repetition_penalty, frequency_penalty, presence_penalty):
    """process_logits' arguments checked and in the ops' form: x2d, rows, vocab, the op's
    keywords, by_counts, the per-row penalties and the id lists to validate."""
    if logits.dim() == 0 or not logits.is_floating_point():
        raise RuntimeError("process_logits: logits must be a floating-point tensor of at least one dimension")
    vocab, device = logits.shape[-1], logits.device
    x2d = logits.reshape(-1, vocab)
    rows = x2d.shape[0]
    index_args = []  # (name, ids) to validate
    if allowed_bitmask is not None:
        words = (vocab + 31) // 32
        if allowed_bitmask.dtype != torch.int32 or tuple(allowed_bitmask.shape) != (rows, words):
            raise RuntimeError(f"process_logits: allowed_bitmask must be int32 [{rows}, {words}], "
                               f"got {allowed_bitmask.dtype} {tuple(allowed_bitmask.shape)}")
    masked = []
    if banned_ids is not None:
        masked.append(_ids(banned_ids, rows, "banned_ids", device))
        index_args.append(("banned_ids", masked[-1]))
    if min_tokens is not None:
        if output_lengths is None or eos_ids is None:
            raise RuntimeError("process_logits: min_tokens needs output_lengths and eos_ids")
        eos = _ids(eos_ids, rows, "eos_ids", device)
        index_args.append(("eos_ids", eos))
        young = _column(output_lengths, rows, device, "output_lengths") < _column(min_tokens, rows, device,
                                                                                   "min_tokens")
        masked.append(torch.where(young, eos, -1))
    bias_ids = bias_values = None
    if logit_bias is not None:
        bias_ids = _ids(logit_bias[0], rows, "logit_bias ids", device)
        index_args.append(("logit_bias ids", bias_ids))
        bias_values = logit_bias[1].to(device).float().expand(bias_ids.shape)
    if repetition_penalty is not None and not isinstance(repetition_penalty, torch.Tensor) \
            and not float(repetition_penalty) > 0:
        raise RuntimeError(f"process_logits: repetition_penalty must be > 0, got {repetition_penalty!r}")
    penalties = {name: None if value is None else _column(value, rows, device, name).view(rows)
                 for name, value in (("repetition_penalty", repetition_penalty),
                                     ("frequency_penalty", frequency_penalty),
                                     ("presence_penalty", presence_penalty))}
    for name, ids, counts in (("output", output_ids, output_counts), ("prompt", prompt_ids, prompt_counts)):
        if ids is not None and counts is not None:
            raise RuntimeError(f"process_logits: give {name}_ids or {name}_counts, not both")
        if ids is not None:
            index_args.append((f"{name}_ids", _ids(ids, rows, f"{name}_ids", device)))
    by_counts = output_counts is not None or prompt_counts is not None
    history = {} if by_counts else dict(output_ids=dict(index_args).get("output_ids"),
                                        prompt_ids=dict(index_args).get("prompt_ids"))
    op = dict(allowed_bitmask=allowed_bitmask, masked_ids=torch.cat(masked, 1) if masked else None,
              bias_ids=bias_ids, bias_values=bias_values, **history,
              **(dict(repetition_penalty=penalties["repetition_penalty"]) if by_counts else penalties))
    return dict(x2d=x2d, rows=rows, vocab=vocab, op=op, by_counts=by_counts, penalties=penalties,
                index_args=index_args, device=device)


def _validate(a):
    """Raises for ids out of [-1, V) (one read back)."""
    index_args, vocab, device = a["index_args"], a["vocab"], a["device"]
    if index_args:
        lows_highs = torch.stack([torch.stack([t.min(), t.max()]) if t.numel() else
                                  torch.zeros(2, dtype=torch.int64, device=device) for _, t in index_args]).tolist()
        for (name, _), (low, high) in zip(index_args, lows_highs):
            if low < -1 or high >= vocab:
                raise RuntimeError(f"process_logits: {name} holds ids out of [-1, {vocab}): {low} to {high}")


def _dense_penalties(x, rows, vocab, device, output_ids, output_counts, prompt_ids, prompt_counts, penalties):
    """The penalties of penalties.h from [B, V] counts (ids turned into counts)."""
    out = _history(output_ids, output_counts, rows, vocab, device, "output")
    prompt = _history(prompt_ids, prompt_counts, rows, vocab, device, "prompt")
    r, f, p = (penalties[n] for n in ("repetition_penalty", "frequency_penalty", "presence_penalty"))
    if r is not None:
        seen = torch.zeros_like(x, dtype=torch.bool)
        for counts in (out, prompt):
            if counts is not None:
                seen |= counts > 0
        r = r[:, None]
        x = torch.where(seen, torch.where(x > 0, x / r, x * r), x)
    if out is not None:
        if f is not None:
            x = x - f[:, None] * out
        if p is not None:
            x = x - p[:, None] * (out > 0)
    return x


def _history(ids, counts, rows, vocab, device, name):
    """A token history as float32 counts [rows, V], from padded ids or counts."""
    if counts is not None:
        if tuple(counts.shape) != (rows, vocab) or counts.device != device:
            raise RuntimeError(f"process_logits: {name}_counts must be [{rows}, {vocab}] on {device}, "
                               f"got {tuple(counts.shape)} on {counts.device}")
        return counts.float()
    if ids is None:
        return None
    return _counts(_ids(ids, rows, f"{name}_ids", device), rows, vocab)
