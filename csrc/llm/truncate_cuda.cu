// top_n_sigma_logits and typical_logits on CUDA (truncate.h states the rules): a cluster of
// CTAs a row (route.h's cluster_size: rows fewer than the SMs are split, up to 8 CTAs), each
// CTA over its share; the cluster's sums, maxima and histograms combined through distributed
// shared memory.
//   top-n-sigma: one pass for the finite entries' count, sum and maximum, one for the squared
//     deviations (two passes, as the definition, so a large mean costs no digits), one that writes.
//   typical-p: one pass for the maximum and the least finite entry, one for sum exp(f - m),
//     the entropy's sum and the integer mass; then levels of select_cuda.cuh's histograms
//     (count and exact integer mass a bin) until the bin where the mass reaches ceil(mass * M)
//     holds one key: the shifts binned linearly, then 11-bit digits of the boundary bin's
//     keys (LevelScan); one pass writes.
// Rows are re-read from L2 or HBM a pass each; no sort, no float64 row in memory.
#include "common/cuda_utils.cuh"
#include "llm/dispatch_cuda.h"
#include "llm/llm.h"
#include "llm/select_cuda.cuh"
#include "llm/truncate.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cooperative_groups.h>
#include <cub/block/block_reduce.cuh>
#include <torch/library.h>

#include <cstdint>
#include <limits>

namespace wrs::llm {
namespace {

namespace cg = cooperative_groups;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int kDigit = 11;  // bits of a radix level of the shifts' keys

struct Sums {
  double w, wl;   // sum exp(f - m), sum exp(f - m) (f - m); top-n-sigma: sum f, unused
  uint64_t q;     // sum of the integer masses
  int count;      // finite entries (top-n-sigma)
};
struct AddSums {
  __device__ Sums operator()(const Sums& a, const Sums& b) const {
    return Sums{a.w + b.w, a.wl + b.wl, a.q + b.q, a.count + b.count};
  }
};
__device__ inline Sums shfl_xor(const Sums& a, int o) {
  return Sums{__shfl_xor_sync(0xffffffffu, a.w, o), __shfl_xor_sync(0xffffffffu, a.wl, o),
              __shfl_xor_sync(0xffffffffu, static_cast<unsigned long long>(a.q), o),
              __shfl_xor_sync(0xffffffffu, a.count, o)};
}
template <typename T>
__device__ inline T shfl_xor(T a, int o) {
  return __shfl_xor_sync(0xffffffffu, a, o);
}

// What each CTA leaves for the cluster to combine, a slot a pass, so no pass waits for the
// cluster to finish reading the one before.
struct Partials {
  Sums sums;
  double d;    // top-n-sigma: the maximum, then the squared deviations
  float m, lo;  // typical-p: the maximum, the least finite entry
  int bad;     // a NaN or +inf entry
};

struct Shared {
  union {
    typename cub::BlockReduce<float, kThreads>::TempStorage max;
    typename cub::BlockReduce<double, kThreads>::TempStorage max64;
    typename cub::BlockReduce<Sums, kThreads>::TempStorage sums;
  };
  CtaSelect select;
  Partials first, second;
};

// Every CTA's *p combined by op (commutative), the same in every warp of every CTA: CTA r's
// value read by lane r, all loads in flight at once, then a butterfly, whose two lanes of a
// pair combine the same two values.
template <typename T, typename Op>
__device__ inline T cluster_all(cg::cluster_group& cluster, const T* p, T none, Op op) {
  const unsigned lane = threadIdx.x % 32;
  T x = lane < cluster.num_blocks() ? *cluster.map_shared_rank(p, lane) : none;
#pragma unroll
  for (int o = 16; o > 0; o /= 2) x = op(x, shfl_xor(x, o));
  return x;
}

// The items of the row this CTA reads: [lo, hi), whole segments of route.h's split.
struct Share {
  int64_t lo, hi;
  bool quads;  // float4 loads: the row's start is 16-byte aligned and V a multiple of 4
};
__device__ inline Share share_of(const float* f, int64_t v, const cg::cluster_group& cluster) {
  const int64_t items = 4 * share_quads(v, cluster.num_blocks());
  const int64_t lo = min(v, static_cast<int64_t>(cluster.block_rank()) * items);
  return Share{lo, min(v, lo + items), v % 4 == 0 && reinterpret_cast<uintptr_t>(f) % 16 == 0};
}

// fn(i, x, valid) for each item of the share, two quads a thread in flight where the row
// allows quads; trips past the share's end come with valid = false.
template <typename Fn>
__device__ __forceinline__ void for_items(const float* f, const Share& sh, Fn&& fn) {
  if (sh.quads) {
    const float4* f4 = reinterpret_cast<const float4*>(f);
    const int64_t end = sh.hi / 4;
    for (int64_t q = sh.lo / 4 + threadIdx.x; q < end; q += 2 * kThreads) {
      const int64_t q2 = q + kThreads;
      const bool second = q2 < end;
      const float4 a = f4[q];
      const float4 b = second ? f4[q2] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      fn(4 * q, a.x, true), fn(4 * q + 1, a.y, true), fn(4 * q + 2, a.z, true), fn(4 * q + 3, a.w, true);
      fn(4 * q2, b.x, second), fn(4 * q2 + 1, b.y, second), fn(4 * q2 + 2, b.z, second), fn(4 * q2 + 3, b.w, second);
    }
    return;
  }
  for (int64_t i = sh.lo + threadIdx.x; i < sh.hi; i += kThreads) fn(i, f[i], true);
}

__device__ inline void nan_share(float* o, const Share& sh) {
  for (int64_t i = sh.lo + threadIdx.x; i < sh.hi; i += kThreads) o[i] = std::numeric_limits<float>::quiet_NaN();
}

__global__ void __launch_bounds__(kThreads) sigma_kernel(const float* __restrict__ y, const double* __restrict__ n,
                                                          float* __restrict__ out, int64_t v) {
  __shared__ Shared s;
  cg::cluster_group cluster = cg::this_cluster();
  const int64_t row = blockIdx.x / cluster.num_blocks();
  const float* f = y + row * v;
  float* o = out + row * v;
  const Share sh = share_of(f, v, cluster);
  const double nb = n[row];
  if (!(nb >= 0.0 && nb < kInf)) return nan_share(o, sh);
  Sums mine{0.0, 0.0, 0, 0};
  double top = -kInf;
  int bad = 0;
  for_items(f, sh, [&](int64_t, float x, bool valid) {
    if (valid && isfinite(x)) mine.w += x, mine.count += 1, top = fmax(top, static_cast<double>(x));
    if (valid) bad |= isnan(x) || x == kInf;
  });
  const Sums cta = cub::BlockReduce<Sums, kThreads>(s.sums).Reduce(mine, AddSums());
  __syncthreads();
  top = cub::BlockReduce<double, kThreads>(s.max64).Reduce(top, [](double a, double b) { return fmax(a, b); });
  bad = __syncthreads_or(bad);
  if (threadIdx.x == 0) s.first = Partials{cta, top, 0.0f, 0.0f, bad};
  cluster.sync();
  const Sums all = cluster_all(cluster, &s.first.sums, Sums{0.0, 0.0, 0, 0}, AddSums());
  top = cluster_all(cluster, &s.first.d, -static_cast<double>(kInf), [](double a, double b) { return fmax(a, b); });
  bad = cluster_all(cluster, &s.first.bad, 0, [](int a, int b) { return a | b; });
  if (bad || all.count == 0) {  // the fused filter's invalid row: NaN or +inf, or no finite entry
    nan_share(o, sh);
    cluster.sync();  // no CTA leaves while another reads its shared memory
    return;
  }
  const double mean = all.w / static_cast<double>(all.count);
  double dev = 0.0;
  for_items(f, sh, [&](int64_t, float x, bool valid) {
    if (valid && isfinite(x)) dev += (x - mean) * (x - mean);
  });
  dev = cub::BlockReduce<double, kThreads>(s.max64).Sum(dev);
  if (threadIdx.x == 0) s.second.d = dev;
  cluster.sync();
  dev = cluster_all(cluster, &s.second.d, 0.0, [](double a, double b) { return a + b; });
  const double floor = top - nb * sqrt(dev / static_cast<double>(all.count));
  for_items(f, sh, [&](int64_t i, float x, bool valid) {
    if (valid) o[i] = static_cast<double>(x) >= floor ? x : -kInf;
  });
  cluster.sync();  // no CTA leaves while another reads its shared memory
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

// A level's histogram over the CTA's share. The first level bins the shifts linearly over
// [0, S] (bin 2047 - floor(shift * 2048 / S), clamped; S bounds the shifts of items with a
// non-zero integer mass), so that the row's items spread over the bins; the radix levels then
// take the keys of the boundary bin's items, from the highest bit in which they can differ. A
// plain loop, not for_items: a lambda's reference to the cache put it in local memory.
struct LevelScan {
  double md, log_s, h, inv_w;
  uint64_t prefix;
  int linear_bin;  // the first level's boundary bin, or -1 during the first level
  int shift, width, top, bits;
  BinCache cache;
  __device__ __forceinline__ double shift_of(float x) const { return typical_shift(x, md, log_s, h); }
  // Bins in decreasing order of shifts' ranks, as keys: a larger bin holds smaller shifts.
  __device__ __forceinline__ int linear_of(double sh) const {
    return kBins - 1 - static_cast<int>(fmin(sh * inv_w, static_cast<double>(kBins - 1)));
  }
  __device__ __forceinline__ void visit(CtaSelect& s, float x, bool valid) {
    const double sh = shift_of(x);
    const int lin = linear_of(sh);
    if (!valid) return;
    if (linear_bin < 0) return cache.add(s, lin, q_of(x, md, bits));
    const uint64_t key = typical_key(sh);
    if (lin != linear_bin || (top < 64 && (key >> top) != prefix)) return;
    cache.add(s, static_cast<int>((key >> shift) & ((uint64_t{1} << width) - 1)), q_of(x, md, bits));
  }
  __device__ __forceinline__ void run(CtaSelect& s, const float* f, const Share& sh) {
    if (sh.quads) {
      const float4* f4 = reinterpret_cast<const float4*>(f);
      const int64_t end = sh.hi / 4;
      for (int64_t q = sh.lo / 4 + threadIdx.x; q < end; q += 2 * kThreads) {
        const bool second = q + kThreads < end;
        const float4 a = f4[q];
        const float4 b = second ? f4[q + kThreads] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        visit(s, a.x, true), visit(s, a.y, true), visit(s, a.z, true), visit(s, a.w, true);
        visit(s, b.x, second), visit(s, b.y, second), visit(s, b.z, second), visit(s, b.w, second);
      }
    } else {
      for (int64_t i = sh.lo + threadIdx.x; i < sh.hi; i += kThreads) visit(s, f[i], true);
    }
    cache.flush_all(s);
  }
  // The bits in which the keys of the first level's bin b may differ (64: any), and the
  // bits above them (prefix): from the bin's range of shifts, widened by far more than the
  // rounding of linear_of.
  __device__ void start_radix(int b) {
    linear_bin = b, top = 64, prefix = 0;
    if (!(inv_w > 0.0 && inv_w < 1e300)) return;
    const double lo = static_cast<double>(kBins - 1 - b) / inv_w * (1.0 - 0x1p-40);
    const double hi = b == 0 ? INFINITY : static_cast<double>(kBins - b) / inv_w * (1.0 + 0x1p-40);
    if (!(lo == 0.0 || lo >= 1e-290)) return;  // (subnormal ranges round coarser)
    const uint64_t high = typical_key(lo), low = typical_key(hi);
    top = high == low ? 0 : 64 - __clzll(static_cast<long long>(high ^ low));
    prefix = top >= 64 ? 0 : high >> top;
  }
};

// The cluster's histogram in every CTA's own: thread t sums its bins over the CTAs' copies,
// and writes them once every CTA has read.
__device__ inline void merge_histograms(CtaSelect& s, cg::cluster_group& cluster) {
  const int cs = static_cast<int>(cluster.num_blocks());
  uint32_t count[kBinsPerThread] = {};
  uint64_t mass[kBinsPerThread] = {};
#pragma unroll
  for (int r = 0; r < kMaxCluster; ++r) {
    if (r >= cs) break;
    const CtaSelect* other = cluster.map_shared_rank(&s, r);
#pragma unroll
    for (int j = 0; j < kBinsPerThread; ++j) {
      const int b = threadIdx.x + j * kThreads;
      count[j] += other->count[b], mass[j] += other->mass[b];
    }
  }
  cluster.sync();  // every CTA's histogram read before any is overwritten
#pragma unroll
  for (int j = 0; j < kBinsPerThread; ++j) {
    const int b = threadIdx.x + j * kThreads;
    s.count[b] = count[j], s.mass[b] = mass[j];
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads) typical_kernel(const float* __restrict__ y,
                                                            const double* __restrict__ mass, float* __restrict__ out,
                                                            int64_t v, int bits) {
  __shared__ Shared s;
  cg::cluster_group cluster = cg::this_cluster();
  const int64_t row = blockIdx.x / cluster.num_blocks();
  const float* f = y + row * v;
  float* o = out + row * v;
  const Share sh = share_of(f, v, cluster);
  const double p = mass[row];
  if (!(p > 0.0 && p <= 1.0)) return nan_share(o, sh);
  float m = -kInf, lo = kInf;
  int bad = 0;
  for_items(f, sh, [&](int64_t, float x, bool valid) {
    if (valid) bad |= isnan(x) || x == kInf, m = fmaxf(m, x), lo = x > -kInf ? fminf(lo, x) : lo;
  });
  m = cub::BlockReduce<float, kThreads>(s.max).Reduce(m, [](float a, float b) { return fmaxf(a, b); });
  __syncthreads();
  lo = cub::BlockReduce<float, kThreads>(s.max).Reduce(lo, [](float a, float b) { return fminf(a, b); });
  bad = __syncthreads_or(bad);
  if (threadIdx.x == 0) s.first.m = m, s.first.lo = lo, s.first.bad = bad;
  cluster.sync();
  m = cluster_all(cluster, &s.first.m, -kInf, [](float a, float b) { return fmaxf(a, b); });
  bad = cluster_all(cluster, &s.first.bad, 0, [](int a, int b) { return a | b; });
  if (p == 1.0 || m == -kInf || bad) {  // the filter's invalid row, or the row as it is
    const bool invalid = m == -kInf || bad;
    for_items(f, sh, [&](int64_t i, float x, bool valid) {
      if (valid) o[i] = invalid ? std::numeric_limits<float>::quiet_NaN() : x;
    });
    cluster.sync();  // no CTA leaves while another reads its shared memory
    return;
  }
  const double md = m;
  const double scale = static_cast<double>(uint64_t{1} << bits);
  Sums mine{0.0, 0.0, 0, 0};
  for_items(f, sh, [&](int64_t, float x, bool valid) {
    const double l = static_cast<double>(x) - md, w = valid ? exp(l) : 0.0;
    // q_of's integer mass from the same exp
    if (w > 0.0) mine.w += w, mine.wl += w * l, mine.q += static_cast<uint64_t>(w * scale + 0.5);
  });
  const Sums cta = cub::BlockReduce<Sums, kThreads>(s.sums).Reduce(mine, AddSums());
  if (threadIdx.x == 0) s.second.sums = cta;
  cluster.sync();
  const Sums all = cluster_all(cluster, &s.second.sums, Sums{0.0, 0.0, 0, 0}, AddSums());
  LevelScan scan;
  scan.md = md, scan.log_s = log(all.w), scan.h = scan.log_s - all.wl / all.w;  // H = log S - sum w l / S
  scan.bits = bits, scan.linear_bin = -1;
  // S: the larger shift of the maximum and of the least entry that can carry integer mass
  const float least = fmaxf(cluster_all(cluster, &s.first.lo, kInf, [](float a, float b) { return fminf(a, b); }),
                            m - static_cast<float>(bits + 2));
  const double range = fmax(scan.shift_of(m), scan.shift_of(least));
  scan.inv_w = range > 0.0 ? static_cast<double>(kBins) / range : 0.0;
  const uint64_t total = all.q;
  const double want = ceil(p * static_cast<double>(total));
  const uint64_t target = want < 1.0 ? 1 : want >= static_cast<double>(total) ? total : static_cast<uint64_t>(want);
  uint64_t threshold = 0;
  CountMass above{0, 0};
  for (int level = 0;; ++level) {
    if (level > 0) scan.shift = max(0, scan.top - kDigit), scan.width = scan.top - scan.shift;
    __syncthreads();  // the last level's boundary read before the histograms are cleared
    for (int b = threadIdx.x; b < kBins; b += kThreads) s.select.count[b] = 0, s.select.mass[b] = 0;
    __syncthreads();
    scan.cache = BinCache{};
    scan.run(s.select, f, sh);
    cluster.sync();  // every CTA's histogram complete
    if (cluster.num_blocks() > 1) merge_histograms(s.select, cluster);
    const Boundary b = find_boundary(s.select.count, s.select.mass, above, target, true, s.select.scan, &s.select.boundary);
    if (b.bin < 0) {  // out of reach (it is not: target <= total): keep the row
      if (level == 0) scan.linear_bin = 0;
      break;
    }
    if (level == 0) {
      scan.start_radix(b.bin);
      threshold = scan.top >= 64 ? 0 : scan.prefix << scan.top;
    } else {
      scan.prefix = (scan.prefix << scan.width) | static_cast<uint64_t>(b.bin);
      threshold = scan.prefix << scan.shift;
      scan.top = scan.shift;
    }
    if (b.in_bin.count == 1 || scan.top == 0) break;
    above = b.above;
  }
  // Kept: the first level's bins above the boundary bin, and its items from the threshold up.
  for_items(f, sh, [&](int64_t i, float x, bool valid) {
    const double shift = scan.shift_of(x);
    const int lin = scan.linear_of(shift);
    if (valid) o[i] = lin > scan.linear_bin || (lin == scan.linear_bin && typical_key(shift) >= threshold) ? x : -kInf;
  });
}

template <bool kTypical>
at::Tensor truncate_cuda(const at::Tensor& y, const at::Tensor& control, const char* op, const char* name) {
  const TruncateCall c = prepare_truncate(y, control, op, name);
  at::Tensor out = at::empty_like(c.y);
  if (c.rows == 0 || c.v == 0) return out;
  const c10::cuda::CUDAGuard guard(c.y.device());
  const int cluster = cluster_size(c.rows, c.v, false);
  TORCH_CHECK(c.rows * cluster <= std::numeric_limits<int32_t>::max(), op, ": at most 2^31 - 1 CTAs, got ", c.rows,
              " rows of ", cluster);
  if constexpr (kTypical) {
    launch_clusters(false, typical_kernel, c.rows, cluster, kThreads, 0, c.y.const_data_ptr<float>(),
                    c.control.const_data_ptr<double>(), out.data_ptr<float>(), c.v, mass_bits(c.v));
  } else {
    launch_clusters(false, sigma_kernel, c.rows, cluster, kThreads, 0, c.y.const_data_ptr<float>(),
                    c.control.const_data_ptr<double>(), out.data_ptr<float>(), c.v);
  }
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
