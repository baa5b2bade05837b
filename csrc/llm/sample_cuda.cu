// CUDA kernels of sample_llm and filter_logits (llm.h states the law). A row is served by
// a cluster of CTAs (route.h picks its size), each over a contiguous share of the
// row; the CTAs combine their partial results through distributed shared memory, so a call
// is one launch however its rows are split. A row's passes over its values:
//   1. stats (with any control, or greedy): largest value, first argmax, bad values,
//      log-sum-exp; the values stay in shared memory (resident), so later passes read no
//      device memory;
//   2. top-k / top-p: radix levels over the keys (select_cuda.cuh), a histogram pass each;
//   3. the draw (or, for filter_logits, the write): a resident row by inverse CDF over its
//      segments of 128 items in row order (float64 sums; the split of the row over CTAs does
//      not change the draw); a longer row by the race over kept items, where an item whose
//      key cannot beat its thread's best draws no log (E >= u bounds its key).
// Nothing is read back to the host; invalid rows give token 0 and a NaN log-probability.
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "llm/dispatch_cuda.h"
#include "llm/llm_ops.h"
#include "llm/penalties_ops.h"
#include "llm/plain_cuda.cuh"
#include "llm/segments_cuda.cuh"
#include "llm/select_cuda.cuh"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cooperative_groups.h>
#include <cub/block/block_reduce.cuh>
#include <torch/library.h>

#include <cfloat>

namespace wrs::llm {
namespace {

namespace cg = cooperative_groups;

constexpr int kQuadsInFlight = 4;  // per thread per trip over device memory
// -log E_i <= 22.9 for every 32-bit E (exponential32): an item 23 below the best never wins.
constexpr float kMaxGumbel = 23.0f;

template <typename scalar_t>
struct Args {
  const scalar_t* x;
  int64_t v;
  int64_t samples;
  Controls controls;
  at::PhiloxCudaState philox;
  int64_t logprob_mode;
  int mass_bits;
  int64_t* tokens;
  float* logprobs;
  scalar_t* filtered;  // filter_logits' output, or nullptr
  bool resident;       // shared memory holds kResident values after Shared
  const uint8_t* only;  // where given, the rows to serve (those the plain kernel deferred)
  PlanArg plan;
};

// What a pass reduces: the best value (stats: the largest y; race: the largest key) and its
// first index, bad values, and an online log-sum-exp (m, s) of the log-weights.
struct Partial {
  float best;
  int64_t index;
  float m;
  float s;
  int bad;
};

__device__ inline void add_lse(Partial& p, float l) {
  if (!(l > -FLT_MAX)) return;
  if (l > p.m) {
    p.s = p.s * __expf(p.m - l) + 1.0f;
    p.m = l;
  } else {
    p.s += __expf(l - p.m);
  }
}

struct Combine {
  __device__ Partial operator()(const Partial& a, const Partial& b) const {
    const bool b_wins = b.best > a.best || (b.best == a.best && b.index < a.index);
    Partial r = b_wins ? b : a;
    r.bad = a.bad | b.bad;
    if (b.s == 0.0f) {
      r.m = a.m, r.s = a.s;
    } else if (a.s == 0.0f) {
      r.m = b.m, r.s = b.s;
    } else {
      const float m = fmaxf(a.m, b.m);
      r.m = m, r.s = a.s * __expf(a.m - m) + b.s * __expf(b.m - m);
    }
    return r;
  }
};

constexpr Partial kEmpty{-INFINITY, INT64_MAX, -INFINITY, 0.0f, 0};

// Shared memory; a resident row's values follow it (kResident floats, at kValsOffset).
struct Shared {
  LocalHistogram local;
  uint32_t l1_count[kBins];  // level 1, summed over the cluster
  uint64_t l1_mass[kBins];
  uint32_t count[kBins];  // levels 2 and 3
  uint64_t mass[kBins];
  double seg_sum[kResident / kSegment];  // kept weight of each segment of this CTA's share
  double seg_before[kResident / kSegment];
  double cta_total;
  int claim;
  Partial part;
  Boundary boundary;
  uint64_t total;
  uint64_t cta_mass;
  union {
    typename cub::BlockReduce<Partial, kThreads>::TempStorage reduce;
    typename CountMassScan::TempStorage scan;
    typename cub::BlockReduce<uint64_t, kThreads>::TempStorage total_reduce;
    typename cub::BlockScan<double, kThreads>::TempStorage dscan;
  };
};

constexpr size_t kValsOffset = (sizeof(Shared) + 15) / 16 * 16;
static_assert(kValsOffset + kResident * sizeof(float) <= 227 * 1024, "a resident CTA's shared memory is over 227 KB");

// This CTA's share of a row: quads [q_begin, q_end); its values y (x / T for logits) come
// from device memory, or from shared memory once `resident` (vals[j] is item 4 q_begin + j).
template <bool kLogits, typename RowT>
struct Row {
  RowT xr;
  int64_t v, q_begin, q_end;
  float inv_t, ymax;
  int bits;
  bool need_mass;
  bool resident;
  float* vals;
  __device__ uint64_t q(float y) const { return need_mass ? quantize_mass(mass_of<kLogits>(y, ymax), bits) : 0; }

  // Calls f(i, y) for each item, a thread's items quad by quad (so a quad's Philox block is
  // drawn once); `keep` stores the values in shared memory for later passes.
  template <typename F>
  __device__ void each(F&& f, bool keep = false) const {
    if (resident) {
      const float4* v4 = reinterpret_cast<const float4*>(vals);
      for (int64_t q = q_begin + threadIdx.x; q < q_end; q += kThreads) {
        const float4 y = v4[q - q_begin];
        const int64_t i = 4 * q;
        const int present = static_cast<int>(min(int64_t{4}, v - i));
        f(i, y.x);
        if (present > 1) f(i + 1, y.y);
        if (present > 2) f(i + 2, y.z);
        if (present > 3) f(i + 3, y.w);
      }
      return;
    }
    const bool aligned = four_aligned(xr);
    const float scale = kLogits ? inv_t : 1.0f;
    for (int64_t base = q_begin + threadIdx.x; base < q_end; base += kQuadsInFlight * kThreads) {
      float y[kQuadsInFlight][4];
      int n[kQuadsInFlight];
      int64_t qs[kQuadsInFlight];
      bool want[kQuadsInFlight];
#pragma unroll
      for (int t = 0; t < kQuadsInFlight; ++t) qs[t] = base + t * kThreads, want[t] = qs[t] < q_end;
      load_quads(xr, v, qs, want, aligned, 1.0f, y, n);
#pragma unroll
      for (int t = 0; t < kQuadsInFlight; ++t) {
        const int64_t q = base + t * kThreads;
#pragma unroll
        for (int h = 0; h < 4; ++h) y[t][h] *= scale;
        if (keep && n[t] > 0) reinterpret_cast<float4*>(vals)[q - q_begin] = make_float4(y[t][0], y[t][1], y[t][2], y[t][3]);
#pragma unroll
        for (int h = 0; h < 4; ++h) {
          if (h < n[t]) f(4 * q + h, y[t][h]);
        }
      }
    }
  }
};

// The cluster's combination of every CTA's block-reduced partial (the same in every CTA).
__device__ Partial cluster_partial(Shared& sh, const Partial& mine, cg::cluster_group& cluster) {
  const Partial block = cub::BlockReduce<Partial, kThreads>(sh.reduce).Reduce(mine, Combine());
  if (threadIdx.x == 0) sh.part = block;
  cluster.sync();
  Partial all = kEmpty;
  for (unsigned r = 0; r < cluster.num_blocks(); ++r) all = Combine()(all, cluster.map_shared_rank(&sh, r)->part);
  cluster.sync();
  return all;
}

// Sums the cluster's local histograms into (count, mass) of every CTA. CTA r sums a slice of
// the bins over all CTAs and writes the sums to all of them: each CTA reads 1/c of the bins
// from each other CTA (independent loads, unrolled), where reading all of them serialised on
// distributed-shared-memory latency and was most of a small call's histogram pass.
__device__ __noinline__ void merge_histograms(Shared& sh, bool wide, uint32_t* count, uint64_t* mass, cg::cluster_group& cluster) {
  cluster.sync();  // every local histogram is complete, and every CTA is done with its last (count, mass)
  const int cs = static_cast<int>(cluster.num_blocks());
  const int slice = kBins / cs;
  const int first = static_cast<int>(cluster.block_rank()) * slice;
  for (int b = first + threadIdx.x; b < first + slice; b += kThreads) {
    uint32_t c = 0;
    uint64_t m = 0;
#pragma unroll
    for (int r = 0; r < kMaxCluster; ++r) {
      if (r < cs) {
        const Shared* other = cluster.map_shared_rank(&sh, r);
        c += other->local.count[b];
        m += other->local.mass(b, wide);
      }
    }
#pragma unroll
    for (int r = 0; r < kMaxCluster; ++r) {
      if (r < cs) {
        cluster.map_shared_rank(count, r)[b] = c;
        cluster.map_shared_rank(mass, r)[b] = m;
      }
    }
  }
  cluster.sync();
}

// One histogram pass at `level` (items in `prefix`, key >= floor), summed over the
// cluster into (count, mass).
template <bool kLogits, typename RowT>
__device__ void histogram_pass(Shared& sh, const Row<kLogits, RowT>& row, int level, uint32_t prefix,
                               uint32_t floor, uint32_t* count, uint64_t* mass, cg::cluster_group& cluster) {
  for (int b = threadIdx.x; b < kBins; b += kThreads) {
    sh.local.count[b] = 0;
    sh.local.part[0][b] = sh.local.part[1][b] = sh.local.part[2][b] = 0;
  }
  __syncthreads();
  const bool wide = !row.resident;
  row.each([&](int64_t, float y) {
    const uint32_t key = order_key(y);
    if (key < floor || !in_prefix(key, level, prefix)) return;
    histogram_add(sh.local, bin_of(key, level), row.q(y), row.need_mass, wide);
  });
  merge_histograms(sh, wide, count, mass, cluster);
}

// The level-1 histogram's total mass, in every thread.
__device__ uint64_t histogram_mass(Shared& sh) {
  uint64_t mine = 0;
  for (int b = threadIdx.x; b < kBins; b += kThreads) mine += sh.l1_mass[b];
  const uint64_t total = cub::BlockReduce<uint64_t, kThreads>(sh.total_reduce).Sum(mine);
  if (threadIdx.x == 0) sh.total = total;
  __syncthreads();
  return sh.total;
}

// The largest key t such that the items with key >= max(t, floor) reach `target` (in
// count, or in mass), and their count and mass (ge). Level 1 is the shared histogram;
// levels 2 and 3 are passes over the row.
template <bool kLogits, typename RowT>
__device__ uint32_t select(Shared& sh, const Row<kLogits, RowT>& row, bool by_mass, uint64_t target,
                           uint32_t floor, CountMass& ge, cg::cluster_group& cluster) {
  Boundary b = find_boundary(sh.l1_count, sh.l1_mass, CountMass{0, 0}, target, by_mass, sh.scan, &sh.boundary);
  uint32_t prefix = 0;
  for (int level = 1;; ++level) {
    if (b.bin < 0) {  // out of reach, which a valid row never is: keep everything
      ge = CountMass{0, 0};
      return 0;
    }
    prefix = (level == 1 ? 0u : prefix << level_bits(level)) | static_cast<uint32_t>(b.bin);
    ge = AddCountMass()(b.above, b.in_bin);
    // Done where the whole boundary bin is kept: a single item, or exactly k items from the
    // top. Its lowest key then keeps the same set as the exact threshold would.
    if (level == 3 || b.in_bin.count == 1 || (!by_mass && ge.count == target)) return prefix << level_shift(level);
    histogram_pass(sh, row, level + 1, prefix, floor, sh.count, sh.mass, cluster);
    b = find_boundary(sh.count, sh.mass, b.above, target, by_mass, sh.scan, &sh.boundary);
  }
}

// A floor under a resident row's top-k (or, without top-k, top-p) threshold, from its
// segment maxima: the maxima of segments are distinct items, so if those in level-1 bins >= b
// number k (or carry the top-p target's mass), the threshold is at least bin b's lowest key.
// Histogram passes then skip the items below it, which on peaked LLM rows are nearly all of
// them, and add no atomics for them. Also returns the row's exact total mass (top-p without
// top-k needs it, and the floored level-1 histogram no longer holds it).
template <bool kLogits, typename RowT>
__device__ uint32_t threshold_floor(Shared& sh, const Row<kLogits, RowT>& r, const RowControls& rc,
                                   uint64_t& total, cg::cluster_group& cluster) {
  for (int b = threadIdx.x; b < kBins; b += kThreads) {
    sh.local.count[b] = 0;
    sh.local.part[0][b] = sh.local.part[1][b] = sh.local.part[2][b] = 0;
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t share = r.q_end - r.q_begin;
  const int nseg = static_cast<int>((share + 31) / 32);
  const bool by_k = rc.top_k_on(r.v);
  uint64_t mine = 0;
  for (int seg = warp; seg < nseg; seg += kThreads / 32) {
    const int64_t qi = static_cast<int64_t>(seg) * 32 + lane;
    float m = -INFINITY;
    if (qi < share) {
      const float4 y4 = reinterpret_cast<const float4*>(r.vals)[qi];
      const float y[4] = {y4.x, y4.y, y4.z, y4.w};
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        if (4 * (r.q_begin + qi) + h >= r.v) break;
        m = fmaxf(m, y[h]);
        if (!by_k) mine += r.q(y[h]);
      }
    }
    m = warp_max(m);
    if (lane == 0 && (kLogits ? m > -INFINITY : m > 0.0f)) {
      histogram_add(sh.local, bin_of(order_key(m), 1), quantize_mass(mass_of<kLogits>(m, r.ymax), r.bits), true, false);
    }
  }
  const uint64_t block = cub::BlockReduce<uint64_t, kThreads>(sh.total_reduce).Sum(mine);
  if (threadIdx.x == 0) sh.cta_mass = block;
  merge_histograms(sh, false, sh.count, sh.mass, cluster);
  total = 0;
  for (unsigned q = 0; q < cluster.num_blocks(); ++q) total += cluster.map_shared_rank(&sh, q)->cta_mass;
  const uint64_t target = by_k ? static_cast<uint64_t>(rc.top_k) : top_p_target(rc.top_p, total);
  const Boundary b = find_boundary(sh.count, sh.mass, CountMass{0, 0}, target, !by_k, sh.scan, &sh.boundary);
  return b.bin < 0 ? 0u : static_cast<uint32_t>(b.bin) << level_shift(1);
}

// The draw of a resident row: inverse CDF at a 53-bit uniform point of the kept weight, in
// row order. Segments (kSegment items, 32 quads, a warp's float4 each) are summed, scanned
// over the CTA and the cluster; the segment holding the point is walked by one warp. Where
// float64 rounding leaves the point between two ranges, the largest value is drawn (the
// fallback written first), with probability about 2^-50.
template <bool kLogits, typename scalar_t, typename RowT, typename Keeps>
__device__ void draw_inverse_cdf(Shared& sh, const Row<kLogits, RowT>& r, Keeps&& keeps, const Args<scalar_t>& a,
                                 int64_t row, int64_t rank, float raw_norm, uint64_t key, uint64_t offset,
                                 uint64_t sub, int64_t fallback, cg::cluster_group& cluster) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t share = r.q_end - r.q_begin;
  const int nseg = static_cast<int>((share + 31) / 32);
  const float4* v4 = reinterpret_cast<const float4*>(r.vals);
  auto weights = [&](int64_t qi, float (&w)[4]) {  // the kept weights of quad qi of the share
    const float4 y4 = qi < share ? v4[qi] : make_float4(0.f, 0.f, 0.f, 0.f);
    const float y[4] = {y4.x, y4.y, y4.z, y4.w};
    const int64_t i = 4 * (r.q_begin + qi);
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      const bool in = qi < share && i + h < r.v && keeps(y[h]);
      w[h] = in ? (kLogits ? __expf(y[h] - r.ymax) : y[h]) : 0.0f;
    }
  };
  for (int seg = warp; seg < nseg; seg += kThreads / 32) {
    float w[4];
    weights(static_cast<int64_t>(seg) * 32 + lane, w);
    const double sum = warp_sum(lane_sum(w));
    if (lane == 0) sh.seg_sum[seg] = sum;
  }
  __syncthreads();
  double before = 0.0, cta_total = 0.0;
  cub::BlockScan<double, kThreads>(sh.dscan)
      .ExclusiveSum(static_cast<int>(threadIdx.x) < nseg ? sh.seg_sum[threadIdx.x] : 0.0, before, cta_total);
  if (static_cast<int>(threadIdx.x) < nseg) sh.seg_before[threadIdx.x] = before;
  if (threadIdx.x == 0) sh.cta_total = cta_total;
  if (rank == 0) {
    for (int64_t s = threadIdx.x; s < a.samples; s += kThreads) {
      a.tokens[row * a.samples + s] = fallback;
      if (a.logprobs) a.logprobs[row * a.samples + s] = NAN;
    }
  }
  cluster.sync();
  double cta_before = 0.0, grand = 0.0;
  for (unsigned q = 0; q < cluster.num_blocks(); ++q) {
    const double t = cluster.map_shared_rank(&sh, q)->cta_total;
    if (q < rank) cta_before += t;
    grand += t;
  }
  cluster.sync();
  for (int64_t s = 0; s < a.samples; ++s) {
    const uint4 w4 = philox_block_at(key, offset / 4 + s, sub);
    const double point = uniform53(w4) * grand;
    if (threadIdx.x == 0) sh.claim = -1;
    __syncthreads();
    if (static_cast<int>(threadIdx.x) < nseg) {
      const double lo = cta_before + sh.seg_before[threadIdx.x];
      if (point >= lo && point < lo + sh.seg_sum[threadIdx.x]) sh.claim = threadIdx.x;
    }
    __syncthreads();
    const int seg = sh.claim;
    if (seg < 0 || warp != 0) continue;
    float w[4];
    const int64_t qi = static_cast<int64_t>(seg) * 32 + lane;
    weights(qi, w);
    const double mine = lane_sum(w);
    const double before = warp_inclusive_sum(mine) - mine;
    double cum = cta_before + sh.seg_before[seg] + before;
    int hit = -1;
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      cum += w[h];
      if (hit < 0 && w[h] > 0.0f && point < cum) hit = h;
    }
    const unsigned found = __ballot_sync(0xffffffffu, hit >= 0 && point >= cta_before + sh.seg_before[seg] + before);
    if (found == 0 || lane != __ffs(found) - 1) continue;
    const int64_t i = 4 * (r.q_begin + qi) + hit;
    a.tokens[row * a.samples + s] = i;
    if (a.logprobs) {
      const float y = r.vals[4 * qi + hit];
      const float l = kLogits ? y - r.ymax : __logf(y);
      a.logprobs[row * a.samples + s] =
          a.logprob_mode == kRaw ? (kLogits ? y : l) - raw_norm : l - static_cast<float>(log(grand));
    }
  }
}

template <typename scalar_t, bool kLogits, bool kPlan>
__global__ void __launch_bounds__(kThreads) sample_kernel(Args<scalar_t> a) {
  extern __shared__ __align__(16) unsigned char smem[];
  Shared& sh = *reinterpret_cast<Shared*>(smem);
  cg::cluster_group cluster = cg::this_cluster();
  const int64_t cs = cluster.num_blocks();
  const int64_t row = blockIdx.x / cs;
  const int64_t rank = cluster.block_rank();
  const RowControls rc = row_controls(a.controls, row);
  const int64_t quads = (a.v + 3) / 4;
  const int64_t share = share_quads(a.v, cs);
  // No staging: the sample kernel's shared memory holds resident rows.
  Row<kLogits, RowOf<kPlan, scalar_t>> r{make_row<kPlan>(a.plan, a.x, row, a.v, 0, 0, nullptr, 0, 0), a.v,
                                         min(quads, rank * share), min(quads, (rank + 1) * share),
                                         rc.inv_temperature, 0.0f, a.mass_bits, rc.top_p_on(), false,
                                         reinterpret_cast<float*>(smem + kValsOffset)};
  const bool filter = a.filtered != nullptr;
  const bool want_lse = a.logprobs != nullptr;
  scalar_t* out = filter ? a.filtered + row * a.v : nullptr;
  auto finish_invalid = [&] {
    if (filter) {
      r.each([&](int64_t i, float) { out[i] = static_cast<scalar_t>(NAN); });
    } else if (rank == 0) {
      for (int64_t s = threadIdx.x; s < a.samples; s += kThreads) {
        a.tokens[row * a.samples + s] = 0;
        if (a.logprobs) a.logprobs[row * a.samples + s] = NAN;
      }
    }
  };
  if (a.only) wait_for_previous_grid();  // launched behind the plain kernel, which wrote `only`
  let_next_grid_start();  // after the wait, as the plain kernel's: top-n's kernels wait for this one's end
  if (a.only && !a.only[row]) return;  // the plain kernel's row (the same in every CTA of the row)
  if (!rc.valid) return finish_invalid();

  // 1. stats
  const bool thresholds = rc.top_k_on(a.v) || rc.top_p_on();
  const bool need_stats = filter || rc.greedy || thresholds || rc.min_p_on() || a.resident;
  Partial stats = kEmpty;
  if (need_stats) {
    Partial mine = kEmpty;
    const bool keep = a.resident && !rc.greedy;
    r.each(
        [&](int64_t i, float y) {
          mine.bad |= bad_value<kLogits>(y);
          if (y > mine.best) mine.best = y, mine.index = i;
          if (want_lse) add_lse(mine, kLogits ? y : (y > 0.0f ? __logf(y) : -INFINITY));
        },
        keep);
    r.resident = keep;
    stats = cluster_partial(sh, mine, cluster);
    if (stats.bad || !(kLogits ? stats.best > -INFINITY : stats.best > 0.0f)) return finish_invalid();
    r.ymax = stats.best;
    if (rc.greedy) {
      if (filter) {
        r.each([&](int64_t i, float y) { out[i] = static_cast<scalar_t>(i == stats.index ? y : -INFINITY); });
      } else if (rank == 0) {
        for (int64_t s = threadIdx.x; s < a.samples; s += kThreads) {
          a.tokens[row * a.samples + s] = stats.index;
          if (a.logprobs) {
            a.logprobs[row * a.samples + s] = a.logprob_mode == kRaw ? stats.best - (stats.m + __logf(stats.s)) : 0.0f;
          }
        }
      }
      return;
    }
  }

  // 2. thresholds
  uint32_t thr = 0;
  if (thresholds) {
    uint64_t total = 0;
    const uint32_t floor = r.resident ? threshold_floor(sh, r, rc, total, cluster) : 0u;
    histogram_pass(sh, r, 1, 0, floor, sh.l1_count, sh.l1_mass, cluster);
    CountMass ge{0, 0};
    uint32_t tk = 0;
    if (rc.top_k_on(a.v)) tk = select(sh, r, false, static_cast<uint64_t>(rc.top_k), 0u, ge, cluster);
    thr = tk;
    if (rc.top_p_on()) {
      const uint64_t m = rc.top_k_on(a.v) ? ge.mass : r.resident ? total : histogram_mass(sh);
      CountMass ge_p{0, 0};
      thr = max(tk, select(sh, r, true, top_p_target(rc.top_p, m), tk, ge_p, cluster));
    }
  }
  const float log_min_p = log_min_p_of(rc.min_p);
  auto keeps = [&](float y) {
    const bool positive = kLogits ? y > -INFINITY : y > 0.0f;
    return positive && order_key(y) >= thr && (!rc.min_p_on() || min_p_keeps<kLogits>(y, r.ymax, rc.min_p, log_min_p));
  };

  // 3. the write (filter_logits) or the race
  if (filter) {
    r.each([&](int64_t i, float y) { out[i] = static_cast<scalar_t>(keeps(y) ? y : -INFINITY); });
    return;
  }
  const bool own_seed = a.controls.seeds != nullptr;
  const PhiloxSeed gen = philox_seed(a.philox);
  const uint64_t key = own_seed ? static_cast<uint64_t>(a.controls.seeds[row]) : gen.seed;
  const uint64_t offset = own_seed ? 0 : gen.offset;
  const int64_t tag = own_seed ? 0 : row;
  if (r.resident) {
    const float raw_norm = stats.m + __logf(stats.s);
    return draw_inverse_cdf(sh, r, keeps, a, row, rank, raw_norm, key, offset, subsequence(tag, quads, 0),
                            stats.index, cluster);
  }
  for (int64_t s = 0; s < a.samples; ++s) {
    Partial mine = kEmpty;
    int64_t quad = -1;
    uint4 words{};
    r.each([&](int64_t i, float y) {
      if (!need_stats) mine.bad |= bad_value<kLogits>(y);
      if (!keeps(y)) return;
      const float l = kLogits ? y : __logf(y);
      if (want_lse) add_lse(mine, l);
      if (mine.index != INT64_MAX && l + kMaxGumbel < mine.best) return;  // cannot win, whatever its bits
      if (i / 4 != quad) quad = i / 4, words = philox_block_at(key, offset / 4 + s, subsequence(tag, quads, i));
      const uint32_t w = (i & 3) == 0 ? words.x : (i & 3) == 1 ? words.y : (i & 3) == 2 ? words.z : words.w;
      // E >= u = (w + 1/2) 2^-32, so the key l - log E <= l - log u: no log unless that can win.
      if (mine.index != INT64_MAX && __fmaf_rn(static_cast<float>(w), 0x1.0p-32f, 0x1.0p-33f) >= __expf(l - mine.best) * 1.0001f) {
        return;
      }
      const float k = race_key(l, w);
      if (k > mine.best || (k == mine.best && i < mine.index)) mine.best = k, mine.index = i;
    });
    const Partial race = cluster_partial(sh, mine, cluster);
    if (race.bad || race.index == INT64_MAX) return finish_invalid();
    if (rank == 0 && threadIdx.x == 0) {
      a.tokens[row * a.samples + s] = race.index;
      if (a.logprobs) {
        const float y = item_value(r.xr, a.v, race.index) * (kLogits ? r.inv_t : 1.0f);
        const float l = kLogits ? y : __logf(y);
        const float norm = a.logprob_mode == kRaw && need_stats ? stats.m + __logf(stats.s) : race.m + __logf(race.s);
        a.logprobs[row * a.samples + s] = l - norm;
      }
    }
  }
}

template <typename scalar_t, bool kLogits, bool kPlan = false>
void launch(const Call& call, Args<scalar_t> a, int cluster, bool resident) {  // deferred rows: behind the plain kernel
  auto kernel = sample_kernel<scalar_t, kLogits, kPlan>;
  const size_t smem = resident ? kValsOffset + kResident * sizeof(float) : sizeof(Shared);
  allow_shared_memory<sample_kernel<scalar_t, kLogits, kPlan>>(kValsOffset + kResident * sizeof(float));
  launch_clusters(a.only != nullptr, kernel, call.rows, cluster, kThreads, smem, a);
}

template <typename scalar_t>
void run(const Call& call, at::PhiloxCudaState philox, int64_t* tokens, float* logprobs, scalar_t* filtered,
         const uint8_t* only = nullptr) {
  const Route r = sample_route(call, device_sms());
  Args<scalar_t> a{call.x.const_data_ptr<scalar_t>(), call.v, call.samples, call.controls, philox, call.logprobs,
                   mass_bits(call.v), tokens, logprobs, filtered, r.resident, only,
                   PlanArg{call.plan, call.plan_stride, call.plan_cap}};
  if (call.plan) {  // penalty plans are of logits
    launch<scalar_t, true, true>(call, a, r.cluster, r.resident);
  } else if (call.logits) {
    launch<scalar_t, true>(call, a, r.cluster, r.resident);
  } else {
    launch<scalar_t, false>(call, a, r.cluster, r.resident);
  }
}

std::tuple<at::Tensor, at::Tensor> sample_llm_cuda(
    const at::Tensor& input, int64_t num_samples, bool logits, const std::optional<at::Tensor>& temperature,
    double temperature_value, const std::optional<at::Tensor>& top_k, int64_t top_k_value,
    const std::optional<at::Tensor>& top_p, double top_p_value, const std::optional<at::Tensor>& min_p,
    double min_p_value, const std::optional<at::Tensor>& seeds, int64_t logprobs,
    std::optional<at::Generator> generator, const std::optional<at::Tensor>& overrides) {
  const c10::cuda::CUDAGuard guard(input.device());
  const char* op = logits ? "sample_logits" : "sample_probs";
  Call call = prepare(op, input, num_samples, logits, temperature, temperature_value, top_k, top_k_value, top_p,
                      top_p_value, min_p, min_p_value, seeds, logprobs);
  if (overrides) {  // the kernels read each row through the plan
    TORCH_CHECK(logits, op, ": overrides apply to logits only");
    call.plan_cap = check_plan(op, *overrides, call.rows, call.v, input);
    call.keep.push_back(overrides->contiguous());
    call.plan = call.keep.back().const_data_ptr<int32_t>();
    call.plan_stride = overrides->size(1);
  }
  // Both in the output shape, whose rows of samples are the kernels' layout.
  at::Tensor tokens = at::empty(call.out_shape, input.options().dtype(at::kLong));
  at::Tensor lp = at::empty(logprobs ? at::IntArrayRef(call.out_shape) : at::IntArrayRef{0},
                            input.options().dtype(at::kFloat));
  if (call.rows > 0) {
    const at::PhiloxCudaState philox =
        seeds ? at::PhiloxCudaState(0, 0) : cuda_philox_state(generator, input.device().index(), 4 * num_samples);
    draw_llm(call, philox, tokens.mutable_data_ptr<int64_t>(), logprobs ? lp.mutable_data_ptr<float>() : nullptr);
  }
  return {tokens, lp};
}

at::Tensor filter_logits_cuda(const at::Tensor& logits, const std::optional<at::Tensor>& temperature,
                              double temperature_value, const std::optional<at::Tensor>& top_k, int64_t top_k_value,
                              const std::optional<at::Tensor>& top_p, double top_p_value,
                              const std::optional<at::Tensor>& min_p, double min_p_value) {
  const c10::cuda::CUDAGuard guard(logits.device());
  const Call call = prepare("filter_logits", logits, 1, true, temperature, temperature_value, top_k, top_k_value,
                            top_p, top_p_value, min_p, min_p_value, std::nullopt, kNoLogprobs);
  at::Tensor out = at::empty({call.rows, call.v}, logits.options());
  if (call.rows > 0) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, logits.scalar_type(), "filter_logits_cuda", [&] {
      run<scalar_t>(call, at::PhiloxCudaState(0, 0), nullptr, nullptr, out.mutable_data_ptr<scalar_t>());
    });
  }
  return out.view(logits.sizes());
}

}  // namespace

void draw_llm(const Call& call, at::PhiloxCudaState philox, int64_t* t, float* l, const TopNArg* top) {
  const Route r = route(call, device_sms());
  if (r.kernel == Kernel::kTopP) {  // top-p alone, a CTA a row (top_p_cuda.cu)
    launch_top_p(call, r, philox, t, l);
  } else if (r.kernel != Kernel::kSample) {  // one read of each row (plain_cuda.cu); with per-row tensors, some rows deferred
    at::Tensor deferred;  // only for per-row controls
    if (r.defers) deferred = at::empty({call.rows}, call.x.options().dtype(at::kByte));
    uint8_t* d = deferred.defined() ? deferred.mutable_data_ptr<uint8_t>() : nullptr;
    launch_plain(call, r, philox, t, l, d, top);
    if (d) {
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "sample_llm_cuda",
                                      [&] { run<scalar_t>(call, philox, t, l, nullptr, d); });
    }
  } else {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "sample_llm_cuda",
                                    [&] { run<scalar_t>(call, philox, t, l, nullptr); });
  }
}

TORCH_LIBRARY_IMPL(wrs, CUDA, m) {
  m.impl("sample_llm", &sample_llm_cuda);
  m.impl("filter_logits", &filter_logits_cuda);
}

}  // namespace wrs::llm
