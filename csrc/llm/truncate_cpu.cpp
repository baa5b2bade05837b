// top_n_sigma_logits and typical_logits: the argument checks, and the CPU kernels (a row at a
// time, rows in parallel); truncate.h states the rules.
#include "common/parallel.h"
#include "llm/llm.h"
#include "llm/truncate.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
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

// Sums in kLanes partial sums, item i into lane i % kLanes: one float64 chain would wait on
// each add's latency (4 cycles an item); these overlap.
constexpr int kLanes = 8;

void sigma_row(const float* y, float* o, int64_t v, double n) {
  double sum[kLanes] = {};
  float top[kLanes];
  int64_t count[kLanes] = {};
  std::fill(top, top + kLanes, -kInf);
  bool bad = false;
  auto first = [&](int l, float x) {
    const bool finite = std::isfinite(x);
    bad |= std::isnan(x) || x == kInf;
    sum[l] += finite ? x : 0.0f, top[l] = finite ? std::max(top[l], x) : top[l], count[l] += finite;
  };
  const int64_t whole = v / kLanes * kLanes;
  for (int64_t i = 0; i < whole; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) first(l, y[i + l]);
  }
  for (int64_t i = whole; i < v; ++i) first(static_cast<int>(i - whole), y[i]);
  double total = 0.0, var = 0.0;
  float peak = -kInf;
  int64_t finite = 0;
  for (int l = 0; l < kLanes; ++l) total += sum[l], peak = std::max(peak, top[l]), finite += count[l];
  if (bad || finite == 0) {
    std::fill(o, o + v, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  const double mean = total / static_cast<double>(finite);
  double dev[kLanes] = {};
  auto second = [&](int l, float x) {
    const double d = std::isfinite(x) ? x - mean : 0.0;
    dev[l] += d * d;
  };
  for (int64_t i = 0; i < whole; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) second(l, y[i + l]);
  }
  for (int64_t i = whole; i < v; ++i) second(static_cast<int>(i - whole), y[i]);
  for (int l = 0; l < kLanes; ++l) var += dev[l];
  const double floor = peak - n * std::sqrt(var / static_cast<double>(finite));
  // The least float at or above the floor: float compares keep exactly the items with y >= floor.
  float cut = static_cast<float>(floor);
  if (static_cast<double>(cut) < floor) cut = std::nextafter(cut, kInf);
  if (std::isnan(floor)) cut = std::numeric_limits<float>::quiet_NaN();  // no item is kept, as y >= NaN
  for (int64_t i = 0; i < v; ++i) o[i] = y[i] >= cut ? y[i] : -kInf;
}

// A row's buffers for typical_row.
struct TypicalScratch {
  std::vector<double> w, shift;                // exp(f_i - m), shift_i
  std::vector<uint64_t> bucket_mass;           // integer mass a bucket
  std::vector<std::pair<double, uint64_t>> in_bucket;  // the boundary bucket's (shift, q)
  void resize(int64_t v) { w.resize(v), shift.resize(v), bucket_mass.resize(kBuckets); }
  static constexpr int kBuckets = 4096;
};

// The shifts are ranked without a sort, by integer masses q_i = round(exp(f_i - m) 2^B) as
// on CUDA (truncate_cuda.cu's q_of): buckets linear in the shift over [0, the largest shift
// with mass] give the bucket where the mass reaches ceil(mass M); only its items are sorted.
void typical_row(const float* f, float* o, int64_t v, double mass, TypicalScratch& t) {
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
  for (int64_t i = 0; i < v; ++i) s += t.w[i] = std::exp(static_cast<double>(f[i]) - m);
  const double log_s = std::log(s);
  double h = 0.0;
  for (int64_t i = 0; i < v; ++i) {
    const double lp = (static_cast<double>(f[i]) - m) - log_s;
    const double p = std::exp(lp);
    if (p > 0.0) h -= p * lp;
  }
  const double scale = static_cast<double>(uint64_t{1} << mass_bits(v));
  uint64_t total = 0;
  double top = 0.0;  // the largest shift of an item with mass
  for (int64_t i = 0; i < v; ++i) {
    t.shift[i] = typical_shift(f[i], m, log_s, h);
    const uint64_t q = static_cast<uint64_t>(t.w[i] * scale + 0.5);
    total += q;
    if (q > 0) top = std::max(top, t.shift[i]);
  }
  const double want = std::ceil(mass * static_cast<double>(total));
  const uint64_t target = want < 1.0 ? 1 : want >= static_cast<double>(total) ? total : static_cast<uint64_t>(want);
  // Buckets in increasing order of shifts (monotone in the shift, so ties share one).
  const double inv = top > 0.0 ? TypicalScratch::kBuckets / top : 0.0;
  auto bucket_of = [&](double shift) {
    const double b = shift * inv;  // NaN (an infinite shift times 0) and beyond: the last bucket
    return b < TypicalScratch::kBuckets - 1 ? static_cast<int>(b) : TypicalScratch::kBuckets - 1;
  };
  std::fill(t.bucket_mass.begin(), t.bucket_mass.end(), uint64_t{0});
  for (int64_t i = 0; i < v; ++i) {
    t.bucket_mass[bucket_of(t.shift[i])] += static_cast<uint64_t>(t.w[i] * scale + 0.5);
  }
  uint64_t cum = 0;
  int boundary = 0;
  while (cum + t.bucket_mass[boundary] < target) cum += t.bucket_mass[boundary++];
  t.in_bucket.clear();
  for (int64_t i = 0; i < v; ++i) {
    if (bucket_of(t.shift[i]) == boundary) {
      t.in_bucket.emplace_back(t.shift[i], static_cast<uint64_t>(t.w[i] * scale + 0.5));
    }
  }
  std::sort(t.in_bucket.begin(), t.in_bucket.end());
  double limit = t.in_bucket.back().first;
  for (const auto& [shift, q] : t.in_bucket) {
    if ((cum += q) >= target) {
      limit = shift;
      break;
    }
  }
  for (int64_t i = 0; i < v; ++i) o[i] = t.shift[i] <= limit ? f[i] : -kInf;
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
    TypicalScratch scratch;
    if (kTypical) scratch.resize(c.v);
    for (int64_t b = lo; b < hi; ++b) {
      const double k = ctl[b];
      if (kTypical ? !(k > 0.0 && k <= 1.0) : !(k >= 0.0 && k < std::numeric_limits<double>::infinity())) {
        std::fill(o + b * c.v, o + (b + 1) * c.v, std::numeric_limits<float>::quiet_NaN());
      } else if constexpr (kTypical) {
        typical_row(x + b * c.v, o + b * c.v, c.v, k, scratch);
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
