// top_n_sigma_logits and typical_logits: the argument checks, and the CPU kernels (a row at a
// time, rows in parallel); truncate.h states the rules.
#include "common/parallel.h"
#include "llm/truncate.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace wrs::llm {

TruncateCall prepare_truncate(const at::Tensor& y, const at::Tensor& control, const char* op, const char* name) {
  TORCH_CHECK(y.scalar_type() == at::kFloat && y.dim() == 2, op, ": values must be float32 [B, V], got ",
              y.scalar_type(), " ", y.sizes());
  TORCH_CHECK(control.scalar_type() == at::kDouble && control.dim() == 1 && control.size(0) == y.size(0), op, ": ",
              name, " must be float64 [", y.size(0), "], got ", control.scalar_type(), " ", control.sizes());
  TORCH_CHECK(control.device() == y.device(), op, ": ", name, " must be on ", y.device(), ", got ", control.device());
  TORCH_CHECK(y.size(1) < (int64_t{1} << 31), op, ": values may hold at most 2^31 - 1 entries a row, got ", y.size(1));
  TruncateCall c;
  c.rows = y.size(0), c.v = y.size(1);
  c.y = y.contiguous(), c.control = control.contiguous();
  return c;
}

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

void sigma_row(const float* y, float* o, int64_t v, double n) {
  double sum = 0.0, top = -kInf;
  int64_t count = 0;
  bool bad = false;
  for (int64_t i = 0; i < v; ++i) {
    bad |= std::isnan(y[i]) || y[i] == kInf;
    if (!std::isfinite(y[i])) continue;
    sum += y[i], top = std::max(top, static_cast<double>(y[i])), ++count;
  }
  if (bad || count == 0) {
    std::fill(o, o + v, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  const double mean = sum / static_cast<double>(count);
  double var = 0.0;
  for (int64_t i = 0; i < v; ++i) {
    if (std::isfinite(y[i])) var += (y[i] - mean) * (y[i] - mean);
  }
  const double floor = top - n * std::sqrt(var / static_cast<double>(count));
  for (int64_t i = 0; i < v; ++i) o[i] = static_cast<double>(y[i]) >= floor ? y[i] : -kInf;
}

void typical_row(const float* f, float* o, int64_t v, double mass, std::vector<double>& shift,
                 std::vector<double>& p, std::vector<int64_t>& order) {
  float m = -kInf;
  bool bad = false;
  for (int64_t i = 0; i < v; ++i) bad |= std::isnan(f[i]) || f[i] == kInf, m = std::max(m, f[i]);
  if (bad || m == -kInf) {
    std::fill(o, o + v, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  if (!(mass < 1.0)) {
    std::copy(f, f + v, o);
    return;
  }
  double s = 0.0;
  for (int64_t i = 0; i < v; ++i) s += std::exp(static_cast<double>(f[i]) - m);
  const double log_s = std::log(s);
  double h = 0.0;
  for (int64_t i = 0; i < v; ++i) {
    const double lp = (static_cast<double>(f[i]) - m) - log_s;
    p[i] = std::exp(lp);
    if (p[i] > 0.0) h -= p[i] * lp;
  }
  for (int64_t i = 0; i < v; ++i) shift[i] = typical_shift(f[i], m, log_s, h);
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return shift[a] < shift[b]; });
  double cum = 0.0;
  int64_t last = 0;  // the first place where the cumulative mass reaches `mass` (the last one kept)
  for (; last < v - 1; ++last) {
    cum += p[order[last]];
    if (!(cum < mass)) break;
  }
  const double limit = shift[order[last]];
  for (int64_t i = 0; i < v; ++i) o[i] = shift[i] <= limit ? f[i] : -kInf;
}

template <bool kTypical>
at::Tensor truncate_cpu(const at::Tensor& y, const at::Tensor& control, const char* op, const char* name) {
  const TruncateCall c = prepare_truncate(y, control, op, name);
  at::Tensor out = at::empty_like(c.y);
  if (c.rows == 0 || c.v == 0) return out;
  const float* x = c.y.const_data_ptr<float>();
  const double* ctl = c.control.const_data_ptr<double>();
  float* o = out.data_ptr<float>();
  wrs::parallel_for(0, c.rows, 1, [&](int64_t lo, int64_t hi) {
    std::vector<double> shift(kTypical ? c.v : 0), p(kTypical ? c.v : 0);
    std::vector<int64_t> order(kTypical ? c.v : 0);
    for (int64_t b = lo; b < hi; ++b) {
      const double k = ctl[b];
      if (kTypical ? !(k > 0.0 && k <= 1.0) : !(k >= 0.0 && k < std::numeric_limits<double>::infinity())) {
        std::fill(o + b * c.v, o + (b + 1) * c.v, std::numeric_limits<float>::quiet_NaN());
      } else if constexpr (kTypical) {
        typical_row(x + b * c.v, o + b * c.v, c.v, k, shift, p, order);
      } else {
        sigma_row(x + b * c.v, o + b * c.v, c.v, k);
      }
    }
  });
  return out;
}

at::Tensor top_n_sigma_logits_cpu(const at::Tensor& y, const at::Tensor& n) {
  return truncate_cpu<false>(y, n, "top_n_sigma_logits", "n");
}

at::Tensor typical_logits_cpu(const at::Tensor& f, const at::Tensor& mass) {
  return truncate_cpu<true>(f, mass, "typical_logits", "mass");
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CPU, m) {
  m.impl("top_n_sigma_logits", &top_n_sigma_logits_cpu);
  m.impl("typical_logits", &typical_logits_cpu);
}

}  // namespace wrs::llm
