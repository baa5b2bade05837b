// top_n_sigma_logits and typical_logits on CUDA (truncate.h states the rules): a CTA a row.
//   top-n-sigma: one pass for the finite entries' count, sum and maximum, one for the squared
//     deviations (two passes, as the definition, so a large mean costs no digits), one that writes.
//   typical-p: one pass for the maximum, one for sum exp(f - m), the entropy's sum and the
//     integer mass; then levels of select_cuda.cuh's histograms (count and exact integer mass
//     a bin) over 11-bit digits of the shifts' keys, from the top, until the bin where the mass
//     reaches ceil(mass * M) holds one item (three levels for most rows); one pass writes.
// Rows are re-read from L2 or HBM a pass each; no sort, no float64 row in memory.
#include "common/cuda_utils.cuh"
#include "llm/llm.h"
#include "llm/select_cuda.cuh"
#include "llm/truncate.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cub/block/block_reduce.cuh>
#include <torch/library.h>

#include <cstdint>
#include <limits>

namespace wrs::llm {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int kDigit = 11;
constexpr int kLevels = 6;  // 11-bit digits from bit 53 down, the last of 9 bits

__device__ inline int digit_shift(int level) { return level < kLevels - 1 ? 53 - kDigit * level : 0; }
__device__ inline int digit_bits(int level) { return level < kLevels - 1 ? kDigit : 9; }

struct Sums {
  double w, wl;   // sum exp(f - m), sum exp(f - m) (f - m)
  uint64_t q;     // sum of the integer masses
  int count;      // finite entries (top-n-sigma)
};
struct AddSums {
  __device__ Sums operator()(const Sums& a, const Sums& b) const {
    return Sums{a.w + b.w, a.wl + b.wl, a.q + b.q, a.count + b.count};
  }
};

struct Shared {
  union {
    typename cub::BlockReduce<float, kThreads>::TempStorage max;
    typename cub::BlockReduce<double, kThreads>::TempStorage max64;
    typename cub::BlockReduce<Sums, kThreads>::TempStorage sums;
  };
  CtaSelect select;
  float m;
  double d0, d1;
  uint64_t total;  // typical-p: the row's integer mass
  int count;       // top-n-sigma: the row's finite entries
};

// fn(i, x, valid) for each item of the row, a quad a load where the row allows it; trips past
// the row's end come with valid = false.
template <typename Fn>
__device__ inline void for_items(const float* f, int64_t v, Fn fn) {
  const int lane = threadIdx.x % 32;
  if (v % 4 == 0 && reinterpret_cast<uintptr_t>(f) % 16 == 0) {
    const float4* f4 = reinterpret_cast<const float4*>(f);
    for (int64_t q0 = threadIdx.x - lane; q0 < v / 4; q0 += kThreads) {
      const int64_t q = q0 + lane;
      const bool valid = q < v / 4;
      const float4 x = valid ? f4[q] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      fn(4 * q, x.x, valid), fn(4 * q + 1, x.y, valid), fn(4 * q + 2, x.z, valid), fn(4 * q + 3, x.w, valid);
    }
    return;
  }
  for (int64_t i0 = threadIdx.x - lane; i0 < v; i0 += kThreads) {
    const int64_t i = i0 + lane;
    fn(i, i < v ? f[i] : 0.0f, i < v);
  }
}

__device__ inline void nan_row(float* o, int64_t v) {
  for (int64_t i = threadIdx.x; i < v; i += kThreads) o[i] = std::numeric_limits<float>::quiet_NaN();
}

__global__ void __launch_bounds__(kThreads) sigma_kernel(const float* __restrict__ y, const double* __restrict__ n,
                                                          float* __restrict__ out, int64_t v) {
  __shared__ Shared s;
  const float* f = y + blockIdx.x * v;
  float* o = out + blockIdx.x * v;
  const double nb = n[blockIdx.x];
  if (!(nb >= 0.0 && nb < kInf)) return nan_row(o, v);
  Sums mine{0.0, 0.0, 0, 0};
  double top = -kInf;
  for_items(f, v, [&](int64_t, float x, bool valid) {
    if (valid && isfinite(x)) mine.w += x, mine.count += 1, top = fmax(top, static_cast<double>(x));
  });
  const Sums all = cub::BlockReduce<Sums, kThreads>(s.sums).Reduce(mine, AddSums());
  __syncthreads();
  top = cub::BlockReduce<double, kThreads>(s.max64).Reduce(top, [](double a, double b) { return fmax(a, b); });
  if (threadIdx.x == 0) s.d0 = all.w / static_cast<double>(max(all.count, 1)), s.d1 = top, s.count = max(all.count, 1);
  __syncthreads();
  const double mean = s.d0;
  double dev = 0.0;
  for_items(f, v, [&](int64_t, float x, bool valid) {
    if (valid && isfinite(x)) dev += (x - mean) * (x - mean);
  });
  dev = cub::BlockReduce<double, kThreads>(s.max64).Sum(dev);
  if (threadIdx.x == 0) s.d0 = s.d1 - nb * sqrt(dev / static_cast<double>(s.count));
  __syncthreads();
  const double floor = s.d0;
  for_items(f, v, [&](int64_t i, float x, bool valid) {
    if (valid) o[i] = (isfinite(x) ? static_cast<double>(x) >= floor : x != -kInf) ? x : -kInf;
  });
}

__device__ inline uint64_t q_of(float f, double m, int bits) {
  return static_cast<uint64_t>(exp(static_cast<double>(f) - m) * static_cast<double>(uint64_t{1} << bits) + 0.5);
}

// A thread's counts and masses for the last few bins it met (direct-mapped by the bin's low
// bits), added to the CTA's histogram when evicted: a row's shifts crowd a few bins of the
// first level, where an atomic an item serialised the CTA on one address (3.5 ms a
// 128,256-item row; lanes grouped by bin with __match_any_sync, 1.4 ms).
struct BinCache {
  struct Slot {
    int bin = -1;
    uint32_t count = 0;
    uint64_t mass = 0;
  };
  Slot s0, s1, s2, s3;  // named, not an array: ptxas kept an array of them in local memory
  __device__ __forceinline__ static void flush(CtaSelect& s, const Slot& c) {
    if (c.bin < 0) return;
    atomicAdd(&s.count[c.bin], c.count);
    if (c.mass) atomicAdd(reinterpret_cast<unsigned long long*>(&s.mass[c.bin]), static_cast<unsigned long long>(c.mass));
  }
  __device__ __forceinline__ static void add(CtaSelect& s, Slot& c, int b, uint64_t q) {
    if (c.bin != b) flush(s, c), c.bin = b, c.count = 0, c.mass = 0;
    c.count += 1, c.mass += q;
  }
  __device__ __forceinline__ void add(CtaSelect& s, int b, uint64_t q) {
    switch (b & 3) {
      case 0: return add(s, s0, b, q);
      case 1: return add(s, s1, b, q);
      case 2: return add(s, s2, b, q);
      default: return add(s, s3, b, q);
    }
  }
  __device__ __forceinline__ void flush_all(CtaSelect& s) { flush(s, s0), flush(s, s1), flush(s, s2), flush(s, s3); }
};

__global__ void __launch_bounds__(kThreads) typical_kernel(const float* __restrict__ y,
                                                            const double* __restrict__ mass, float* __restrict__ out,
                                                            int64_t v, int bits) {
  __shared__ Shared s;
  const float* f = y + blockIdx.x * v;
  float* o = out + blockIdx.x * v;
  const double p = mass[blockIdx.x];
  if (!(p > 0.0 && p <= 1.0)) return nan_row(o, v);
  float m = -kInf;
  int bad = 0;
  for_items(f, v, [&](int64_t, float x, bool valid) {
    if (valid) bad |= isnan(x) || x == kInf, m = fmaxf(m, x);
  });
  m = cub::BlockReduce<float, kThreads>(s.max).Reduce(m, [](float a, float b) { return fmaxf(a, b); });
  if (threadIdx.x == 0) s.m = m;
  bad = __syncthreads_or(bad);
  m = s.m;
  if (p == 1.0 || m == -kInf || bad) {  // the row as it is, or its NaN entries alone
    const bool keep_all = p == 1.0 || m == -kInf;
    for_items(f, v, [&](int64_t i, float x, bool valid) {
      if (valid) o[i] = keep_all || isnan(x) ? x : -kInf;
    });
    return;
  }
  const double md = m;
  Sums mine{0.0, 0.0, 0, 0};
  for_items(f, v, [&](int64_t, float x, bool valid) {
    const double l = static_cast<double>(x) - md, w = valid ? exp(l) : 0.0;
    if (w > 0.0) mine.w += w, mine.wl += w * l, mine.q += q_of(x, md, bits);
  });
  const Sums all = cub::BlockReduce<Sums, kThreads>(s.sums).Reduce(mine, AddSums());
  if (threadIdx.x == 0) {
    s.d0 = log(all.w);
    s.d1 = s.d0 - all.wl / all.w;  // H = log S - sum w l / S
    s.total = all.q;
  }
  __syncthreads();
  const double log_s = s.d0, h = s.d1;
  const uint64_t total = s.total;
  const double want = ceil(p * static_cast<double>(total));
  const uint64_t target = want < 1.0 ? 1 : want >= static_cast<double>(total) ? total : static_cast<uint64_t>(want);
  uint64_t prefix = 0, threshold = 0;
  CountMass above{0, 0};
  for (int level = 0; level < kLevels; ++level) {
    const int shift = digit_shift(level), width = digit_bits(level), top = shift + width;
    __syncthreads();  // the last level's boundary read before the histograms are cleared
    for (int b = threadIdx.x; b < kBins; b += kThreads) s.select.count[b] = 0, s.select.mass[b] = 0;
    __syncthreads();
    BinCache cache;  // a plain loop, not for_items: a lambda's reference would put it in local memory
    for (int64_t i = threadIdx.x; i < v; i += kThreads) {
      const float x = f[i];
      const uint64_t key = typical_key(typical_shift(x, md, log_s, h));
      if (top < 64 && (key >> top) != prefix) continue;
      cache.add(s.select, static_cast<int>((key >> shift) & ((uint64_t{1} << width) - 1)), q_of(x, md, bits));
    }
    cache.flush_all(s.select);
    __syncthreads();
    const Boundary b = find_boundary(s.select.count, s.select.mass, above, target, true, s.select.scan, &s.select.boundary);
    if (b.bin < 0) break;  // out of reach (it is not: target <= total): keep the row
    prefix = (prefix << width) | static_cast<uint64_t>(b.bin);
    threshold = prefix << shift;
    if (b.in_bin.count == 1) break;
    above = b.above;
  }
  for_items(f, v, [&](int64_t i, float x, bool valid) {
    if (valid) o[i] = typical_key(typical_shift(x, md, log_s, h)) >= threshold ? x : -kInf;
  });
}

template <bool kTypical>
at::Tensor truncate_cuda(const at::Tensor& y, const at::Tensor& control, const char* op, const char* name) {
  const TruncateCall c = prepare_truncate(y, control, op, name);
  at::Tensor out = at::empty_like(c.y);
  if (c.rows == 0 || c.v == 0) return out;
  TORCH_CHECK(c.rows <= std::numeric_limits<int32_t>::max(), op, ": at most 2^31 - 1 rows, got ", c.rows);
  const c10::cuda::CUDAGuard guard(c.y.device());
  const auto stream = at::cuda::getCurrentCUDAStream();
  const unsigned grid = static_cast<unsigned>(c.rows);
  if constexpr (kTypical) {
    typical_kernel<<<grid, kThreads, 0, stream>>>(c.y.const_data_ptr<float>(), c.control.const_data_ptr<double>(),
                                                  out.data_ptr<float>(), c.v, mass_bits(c.v));
  } else {
    sigma_kernel<<<grid, kThreads, 0, stream>>>(c.y.const_data_ptr<float>(), c.control.const_data_ptr<double>(),
                                                out.data_ptr<float>(), c.v);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

at::Tensor top_n_sigma_logits_cuda(const at::Tensor& y, const at::Tensor& n) {
  return truncate_cuda<false>(y, n, "top_n_sigma_logits", "n");
}

at::Tensor typical_logits_cuda(const at::Tensor& f, const at::Tensor& mass) {
  return truncate_cuda<true>(f, mass, "typical_logits", "mass");
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) {
  m.impl("top_n_sigma_logits", &top_n_sigma_logits_cuda);
  m.impl("typical_logits", &typical_logits_cuda);
}

}  // namespace wrs::llm
