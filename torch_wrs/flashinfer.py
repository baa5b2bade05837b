"""FlashInfer's sampling API (``flashinfer.sampling``, 0.7) on torch_wrs's kernels: an engine
switches by changing ``import flashinfer.sampling as fs`` to ``import torch_wrs.flashinfer as fs``.

Arguments shared by the sampling functions, as FlashInfer takes them:

- ``indices``: int32 or int64 ``[batch_size]``; output i is drawn from row ``indices[i]``,
  and the output takes its dtype (int32 without it).
- ``deterministic``: accepted and ignored: every call here is deterministic for a given
  generator or seed.
- ``generator``: the source of randomness where ``seed`` and ``offset`` are not both given.
- ``check_nan``: raise ``ValueError("Input probs contains NaN.")`` (``logits`` for the
  logits functions), as FlashInfer does.
- ``seed``, ``offset``: ints, or int64 tensors of length 1 or ``batch_size``; with both, each
  output row draws from a stream keyed by (seed, offset, row), as FlashInfer's Philox
  streams are; the draws differ from FlashInfer's (another generator), their law does not.
- ``return_valid``: also return a bool ``[batch_size]``, False for rows with no mass (all
  zero, or NaN), which draw token 0.

Where the laws differ from Hugging Face's, FlashInfer's are kept and said: ``"joint"``
applies top-k and top-p together on the original law. Top-k keeps the values tied with the
k-th, top-p the smallest set of largest probabilities whose mass reaches p with the values
tied at the crossing (``csrc/llm/llm.h``). Probabilities need not sum to one: each row is
normalised by its sum, as ``torch.multinomial`` does."""
from typing import Optional, Union

import torch

from .llm import filter_logits, sample_logits, sample_probs

Number = Union[float, int, torch.Tensor]
_MIX = (-7046029254386353131, -4658895280553007687)  # 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9 as int64


def _rows(x, indices):
    return x if indices is None else x.index_select(0, indices.long())


def _seeds(batch, seed, offset, device):
    """Per-row keys of (seed, offset, row), or None to use the generator."""
    if seed is None or offset is None:
        return None
    if isinstance(seed, torch.Tensor) != isinstance(offset, torch.Tensor):
        raise ValueError("seed and offset must both be tensors or both be scalars")
    key = torch.as_tensor(seed, dtype=torch.int64, device=device).reshape(-1)
    off = torch.as_tensor(offset, dtype=torch.int64, device=device).reshape(-1)
    for name, t in (("seed", key), ("offset", off)):
        if t.numel() not in (1, batch):
            raise ValueError(f"{name} tensor length must be 1 or {batch}")
    row = torch.arange(batch, dtype=torch.int64, device=device)
    return (key + off * _MIX[0]) ^ (row * _MIX[1])


def _check(x, check_nan, what):
    if check_nan and bool(torch.isnan(x).any()):
        raise ValueError(f"Input {what} contains NaN.")


def _draw(x, logits, indices, generator, seed, offset, return_valid, **controls):
    """One draw a row of x (rows gathered by indices): int32 (indices' dtype), and validity."""
    x = _rows(x, indices)
    seeds = _seeds(x.shape[0], seed, offset, x.device)
    fn = sample_logits if logits else sample_probs
    tokens, lp = fn(x, generator=generator if seeds is None else None, seeds=seeds, return_logprobs="processed",
                    **controls)
    out = tokens.squeeze(-1).to(indices.dtype if indices is not None else torch.int32)
    return (out, ~torch.isnan(lp.squeeze(-1))) if return_valid else out


def softmax(logits: torch.Tensor, temperature: Optional[Number] = None, enable_pdl: Optional[bool] = None):
    """``softmax(logits / temperature)`` in float32, a row at a time.

    Parameters
    ----------
    logits : Tensor
        ``[batch_size, V]``, any float dtype.
    temperature : float or Tensor, optional
        A scalar, or one value per row.
    enable_pdl : bool, optional
        Accepted and ignored.

    Returns
    -------
    Tensor
        float32 probabilities, the shape of ``logits``.

    Raises
    ------
    ValueError
        For a temperature tensor that is not 1-D with one value per row.

    Examples
    --------
    >>> probs = torch_wrs.flashinfer.softmax(torch.randn(4, 1000), temperature=0.7)
    """
    x = logits.float()
    if isinstance(temperature, torch.Tensor):
        if temperature.dim() != 1 or temperature.shape[0] != logits.shape[0]:
            raise ValueError("temperature tensor must be 1D with one value per logits row, "
                             f"got shape {tuple(temperature.shape)}")
        x = x / temperature.float()[:, None]
    elif temperature is not None:
        x = x / float(temperature)
    return torch.softmax(x, -1)


def sampling_from_logits(logits, indices=None, deterministic=True, generator=None, check_nan=False, seed=None,
                         offset=None):
    """A token a row from ``softmax(logits)``.

    Parameters
    ----------
    logits : Tensor
        ``[unique_batch_size, V]``.
    indices, deterministic, generator, check_nan, seed, offset
        As in the module's docstring.

    Returns
    -------
    Tensor
        ``[batch_size]`` tokens, int32 or ``indices``' dtype.

    Raises
    ------
    ValueError
        ``check_nan`` with NaN logits, or seed and offset of different kinds or lengths.

    Examples
    --------
    >>> tokens = torch_wrs.flashinfer.sampling_from_logits(torch.randn(4, 1000))
    """
    _check(logits, check_nan, "logits")
    return _draw(logits, True, indices, generator, seed, offset, False)


def sampling_from_probs(probs, indices=None, deterministic=True, generator=None, check_nan=False, seed=None,
                        offset=None, return_valid=False):
    """A token a row from ``probs``.

    Parameters
    ----------
    probs : Tensor
        ``[unique_batch_size, V]``, non-negative.
    indices, deterministic, generator, check_nan, seed, offset, return_valid
        As in the module's docstring.

    Returns
    -------
    Tensor or (Tensor, Tensor)
        ``[batch_size]`` tokens, and with ``return_valid`` each row's validity.

    Raises
    ------
    ValueError
        ``check_nan`` with NaN probabilities, or seed and offset of different kinds or lengths.

    Examples
    --------
    >>> probs = torch.softmax(torch.randn(4, 1000), -1)
    >>> tokens = torch_wrs.flashinfer.sampling_from_probs(probs)
    """
    _check(probs, check_nan, "probs")
    return _draw(probs, False, indices, generator, seed, offset, return_valid)


def top_p_sampling_from_probs(probs, top_p, indices=None, deterministic=True, generator=None, check_nan=False,
                              seed=None, offset=None, return_valid=False):
    """A token a row from the top-p set of ``probs``, renormalised.

    Parameters
    ----------
    probs : Tensor
        ``[unique_batch_size, V]``, non-negative.
    top_p : float or Tensor
        In ``(0, 1]``, or one value per output row.
    indices, deterministic, generator, check_nan, seed, offset, return_valid
        As in the module's docstring.

    Returns
    -------
    Tensor or (Tensor, Tensor)
        As :func:`sampling_from_probs`.

    Raises
    ------
    ValueError
        As :func:`sampling_from_probs`.
    RuntimeError
        For a scalar top_p out of range.

    Examples
    --------
    >>> tokens = torch_wrs.flashinfer.top_p_sampling_from_probs(torch.softmax(torch.randn(4, 1000), -1), 0.9)
    """
    _check(probs, check_nan, "probs")
    return _draw(probs, False, indices, generator, seed, offset, return_valid, top_p=top_p)


def top_k_sampling_from_probs(probs, top_k, indices=None, deterministic=True, generator=None, check_nan=False,
                              seed=None, offset=None, return_valid=False):
    """A token a row from the k most likely of ``probs`` (ties with the k-th kept), renormalised.

    Parameters
    ----------
    probs : Tensor
        ``[unique_batch_size, V]``, non-negative.
    top_k : int or Tensor
        k, or one value per output row; ``k <= 0`` or ``k >= V`` keeps every token.
    indices, deterministic, generator, check_nan, seed, offset, return_valid
        As in the module's docstring.

    Returns
    -------
    Tensor or (Tensor, Tensor)
        As :func:`sampling_from_probs`.

    Raises
    ------
    ValueError
        As :func:`sampling_from_probs`.

    Examples
    --------
    >>> tokens = torch_wrs.flashinfer.top_k_sampling_from_probs(torch.softmax(torch.randn(4, 1000), -1), 50)
    """
    _check(probs, check_nan, "probs")
    return _draw(probs, False, indices, generator, seed, offset, return_valid, top_k=top_k)


def min_p_sampling_from_probs(probs, min_p, indices=None, deterministic=True, generator=None, check_nan=False,
                              seed=None, offset=None, return_valid=False):
    """A token a row from the tokens with ``p >= min_p * max p``, renormalised.

    Parameters
    ----------
    probs : Tensor
        ``[unique_batch_size, V]``, non-negative.
    min_p : float or Tensor
        In ``[0, 1]``, or one value per output row.
    indices, deterministic, generator, check_nan, seed, offset, return_valid
        As in the module's docstring.

    Returns
    -------
    Tensor or (Tensor, Tensor)
        As :func:`sampling_from_probs`.

    Raises
    ------
    ValueError
        As :func:`sampling_from_probs`.
    RuntimeError
        For a scalar min_p out of range.

    Examples
    --------
    >>> tokens = torch_wrs.flashinfer.min_p_sampling_from_probs(torch.softmax(torch.randn(4, 1000), -1), 0.1)
    """
    _check(probs, check_nan, "probs")
    return _draw(probs, False, indices, generator, seed, offset, return_valid, min_p=min_p)


def _keep(probs, top_k=None, top_p=None):
    """Which tokens top-k and top-p keep, both on the original law (FlashInfer's rule: fewer
    than k tokens are more likely, and their mass is below p of the row's), by a sort in
    float64; ties are kept together."""
    v, order = probs.double().sort(dim=-1, descending=True, stable=True)
    n = v.shape[-1]
    pos = torch.arange(n, device=v.device).expand_as(v)
    new = torch.ones_like(v, dtype=torch.bool)
    new[..., 1:] = v[..., 1:] != v[..., :-1]
    first = torch.where(new, pos, 0).cummax(-1).values  # how many tokens are more likely
    keep = torch.ones_like(new)
    if top_k is not None:
        k = top_k.reshape(-1, 1).long() if isinstance(top_k, torch.Tensor) else int(top_k)
        k = torch.where(torch.as_tensor(k, device=v.device) <= 0, n, k)
        keep &= first < k
    if top_p is not None:
        p = top_p.reshape(-1, 1).double() if isinstance(top_p, torch.Tensor) else float(top_p)
        before = (v.cumsum(-1) - v).gather(-1, first)
        keep &= (before < p * v.sum(-1, keepdim=True)) | (first == 0)
    return torch.empty_like(keep).scatter_(-1, order, keep)


def _order(filter_apply_order):
    if filter_apply_order not in ("top_k_first", "joint"):
        raise ValueError(f"Invalid filter_apply_order: {filter_apply_order}")
    return filter_apply_order


def top_k_top_p_sampling_from_probs(probs, top_k, top_p, indices=None, filter_apply_order="top_k_first",
                                    deterministic=True, generator=None, check_nan=False, seed=None, offset=None,
                                    return_valid=False):
    """A token a row after top-k and top-p.

    Parameters
    ----------
    probs : Tensor
        ``[unique_batch_size, V]``, non-negative.
    top_k, top_p : number or Tensor
        As in :func:`top_k_sampling_from_probs` and :func:`top_p_sampling_from_probs`.
    filter_apply_order : {"top_k_first", "joint"}
        ``"top_k_first"``: top-p over the top-k set renormalised (Hugging Face's order);
        ``"joint"``: both on the original law (SGLang's choice).
    indices, deterministic, generator, check_nan, seed, offset, return_valid
        As in the module's docstring.

    Returns
    -------
    Tensor or (Tensor, Tensor)
        As :func:`sampling_from_probs`.

    Raises
    ------
    ValueError
        As :func:`sampling_from_probs`, or an unknown ``filter_apply_order``.

    Examples
    --------
    >>> probs = torch.softmax(torch.randn(4, 1000), -1)
    >>> tokens = torch_wrs.flashinfer.top_k_top_p_sampling_from_probs(probs, 50, 0.9, filter_apply_order="joint")
    """
    _check(probs, check_nan, "probs")
    if _order(filter_apply_order) == "top_k_first":
        return _draw(probs, False, indices, generator, seed, offset, return_valid, top_k=top_k, top_p=top_p)
    x = _rows(probs, indices)
    kept = torch.where(_keep(x, top_k, top_p), x, torch.zeros((), dtype=x.dtype, device=x.device))
    out = _draw(kept, False, None, generator, seed, offset, return_valid)
    if indices is None:
        return out
    return (out[0].to(indices.dtype), out[1]) if return_valid else out.to(indices.dtype)


def top_k_top_p_sampling_from_logits(logits, top_k, top_p, indices=None, filter_apply_order="top_k_first",
                                     deterministic=True, generator=None, check_nan=False, seed=None, offset=None):
    """A token a row from ``softmax(logits)`` after top-k and top-p.

    Parameters
    ----------
    logits : Tensor
        ``[unique_batch_size, V]``.
    top_k, top_p, filter_apply_order
        As in :func:`top_k_top_p_sampling_from_probs`.
    indices, deterministic, generator, check_nan, seed, offset
        As in the module's docstring.

    Returns
    -------
    Tensor
        ``[batch_size]`` tokens.

    Raises
    ------
    ValueError
        As :func:`sampling_from_logits`, or an unknown ``filter_apply_order``.

    Examples
    --------
    >>> tokens = torch_wrs.flashinfer.top_k_top_p_sampling_from_logits(torch.randn(4, 1000), 50, 0.9)
    """
    _check(logits, check_nan, "logits")
    if _order(filter_apply_order) == "top_k_first":
        return _draw(logits, True, indices, generator, seed, offset, False, top_k=top_k, top_p=top_p)
    return top_k_top_p_sampling_from_probs(softmax(logits), top_k, top_p, indices, "joint", deterministic, generator,
                                           False, seed, offset)


def top_p_renorm_probs(probs, top_p, is_deterministic=False):
    """``probs`` with the tokens outside the top-p set zeroed, renormalised.

    Parameters
    ----------
    probs : Tensor
        ``[batch_size, V]``, non-negative.
    top_p : float or Tensor
        In ``(0, 1]``, or one value per row.
    is_deterministic : bool
        Accepted: the result never depends on the order of summation.

    Returns
    -------
    Tensor
        float32, the shape of ``probs``; rows summing to one.

    Raises
    ------
    RuntimeError
        For a scalar top_p out of range.

    Examples
    --------
    >>> renormed = torch_wrs.flashinfer.top_p_renorm_probs(torch.softmax(torch.randn(4, 1000), -1), 0.9)
    """
    return _renorm(probs, top_p=top_p)


def top_k_renorm_probs(probs, top_k, is_deterministic=False):
    """``probs`` with all but the k most likely zeroed (ties with the k-th kept), renormalised.

    Parameters
    ----------
    probs : Tensor
        ``[batch_size, V]``, non-negative.
    top_k : int or Tensor
        k, or one value per row.
    is_deterministic : bool
        Accepted: the result never depends on the order of summation.

    Returns
    -------
    Tensor
        The shape and dtype of ``probs``; rows summing to one.

    Raises
    ------
    RuntimeError
        For per-row tensors of the wrong shape.

    Examples
    --------
    >>> renormed = torch_wrs.flashinfer.top_k_renorm_probs(torch.softmax(torch.randn(4, 1000), -1), 50)
    """
    return _renorm(probs, top_k=top_k).to(probs.dtype)


def _renorm(probs, **control):
    kept = torch.where(_keep(probs, **control), probs.float(), 0.0)
    return kept / kept.sum(-1, keepdim=True)


def top_k_mask_logits(logits, top_k):
    """``logits`` with all but the k largest (ties with the k-th kept) set to ``-inf``.

    Parameters
    ----------
    logits : Tensor
        ``[batch_size, V]``, any float dtype.
    top_k : int or Tensor
        k, or one value per row.

    Returns
    -------
    Tensor
        The shape and dtype of ``logits``.

    Raises
    ------
    RuntimeError
        For per-row tensors of the wrong shape.

    Examples
    --------
    >>> masked = torch_wrs.flashinfer.top_k_mask_logits(torch.randn(4, 1000), 50)
    """
    return filter_logits(logits, top_k=top_k)


def chain_speculative_sampling(draft_probs, draft_token_ids, target_probs, maybe_output_accepted_token_num=None,
                               maybe_output_emitted_draft_token_num=None, deterministic=True, generator=None,
                               seed=None, offset=None):
    """Speculative sampling of a chain of draft tokens (Chen et al. 2023): draft token j is
    accepted when ``u_j q(x_j) < p(x_j)`` (q the draft's law, p the target's); the first
    rejection draws from ``max(0, p - q)`` renormalised (from p where that is all zero), and
    a chain accepted whole draws a bonus token from ``target_probs[:, S]``.

    Parameters
    ----------
    draft_probs : Tensor
        ``[batch_size, S, V]``.
    draft_token_ids : Tensor
        int32 or int64 ``[batch_size, S]``.
    target_probs : Tensor
        ``[batch_size, S + 1, V]``.
    maybe_output_accepted_token_num, maybe_output_emitted_draft_token_num : Tensor, optional
        int32 ``[batch_size]``, added to in place where given.
    deterministic, generator, seed, offset
        As in the module's docstring; here seed and offset seed one generator for the call
        (tensors are read back once).

    Returns
    -------
    (Tensor, Tensor, Tensor)
        int32 ``[batch_size, S + 1]`` tokens (the emitted drafts, the drawn token, then -1);
        the tokens each accepted on its own (not stopping at the first rejection); the
        emitted draft tokens, the bonus token not counted.

    Raises
    ------
    ValueError
        For shapes that do not match.

    Examples
    --------
    >>> q = torch.softmax(torch.randn(2, 4, 100), -1); p = torch.softmax(torch.randn(2, 5, 100), -1)
    >>> x = torch.multinomial(q.view(-1, 100), 1).view(2, 4)
    >>> out, accepted, emitted = torch_wrs.flashinfer.chain_speculative_sampling(q, x, p)
    """
    b, s, v = draft_probs.shape
    if tuple(draft_token_ids.shape) != (b, s) or tuple(target_probs.shape) != (b, s + 1, v):
        raise ValueError(f"shapes do not match: draft_probs {tuple(draft_probs.shape)}, draft_token_ids "
                         f"{tuple(draft_token_ids.shape)}, target_probs {tuple(target_probs.shape)}")
    dev = draft_probs.device
    if seed is not None and offset is not None:  # one stream for the call, keyed by (seed, offset)
        key = int(_seeds(1, seed, offset, torch.device("cpu"))[0]) if not isinstance(seed, torch.Tensor) else \
            int(_seeds(1, seed.reshape(-1)[:1].cpu(), offset.reshape(-1)[:1].cpu(), torch.device("cpu"))[0])
        generator = torch.Generator(dev).manual_seed(key & ((1 << 63) - 1))
    tok = draft_token_ids.long().clamp(0, v - 1)
    q = draft_probs.float().gather(-1, tok[..., None])[..., 0]
    p = target_probs[:, :s].float().gather(-1, tok[..., None])[..., 0]
    u = torch.rand(b, s, device=dev, generator=generator)
    accept = (u * q < p) & (draft_token_ids >= 0) & (draft_token_ids < v)
    emitted = torch.cumprod(accept.int(), 1).sum(1)
    rows = torch.arange(b, device=dev)
    p_row = target_probs.float()[rows, emitted]
    q_row = (torch.where((emitted < s)[:, None], draft_probs.float()[rows, emitted.clamp(max=s - 1)], 0.0) if s
             else torch.zeros_like(p_row))
    resid = (p_row - q_row).clamp(min=0)
    resid = torch.where((resid.sum(-1) > 0)[:, None], resid, p_row)
    last = sample_probs(resid, generator=generator).squeeze(-1)
    out = torch.where(torch.arange(s, device=dev) < emitted[:, None], tok, -1)
    out = torch.cat([out, torch.full((b, 1), -1, dtype=torch.int64, device=dev)], 1)
    out[rows, emitted] = last
    accepted = maybe_output_accepted_token_num
    accepted = torch.zeros(b, dtype=torch.int32, device=dev) if accepted is None else accepted
    emitted_out = maybe_output_emitted_draft_token_num
    emitted_out = torch.zeros(b, dtype=torch.int32, device=dev) if emitted_out is None else emitted_out
    accepted += accept.sum(1).to(accepted.dtype)
    emitted_out += emitted.to(emitted_out.dtype)
    return out.int(), accepted, emitted_out


top_p_renorm_prob = top_p_renorm_probs
top_k_renorm_prob = top_k_renorm_probs

__all__ = ["softmax", "sampling_from_logits", "sampling_from_probs", "top_p_sampling_from_probs",
           "top_k_sampling_from_probs", "min_p_sampling_from_probs", "top_k_top_p_sampling_from_probs",
           "top_k_top_p_sampling_from_logits", "top_p_renorm_probs", "top_k_renorm_probs", "top_k_mask_logits",
           "chain_speculative_sampling", "top_p_renorm_prob", "top_k_renorm_prob"]
