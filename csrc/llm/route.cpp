// The LLM samplers' CUDA method table (route.h), and _llm_route, its answer for a call's
// shape and controls on any build.
#include "llm/route.h"

#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cfloat>
#include <sstream>
#include <string>

namespace wrs::llm {

Route route(const Call& call, int64_t sms) {
  const Controls& c = call.controls;
  const bool per_row = c.temperature || c.top_k || c.top_p || c.min_p;
  const bool top_k = c.top_k || (c.top_k_value > 0 && c.top_k_value < call.v);
  bool plain = true;
  if (!per_row) {  // scalar controls: decided here (per-row ones on the device)
    const bool greedy_or_invalid = !(c.temperature_value > 0.0f && c.temperature_value <= FLT_MAX);
    const bool long_top_k = top_k && c.top_k_value > kPlainMaxTopK;
    // Top-p alone by rejection: one sample, no log-probabilities under the top-p set.
    const bool top_p_alone_unfit = !top_k && c.top_p_value < 1.0f && (call.samples != 1 || call.logprobs == kProcessed);
    plain = !greedy_or_invalid && !long_top_k && !top_p_alone_unfit;
  }
  const int cluster = cluster_size(call.rows, call.v, false, sms);
  const bool top_p_alone = !per_row && !top_k && c.top_p_value < 1.0f && !(c.min_p_value > 0.0f);
  if (plain && top_p_alone && call.v <= kTopPMaxItems && (call.v <= kTopPShortRow || cluster <= 2)) {
    return {Kernel::kTopP, 1, false, false, call.rows * 2 <= sms ? 1024 : 512};
  }
  if (!plain || share_items(call.v, cluster) > kPlainMaxItems) return sample_route(call, sms);
  const bool thresholds = top_k || c.top_p || c.top_p_value < 1.0f;  // the variant that also draws top-p alone
  return {thresholds ? Kernel::kPlainThresholds : Kernel::kPlain, cluster, false, per_row};
}

namespace {

std::string llm_route(int64_t rows, int64_t v, int64_t num_samples, double temperature, int64_t top_k, double top_p,
                      double min_p, const std::string& per_row, int64_t logprobs, int64_t top_logprobs, int64_t sms) {
  TORCH_CHECK(rows >= 1 && v >= 1 && num_samples >= 1, "_llm_route: rows, v and num_samples must be positive");
  TORCH_CHECK(sms >= 1, "_llm_route: sms must be positive");
  Call call;
  call.rows = rows, call.v = v, call.samples = num_samples, call.logprobs = logprobs;
  TORCH_CHECK(top_logprobs >= 0, "_llm_route: top_logprobs must be non-negative, got ", top_logprobs);
  if (top_logprobs > 0) call.logprobs = kRaw;  // sample_llm_top_logprobs draws with raw log-probs
  Controls& c = call.controls;
  c.temperature_value = static_cast<float>(temperature), c.top_k_value = top_k;
  c.top_p_value = static_cast<float>(top_p), c.min_p_value = static_cast<float>(min_p);
  static const float kAny = 0.0f;  // the route reads only whether a per-row tensor is given
  static const int64_t kAnyK = 0;
  std::stringstream names(per_row);
  for (std::string name; std::getline(names, name, ',');) {
    if (name == "temperature") c.temperature = &kAny;
    else if (name == "top_k") c.top_k = &kAnyK;
    else if (name == "top_p") c.top_p = &kAny;
    else if (name == "min_p") c.min_p = &kAny;
    else TORCH_CHECK(false, "_llm_route: per_row names temperature, top_k, top_p or min_p, got \"", name, "\"");
  }
  const Route r = route(call, sms);
  const std::string top_n = top_logprobs <= 0 ? "" : fuses_top_n(call, r, top_logprobs) ? " top-n=fused" : " top-n=after";
  if (r.kernel == Kernel::kTopP) return "top-p threads=" + std::to_string(r.threads) + top_n;
  std::string out = r.kernel == Kernel::kPlain ? "plain" : r.kernel == Kernel::kPlainThresholds ? "plain-thresholds" : "sample";
  out += " cluster=" + std::to_string(r.cluster);
  if (r.resident) out += " resident";
  if (r.defers) out += " defers";
  return out + top_n;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CompositeImplicitAutograd, m) {
  m.impl("_llm_route", &llm_route);
}

}  // namespace wrs::llm
