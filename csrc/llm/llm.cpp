// Argument checks of the LLM samplers (no data read: bad values give invalid rows, llm.h).
#include "llm/llm_ops.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>

namespace wrs::llm {

namespace {

// A per-row control: 1-D of one entry per row, on the input's device, in the kernels' dtype.
const void* row_tensor(Call& call, const char* op, const char* name, const at::Tensor& t, at::ScalarType dtype,
                       const at::Tensor& input) {
  TORCH_CHECK(t.dim() == 1 && t.size(0) == call.rows, op, ": ", name, " must be a number or a 1-D tensor of ",
              call.rows, " entries (one per row), got shape ", t.sizes());
  TORCH_CHECK(t.device() == input.device(), op, ": ", name, " must be on ", input.device(), ", got ", t.device());
  if (dtype == at::kLong) {
    TORCH_CHECK(!at::isFloatingType(t.scalar_type()) && !at::isComplexType(t.scalar_type()) &&
                    t.scalar_type() != at::kBool,
                op, ": ", name, " must be an integer tensor, got ", t.scalar_type());
  } else {
    TORCH_CHECK(at::isFloatingType(t.scalar_type()), op, ": ", name, " must be a floating-point tensor, got ",
                t.scalar_type());
  }
  call.keep.push_back(t.to(dtype).contiguous());
  return call.keep.back().const_data_ptr();
}

}  // namespace

Call prepare(const char* op, const at::Tensor& input, int64_t num_samples, bool logits,
             const std::optional<at::Tensor>& temperature, double temperature_value,
             const std::optional<at::Tensor>& top_k, int64_t top_k_value, const std::optional<at::Tensor>& top_p,
             double top_p_value, const std::optional<at::Tensor>& min_p, double min_p_value,
             const std::optional<at::Tensor>& seeds, int64_t logprobs) {
  const char* arg = logits ? "logits" : "probs";
  check_floating(input, op, arg);
  check_has_last_dim(input, op, arg);
  TORCH_CHECK(num_samples > 0, op, ": num_samples must be positive, got ", num_samples);
  TORCH_CHECK(logprobs >= kNoLogprobs && logprobs <= kRaw, op, ": unknown log-probability mode ", logprobs);
  TORCH_CHECK(temperature_value >= 0 && std::isfinite(temperature_value), op,
              ": temperature must be non-negative and finite, got ", temperature_value);
  TORCH_CHECK(top_k_value >= 0, op, ": top_k must be non-negative (0 disables it), got ", top_k_value);
  TORCH_CHECK(top_p_value > 0 && top_p_value <= 1, op, ": top_p must be in (0, 1], got ", top_p_value);
  TORCH_CHECK(min_p_value >= 0 && min_p_value <= 1, op, ": min_p must be in [0, 1], got ", min_p_value);
  TORCH_CHECK(input.size(-1) <= (int64_t{1} << 31), op, ": at most 2^31 categories, got ", input.size(-1));

  Call call;
  call.v = input.size(-1);
  call.rows = input.numel() / call.v;
  call.x = input.contiguous();
  call.samples = num_samples;
  call.logits = logits;
  call.logprobs = logprobs;
  call.out_shape.assign(input.sizes().begin(), input.sizes().end());
  call.out_shape.back() = num_samples;
  Controls& c = call.controls;
  c.temperature_value = static_cast<float>(temperature_value);
  c.top_k_value = top_k_value;
  c.top_p_value = static_cast<float>(top_p_value);
  c.min_p_value = static_cast<float>(min_p_value);
  if (temperature) {
    TORCH_CHECK(logits, op, ": temperature applies to logits only");
    c.temperature = static_cast<const float*>(row_tensor(call, op, "temperature", *temperature, at::kFloat, input));
  }
  if (top_k) c.top_k = static_cast<const int64_t*>(row_tensor(call, op, "top_k", *top_k, at::kLong, input));
  if (top_p) c.top_p = static_cast<const float*>(row_tensor(call, op, "top_p", *top_p, at::kFloat, input));
  if (min_p) c.min_p = static_cast<const float*>(row_tensor(call, op, "min_p", *min_p, at::kFloat, input));
  if (seeds) c.seeds = static_cast<const int64_t*>(row_tensor(call, op, "seeds", *seeds, at::kLong, input));
  return call;
}

void check_speculative(const at::Tensor& draft_probs, const at::Tensor& draft_tokens, const at::Tensor& target_probs) {
  constexpr const char* op = "speculative_accept";
  check_floating(draft_probs, op, "draft_probs");
  check_floating(target_probs, op, "target_probs");
  TORCH_CHECK(draft_probs.dim() == 3, op, ": draft_probs must be [B, S, V], got shape ", draft_probs.sizes());
  const int64_t b = draft_probs.size(0), s = draft_probs.size(1), v = draft_probs.size(2);
  TORCH_CHECK(draft_tokens.dim() == 2 && draft_tokens.size(0) == b && draft_tokens.size(1) == s, op,
              ": draft_tokens must be [B, S] = [", b, ", ", s, "], got shape ", draft_tokens.sizes());
  TORCH_CHECK(draft_tokens.scalar_type() == at::kLong || draft_tokens.scalar_type() == at::kInt, op,
              ": draft_tokens must be int64 or int32, got ", draft_tokens.scalar_type());
  TORCH_CHECK(target_probs.dim() == 3 && target_probs.size(0) == b && target_probs.size(1) == s + 1 &&
                  target_probs.size(2) == v,
              op, ": target_probs must be [B, S + 1, V] = [", b, ", ", s + 1, ", ", v, "], got shape ",
              target_probs.sizes());
  TORCH_CHECK(v > 0, op, ": the vocabulary is empty (V = 0)");
  TORCH_CHECK(draft_probs.device() == target_probs.device() && draft_tokens.device() == target_probs.device(), op,
              ": every tensor must be on one device, got ", draft_probs.device(), ", ", draft_tokens.device(), ", ",
              target_probs.device());
}

// Integer tokens and log-probabilities of a draw have no gradient.
TORCH_LIBRARY_IMPL(wrs, Autograd, m) {
  m.impl("sample_llm", torch::CppFunction::makeFallthrough());
  m.impl("filter_logits", torch::CppFunction::makeFallthrough());
  m.impl("speculative_accept", torch::CppFunction::makeFallthrough());
  m.impl("sample_llm_top_logprobs", torch::CppFunction::makeFallthrough());
}

}  // namespace wrs::llm
