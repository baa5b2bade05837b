"""The truncations and log-probabilities that sample_logits adds around its fused kernel:
top-n-sigma, typical-p and the top-n log-probabilities with the drawn token's rank.

Order (docs/llm.md): temperature, then top-n-sigma over the whole row, then top-k, top-p
and min-p (the fused filter), then typical-p over what they kept (Hugging Face's warper
order: temperature, top-k, top-p, min-p, typical-p). Decisions are made in float64, by
the ops of csrc/llm/truncate.h."""
from typing import NamedTuple, Optional

import torch

_filter_logits = torch.ops.wrs.filter_logits.default
_top_logprobs = torch.ops.wrs.top_logprobs.default
_top_n_sigma = torch.ops.wrs.top_n_sigma_logits.default  # csrc/llm/truncate.h states both rules
_typical = torch.ops.wrs.typical_logits.default
_NEG_INF = float("-inf")


class SampleOutput(NamedTuple):
    """What ``sample_logits(..., top_logprobs=n)`` returns.

    tokens: int64 ``[..., num_samples]``; logprobs: float32, the drawn tokens' log-probs
    (``return_logprobs``'s law, raw when it is None); top_tokens, top_logprobs:
    ``[..., n]``, most likely first; ranks: int64 ``[..., num_samples]``, one plus the
    number of tokens whose log-prob is strictly higher than the drawn token's."""
    tokens: torch.Tensor
    logprobs: torch.Tensor
    top_tokens: torch.Tensor
    top_logprobs: torch.Tensor
    ranks: torch.Tensor


def _per_row(value, rows, device, name, op):
    """A control as a float64 [rows, 1] column, or None where it is off."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        if value.numel() != rows or value.device != device:
            raise RuntimeError(f"{op}: {name} must hold one value per row ({rows}) on {device}, "
                               f"got shape {tuple(value.shape)} on {value.device}")
        return value.reshape(rows, 1).double()
    return torch.full((rows, 1), float(value), dtype=torch.float64, device=device)


def check_scalars(op, typical_p, top_n_sigma, top_logprobs, vocab):
    """RuntimeErrors naming the argument, for scalar controls out of range."""
    if typical_p is not None and not isinstance(typical_p, torch.Tensor):
        if isinstance(typical_p, bool) or not 0.0 < float(typical_p) <= 1.0:
            raise RuntimeError(f"{op}: typical_p must be in (0, 1], got {typical_p!r}")
    if top_n_sigma is not None and not isinstance(top_n_sigma, torch.Tensor):
        n = float(top_n_sigma)
        if isinstance(top_n_sigma, bool) or not (0.0 <= n < float("inf")):
            raise RuntimeError(f"{op}: top_n_sigma must be a finite number >= 0, got {top_n_sigma!r}")
    if isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int) or not 0 <= top_logprobs <= vocab:
        raise RuntimeError(f"{op}: top_logprobs must be an int in [0, {vocab}], got {top_logprobs!r}")


def active(typical_p, top_n_sigma) -> bool:
    """Whether a call needs the extra truncations (a tensor always does: no host read)."""
    return typical_p is not None or top_n_sigma is not None


def scaled(x2d, kw):
    """The values the law is over, float32 [B, V]: x * (1 / T) as llm.h computes them, x
    itself on greedy rows; and the greedy rows' mask [B, 1] (None where no row is greedy)."""
    t = kw["temperature"]
    if t is None:
        value = kw["temperature_value"]
        if value in (0.0, 1.0):
            return x2d.float(), (None if value else torch.ones(x2d.shape[0], 1, dtype=torch.bool, device=x2d.device))
        return x2d.float() * torch.reciprocal(torch.tensor(value, dtype=torch.float32)), None
    return x2d.float() * raw_scale(x2d, kw)[:, None], (t == 0).reshape(-1, 1)


def extra_filtered(x, kw, typical_p, top_n_sigma, op):
    """The processed logits (float32, ``[..., V]``): the fused filter's output with
    top-n-sigma before it and typical-p after it; greedy rows as the fused filter leaves them."""
    shape = x.shape
    x2d = x.reshape(-1, shape[-1])
    rows = x2d.shape[0]
    y, greedy = scaled(x2d, kw)
    bad = None  # rows whose per-row controls are out of range: NaN, as the fused filter marks them
    if kw["temperature"] is not None:
        t = kw["temperature"].reshape(-1, 1).float()
        bad = ~((t >= 0) & (t <= torch.finfo(torch.float32).max))
    n = _per_row(top_n_sigma, rows, x.device, "top_n_sigma", op)
    # The ops return NaN rows where their control is out of range; greedy rows, which take
    # the fused filter's output below, are marked here.
    if n is not None:
        y = _top_n_sigma(y, n.reshape(-1))
        if greedy is not None:
            bad = _either(bad, ~((n >= 0) & (n < float("inf"))))
    plain = dict(kw, temperature=None, temperature_value=1.0)
    mass = _per_row(typical_p, rows, x.device, "typical_p", op)
    # The ops mark invalid rows NaN as the filter does: a filter without controls of its own
    # would only copy the row.
    f = _filter_logits(y, **plain) if _filters(kw) else y
    if mass is not None:
        f = _typical(f.float(), mass.reshape(-1))
        if greedy is not None:
            bad = _either(bad, ~((mass > 0) & (mass <= 1)))
    if greedy is not None:
        f = torch.where(greedy, _filter_logits(x2d, **kw).float(), f)
    if bad is not None:
        f = f.masked_fill(bad, float("nan"))
    return f.reshape(shape)


def _filters(kw):
    """Whether the fused filter has a control of its own (top-k, top-p, min-p) on."""
    return (kw["top_k"] is not None or kw["top_k_value"] != 0 or kw["top_p"] is not None or kw["top_p_value"] != 1.0
            or kw["min_p"] is not None or kw["min_p_value"] != 0.0)


def _either(a, b):
    return b if a is None else a | b


def with_top_logprobs(tokens, law, n, scale=None):
    """SampleOutput for drawn ``tokens`` under the log-law of logits ``law`` ([..., V]) times
    ``scale`` (float32 per row, or None): one read of the row (torch.ops.wrs.top_logprobs)."""
    v = law.shape[-1]
    lead, samples = tokens.shape[:-1], tokens.shape[-1]
    lp, top_tokens, top_lp, ranks = _top_logprobs(law.reshape(-1, v), tokens.reshape(-1, samples), n, scale=scale)
    return SampleOutput(tokens, lp.reshape(*lead, samples), top_tokens.reshape(*lead, n),
                        top_lp.reshape(*lead, n), ranks.reshape(*lead, samples))


def raw_scale(x, kw):
    """The per-row factor of raw log-probs' law, float32 [rows]: 1 / T as llm.h computes it,
    1 on greedy rows (the law is then x itself)."""
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    t = kw["temperature"]
    if t is None:
        value = kw["temperature_value"]
        inv = 1.0 if value in (0.0, 1.0) else torch.reciprocal(torch.tensor(value, dtype=torch.float32))
        return torch.full((rows,), float(inv), dtype=torch.float32, device=x.device)
    t = t.reshape(-1).float()
    return torch.where(t == 0, 1.0, torch.reciprocal(t))


def typical_none(value) -> Optional[float]:
    """typical_p == 1 keeps everything: treated as off (other values are checked later)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and float(value) == 1.0:
        return None
    return value
