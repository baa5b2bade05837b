// CPU kernels of the LLM samplers (llm.h states the law): a row at a time, the thresholds
// by selection (nth_element for top-k, a sort of the top-k set for top-p), then each draw
// by inverse CDF over the kept items (the GPU races them instead: the same law, other bits).
#include "common/parallel.h"
#include "common/philox.h"
#include "llm/llm_ops.h"
#include "llm/penalties_ops.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

namespace wrs::llm {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// Rows per task: at least this many items, so small calls stay on one thread.
constexpr int64_t kItemsPerTask = 1 << 16;

struct Scratch {
  std::vector<float> y;
  std::vector<uint32_t> keys;
  std::vector<std::pair<uint32_t, uint64_t>> pairs;
  std::vector<int64_t> kept;
  std::vector<float> log_w;
  std::vector<double> cum;
};

// A row's values, validity, largest value and its first index.
struct RowStats {
  bool valid;
  float ymax;
  int64_t argmax;
};

template <bool kLogits, typename scalar_t>
RowStats load_row(const scalar_t* x, int64_t v, const RowControls& rc, Scratch& s) {
  s.y.resize(v);
  bool bad = !rc.valid;
  float ymax = -std::numeric_limits<float>::infinity();
  int64_t argmax = 0;
  for (int64_t i = 0; i < v; ++i) {
    const float y = kLogits ? static_cast<float>(x[i]) * rc.inv_temperature : static_cast<float>(x[i]);
    s.y[i] = y;
    bad |= bad_value<kLogits>(y);
    if (y > ymax) ymax = y, argmax = i;
  }
  const bool mass = kLogits ? ymax > -std::numeric_limits<float>::infinity() : ymax > 0.0f;
  return RowStats{!bad && mass, ymax, argmax};
}

// The key threshold of top-k and top-p together (0 where neither is on).
template <bool kLogits>
uint32_t threshold(const RowStats& st, const RowControls& rc, int64_t v, Scratch& s) {
  uint32_t tk = 0;
  if (rc.top_k_on(v)) {
    s.keys.resize(v);
    for (int64_t i = 0; i < v; ++i) s.keys[i] = order_key(s.y[i]);
    std::nth_element(s.keys.begin(), s.keys.begin() + (rc.top_k - 1), s.keys.end(), std::greater<uint32_t>());
    tk = s.keys[rc.top_k - 1];
  }
  if (!rc.top_p_on()) return tk;
  const int bits = mass_bits(v);
  s.pairs.clear();
  uint64_t m = 0;
  for (int64_t i = 0; i < v; ++i) {
    const uint32_t key = order_key(s.y[i]);
    if (key < tk) continue;
    const uint64_t q = quantize_mass(mass_of<kLogits>(s.y[i], st.ymax), bits);
    s.pairs.emplace_back(key, q);
    m += q;
  }
  std::sort(s.pairs.begin(), s.pairs.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  const uint64_t target = top_p_target(rc.top_p, m);
  uint64_t cum = 0;
  for (const auto& [key, q] : s.pairs) {
    cum += q;
    if (cum >= target) return std::max(tk, key);
  }
  return tk;
}

template <bool kLogits>
bool kept(float y, uint32_t thr, const RowStats& st, const RowControls& rc, float log_min_p) {
  return order_key(y) >= thr && (!rc.min_p_on() || min_p_keeps<kLogits>(y, st.ymax, rc.min_p, log_min_p));
}

template <bool kLogits, typename scalar_t>
void sample_row(const scalar_t* x, const Call& call, int64_t row, const PhiloxSeed& gen_seed, int64_t* tokens,
                float* logprobs, Scratch& s) {
  const int64_t v = call.v;
  const RowControls rc = row_controls(call.controls, row);
  const RowStats st = load_row<kLogits>(x, v, rc, s);
  if (!st.valid) {
    for (int64_t j = 0; j < call.samples; ++j) tokens[j] = 0, logprobs ? logprobs[j] = kNaN : 0.0f;
    return;
  }
  double sum_all = 0.0;
  if (call.logprobs == kRaw || rc.greedy) {
    for (int64_t i = 0; i < v; ++i) sum_all += kLogits ? std::exp(static_cast<double>(s.y[i] - st.ymax)) : s.y[i];
  }
  if (rc.greedy) {
    const float lp = call.logprobs == kRaw ? static_cast<float>(-std::log(sum_all)) : 0.0f;
    for (int64_t j = 0; j < call.samples; ++j) tokens[j] = st.argmax, logprobs ? logprobs[j] = lp : 0.0f;
    return;
  }
  const uint32_t thr = threshold<kLogits>(st, rc, v, s);
  const float log_min_p = log_min_p_of(rc.min_p);
  // The kept items' cumulative weights, once; each draw is a binary search for a uniform
  // point of their total (the same law as the GPU's race: the kept set, renormalised).
  s.kept.clear();
  s.log_w.clear();
  s.cum.clear();
  double sum_kept = 0.0;
  for (int64_t i = 0; i < v; ++i) {
    const bool positive = kLogits ? s.y[i] > -std::numeric_limits<float>::infinity() : s.y[i] > 0.0f;
    if (!positive || !kept<kLogits>(s.y[i], thr, st, rc, log_min_p)) continue;
    s.kept.push_back(i);
    s.log_w.push_back(log_weight<kLogits>(s.y[i], st.ymax));
    sum_kept += std::exp(static_cast<double>(s.log_w.back()));
    s.cum.push_back(sum_kept);
  }
  const bool own_seed = call.controls.seeds != nullptr;
  const PhiloxSeed seed = own_seed ? PhiloxSeed{static_cast<uint64_t>(call.controls.seeds[row]), 0} : gen_seed;
  const int64_t tag = own_seed ? 0 : row;
  for (int64_t j = 0; j < call.samples; ++j) {
    // Draw j: words 0 and 1 of block offset / 4 + j of the row's first subsequence, as on CUDA.
    const auto words = philox_block(PhiloxSeed{seed.seed, seed.offset + 4 * static_cast<uint64_t>(j)},
                                    subsequence(tag, (v + 3) / 4, 0));
    const uint64_t bits = (static_cast<uint64_t>(words[1]) << 32) | words[0];
    const double point = static_cast<double>(bits >> 11) * 0x1.0p-53 * sum_kept;
    const size_t win = std::min<size_t>(std::upper_bound(s.cum.begin(), s.cum.end(), point) - s.cum.begin(),
                                        s.kept.size() - 1);
    tokens[j] = s.kept[win];
    if (logprobs) logprobs[j] = static_cast<float>(s.log_w[win] - std::log(call.logprobs == kRaw ? sum_all : sum_kept));
  }
}

std::tuple<at::Tensor, at::Tensor> sample_llm_cpu(
    const at::Tensor& input, int64_t num_samples, bool logits, const std::optional<at::Tensor>& temperature,
    double temperature_value, const std::optional<at::Tensor>& top_k, int64_t top_k_value,
    const std::optional<at::Tensor>& top_p, double top_p_value, const std::optional<at::Tensor>& min_p,
    double min_p_value, const std::optional<at::Tensor>& seeds, int64_t logprobs,
    std::optional<at::Generator> generator, const std::optional<at::Tensor>& overrides) {
  const char* op = logits ? "sample_logits" : "sample_probs";
  Call call = prepare(op, input, num_samples, logits, temperature, temperature_value, top_k, top_k_value, top_p,
                      top_p_value, min_p, min_p_value, seeds, logprobs);
  if (overrides) {  // the plan's values, then the plain CPU sampler over them
    TORCH_CHECK(logits, op, ": overrides apply to logits only");
    const int64_t cap = check_plan(op, *overrides, call.rows, call.v, input);
    const at::Tensor x = apply_plan_cpu(call.x.reshape({call.rows, call.v}), *overrides, cap).view(input.sizes());
    call = prepare(op, x, num_samples, logits, temperature, temperature_value, top_k, top_k_value, top_p, top_p_value,
                   min_p, min_p_value, seeds, logprobs);
  }
  // Both in the output shape, whose rows of samples are the kernels' layout.
  at::Tensor tokens = at::empty(call.out_shape, input.options().dtype(at::kLong));
  at::Tensor lp = at::empty(logprobs ? at::IntArrayRef(call.out_shape) : at::IntArrayRef{0},
                            input.options().dtype(at::kFloat));
  const PhiloxSeed seed = cpu_philox_seed(generator);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "sample_llm_cpu", [&] {
    const scalar_t* x = call.x.const_data_ptr<scalar_t>();
    int64_t* tok = tokens.mutable_data_ptr<int64_t>();
    float* out_lp = logprobs ? lp.mutable_data_ptr<float>() : nullptr;
    wrs::parallel_for(0, call.rows, std::max<int64_t>(1, kItemsPerTask / call.v), [&](int64_t begin, int64_t end) {
      Scratch s;
      for (int64_t r = begin; r < end; ++r) {
        float* row_lp = out_lp ? out_lp + r * call.samples : nullptr;
        if (logits) {
          sample_row<true>(x + r * call.v, call, r, seed, tok + r * call.samples, row_lp, s);
        } else {
          sample_row<false>(x + r * call.v, call, r, seed, tok + r * call.samples, row_lp, s);
        }
      }
    });
  });
  return {tokens, lp};
}

at::Tensor filter_logits_cpu(const at::Tensor& logits, const std::optional<at::Tensor>& temperature,
                             double temperature_value, const std::optional<at::Tensor>& top_k, int64_t top_k_value,
                             const std::optional<at::Tensor>& top_p, double top_p_value,
                             const std::optional<at::Tensor>& min_p, double min_p_value) {
  const Call call = prepare("filter_logits", logits, 1, true, temperature, temperature_value, top_k, top_k_value,
                            top_p, top_p_value, min_p, min_p_value, std::nullopt, kNoLogprobs);
  at::Tensor out = at::empty({call.rows, call.v}, logits.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, logits.scalar_type(), "filter_logits_cpu", [&] {
    const scalar_t* x = call.x.const_data_ptr<scalar_t>();
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    wrs::parallel_for(0, call.rows, std::max<int64_t>(1, kItemsPerTask / call.v), [&](int64_t begin, int64_t end) {
      Scratch s;
      for (int64_t r = begin; r < end; ++r) {
        const RowControls rc = row_controls(call.controls, r);
        const RowStats st = load_row<true>(x + r * call.v, call.v, rc, s);
        scalar_t* orow = o + r * call.v;
        const uint32_t thr = st.valid && !rc.greedy ? threshold<true>(st, rc, call.v, s) : 0;
        const float log_min_p = log_min_p_of(rc.min_p);
        for (int64_t i = 0; i < call.v; ++i) {
          const bool keep = rc.greedy ? i == st.argmax : kept<true>(s.y[i], thr, st, rc, log_min_p);
          orow[i] = static_cast<scalar_t>(!st.valid ? kNaN : keep ? s.y[i] : -std::numeric_limits<float>::infinity());
        }
      }
    });
  });
  return out.view(logits.sizes());
}

// Speculative decoding (the law in speculative_accept's schema comment, ops.cpp): row b's
// acceptance uniforms are words of blocks offset / 4 + 1 + s / 4 of subsequence b * quads;
// the residual or bonus draw inverts its cumulative weights in row order at words 0 and 1
// of block offset / 4 (as speculative_cuda.cu).
template <typename scalar_t, typename token_t>
void speculative_rows(const scalar_t* draft, const token_t* draft_tokens, const scalar_t* target, int64_t b_count,
                      int64_t s_count, int64_t v, const PhiloxSeed& seed, int64_t* out, int64_t* accepted) {
  const int64_t quads = (v + 3) / 4;
  wrs::parallel_for(0, b_count, std::max<int64_t>(1, kItemsPerTask / v), [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      int64_t acc = 0;
      for (; acc < s_count; ++acc) {
        const int64_t tok = static_cast<int64_t>(draft_tokens[b * s_count + acc]);
        const bool in_range = tok >= 0 && tok < v;
        const double p = in_range ? static_cast<double>(draft[(b * s_count + acc) * v + tok]) : 0.0;
        const double q = in_range ? static_cast<double>(target[(b * (s_count + 1) + acc) * v + tok]) : 0.0;
        const PhiloxSeed acc_seed{seed.seed, seed.offset + 4 * static_cast<uint64_t>(1 + acc / 4)};
        const double u = (philox_block(acc_seed, subsequence(b, quads, 0))[acc % 4] + 0.5) * 0x1.0p-32;
        if (!(u * p < q)) break;
      }
      for (int64_t j = 0; j <= s_count; ++j) out[b * (s_count + 1) + j] = j < acc ? draft_tokens[b * s_count + j] : -1;
      accepted[b] = acc;
      // The residual max(0, q - p) after a rejection (the target where it is all zero), or the bonus draw.
      const scalar_t* q_row = target + (b * (s_count + 1) + acc) * v;
      const scalar_t* p_row = acc < s_count ? draft + (b * s_count + acc) * v : nullptr;
      auto weight = [&](int64_t i, bool residual) {
        const float q = static_cast<float>(q_row[i]);
        return residual ? std::max(0.0f, q - static_cast<float>(p_row[i])) : q;
      };
      auto positive_weight = [&](int64_t i, bool res) {
        const float w = weight(i, res);
        return w > 0.0f && w <= std::numeric_limits<float>::max() ? w : 0.0f;
      };
      bool residual = p_row != nullptr;
      if (residual) {
        bool any = false;
        for (int64_t i = 0; i < v && !any; ++i) any = positive_weight(i, true) > 0.0f;
        residual = any;
      }
      // Inverse CDF in row order at a 53-bit uniform point (words 0 and 1 of block offset / 4).
      double total = 0.0;
      for (int64_t i = 0; i < v; ++i) total += positive_weight(i, residual);
      const auto words = philox_block(seed, subsequence(b, quads, 0));
      const double point = static_cast<double>(((static_cast<uint64_t>(words[1]) << 32) | words[0]) >> 11) *
                           0x1.0p-53 * total;
      int64_t token = -1, last = 0;
      double cum = 0.0;
      for (int64_t i = 0; i < v && token < 0; ++i) {
        const float w = positive_weight(i, residual);
        if (w > 0.0f) last = i;
        cum += w;
        if (w > 0.0f && point < cum) token = i;
      }
      if (token < 0) token = last;
      out[b * (s_count + 1) + acc] = token;
    }
  });
}

std::tuple<at::Tensor, at::Tensor> speculative_accept_cpu(const at::Tensor& draft_probs,
                                                          const at::Tensor& draft_tokens,
                                                          const at::Tensor& target_probs,
                                                          std::optional<at::Generator> generator) {
  check_speculative(draft_probs, draft_tokens, target_probs);
  const int64_t b = draft_probs.size(0), s = draft_probs.size(1), v = draft_probs.size(2);
  const auto dtype = at::promote_types(draft_probs.scalar_type(), target_probs.scalar_type());
  const at::Tensor draft = draft_probs.to(dtype).contiguous();
  const at::Tensor target = target_probs.to(dtype).contiguous();
  const at::Tensor tokens = draft_tokens.contiguous();
  at::Tensor out = at::empty({b, s + 1}, draft_probs.options().dtype(at::kLong));
  at::Tensor accepted = at::empty({b}, draft_probs.options().dtype(at::kLong));
  const PhiloxSeed seed = cpu_philox_seed(generator);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "speculative_accept_cpu", [&] {
    AT_DISPATCH_INDEX_TYPES(tokens.scalar_type(), "speculative_accept_cpu", [&] {
      speculative_rows(draft.const_data_ptr<scalar_t>(), tokens.const_data_ptr<index_t>(),
                       target.const_data_ptr<scalar_t>(), b, s, v, seed, out.mutable_data_ptr<int64_t>(),
                       accepted.mutable_data_ptr<int64_t>());
    });
  });
  return {out, accepted};
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CPU, m) {
  m.impl("sample_llm", &sample_llm_cpu);
  m.impl("filter_logits", &filter_logits_cpu);
  m.impl("speculative_accept", &speculative_accept_cpu);
}

}  // namespace wrs::llm
