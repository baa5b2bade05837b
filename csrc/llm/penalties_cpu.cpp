// penalize_logits: the argument checks, and the CPU kernel (a row at a time, rows in
// parallel); penalties.h states the rule.
#include "common/checks.h"
#include "common/parallel.h"
#include "llm/penalties.h"
#include "llm/penalties_ops.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <unordered_map>

namespace wrs::llm {

namespace {

constexpr const char* kOp = "penalize_logits";

at::Tensor id_list(const std::optional<at::Tensor>& t, const char* name, const PenaltyCall& c) {
  if (!t.has_value()) return {};
  TORCH_CHECK(t->dim() == 2 && t->size(0) == c.rows, kOp, ": ", name, " must be [", c.rows,
              ", n] (padded with -1), got shape ", t->sizes());
  TORCH_CHECK(t->scalar_type() == at::kLong || t->scalar_type() == at::kInt, kOp, ": ", name,
              " must be an int32 or int64 tensor, got ", t->scalar_type());
  TORCH_CHECK(t->device() == c.x.device(), kOp, ": ", name, " must be on ", c.x.device(), ", got ", t->device());
  return t->to(at::kLong).contiguous();
}

at::Tensor per_row(const std::optional<at::Tensor>& t, const char* name, const PenaltyCall& c) {
  if (!t.has_value()) return {};
  TORCH_CHECK(t->dim() == 1 && t->size(0) == c.rows, kOp, ": ", name, " must be a 1-D tensor of ", c.rows,
              " entries (one per row), got shape ", t->sizes());
  TORCH_CHECK(at::isFloatingType(t->scalar_type()), kOp, ": ", name, " must be a floating-point tensor, got ",
              t->scalar_type());
  TORCH_CHECK(t->device() == c.x.device(), kOp, ": ", name, " must be on ", c.x.device(), ", got ", t->device());
  return t->to(at::kFloat).contiguous();
}

}  // namespace

PenaltyCall prepare_penalties(const at::Tensor& logits, const std::optional<at::Tensor>& allowed_bitmask,
                              const std::optional<at::Tensor>& masked_ids, const std::optional<at::Tensor>& bias_ids,
                              const std::optional<at::Tensor>& bias_values, const std::optional<at::Tensor>& output_ids,
                              const std::optional<at::Tensor>& prompt_ids,
                              const std::optional<at::Tensor>& repetition_penalty,
                              const std::optional<at::Tensor>& frequency_penalty,
                              const std::optional<at::Tensor>& presence_penalty) {
  check_floating(logits, kOp, "logits");
  TORCH_CHECK(logits.dim() == 2, kOp, ": logits must be [B, V], got shape ", logits.sizes());
  PenaltyCall c;
  c.rows = logits.size(0);
  c.v = logits.size(1);
  TORCH_CHECK(c.v < (int64_t{1} << 31), kOp, ": logits may hold at most 2^31 - 1 tokens a row, got ", c.v);
  c.x = logits.contiguous();
  if (allowed_bitmask.has_value()) {
    const int64_t words = (c.v + 31) / 32;
    TORCH_CHECK(allowed_bitmask->scalar_type() == at::kInt && allowed_bitmask->dim() == 2 &&
                    allowed_bitmask->size(0) == c.rows && allowed_bitmask->size(1) == words,
                kOp, ": allowed_bitmask must be int32 [", c.rows, ", ", words, "], got ",
                allowed_bitmask->scalar_type(), " ", allowed_bitmask->sizes());
    TORCH_CHECK(allowed_bitmask->device() == logits.device(), kOp, ": allowed_bitmask must be on ",
                logits.device(), ", got ", allowed_bitmask->device());
    c.bitmask = allowed_bitmask->contiguous();
  }
  c.masked = id_list(masked_ids, "masked_ids", c);
  c.bias_ids = id_list(bias_ids, "bias_ids", c);
  TORCH_CHECK(bias_ids.has_value() == bias_values.has_value(), kOp, ": bias_ids and bias_values go together");
  if (bias_values.has_value()) {
    TORCH_CHECK(bias_values->sizes() == bias_ids->sizes(), kOp, ": bias_values must have bias_ids' shape ",
                bias_ids->sizes(), ", got ", bias_values->sizes());
    TORCH_CHECK(bias_values->device() == logits.device(), kOp, ": bias_values must be on ", logits.device());
    TORCH_CHECK(at::isFloatingType(bias_values->scalar_type()), kOp, ": bias_values must be a floating-point tensor");
    c.bias_values = bias_values->to(at::kFloat).contiguous();
  }
  c.output = id_list(output_ids, "output_ids", c);
  c.prompt = id_list(prompt_ids, "prompt_ids", c);
  c.repetition = per_row(repetition_penalty, "repetition_penalty", c);
  c.frequency = per_row(frequency_penalty, "frequency_penalty", c);
  c.presence = per_row(presence_penalty, "presence_penalty", c);
  return c;
}

namespace {

template <typename scalar_t>
void penalize_row(const PenaltyCall& c, int64_t b, float* out) {
  const int64_t v = c.v;
  const scalar_t* x = c.x.const_data_ptr<scalar_t>() + b * v;
  const int32_t* bits = c.bitmask.defined() ? c.bitmask.const_data_ptr<int32_t>() + b * ((v + 31) / 32) : nullptr;
  PenaltyRow p{c.repetition.defined() ? c.repetition.const_data_ptr<float>()[b] : 1.0f,
               c.frequency.defined() ? c.frequency.const_data_ptr<float>()[b] : 0.0f,
               c.presence.defined() ? c.presence.const_data_ptr<float>()[b] : 0.0f};
  if (!(p.repetition > 0.0f)) {
    for (int64_t t = 0; t < v; ++t) out[t] = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < v; ++t) out[t] = allowed(bits, t) ? static_cast<float>(x[t]) : kNegInf;
  auto each = [&](const at::Tensor& ids, auto&& fn) {
    if (!ids.defined()) return;
    const int64_t n = ids.size(1);
    const int64_t* row = ids.const_data_ptr<int64_t>() + b * n;
    for (int64_t j = 0; j < n; ++j)
      if (row[j] >= 0 && row[j] < v) fn(row[j], j);
  };
  each(c.masked, [&](int64_t t, int64_t) { out[t] = kNegInf; });
  if (c.bias_ids.defined()) {
    const float* values = c.bias_values.const_data_ptr<float>() + b * c.bias_ids.size(1);
    each(c.bias_ids, [&](int64_t t, int64_t j) { out[t] += values[j]; });
  }
  if (!c.output.defined() && !c.prompt.defined()) return;
  std::unordered_map<int64_t, int32_t> counts;
  each(c.output, [&](int64_t t, int64_t) { ++counts[t]; });
  each(c.prompt, [&](int64_t t, int64_t) { counts.emplace(t, 0); });
  for (const auto& [t, count] : counts) out[t] = penalized(out[t], count, p);
}

at::Tensor penalize_logits_cpu(const at::Tensor& logits, const std::optional<at::Tensor>& allowed_bitmask,
                               const std::optional<at::Tensor>& masked_ids, const std::optional<at::Tensor>& bias_ids,
                               const std::optional<at::Tensor>& bias_values,
                               const std::optional<at::Tensor>& output_ids, const std::optional<at::Tensor>& prompt_ids,
                               const std::optional<at::Tensor>& repetition_penalty,
                               const std::optional<at::Tensor>& frequency_penalty,
                               const std::optional<at::Tensor>& presence_penalty) {
  PenaltyCall c = prepare_penalties(logits, allowed_bitmask, masked_ids, bias_ids, bias_values, output_ids,
                                    prompt_ids, repetition_penalty, frequency_penalty, presence_penalty);
  at::Tensor out = at::empty({c.rows, c.v}, logits.options().dtype(at::kFloat));
  if (out.numel() == 0) return out;
  float* o = out.data_ptr<float>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, c.x.scalar_type(), "penalize_logits_cpu", [&] {
    wrs::parallel_for(0, c.rows, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) penalize_row<scalar_t>(c, b, o + b * c.v);
    });
  });
  return out;
}

constexpr int32_t kSeen = 1 << 30, kMasked = 1 << 29, kCountMask = kMasked - 1;

// Row b's plan (penalties.h), in penalize_row's order of operations.
template <typename scalar_t>
void plan_row(const PenaltyCall& c, int64_t b, int64_t cap, int32_t* row) {
  const int64_t v = c.v, words = plan_words(v);
  const int32_t* bits = c.bitmask.defined() ? c.bitmask.const_data_ptr<int32_t>() + b * words : nullptr;
  PenaltyRow p{c.repetition.defined() ? c.repetition.const_data_ptr<float>()[b] : 1.0f,
               c.frequency.defined() ? c.frequency.const_data_ptr<float>()[b] : 0.0f,
               c.presence.defined() ? c.presence.const_data_ptr<float>()[b] : 0.0f};
  const bool invalid = !(p.repetition > 0.0f);
  int32_t* prefix = row + 2 * words;
  float* sorted = reinterpret_cast<float*>(row + plan_values_at(v));
  int32_t* keys = row + plan_values_at(v) + cap;
  float* values = reinterpret_cast<float*>(keys + cap);
  int32_t* flags = keys + 2 * cap;
  for (int64_t k = 0; k < words; ++k) row[2 * k] = invalid ? 0 : bits ? bits[k] : -1, row[2 * k + 1] = 0;
  std::fill(prefix, prefix + (plan_values_at(v) - 2 * words), 0);
  std::fill(sorted, sorted + cap, 0.0f);  // unused slots too: the plan is a pure function of its inputs
  std::fill(keys, keys + cap, -1);
  std::fill(values, values + cap, 0.0f);
  std::fill(flags, flags + cap, 0);
  if (invalid) {
    keys[plan_slot(0, cap)] = 0;
    values[plan_slot(0, cap)] = sorted[0] = std::numeric_limits<float>::quiet_NaN();
    row[1] = 1;
    std::fill(prefix + 1, prefix + words, 1);  // item 0 is before every later word
    return;
  }
  auto each = [&](const at::Tensor& ids, auto&& fn) {
    if (!ids.defined()) return;
    const int64_t n = ids.size(1);
    const int64_t* r = ids.const_data_ptr<int64_t>() + b * n;
    for (int64_t j = 0; j < n; ++j)
      if (r[j] >= 0 && r[j] < v) fn(static_cast<int32_t>(r[j]), j);
  };
  auto insert = [&](int32_t t, int64_t) {  // ordered probing (penalties.h): the larger id keeps the slot
    for (uint32_t h = plan_slot(t, cap); keys[h] != t; h = (h + 1) & static_cast<uint32_t>(cap - 1)) {
      if (keys[h] < t) std::swap(keys[h], t);
      if (t == -1) return;
    }
  };
  for (const at::Tensor* ids : {&c.masked, &c.bias_ids, &c.output, &c.prompt}) each(*ids, insert);
  auto slot = [&](int64_t t) { return plan_find(keys, cap, t); };
  each(c.masked, [&](int32_t t, int64_t) { flags[slot(t)] |= kMasked; });
  each(c.output, [&](int32_t t, int64_t) { flags[slot(t)] += 1; });  // a count > 0: seen
  each(c.prompt, [&](int32_t t, int64_t) { flags[slot(t)] |= kSeen; });
  const scalar_t* x = c.x.const_data_ptr<scalar_t>() + b * v;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t h = 0; h < cap; ++h) {
    const int64_t t = keys[h];
    if (t < 0) continue;
    values[h] = allowed(bits, t) && !(flags[h] & kMasked) ? static_cast<float>(x[t]) : kNegInf;
    row[2 * (t >> 5) + 1] |= static_cast<int32_t>(1u << (t & 31));
  }
  if (c.bias_ids.defined()) {
    const float* bias = c.bias_values.const_data_ptr<float>() + b * c.bias_ids.size(1);
    each(c.bias_ids, [&](int64_t t, int64_t j) { values[slot(t)] += bias[j]; });
  }
  for (int64_t h = 0; h < cap; ++h) {
    if (keys[h] >= 0 && (flags[h] & (kSeen | kCountMask))) values[h] = penalized(values[h], flags[h] & kCountMask, p);
  }
  int32_t total = 0;
  for (int64_t k = 0; k < words; ++k) prefix[k] = total, total += popcount32(static_cast<uint32_t>(row[2 * k + 1]));
  for (int64_t h = 0; h < cap; ++h) {
    const int64_t t = keys[h];
    if (t >= 0) sorted[plan_rank(prefix[t >> 5], static_cast<uint32_t>(row[2 * (t >> 5) + 1]), t)] = values[h];
  }
}

at::Tensor penalty_plan_cpu(const at::Tensor& logits, const std::optional<at::Tensor>& allowed_bitmask,
                            const std::optional<at::Tensor>& masked_ids, const std::optional<at::Tensor>& bias_ids,
                            const std::optional<at::Tensor>& bias_values, const std::optional<at::Tensor>& output_ids,
                            const std::optional<at::Tensor>& prompt_ids,
                            const std::optional<at::Tensor>& repetition_penalty,
                            const std::optional<at::Tensor>& frequency_penalty,
                            const std::optional<at::Tensor>& presence_penalty) {
  PenaltyCall c = prepare_penalties(logits, allowed_bitmask, masked_ids, bias_ids, bias_values, output_ids,
                                    prompt_ids, repetition_penalty, frequency_penalty, presence_penalty);
  const int64_t cap = plan_capacity(c);
  at::Tensor plan = at::empty({c.rows, plan_stride(c.v, cap)}, logits.options().dtype(at::kInt));
  int32_t* out = plan.data_ptr<int32_t>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, c.x.scalar_type(), "penalty_plan_cpu", [&] {
    wrs::parallel_for(0, c.rows, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) plan_row<scalar_t>(c, b, cap, out + b * plan.size(1));
    });
  });
  return plan;
}

}  // namespace

int64_t plan_capacity(const PenaltyCall& c) {
  int64_t ids = 0;
  for (const at::Tensor* t : {&c.masked, &c.bias_ids, &c.output, &c.prompt})
    if (t->defined()) ids += t->size(1);
  TORCH_CHECK(ids < (int64_t{1} << 28), "penalty_plan: the id lists hold ", ids, " ids a row, over 2^28");
  int64_t cap = 2;
  while (cap < 2 * ids) cap *= 2;
  return cap;
}

int64_t check_plan(const char* op, const at::Tensor& plan, int64_t rows, int64_t v, const at::Tensor& input) {
  const int64_t rest = plan.dim() == 2 ? plan.size(1) - plan_values_at(v) : -1;
  int64_t cap = rest > 0 && rest % 4 == 0 ? rest / 4 : 0;
  TORCH_CHECK(plan.scalar_type() == at::kInt && plan.dim() == 2 && plan.size(0) == rows && cap >= 2 &&
                  (cap & (cap - 1)) == 0,
              op, ": overrides must be a penalty plan, int32 [", rows, ", ", plan_values_at(v),
              " + 4C] with C a power of two >= 2 (torch.ops.wrs.penalty_plan), got ", plan.scalar_type(), " ",
              plan.sizes());
  TORCH_CHECK(plan.device() == input.device(), op, ": overrides must be on ", input.device(), ", got ",
              plan.device());
  return cap;
}

at::Tensor apply_plan_cpu(const at::Tensor& x2d, const at::Tensor& plan, int64_t cap) {
  const int64_t rows = x2d.size(0), v = x2d.size(1);
  const at::Tensor x = x2d.contiguous(), p = plan.contiguous();
  at::Tensor out = at::empty({rows, v}, x.options().dtype(at::kFloat));
  if (out.numel() == 0) return out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "apply_plan_cpu", [&] {
    wrs::parallel_for(0, rows, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        const scalar_t* xr = x.const_data_ptr<scalar_t>() + b * v;
        const int32_t* row = p.const_data_ptr<int32_t>() + b * p.size(1);
        float* o = out.data_ptr<float>() + b * v;
        for (int64_t t = 0; t < v; ++t) o[t] = plan_item(row, v, cap, t, static_cast<float>(xr[t]));
      }
    });
  });
  return out;
}

TORCH_LIBRARY_IMPL(wrs, CPU, m) {
  m.impl("penalize_logits", &penalize_logits_cpu);
  m.impl("penalty_plan", &penalty_plan_cpu);
}

}  // namespace wrs::llm
