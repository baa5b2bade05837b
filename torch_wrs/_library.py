"""Loads the compiled operators (torch.ops.wrs.*) and registers their fake kernels.

The fake (meta) kernels give torch.compile and FakeTensor the output shapes without
running anything; the real kernels are in csrc/.
"""
import glob
import os

import torch

_here = os.path.dirname(os.path.abspath(__file__))
_candidates = sorted(glob.glob(os.path.join(_here, "_C*.so")) + glob.glob(os.path.join(_here, "_C*.pyd")))
if not _candidates:
    raise ImportError(
        "torch_wrs: the compiled extension torch_wrs/_C is missing; build it with "
        "`pip install --no-build-isolation -e .`"
    )
torch.ops.load_library(_candidates[0])
from . import _C  # noqa: E402  (the same library as a Python module: csrc/python/eager_calls.cpp)


_is_compiling = torch.compiler.is_compiling
_has_torch_function_unary = torch._C._has_torch_function_unary


def direct_call(t: torch.Tensor) -> bool:
    """Whether an eager call on ``t`` may take ``_C``'s direct binding of an operator,
    which skips torch.ops' boxed argument parsing (most of a small call). Not while
    torch.compile traces (it must see torch.ops), and not for a tensor or a mode with
    ``__torch_function__``, which torch.ops honours and the binding would skip. (The two
    tests are bound once: attribute lookups are a tenth of a 1.3 us call.)"""
    return not _is_compiling() and not _has_torch_function_unary(t)


@torch.library.register_fake("wrs::alias_table")
def _alias_table_fake(weights, *, validate=True):
    torch._check(weights.dim() >= 1, lambda: "alias_table: weights must have at least one dimension")
    return weights.new_empty(weights.shape, dtype=torch.int64)


@torch.library.register_fake("wrs::alias_sample")
def _alias_sample_fake(table, num_samples, *, ordered=True, method="auto", dtype=None, generator=None):
    torch._check(table.dim() >= 1, lambda: "alias_sample: table must have at least one dimension")
    return table.new_empty((*table.shape[:-1], num_samples), dtype=torch.int64 if dtype is None else dtype)


@torch.library.register_fake("wrs::_alias_sample_segments")
def _alias_sample_segments_fake(table, counts, begin=0, end=-1, *, dtype=None, generator=None):
    torch._check(table.dim() == 1, lambda: "_alias_sample_segments: table must be a 1-D int64 table")
    return table.new_empty((sum(counts),), dtype=torch.int64 if dtype is None else dtype)


@torch.library.register_fake("wrs::multinomial")
def _multinomial_fake(input, num_samples, replacement=False, *, generator=None):
    torch._check(input.dim() in (1, 2), lambda: "prob_dist must be 1 or 2 dim")
    return input.new_empty((*input.shape[:-1], num_samples), dtype=torch.int64)


@torch.library.register_fake("wrs::sample_logits")
def _sample_logits_fake(logits, num_samples=1, *, temperature=1.0, replacement=True, generator=None):
    torch._check(logits.dim() >= 1, lambda: "sample_logits: logits must have at least one dimension")
    return logits.new_empty((*logits.shape[:-1], num_samples), dtype=torch.int64)


@torch.library.register_fake("wrs::multinomial_counts")
def _multinomial_counts_fake(weights, total_count, *, generator=None):
    torch._check(weights.dim() >= 1, lambda: "multinomial_counts: weights must have at least one dimension")
    return weights.new_empty(weights.shape, dtype=torch.int64)


@torch.library.register_fake("wrs::standard_gamma")
def _standard_gamma_fake(alpha, method="auto", *, log=False, validate=True, generator=None):
    return torch.empty_like(alpha, memory_format=torch.contiguous_format)


@torch.library.register_fake("wrs::dirichlet_rows")
def _dirichlet_rows_fake(concentration, *, validate=True, generator=None):
    return torch.empty_like(concentration, memory_format=torch.contiguous_format)


@torch.library.register_fake("wrs::beta_pairs")
def _beta_pairs_fake(a, b, *, validate=True, generator=None):
    shape = torch.broadcast_shapes(a.shape, b.shape)
    return a.new_empty(shape, dtype=torch.promote_types(a.dtype, b.dtype))


def _default_cells(n):
    return 1 << min(max(int(n) - 1, 0).bit_length(), 30)


@torch.library.register_fake("wrs::radix_forest")
def _radix_forest_fake(weights, cells=None, *, validate=True):
    torch._check(weights.dim() >= 1, lambda: "radix_forest: weights must have at least one dimension")
    m = _default_cells(weights.shape[-1]) if cells is None else cells
    return (
        weights.new_empty(weights.shape, dtype=torch.int64),
        weights.new_empty((*weights.shape[:-1], m), dtype=torch.int32),
        weights.new_empty((*weights.shape, 2), dtype=torch.int64),
    )


@torch.library.register_fake("wrs::inverse_cdf")
def _inverse_cdf_fake(cdf, guide, nodes, u, row=None, *, validate=True):
    return u.new_empty(u.shape, dtype=torch.int64)


@torch.library.register_fake("wrs::radix_forest_sample")
def _radix_forest_sample_fake(cdf, guide, nodes, num_samples, *, generator=None):
    return cdf.new_empty((*cdf.shape[:-1], num_samples), dtype=torch.int64)


@torch.library.register_fake("wrs::sample_llm")
def _sample_llm_fake(input, num_samples=1, *, logits=True, temperature=None, temperature_value=1.0, top_k=None,
                     top_k_value=0, top_p=None, top_p_value=1.0, min_p=None, min_p_value=0.0, seeds=None, logprobs=0,
                     generator=None, overrides=None):
    torch._check(input.dim() >= 1, lambda: "sample_llm: input must have at least one dimension")
    shape = (*input.shape[:-1], num_samples)
    return input.new_empty(shape, dtype=torch.int64), input.new_empty(shape if logprobs else (0,), dtype=torch.float32)


@torch.library.register_fake("wrs::sample_llm_top_logprobs")
def _sample_llm_top_logprobs_fake(logits, num_samples=1, n=1, *, temperature=None, temperature_value=1.0, top_k=None,
                                  top_k_value=0, top_p=None, top_p_value=1.0, min_p=None, min_p_value=0.0, seeds=None,
                                  generator=None):
    torch._check(logits.dim() >= 1, lambda: "sample_logits: logits must have at least one dimension")
    shape, top = (*logits.shape[:-1], num_samples), (*logits.shape[:-1], n)
    i64, f32 = torch.int64, torch.float32
    return (logits.new_empty(shape, dtype=i64), logits.new_empty(shape, dtype=f32), logits.new_empty(top, dtype=i64),
            logits.new_empty(top, dtype=f32), logits.new_empty(shape, dtype=i64))


@torch.library.register_fake("wrs::filter_logits")
def _filter_logits_fake(logits, *, temperature=None, temperature_value=1.0, top_k=None, top_k_value=0, top_p=None,
                        top_p_value=1.0, min_p=None, min_p_value=0.0):
    return torch.empty_like(logits, memory_format=torch.contiguous_format)


@torch.library.register_fake("wrs::top_n_sigma_logits")
def _top_n_sigma_logits_fake(values, n):
    return torch.empty_like(values, memory_format=torch.contiguous_format)


@torch.library.register_fake("wrs::typical_logits")
def _typical_logits_fake(logits, mass):
    return torch.empty_like(logits, memory_format=torch.contiguous_format)


@torch.library.register_fake("wrs::speculative_accept")
def _speculative_accept_fake(draft_probs, draft_tokens, target_probs, *, generator=None):
    b, s = draft_tokens.shape
    return draft_probs.new_empty((b, s + 1), dtype=torch.int64), draft_probs.new_empty((b,), dtype=torch.int64)


@torch.library.register_fake("wrs::csr_alias_table")
def _csr_alias_table_fake(rowptr, weight, *, validate=True):
    return weight.new_empty(weight.shape, dtype=torch.int64)


@torch.library.register_fake("wrs::csr_sample_neighbors")
def _csr_sample_neighbors_fake(rowptr, col, table, weight, nodes, k, replace=True, *, validate=True, generator=None):
    n = nodes.shape[0]
    return (rowptr.new_empty((n, k)), rowptr.new_empty((n, k)), rowptr.new_empty((n,)))


@torch.library.register_fake("wrs::csr_random_walk")
def _csr_random_walk_fake(rowptr, col, table, weight, start, walk_length, p=1.0, q=1.0, *, rows_sorted=None,
                          validate=True, generator=None):
    return rowptr.new_empty((start.shape[0], walk_length + 1))


@torch.library.register_fake("wrs::penalize_logits")
def _penalize_logits_fake(logits, *, allowed_bitmask=None, masked_ids=None, bias_ids=None, bias_values=None,
                          output_ids=None, prompt_ids=None, repetition_penalty=None, frequency_penalty=None,
                          presence_penalty=None):
    return logits.new_empty(logits.shape, dtype=torch.float32)


@torch.library.register_fake("wrs::penalty_plan")
def _penalty_plan_fake(logits, *, allowed_bitmask=None, masked_ids=None, bias_ids=None, bias_values=None,
                       output_ids=None, prompt_ids=None, repetition_penalty=None, frequency_penalty=None,
                       presence_penalty=None):
    ids = sum(t.shape[1] for t in (masked_ids, bias_ids, output_ids, prompt_ids) if t is not None)
    cap = 2
    while cap < 2 * ids:
        cap *= 2
    words = (logits.shape[1] + 31) // 32
    return logits.new_empty((logits.shape[0], 3 * words + words % 2 + 4 * cap), dtype=torch.int32)


@torch.library.register_fake("wrs::top_logprobs")
def _top_logprobs_fake(law, tokens, n, *, scale=None):
    b, s = tokens.shape
    return (law.new_empty((b, s), dtype=torch.float32), law.new_empty((b, n), dtype=torch.int64),
            law.new_empty((b, n), dtype=torch.float32), law.new_empty((b, s), dtype=torch.int64))


@torch.library.register_fake("wrs::priority_update")
def _priority_update_fake(leaves, nodes, marks, index, priority, capacity, alpha, eps, *, validate=True):
    return None


@torch.library.register_fake("wrs::priority_rebuild")
def _priority_rebuild_fake(leaves, nodes, capacity, alpha, eps):
    return None


@torch.library.register_fake("wrs::priority_sample")
def _priority_sample_fake(leaves, nodes, capacity, num_samples, stratified=True, *, validate=True, generator=None):
    b = leaves.shape[1]
    return leaves.new_empty((b, num_samples), dtype=torch.int64), leaves.new_empty((b, num_samples))


@torch.library.register_fake("wrs::priority_weights")
def _priority_weights_fake(leaves, nodes, capacity, prob, alpha, eps, beta):
    return torch.empty_like(prob, memory_format=torch.contiguous_format)
