"""Sampling for LLM decode loops and RL rollouts: temperature, top-k, top-p, min-p (each a
number or a per-row tensor), per-row seeds, log-probabilities and speculative acceptance,
with nothing read back to the host. ``csrc/llm/llm.h`` states the law."""
from typing import Optional, Union

import torch

from . import _llm_extras as extras
from . import penalties
from ._library import _C, direct_call
from ._llm_extras import SampleOutput

_sample_llm = torch.ops.wrs.sample_llm.default
_filter_logits = torch.ops.wrs.filter_logits.default
_speculative_accept = torch.ops.wrs.speculative_accept.default
_sample_logits_op = torch.ops.wrs.sample_logits.default
_sample_top_logprobs = torch.ops.wrs.sample_llm_top_logprobs.default

Control = Optional[Union[float, int, torch.Tensor]]
_LOGPROB_MODES = {None: 0, "processed": 1, "raw": 2}


_CONTROL_NAMES = ("temperature", "temperature_value", "top_k", "top_k_value", "top_p", "top_p_value", "min_p",
                  "min_p_value")


def _split(value, default, cast):
    """A control as the op takes it: (per-row tensor or None, number)."""
    if value is None:
        return None, default
    if isinstance(value, torch.Tensor):
        return value, default
    return None, cast(value)


def _controls(temperature, top_k, top_p, min_p):
    """The op's control arguments in _CONTROL_NAMES order (positional: a small call's
    time is mostly the host's)."""
    return (*_split(temperature, 1.0, float), *_split(top_k, 0, int), *_split(top_p, 1.0, float),
            *_split(min_p, 0.0, float))


def _check_rows(op, x, logits, kw):
    """check=True: one read back, then torch-style errors for invalid rows."""
    if logits:
        bad = torch.isnan(x) | (x == float("inf"))
        empty = (x == float("-inf")).all(-1)
        texts = ["logits contains NaN or +inf", "logits has a row whose entries are all -inf"]
    else:
        bad = ~torch.isfinite(x) | (x < 0)
        empty = (x == 0).all(-1)
        texts = ["probability tensor contains either `inf`, `nan` or element < 0",
                 "invalid multinomial distribution (sum of probabilities <= 0)"]
    flags = [bad.any(), empty.any()]
    names = []
    for name, ok in (("temperature", lambda t: (t >= 0) & torch.isfinite(t)), ("top_p", lambda t: (t > 0) & (t <= 1)),
                     ("min_p", lambda t: (t >= 0) & (t <= 1))):
        if kw.get(name) is not None:
            flags.append((~ok(kw[name].float())).any())
            names.append(f"{name} has an entry out of range")
    read = torch.stack(flags).tolist()
    for flag, text in zip(read, texts + names):
        if flag:
            raise RuntimeError(f"{op}: {text}")


def _sample(op, x, num_samples, logits, controls, replacement, generator, seeds, return_logprobs, check,
            overrides=None):
    try:
        mode = _LOGPROB_MODES[return_logprobs]
    except (KeyError, TypeError):  # TypeError: an unhashable value
        raise RuntimeError(f"{op}: return_logprobs must be None, 'processed' or 'raw', got {return_logprobs!r}") from None
    if check:
        _check_rows(op, x, logits, dict(zip(_CONTROL_NAMES, controls)))
    if replacement or num_samples == 1:
        if direct_call(x):
            tokens, lp = _C.sample_llm(x, num_samples, logits, *controls, seeds, mode, generator, overrides)
        else:
            tokens, lp = _sample_llm(x, num_samples, logits=logits, seeds=seeds, logprobs=mode, generator=generator,
                                     overrides=overrides, **dict(zip(_CONTROL_NAMES, controls)))
        return (tokens, lp) if mode else tokens
    # Without replacement: the Gumbel top-k race over the filtered logits (one read back).
    kw = dict(zip(_CONTROL_NAMES, controls))
    if seeds is not None:
        raise RuntimeError(f"{op}: seeds needs replacement=True")
    base = x if logits else torch.log(x)
    filtered = _filter_logits(base, **kw)
    tokens = _sample_logits_op(filtered, num_samples, replacement=False, generator=generator)
    if not mode:
        return tokens
    t = kw["temperature"] if kw["temperature"] is not None else kw["temperature_value"]
    t = t.reshape(*base.shape[:-1], 1) if isinstance(t, torch.Tensor) else t
    scaled = filtered if mode == 1 else base / t
    return tokens, torch.log_softmax(scaled.float(), -1).gather(-1, tokens)


def _sample_extra(x, num_samples, controls, typical_p, top_n_sigma, top_logprobs, replacement, generator, seeds,
                  return_logprobs, check):
    """sample_logits with typical-p, top-n-sigma or top-n log-probs (_llm_extras)."""
    op = "sample_logits"
    if not isinstance(return_logprobs, (str, type(None))) or return_logprobs not in _LOGPROB_MODES:
        raise RuntimeError(f"{op}: return_logprobs must be None, 'processed' or 'raw', got {return_logprobs!r}")
    if x.dim() == 0:
        raise RuntimeError(f"{op}: logits must have at least one dimension")
    extras.check_scalars(op, typical_p, top_n_sigma, top_logprobs, x.shape[-1])
    kw = dict(zip(_CONTROL_NAMES, controls))
    if check:
        _check_rows(op, x, True, kw)
    law = extras.extra_filtered(x, kw, typical_p, top_n_sigma, op) if extras.active(typical_p, top_n_sigma) else None
    if top_logprobs and law is None and return_logprobs != "processed" and (replacement or num_samples == 1):
        # One op: on CUDA, the sampler ranks the top n where its top-k lists hold them.
        return SampleOutput(*_sample_top_logprobs(x, num_samples, top_logprobs, seeds=seeds, generator=generator, **kw))
    source, draw = (x, controls) if law is None else (law, _controls(1.0, None, None, None))
    tokens = _sample(op, source, num_samples, True, draw, replacement, generator, seeds, None, False)
    if return_logprobs is None and not top_logprobs:
        return tokens
    if return_logprobs == "processed":
        out = extras.with_top_logprobs(tokens, law if law is not None else _filter_logits(x, **kw), top_logprobs)
    else:
        out = extras.with_top_logprobs(tokens, x, top_logprobs, extras.raw_scale(x, kw))
    return out if top_logprobs else (tokens, out.logprobs)


def sample_logits(
    logits: torch.Tensor,
    num_samples: int = 1,
    *,
    temperature: Control = 1.0,
    top_k: Control = None,
    top_p: Control = None,
    min_p: Control = None,
    typical_p: Control = None,
    top_n_sigma: Control = None,
    replacement: bool = True,
    generator: Optional[torch.Generator] = None,
    seeds: Optional[torch.Tensor] = None,
    return_logprobs: Optional[str] = None,
    top_logprobs: int = 0,
    check: bool = False,
    process: Optional[dict] = None,
):
    """Draws tokens from ``softmax(logits / temperature)`` after top-k, top-p and min-p.

    The controls apply in Hugging Face's and vLLM's order: temperature, then top-k (values
    tied with the k-th are kept), then top-p over the top-k set renormalised (the smallest
    set of largest probabilities whose mass reaches p, the crossing value included), then
    min-p (keep ``p_i >= min_p * max p``). The draw is from the kept set, renormalised
    (``csrc/llm/llm.h`` states the law and its precision). No vocabulary sort, and nothing
    is read back to the host unless ``check=True``. ``top_n_sigma`` applies before top-k (to
    the whole row) and ``typical_p`` after min-p, as Hugging Face orders its warpers; these
    two, and ``top_logprobs``, run in torch ops around the fused kernel (typical-p sorts the
    row).

    Parameters
    ----------
    logits : Tensor
        ``[..., V]``, any float dtype, any strides.
    num_samples : int
        Draws per row.
    temperature : float or Tensor, optional
        ``> 0``, or ``0`` for greedy (the first largest logit). A tensor gives one value per
        row (``[B]``, B the product of the leading dimensions).
    top_k : int or Tensor, optional
        Keep the k largest (with ties); ``None`` or ``<= 0`` disables it.
    top_p : float or Tensor, optional
        Nucleus mass in ``(0, 1]``; ``None`` or ``1`` disables it.
    min_p : float or Tensor, optional
        In ``[0, 1]``; ``None`` or ``0`` disables it.
    typical_p : float or Tensor, optional
        In ``(0, 1]``: Hugging Face's typical sampling, the tokens whose surprisal is closest
        to the row's entropy until their mass reaches typical_p; ``None`` or ``1`` disables it.
    top_n_sigma : float or Tensor, optional
        ``>= 0``: keep the logits within top_n_sigma standard deviations (over the row's finite
        logits, after temperature) of the row's maximum; ``None`` disables it.
    replacement : bool
        With ``False`` and ``num_samples > 1``: distinct tokens, the Gumbel top-k of the
        filtered logits (this path reads back once to validate).
    generator : torch.Generator, optional
        Source of randomness where ``seeds`` is not given.
    seeds : Tensor, optional
        int64 ``[B]``: row b's draws depend only on ``seeds[b]`` and the draw's position, so a
        request reproduces in any batch.
    return_logprobs : {None, "processed", "raw"}
        Also return float32 log-probabilities of the drawn tokens: under the filtered law, or
        under ``log_softmax(logits / temperature)`` (``log_softmax(logits)`` for greedy rows).
    top_logprobs : int
        n > 0 also returns the n most likely tokens under that law (raw where
        ``return_logprobs`` is None) and the drawn tokens' ranks.
    check : bool
        Read the rows back once and raise for invalid ones, instead of the silent result.
    process : dict, optional
        :func:`process_logits`' keywords (bitmask, banned ids, ``min_tokens``, logit bias,
        penalties): the draw is ``sample_logits(process_logits(logits, **process), ...)``'s,
        with the pass applied in the sampler's own read of the row (a plan of the bitmask and
        the few ids it changes, ``torch.ops.wrs.penalty_plan``). CUDA calls of fewer than 64
        rows, histories given as counts, ``check``, ``top_logprobs``, ``typical_p``,
        ``top_n_sigma`` and draws without replacement take ``process_logits`` first.

    Returns
    -------
    Tensor, (Tensor, Tensor) or SampleOutput
        int64 tokens ``[..., num_samples]``, and the log-probabilities with ``return_logprobs``.
        With ``top_logprobs=n``: ``SampleOutput(tokens, logprobs, top_tokens, top_logprobs,
        ranks)``, ``top_*`` of shape ``[..., n]`` most likely first, ``ranks`` one plus the
        number of tokens whose log-prob is strictly higher than the drawn token's.
        An invalid row (NaN or ``+inf`` logits, all ``-inf``, or a per-row control out of
        range) gives token 0 and a NaN log-probability.

    Raises
    ------
    RuntimeError
        For a non-float input, ``num_samples <= 0``, scalar controls out of range, per-row
        tensors of the wrong shape or device, and (``check=True``) invalid rows.

    Examples
    --------
    >>> logits = torch.randn(4, 32000)
    >>> tokens = torch_wrs.sample_logits(logits, temperature=0.8, top_k=50, top_p=0.9)
    >>> tokens, lp = torch_wrs.sample_logits(logits, top_p=torch.tensor([0.9, 1.0, 0.5, 0.95]),
    ...                                      seeds=torch.arange(4), return_logprobs="raw")
    >>> out = torch_wrs.sample_logits(logits, typical_p=0.9, top_logprobs=5)
    >>> out.top_tokens.shape, out.ranks.shape
    (torch.Size([4, 5]), torch.Size([4, 1]))
    >>> history = torch.randint(32000, (4, 64))
    >>> tokens = torch_wrs.sample_logits(logits, top_p=0.9, process=dict(
    ...     output_ids=history, repetition_penalty=1.1, banned_ids=torch.tensor([0])))
    """
    controls = _controls(temperature, top_k, top_p, min_p)
    typical_p = extras.typical_none(typical_p)
    overrides = None
    if process is not None:
        if not isinstance(process, dict):
            raise RuntimeError(f"sample_logits: process must be a dict of process_logits' keywords, "
                               f"got {type(process).__name__}")
        unknown = set(process) - set(penalties._KEYWORDS) - {"validate"}
        if unknown:
            raise RuntimeError(f"sample_logits: process holds keywords that process_logits does not take: "
                               f"{sorted(unknown)}")
        fuse = penalties._fuses(logits) and not (check or top_logprobs or extras.active(typical_p, top_n_sigma) or
                                                (not replacement and num_samples > 1))
        overrides = penalties._plan(logits, **process) if fuse else None
        if overrides is None:
            logits = penalties.process_logits(logits, **process)
    if top_logprobs or extras.active(typical_p, top_n_sigma):
        return _sample_extra(logits, num_samples, controls, typical_p, top_n_sigma, top_logprobs, replacement,
                             generator, seeds, return_logprobs, check)
    return _sample("sample_logits", logits, num_samples, True, controls, replacement, generator, seeds, return_logprobs,
                   check, overrides)


def sample_probs(
    probs: torch.Tensor,
    num_samples: int = 1,
    *,
    top_k: Control = None,
    top_p: Control = None,
    min_p: Control = None,
    replacement: bool = True,
    generator: Optional[torch.Generator] = None,
    seeds: Optional[torch.Tensor] = None,
    return_logprobs: Optional[str] = None,
    check: bool = False,
):
    """:func:`sample_logits` on probabilities (non-negative weights, normalised per row).

    Parameters
    ----------
    probs : Tensor
        ``[..., V]`` non-negative, any float dtype; rows need not sum to one.
    num_samples, top_k, top_p, min_p, replacement, generator, seeds, check
        As in :func:`sample_logits`.
    return_logprobs : {None, "processed", "raw"}
        Log-probabilities under the filtered law, or under ``probs / probs.sum(-1)``.

    Returns
    -------
    Tensor or (Tensor, Tensor)
        As :func:`sample_logits`; invalid rows (NaN, inf or negative entries, all zero)
        give token 0 and a NaN log-probability.

    Raises
    ------
    RuntimeError
        As :func:`sample_logits`, with torch.multinomial's texts under ``check=True``.

    Examples
    --------
    >>> probs = torch.softmax(torch.randn(8, 128256), -1)
    >>> tokens = torch_wrs.sample_probs(probs, top_k=50, top_p=0.9)
    """
    controls = _controls(None, top_k, top_p, min_p)
    return _sample("sample_probs", probs, num_samples, False, controls, replacement, generator, seeds, return_logprobs,
                   check)


def filter_logits(
    logits: torch.Tensor,
    *,
    temperature: Control = 1.0,
    top_k: Control = None,
    top_p: Control = None,
    min_p: Control = None,
    typical_p: Control = None,
    top_n_sigma: Control = None,
) -> torch.Tensor:
    """The processed logits that :func:`sample_logits` draws from: ``logits / temperature``
    on the kept set, ``-inf`` elsewhere (for KL terms, entropy bonuses, beam search).

    Parameters
    ----------
    logits : Tensor
        ``[..., V]``, any float dtype.
    temperature, top_k, top_p, min_p, typical_p, top_n_sigma
        As in :func:`sample_logits`.

    Returns
    -------
    Tensor
        Same shape and dtype as ``logits``. Greedy rows keep only their first largest logit;
        invalid rows are all NaN. Differentiable in ``logits`` (the gradient flows through
        the kept entries).

    Raises
    ------
    RuntimeError
        As :func:`sample_logits`.

    Examples
    --------
    >>> logits = torch.randn(2, 1000)
    >>> out = torch_wrs.filter_logits(logits, top_k=10)
    >>> int(torch.isfinite(out).sum())
    20
    """
    kw = dict(zip(_CONTROL_NAMES, _controls(temperature, top_k, top_p, min_p)))
    typical_p = extras.typical_none(typical_p)
    if extras.active(typical_p, top_n_sigma):
        if logits.dim() == 0:
            raise RuntimeError("filter_logits: logits must have at least one dimension")
        extras.check_scalars("filter_logits", typical_p, top_n_sigma, 0, logits.shape[-1])
        out = extras.extra_filtered(logits.detach(), kw, typical_p, top_n_sigma, "filter_logits").to(logits.dtype)
    else:
        out = _filter_logits(logits, **kw)
    if not (logits.requires_grad and torch.is_grad_enabled()):
        return out
    t = kw["temperature"] if kw["temperature"] is not None else kw["temperature_value"]
    t = t.reshape(*logits.shape[:-1], 1) if isinstance(t, torch.Tensor) else t
    t = torch.where(torch.as_tensor(t, device=logits.device) == 0, 1.0, t)
    return torch.where(out == float("-inf"), out, logits / t).where(~out.isnan(), out)


def speculative_accept(
    draft_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    target_probs: torch.Tensor,
    *,
    generator: Optional[torch.Generator] = None,
):
    """Speculative decoding's rejection scheme (Leviathan et al. 2023; Chen et al. 2023).

    Draft token s of row b is accepted with probability ``min(1, q(x) / p(x))``; at the first
    rejection a token is drawn from ``max(0, q - p)`` renormalised (from ``q`` where that is all
    zero), and if all S are accepted a bonus token is drawn from ``target_probs[:, S]``. The
    emitted tokens then follow the target law exactly.

    Parameters
    ----------
    draft_probs : Tensor
        ``[B, S, V]``: the draft model's probabilities (rows summing to one).
    draft_tokens : Tensor
        int64 or int32 ``[B, S]``: the draft's tokens. One out of ``[0, V)`` is rejected.
    target_probs : Tensor
        ``[B, S + 1, V]``: the target model's probabilities.
    generator : torch.Generator, optional

    Returns
    -------
    (Tensor, Tensor)
        int64 ``[B, S + 1]`` emitted tokens (the accepted drafts, then the drawn token, then
        -1), and int64 ``[B]`` accepted draft counts.

    Raises
    ------
    RuntimeError
        For shapes that do not match, non-float probabilities or tensors on several devices.

    Examples
    --------
    >>> d = torch.softmax(torch.randn(2, 4, 100), -1); t = torch.softmax(torch.randn(2, 5, 100), -1)
    >>> tokens, accepted = torch_wrs.speculative_accept(d, torch.multinomial(d.view(-1, 100), 1).view(2, 4), t)
    """
    if direct_call(draft_probs):
        return _C.speculative_accept(draft_probs, draft_tokens, target_probs, generator)
    return _speculative_accept(draft_probs, draft_tokens, target_probs, generator=generator)
