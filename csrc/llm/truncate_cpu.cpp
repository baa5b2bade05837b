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

// Top-n-sigma's passes go over fixed chunks of a row, whose partial results combine in chunk
// order: the same sums whatever the threads, and rows fewer than the threads split over them.
constexpr int64_t kChunk = 16384;

struct Moments {  // a chunk's first pass
  double sum = 0.0;
  float top = -kInf;
  int64_t count = 0;
  bool bad = false;
  void add(const Moments& m) { sum += m.sum, top = std::max(top, m.top), count += m.count, bad |= m.bad; }
};

Moments first_pass(const float* y, int64_t lo, int64_t hi) {
  double sum[kLanes] = {};
  float top[kLanes];
  int64_t count[kLanes] = {};
  std::fill(top, top + kLanes, -kInf);
  bool bad = false;
  auto add = [&](int l, float x) {
    const bool finite = std::isfinite(x);
    bad |= std::isnan(x) || x == kInf;
    sum[l] += finite ? x : 0.0f, top[l] = finite ? std::max(top[l], x) : top[l], count[l] += finite;
  };
  const int64_t whole = lo + (hi - lo) / kLanes * kLanes;
  for (int64_t i = lo; i < whole; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) add(l, y[i + l]);
  }
  for (int64_t i = whole; i < hi; ++i) add(static_cast<int>(i - whole), y[i]);
  Moments m;
  m.bad = bad;
  for (int l = 0; l < kLanes; ++l) m.sum += sum[l], m.top = std::max(m.top, top[l]), m.count += count[l];
  return m;
}

double second_pass(const float* y, int64_t lo, int64_t hi, double mean) {
  double dev[kLanes] = {};
  auto add = [&](int l, float x) {
    const double d = std::isfinite(x) ? x - mean : 0.0;
    dev[l] += d * d;
  };
  const int64_t whole = lo + (hi - lo) / kLanes * kLanes;
  for (int64_t i = lo; i < whole; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) add(l, y[i + l]);
  }
  for (int64_t i = whole; i < hi; ++i) add(static_cast<int>(i - whole), y[i]);
  double var = 0.0;
  for (int l = 0; l < kLanes; ++l) var += dev[l];
  return var;
}

// A row's state between the passes: its moments, then its mean (NaN: a NaN row), then its cut.
struct SigmaRow {
  Moments all;
  double mean = 0.0, var = 0.0;
  float cut = 0.0f;
  bool nan_row = false;
};

// The rows' passes, each over every (row, chunk) in parallel where rows are fewer than the
// threads, else a row a task; n[b] is row b's control (checked here: out of range, a NaN row).
void sigma_rows(const float* x, float* o, int64_t rows, int64_t v, const double* n) {
  const int64_t chunks = (v + kChunk - 1) / kChunk;
  const bool split = rows < at::get_num_threads() && chunks > 1;
  std::vector<SigmaRow> st(rows);
  auto range = [&](int64_t c) { return std::pair<int64_t, int64_t>{c * kChunk, std::min(v, (c + 1) * kChunk)}; };
  auto moments = [&](int64_t b) {
    for (int64_t c = 0; c < chunks; ++c) {
      const auto [lo, hi] = range(c);
      st[b].all.add(first_pass(x + b * v, lo, hi));
    }
  };
  auto settle_mean = [&](int64_t b) {
    SigmaRow& r = st[b];
    r.nan_row = r.all.bad || r.all.count == 0 || !(n[b] >= 0.0 && n[b] < kInf);
    r.mean = r.all.sum / static_cast<double>(std::max<int64_t>(r.all.count, 1));
  };
  auto settle_cut = [&](int64_t b) {
    SigmaRow& r = st[b];
    const double floor = r.all.top - n[b] * std::sqrt(r.var / static_cast<double>(std::max<int64_t>(r.all.count, 1)));
    // The least float at or above the floor: float compares keep exactly the items with y >= floor.
    r.cut = static_cast<float>(floor);
    if (static_cast<double>(r.cut) < floor) r.cut = std::nextafter(r.cut, kInf);
    if (std::isnan(floor)) r.cut = std::numeric_limits<float>::quiet_NaN();  // no item is kept, as y >= NaN
  };
  auto write = [&](int64_t b, int64_t lo, int64_t hi) {
    const float* y = x + b * v;
    float* out = o + b * v;
    if (st[b].nan_row) return std::fill(out + lo, out + hi, std::numeric_limits<float>::quiet_NaN());
    const float cut = st[b].cut;
    for (int64_t i = lo; i < hi; ++i) out[i] = y[i] >= cut ? y[i] : -kInf;
  };
  if (!split) {
    wrs::parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t b = r0; b < r1; ++b) {
        moments(b), settle_mean(b);
        if (!st[b].nan_row) {
          for (int64_t c = 0; c < chunks; ++c) {
            const auto [lo, hi] = range(c);
            st[b].var += second_pass(x + b * v, lo, hi, st[b].mean);
          }
          settle_cut(b);
        }
        write(b, 0, v);
      }
    });
    return;
  }
  const int64_t parts = rows * chunks;
  std::vector<Moments> m(parts);
  std::vector<double> var(parts, 0.0);
  wrs::parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const auto [lo, hi] = range(p % chunks);
      m[p] = first_pass(x + (p / chunks) * v, lo, hi);
    }
  });
  for (int64_t p = 0; p < parts; ++p) st[p / chunks].all.add(m[p]);  // in chunk order, as moments() adds them
  for (int64_t b = 0; b < rows; ++b) settle_mean(b);
  wrs::parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const auto [lo, hi] = range(p % chunks);
      if (!st[p / chunks].nan_row) var[p] = second_pass(x + (p / chunks) * v, lo, hi, st[p / chunks].mean);
    }
  });
  for (int64_t p = 0; p < parts; ++p) st[p / chunks].var += var[p];
  for (int64_t b = 0; b < rows; ++b) {
    if (!st[b].nan_row) settle_cut(b);
  }
  wrs::parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const auto [lo, hi] = range(p % chunks);
      write(p / chunks, lo, hi);
    }
  });
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
  if constexpr (!kTypical) {
    sigma_rows(x, o, c.rows, c.v, ctl);
  } else {
    wrs::parallel_for(0, c.rows, 1, [&](int64_t lo, int64_t hi) {
      TypicalScratch scratch;
      scratch.resize(c.v);
      for (int64_t b = lo; b < hi; ++b) {
        const double k = ctl[b];
        if (!(k > 0.0 && k <= 1.0)) {
          std::fill(o + b * c.v, o + (b + 1) * c.v, std::numeric_limits<float>::quiet_NaN());
        } else {
          typical_row(x + b * c.v, o + b * c.v, c.v, k, scratch);
        }
      }
    });
  }
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
