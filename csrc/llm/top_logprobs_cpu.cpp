// top_logprobs: the argument checks, and the CPU kernel (a row at a time, rows in parallel);
// top_logprobs.h states the rule.
#include "common/parallel.h"
#include "llm/top_logprobs.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <tuple>
#include <vector>

namespace wrs::llm {

namespace {
constexpr const char* kOp = "top_logprobs";
}

TopLogprobsCall prepare_top_logprobs(const at::Tensor& law, const at::Tensor& tokens, int64_t n,
                                     const std::optional<at::Tensor>& scale) {
  check_floating(law, kOp, "law");
  TORCH_CHECK(law.dim() == 2, kOp, ": law must be [B, V], got shape ", law.sizes());
  TopLogprobsCall c;
  c.rows = law.size(0), c.v = law.size(1);
  TORCH_CHECK(c.v < (int64_t{1} << 31), kOp, ": law may hold at most 2^31 - 1 tokens a row, got ", c.v);
  TORCH_CHECK(c.v > 0 || c.rows == 0, kOp, ": law must have at least one token a row");
  TORCH_CHECK(n >= 0 && n <= c.v, kOp, ": n must be in [0, ", c.v, "], got ", n);
  TORCH_CHECK(tokens.scalar_type() == at::kLong && tokens.dim() == 2 && tokens.size(0) == c.rows, kOp,
              ": tokens must be int64 [", c.rows, ", S], got ", tokens.scalar_type(), " ", tokens.sizes());
  TORCH_CHECK(tokens.device() == law.device(), kOp, ": tokens must be on ", law.device(), ", got ", tokens.device());
  if (scale.has_value()) {
    TORCH_CHECK(scale->scalar_type() == at::kFloat && scale->dim() == 1 && scale->size(0) == c.rows, kOp,
                ": scale must be float32 [", c.rows, "], got ", scale->scalar_type(), " ", scale->sizes());
    TORCH_CHECK(scale->device() == law.device(), kOp, ": scale must be on ", law.device(), ", got ", scale->device());
    c.scale = scale->contiguous();
  }
  c.samples = tokens.size(1), c.n = n;
  c.x = law.contiguous();
  c.tokens = tokens.contiguous();
  return c;
}

void check_top_n(const char* op, int64_t n, int64_t v) {
  TORCH_CHECK(n >= 0 && n <= v, op, ": top_logprobs must be in [0, ", v, "], got ", n);
}

SampleTopLogprobs sample_then_top_logprobs(const at::Tensor& logits, int64_t num_samples, int64_t n,
                                           const std::optional<at::Tensor>& temperature, double temperature_value,
                                           const std::optional<at::Tensor>& top_k, int64_t top_k_value,
                                           const std::optional<at::Tensor>& top_p, double top_p_value,
                                           const std::optional<at::Tensor>& min_p, double min_p_value,
                                           const std::optional<at::Tensor>& seeds,
                                           const std::optional<at::Generator>& generator) {
  static const auto sample =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("wrs::sample_llm", "")
          .typed<std::tuple<at::Tensor, at::Tensor>(
              const at::Tensor&, c10::SymInt, bool, const std::optional<at::Tensor>&, double,
              const std::optional<at::Tensor>&, int64_t, const std::optional<at::Tensor>&, double,
              const std::optional<at::Tensor>&, double, const std::optional<at::Tensor>&, int64_t,
              std::optional<at::Generator>, const std::optional<at::Tensor>&)>();
  static const auto top = c10::Dispatcher::singleton()
                              .findSchemaOrThrow("wrs::top_logprobs", "")
                              .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
                                  const at::Tensor&, const at::Tensor&, int64_t, const std::optional<at::Tensor>&)>();
  if (logits.dim() > 0) check_top_n("sample_logits", n, logits.size(-1));  // before the draw moves the generator
  auto [tokens, lp] = sample.call(logits, c10::SymInt(num_samples), true, temperature, temperature_value, top_k,
                                  top_k_value, top_p, top_p_value, min_p, min_p_value, seeds, kRaw, generator,
                                  std::nullopt);
  const int64_t v = logits.size(-1), rows = v ? logits.numel() / v : 0;
  // Raw log-probs' law: logits / T, as llm.h's row_controls computes 1 / T (1 on greedy rows).
  at::Tensor scale;
  if (temperature) {
    const at::Tensor t = temperature->reshape(-1).to(at::kFloat);
    scale = at::where(t == 0, at::ones_like(t), at::reciprocal(t));
  } else {
    const float t = static_cast<float>(temperature_value);
    scale = at::full({rows}, t == 0.0f ? 1.0f : 1.0f / t, logits.options().dtype(at::kFloat));
  }
  auto [lp2, top_tokens, top_lp, ranks] = top.call(logits.reshape({rows, v}), tokens.reshape({rows, num_samples}), n, scale);
  auto lead = logits.sizes().vec();
  lead.back() = n;
  return {tokens, lp2.view(tokens.sizes()), top_tokens.view(lead), top_lp.view(lead), ranks.view(tokens.sizes())};
}

TopLogprobsOut empty_top_logprobs(const TopLogprobsCall& c) {
  const auto f32 = c.x.options().dtype(at::kFloat), i64 = c.x.options().dtype(at::kLong);
  return {at::empty({c.rows, c.samples}, f32), at::empty({c.rows, c.n}, i64), at::empty({c.rows, c.n}, f32),
          at::empty({c.rows, c.samples}, i64)};
}

namespace {

template <typename scalar_t>
void row_cpu(const TopLogprobsCall& c, int64_t b, std::vector<float>& y, std::vector<uint64_t>& keys, float* lp,
             int64_t* top_tokens, float* top_lp, int64_t* ranks) {
  const int64_t v = c.v;
  const scalar_t* x = c.x.const_data_ptr<scalar_t>() + b * v;
  const float s = c.scale.defined() ? c.scale.const_data_ptr<float>()[b] : 1.0f;
  float m = -std::numeric_limits<float>::infinity();
  bool bad = false;
  for (int64_t i = 0; i < v; ++i) {
    y[i] = static_cast<float>(x[i]) * s;
    bad |= std::isnan(y[i]) || y[i] == std::numeric_limits<float>::infinity();
    m = std::max(m, y[i]);
  }
  const int64_t* tok = c.tokens.const_data_ptr<int64_t>() + b * c.samples;
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  if (bad || m == -std::numeric_limits<float>::infinity()) {
    for (int64_t j = 0; j < c.samples; ++j) lp[j] = kNaN, ranks[j] = 0;
    for (int64_t r = 0; r < c.n; ++r) top_tokens[r] = r, top_lp[r] = kNaN;
    return;
  }
  double sum = 0.0;
  for (int64_t i = 0; i < v; ++i) sum += static_cast<double>(::expf(y[i] - m));
  const double lse = static_cast<double>(m) + std::log(sum);
  for (int64_t j = 0; j < c.samples; ++j) {
    const int64_t t = tok[j];
    if (t < 0 || t >= v) {
      lp[j] = kNaN, ranks[j] = 0;
      continue;
    }
    int64_t above = 0;
    for (int64_t i = 0; i < v; ++i) above += y[i] > y[t];
    lp[j] = logprob_of(y[t], lse), ranks[j] = above + 1;
  }
  if (c.n == 0) return;
  for (int64_t i = 0; i < v; ++i) keys[i] = composite_key(y[i], i);
  std::nth_element(keys.begin(), keys.begin() + (c.n - 1), keys.end(), std::greater<uint64_t>());
  std::sort(keys.begin(), keys.begin() + c.n, std::greater<uint64_t>());
  for (int64_t r = 0; r < c.n; ++r) top_tokens[r] = key_index(keys[r]), top_lp[r] = logprob_of(key_value(keys[r]), lse);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> top_logprobs_cpu(const at::Tensor& law,
                                                                             const at::Tensor& tokens, int64_t n,
                                                                             const std::optional<at::Tensor>& scale) {
  const TopLogprobsCall c = prepare_top_logprobs(law, tokens, n, scale);
  const TopLogprobsOut o = empty_top_logprobs(c);
  if (c.rows == 0) return o.tuple();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, c.x.scalar_type(), "top_logprobs_cpu", [&] {
    wrs::parallel_for(0, c.rows, 1, [&](int64_t lo, int64_t hi) {
      std::vector<float> y(c.v);
      std::vector<uint64_t> keys(c.n > 0 ? c.v : 0);
      for (int64_t b = lo; b < hi; ++b) {
        row_cpu<scalar_t>(c, b, y, keys, o.lp.data_ptr<float>() + b * c.samples,
                          o.top_tokens.data_ptr<int64_t>() + b * c.n, o.top_lp.data_ptr<float>() + b * c.n,
                          o.ranks.data_ptr<int64_t>() + b * c.samples);
      }
    });
  });
  return o.tuple();
}

}  // namespace

SampleTopLogprobs sample_llm_top_logprobs_cpu(
    const at::Tensor& logits, int64_t num_samples, int64_t n, const std::optional<at::Tensor>& temperature,
    double temperature_value, const std::optional<at::Tensor>& top_k, int64_t top_k_value,
    const std::optional<at::Tensor>& top_p, double top_p_value, const std::optional<at::Tensor>& min_p,
    double min_p_value, const std::optional<at::Tensor>& seeds, std::optional<at::Generator> generator) {
  return sample_then_top_logprobs(logits, num_samples, n, temperature, temperature_value, top_k, top_k_value, top_p,
                                  top_p_value, min_p, min_p_value, seeds, generator);
}

TORCH_LIBRARY_IMPL(wrs, CPU, m) {
  m.impl("top_logprobs", &top_logprobs_cpu);
  m.impl("sample_llm_top_logprobs", &sample_llm_top_logprobs_cpu);
}

}  // namespace wrs::llm
