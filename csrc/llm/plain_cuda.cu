// The plain LLM sampler on CUDA (plain_cuda.cuh): scalar controls, every item kept or a
// scalar min-p and top-k (top-p over the top-k set), each row read once, then only the
// segments that can hold kept items read again.
// A row is served by a cluster of CTAs (dispatch_cuda.h's size for rows that are not
// resident), each over whole 128-item segments of its share:
//   1. stream: a warp per segment, several segments in flight; per segment its largest
//      value m_j and the float64 sum s_j of its weights (exp(y - m_j) for logits, y for
//      probabilities), and whether any value is bad;
//   2. the row's maximum M; under top-k (a kernel of its own), the threshold: the k-th
//      largest segment maximum of the row is a floor under it (the maxima are k distinct
//      items), each CTA lists its items at or above the floor from its segments, and every
//      CTA runs the sample kernel's radix select over all the cluster's lists (over the row,
//      should a list overflow), then top-p by mass over the top-k set;
//   3. the segments whose maximum is kept re-summed over their kept items (the others hold
//      none); per segment S_j = s_j exp(m_j - M), scanned over the CTA and the cluster in
//      row order;
//   4. per sample, the 53-bit uniform point of the resident path; the segment holding it is
//      re-read by one warp and walked.
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "llm/dispatch_cuda.h"
#include "llm/plain_cuda.cuh"
#include "llm/segments_cuda.cuh"
#include "llm/select_cuda.cuh"

#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <cooperative_groups.h>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <cfloat>

namespace wrs::llm {
namespace {

namespace cg = cooperative_groups;

constexpr int kPlainThreads = 512;
constexpr int kPlainWarps = kPlainThreads / 32;
constexpr int kSegsPerThread = 4;  // a thread's segments in the scan (blocked)
constexpr int kMaxSegments = kPlainThreads * kSegsPerThread;
constexpr int64_t kMaxItems = kMaxSegments * kSegment;  // a CTA's share: 262,144 items
constexpr int kSegsInFlight = 4;  // segments a warp loads before it sums any
constexpr int kCandidates = 2048;  // items a CTA's top-k list holds; past it, selects read the row
constexpr int64_t kPlainMaxTopK = 1024;  // larger k: longer lists; the sample kernel takes them

struct PlainShared {
  float seg_max[kMaxSegments];
  double seg_sum[kMaxSegments];
  float cta_max;
  int bad;
  double cta_total;
  double cta_all;  // filtered, with raw log-probabilities: the whole share's weight
  int claim;
  double claim_lo;
  int64_t pick;  // top-p by rejection: the CTA's drawn item (-1: another CTA's), its value
  float pick_y;
  uint64_t cta_mass, cta_above;
  union {
    typename cub::BlockReduce<uint64_t, kPlainThreads>::TempStorage mass_reduce;
    typename cub::BlockReduce<float, kPlainThreads>::TempStorage max_reduce;
    typename cub::BlockScan<double, kPlainThreads>::TempStorage scan;
    typename cub::BlockReduce<double, kPlainThreads>::TempStorage sum_reduce;
  };
};

// The top-k kernel's shared memory, after PlainShared: the select's histogram, this CTA's
// list of items at or above the floor, and the cluster's lists gathered where they are short.
constexpr int kRanked = kPlainThreads;  // lists this short are ranked by counting, an item a thread
struct TopKShared {
  CtaSelect select;
  float candidates[kCandidates];
  int listed;
  uint32_t keys[kRanked];
  uint64_t masses[kRanked];
  uint32_t thr_k, thr_p;
  unsigned long long mass_k;
};
constexpr size_t kTopKOffset = (sizeof(PlainShared) + 15) / 16 * 16;

// The weights of a lane's four items relative to the segment's maximum m.
template <bool kLogits>
__device__ inline void weights_of(const float (&y)[4], int present, float m, float (&w)[4]) {
#pragma unroll
  for (int h = 0; h < 4; ++h) {
    const bool in = h < present && (kLogits ? m > -INFINITY : true);
    w[h] = in ? (kLogits ? __expf(y[h] - m) : y[h]) : 0.0f;
  }
}

struct MaxOf {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Warp 0's walk of segment `seg` (claimed, starting at sh.claim_lo) to the item at `point`
// over the kept weights: the lane that holds it returns true, with the item and its value.
template <typename scalar_t, bool kLogits, typename Kept>
__device__ inline bool walk_to_point(const PlainShared& sh, int seg, double point, const scalar_t* xr, int64_t v,
                                     int64_t q_begin, int64_t q_end, bool aligned, float scale, float row_max,
                                     Kept kept, int64_t& item, float& value) {
  const int lane = threadIdx.x % 32;
  const int64_t q = q_begin + static_cast<int64_t>(seg) * 32 + lane;
  float y[4], w[4];
  const int present = q < q_end ? load_four(xr, v, q, aligned, scale, y) : 0;
  const float m = sh.seg_max[seg];
  weights_of<kLogits>(y, present, m, w);
#pragma unroll
  for (int h = 0; h < 4; ++h) w[h] = kept(y[h]) ? w[h] : 0.0f;
  // The point within the segment in the segment's own units (s_j, not S_j).
  const double in_seg = (point - sh.claim_lo) / (kLogits ? exp(static_cast<double>(m) - row_max) : 1.0);
  int h = 0;
  if (lane != walk_segment(w, in_seg, h)) return false;
  item = 4 * q + h, value = y[h];
  return true;
}

// fn(seg, y, present) for each of the CTA's segments that `wanted` picks, a warp a segment,
// each warp loading kSegsInFlight segments before it uses any (one load in flight a warp
// leaves most of the bandwidth unused). `wanted` must be the same for the whole warp, so fn
// may use warp collectives.
template <typename scalar_t, typename Wanted, typename Fn>
__device__ inline void for_segments(const scalar_t* xr, int64_t v, int64_t q_begin, int64_t q_end, int nseg,
                                    bool aligned, float scale, Wanted wanted, Fn fn) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int seg0 = warp; seg0 < nseg; seg0 += kPlainWarps * kSegsInFlight) {
    float y[kSegsInFlight][4];
    int present[kSegsInFlight];
#pragma unroll
    for (int u = 0; u < kSegsInFlight; ++u) {
      const int seg = seg0 + u * kPlainWarps;
      const int64_t q = q_begin + static_cast<int64_t>(seg) * 32 + lane;
      present[u] = seg < nseg && q < q_end && wanted(seg) ? load_four(xr, v, q, aligned, scale, y[u]) : 0;
    }
#pragma unroll
    for (int u = 0; u < kSegsInFlight; ++u) {
      const int seg = seg0 + u * kPlainWarps;
      if (seg < nseg && wanted(seg)) fn(seg, y[u], present[u]);
    }
  }
}

static_assert(kPlainThreads == kThreads, "the select's scans assume the plain kernel's block");

// The top-k threshold key of a row (then top-p's over the top-k set, where on): the lowest
// kept key, 0 keeping every item; the same in every CTA of the cluster, which each select
// over the whole row's lists. Phase 2 of the file comment; not inlined, so its registers do
// not crowd the stream's.
template <typename scalar_t, bool kLogits>
__device__ __noinline__ uint32_t top_k_threshold(PlainShared& sh, TopKShared& ts, cg::cluster_group& cluster,
                                                 const scalar_t* xr, int64_t v, int64_t share, bool aligned,
                                                 float scale, float row_max, const RowControls& rc) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned cs = cluster.num_blocks(), rank = cluster.block_rank();
  const int64_t quads = (v + 3) / 4;
  auto first_quad = [&](unsigned r) { return min(quads, static_cast<int64_t>(r) * share); };
  auto segments = [&](unsigned r) { return static_cast<int>((first_quad(r + 1) - first_quad(r) + 31) / 32); };
  const int bits = mass_bits(v);
  const bool need_mass = rc.top_p_on();
  auto positive = [](float y) { return kLogits ? y > -INFINITY : y > 0.0f; };
  auto mass = [&](float y) { return need_mass ? quantize_mass(mass_of<kLogits>(y, row_max), bits) : uint64_t{0}; };
  const uint64_t k = static_cast<uint64_t>(rc.top_k);
  CountMass ge{0, 0};
  // The floor: the k-th largest segment maximum of the row (every CTA's, complete since the
  // cluster step that found the row's maximum).
  const uint32_t floor = cta_select(
      ts.select,
      [&](auto&& f) {
        for (unsigned r = 0; r < cs; ++r) {
          const float* seg_max = cluster.map_shared_rank(sh.seg_max, r);
          for (int j = threadIdx.x; j < segments(r); j += kPlainThreads) {
            if (positive(seg_max[j])) f(order_key(seg_max[j]), uint64_t{0});
          }
        }
      },
      false, k, 0u, ge);
  // This CTA's list: the items at or above the floor, from the segments whose maximum is.
  if (threadIdx.x == 0) ts.listed = 0;
  __syncthreads();
  const int64_t q_begin = first_quad(rank), q_end = first_quad(rank + 1);
  for (int seg = warp; seg < segments(rank); seg += kPlainWarps) {
    const float m = sh.seg_max[seg];
    if (!positive(m) || order_key(m) < floor) continue;  // the same for the whole warp
    const int64_t q = q_begin + static_cast<int64_t>(seg) * 32 + lane;
    float y[4];
    const int present = q < q_end ? load_four(xr, v, q, aligned, scale, y) : 0;
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      const bool take = h < present && positive(y[h]) && order_key(y[h]) >= floor;
      const unsigned mask = __ballot_sync(0xffffffffu, take);
      int base = 0;
      if (lane == 0 && mask) base = atomicAdd(&ts.listed, __popc(mask));
      base = __shfl_sync(0xffffffffu, base, 0);
      const int at = base + __popc(mask & ((1u << lane) - 1u));
      if (take && at < kCandidates) ts.candidates[at] = y[h];
    }
  }
  cluster.sync();  // every CTA's list complete
  bool listed = true;
  int total = 0;
  for (unsigned r = 0; r < cs; ++r) {
    const int n = cluster.map_shared_rank(&ts, r)->listed;
    listed &= n <= kCandidates;
    total += n;
  }
  if (threadIdx.x == 0) ts.thr_k = 0, ts.thr_p = 0, ts.mass_k = 0;
  if (listed && total <= kRanked) {
    // Short lists (the usual case): thread t ranks item t of the lists against all of them.
    // The top-k threshold is the key with fewer than k items above it and k at or above;
    // top-p's, the key with less than the target's mass above it and the target at or above.
    const bool mine = static_cast<int>(threadIdx.x) < total;
    uint32_t key = 0;
    uint64_t q = 0;
    if (mine) {
      int i = threadIdx.x;
      unsigned r = 0;
      for (; i >= cluster.map_shared_rank(&ts, r)->listed; ++r) i -= cluster.map_shared_rank(&ts, r)->listed;
      const float y = cluster.map_shared_rank(&ts, r)->candidates[i];
      key = order_key(y), q = mass(y);
      ts.keys[threadIdx.x] = key, ts.masses[threadIdx.x] = q;
    }
    __syncthreads();
    if (mine) {
      uint64_t above = 0, at_or_above = 0;
      for (int j = 0; j < total; ++j) above += ts.keys[j] > key, at_or_above += ts.keys[j] >= key;
      if (above < k && k <= at_or_above) ts.thr_k = key;  // every writer writes the same key
    }
    __syncthreads();
    const uint32_t tk = ts.thr_k;
    if (!need_mass) return tk;
    if (mine && key >= tk) atomicAdd(&ts.mass_k, static_cast<unsigned long long>(q));
    __syncthreads();
    const uint64_t target = top_p_target(rc.top_p, ts.mass_k);
    if (mine && key >= tk) {
      uint64_t above = 0, at_or_above = 0;
      for (int j = 0; j < total; ++j) {
        const uint32_t kj = ts.keys[j];
        if (kj >= tk) above += kj > key ? ts.masses[j] : 0, at_or_above += kj >= key ? ts.masses[j] : 0;
      }
      if (above < target && target <= at_or_above) ts.thr_p = key;
    }
    __syncthreads();
    return max(tk, ts.thr_p);
  }
  auto each = [&](auto&& f) {
    if (listed) {
      for (unsigned r = 0; r < cs; ++r) {
        const TopKShared* o = cluster.map_shared_rank(&ts, r);
        const int n = o->listed;
        for (int i = threadIdx.x; i < n; i += kPlainThreads) f(order_key(o->candidates[i]), mass(o->candidates[i]));
      }
      return;
    }
    for (int64_t q = threadIdx.x; q < quads; q += kPlainThreads) {  // rare: ties past a list; the whole row
      float y[4];
      const int present = load_four(xr, v, q, aligned, scale, y);
      for (int h = 0; h < present; ++h) {
        if (positive(y[h]) && order_key(y[h]) >= floor) f(order_key(y[h]), mass(y[h]));
      }
    }
  };
  const uint32_t tk = cta_select(ts.select, each, false, k, floor, ge);
  if (!need_mass) return tk;
  // The top-k set's mass (all listed items' where fewer than k have weight: tk = 0).
  each([&](uint32_t key, uint64_t q) {
    if (key >= tk && q) atomicAdd(&ts.mass_k, static_cast<unsigned long long>(q));
  });
  __syncthreads();
  CountMass ge_p{0, 0};
  return max(tk, cta_select(ts.select, each, true, top_p_target(rc.top_p, ts.mass_k), tk, ge_p));
}

// Top-p alone, one sample a row (the top-k kernel variant): rejection. Draw from the kept
// weights (min-p's, over the items above the pivot); the draw t is in the top-p set exactly
// where the items with key above t's hold less than the target's integer mass (the sample
// kernel's set: ceil(p M) of the row's mass M, ties at the crossing value kept). If it is not,
// none of the set lies at or below t: t's key becomes the pivot and the draw is repeated over
// the items above it. Accepted draws follow the kept weights over the set exactly. Each round
// is one pass over the segments whose maximum is above the pivot (the first over the row, for
// M), which also sums the next round's weights. Round r > 0 takes its uniform point from
// subsequence r of the row's range. All CTAs of the cluster take the same decisions.
template <typename scalar_t, bool kLogits>
__device__ __noinline__ void draw_top_p_by_rejection(PlainShared& sh, cg::cluster_group& cluster, const scalar_t* xr,
                                                     int64_t v, int64_t q_begin, int64_t q_end, int nseg, bool aligned,
                                                     float scale, float row_max, const RowControls& rc,
                                                     double (&seg_weight)[kSegsPerThread],
                                                     double (&seg_before)[kSegsPerThread], double cta_before,
                                                     double cta_total, double grand, uint64_t key, uint64_t offset,
                                                     int64_t tag, int64_t* token, float* logprob, double log_norm) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned cs = cluster.num_blocks();
  const int64_t quads = (v + 3) / 4;
  const int bits = mass_bits(v);
  const bool min_p = rc.min_p_on();
  const float log_min_p = log_min_p_of(rc.min_p);
  auto positive = [](float y) { return kLogits ? y > -INFINITY : y > 0.0f; };
  uint32_t pivot = 0;
  bool pivoted = false;
  auto kept = [&](float y) {
    return (!pivoted || order_key(y) > pivot) && (!min_p || min_p_keeps<kLogits>(y, row_max, rc.min_p, log_min_p));
  };
  auto segment_weight = [&](int j) -> double {  // S_j from s_j
    if (j >= nseg) return 0.0;
    const float m = sh.seg_max[j];
    return !kLogits ? sh.seg_sum[j] : m > -INFINITY ? sh.seg_sum[j] * exp(static_cast<double>(m) - row_max) : 0.0;
  };
  uint64_t target = 0;
  for (int64_t round = 0;; ++round) {
    if (round > 0) {  // the kept weights above the pivot (summed by the last check): scan, the cluster's totals
#pragma unroll
      for (int k = 0; k < kSegsPerThread; ++k) seg_weight[k] = segment_weight(threadIdx.x * kSegsPerThread + k);
      cub::BlockScan<double, kPlainThreads>(sh.scan).ExclusiveSum(seg_weight, seg_before, cta_total);
      if (threadIdx.x == 0) sh.cta_total = cta_total;
      cluster.sync();
      cta_before = 0.0, grand = 0.0;
      for (unsigned r = 0; r < cs; ++r) {
        const double t = cluster.map_shared_rank(&sh, r)->cta_total;
        if (r < cluster.block_rank()) cta_before += t;
        grand += t;
      }
    }
    // The draw: the CTA whose range holds the point finds the item.
    const uint4 w4 = philox_block_at(key, offset / 4, subsequence(tag, quads, 4 * (round % quads)));
    const double point = min(uniform53(w4) * grand, nextafter(grand, 0.0));
    if (threadIdx.x == 0) sh.pick = -1;
    __syncthreads();
    if (point >= cta_before && point < cta_before + cta_total) {  // the same in a CTA
      const int seg = claim_segment(seg_weight, seg_before, cta_before, point, &sh.claim, &sh.claim_lo);
      int64_t item;
      float y;
      if (warp == 0 && walk_to_point<scalar_t, kLogits>(sh, seg, point, xr, v, q_begin, q_end, aligned, scale, row_max,
                                                        kept, item, y)) {
        sh.pick = item, sh.pick_y = y;
      }
    }
    cluster.sync();  // every CTA's pick written (and, past round 0, every cta_total read)
    int64_t t = -1;
    float yt = 0.0f;
    for (unsigned r = 0; r < cs; ++r) {
      const PlainShared* o = cluster.map_shared_rank(&sh, r);
      if (o->pick >= 0) t = o->pick, yt = o->pick_y;
    }
    if (t < 0) {  // no CTA drew (float rounding of the ranges; not expected): token 0, as an invalid row
      if (cluster.block_rank() == 0 && threadIdx.x == 0) {
        *token = 0;
        if (logprob) *logprob = NAN;
      }
      cluster.sync();  // every CTA done reading picks
      return;
    }
    // The check: the integer mass above the draw (and, in round 0, the row's). The same pass
    // sums the kept weights above the draw per segment: the next round's, if it is rejected.
    const uint32_t kt = order_key(yt);
    auto above_kt = [&](float y) { return order_key(y) > kt && (!min_p || min_p_keeps<kLogits>(y, row_max, rc.min_p, log_min_p)); };
    auto wanted = [&](int seg) {
      const float m = sh.seg_max[seg];
      return positive(m) && (round == 0 || order_key(m) > kt);
    };
    uint64_t all = 0, above = 0;
    for_segments(xr, v, q_begin, q_end, nseg, aligned, scale, wanted,
                 [&](int seg, const float (&y)[4], int present) {
                   float w[4];
                   weights_of<kLogits>(y, present, sh.seg_max[seg], w);
#pragma unroll
                   for (int h = 0; h < 4; ++h) {
                     w[h] = above_kt(y[h]) ? w[h] : 0.0f;
                     if (h >= present || !positive(y[h])) continue;
                     const uint64_t mass = quantize_mass(mass_of<kLogits>(y[h], row_max), bits);
                     all += mass;
                     above += order_key(y[h]) > kt ? mass : 0;
                   }
                   const double sum = warp_sum(lane_sum(w));
                   if (lane == 0) sh.seg_sum[seg] = sum;
                 });
    for (int j = threadIdx.x; j < nseg; j += kPlainThreads) {
      if (!wanted(j)) sh.seg_sum[j] = 0.0;  // no item above the draw
    }
    const uint64_t cta_all = cub::BlockReduce<uint64_t, kPlainThreads>(sh.mass_reduce).Sum(all);
    __syncthreads();
    const uint64_t cta_above = cub::BlockReduce<uint64_t, kPlainThreads>(sh.mass_reduce).Sum(above);
    if (threadIdx.x == 0) sh.cta_mass = cta_all, sh.cta_above = cta_above;
    cluster.sync();
    uint64_t row_mass = 0, row_above = 0;
    for (unsigned r = 0; r < cs; ++r) {
      const PlainShared* o = cluster.map_shared_rank(&sh, r);
      row_mass += o->cta_mass, row_above += o->cta_above;
    }
    cluster.sync();  // every CTA done reading before the next round rewrites
    if (round == 0) target = top_p_target(rc.top_p, row_mass);
    if (row_above < target) {  // in the top-p set
      if (sh.pick >= 0 && threadIdx.x == 0) {
        *token = t;
        if (logprob) *logprob = static_cast<float>((kLogits ? yt : log(yt)) - log_norm);
      }
      return;
    }
    pivot = kt, pivoted = true;
  }
}

template <typename scalar_t, bool kLogits, bool kTopK>
__global__ void __launch_bounds__(kPlainThreads, 2)  // two CTAs an SM: more loads in flight
    plain_kernel(const scalar_t* x, int64_t v, int64_t samples, Controls controls, at::PhiloxCudaState philox,
                 int64_t logprob_mode, int64_t* tokens, float* logprobs, uint8_t* deferred) {
  extern __shared__ __align__(16) unsigned char smem[];  // top-k: over the 48 KB of static shared memory
  PlainShared& sh = *reinterpret_cast<PlainShared*>(smem);
  cg::cluster_group cluster = cg::this_cluster();
  const int64_t cs = cluster.num_blocks();
  const int64_t row = blockIdx.x / cs;
  const int64_t rank = cluster.block_rank();
  const RowControls rc = row_controls(controls, row);
  const int64_t quads = (v + 3) / 4;
  const int64_t share = share_quads(v, cs);
  const int64_t q_begin = min(quads, rank * share), q_end = min(quads, (rank + 1) * share);
  const int nseg = static_cast<int>((q_end - q_begin + 31) / 32);
  const scalar_t* xr = x + row * v;
  const bool aligned = four_aligned(xr);
  const float scale = kLogits ? rc.inv_temperature : 1.0f;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Top-p alone by rejection: one sample, and no log-probabilities under the top-p set (whose
  // total rejection does not find).
  const bool rejection_fits = samples == 1 && !(logprobs != nullptr && logprob_mode == kProcessed);
  if (deferred) {  // per-row controls: greedy rows, top-p alone where rejection does not fit, and k over 1,024 go to the sample kernel
    const bool serve = !rc.valid || (!rc.greedy && (rc.top_k_on(v) ? kTopK && rc.top_k <= kPlainMaxTopK
                                                                     : !rc.top_p_on() || (kTopK && rejection_fits)));
    if (rank == 0 && threadIdx.x == 0) deferred[row] = !serve;
    if (!serve) return;  // the same in every CTA of the row
  }
  const bool min_p = rc.min_p_on();
  const bool top_k = kTopK && rc.top_k_on(v);
  const bool top_p_alone = kTopK && !top_k && rc.top_p_on();  // served by rejection (rejection_fits)
  const bool filtering = min_p || top_k;
  const bool raw_all = filtering && logprobs != nullptr && logprob_mode == kRaw;

  // 1. stream
  int bad = 0;
  for_segments(xr, v, q_begin, q_end, nseg, aligned, scale, [](int) { return true; },
               [&](int seg, const float (&y)[4], int present) {
                 float m = -INFINITY;
#pragma unroll
                 for (int h = 0; h < 4; ++h) {
                   if (h < present) {
                     bad |= bad_value<kLogits>(y[h]);
                     m = fmaxf(m, y[h]);
                   }
                 }
                 // probabilities: only thresholds need the maximum
                 m = kLogits || min_p || top_k || top_p_alone ? warp_max(m) : 0.0f;
                 float w[4];
                 weights_of<kLogits>(y, present, m, w);
                 const double s = warp_sum(lane_sum(w));
                 if (lane == 0) sh.seg_max[seg] = m, sh.seg_sum[seg] = s;
               });
  __syncthreads();

  // 2. the row's maximum and the threshold; 3. the re-sums, S_j and their scan
  float mine = -INFINITY;
  for (int j = threadIdx.x; j < nseg; j += kPlainThreads) mine = fmaxf(mine, sh.seg_max[j]);
  const int any_bad = __syncthreads_or(bad);
  const float block_max = cub::BlockReduce<float, kPlainThreads>(sh.max_reduce).Reduce(mine, MaxOf());
  if (threadIdx.x == 0) sh.cta_max = block_max, sh.bad = any_bad;
  cluster.sync();
  float row_max = -INFINITY;
  int row_bad = 0;
  for (unsigned r = 0; r < cluster.num_blocks(); ++r) {
    const PlainShared* other = cluster.map_shared_rank(&sh, r);
    row_max = fmaxf(row_max, other->cta_max);
    row_bad |= other->bad;
  }
  auto segment_weight = [&](int j) -> double {  // S_j from s_j
    if (j >= nseg) return 0.0;
    const float m = sh.seg_max[j];
    return !kLogits ? sh.seg_sum[j] : m > -INFINITY ? sh.seg_sum[j] * exp(static_cast<double>(m) - row_max) : 0.0;
  };
  if (raw_all) {
    double all = 0.0;
#pragma unroll
    for (int k = 0; k < kSegsPerThread; ++k) all += segment_weight(threadIdx.x * kSegsPerThread + k);
    const double cta_all = cub::BlockReduce<double, kPlainThreads>(sh.sum_reduce).Sum(all);
    if (threadIdx.x == 0) sh.cta_all = cta_all;
  }
  __syncthreads();  // every s_j read before the re-sums replace them
  const uint32_t thr = top_k ? top_k_threshold<scalar_t, kLogits>(sh, *reinterpret_cast<TopKShared*>(smem + kTopKOffset),
                                                                  cluster, xr, v, share, aligned, scale, row_max, rc)
                             : 0u;
  // Kept: key >= the top-k (top-p) threshold, and y >= log(min_p) + max (logits) or
  // min_p * max. Both are thresholds on y, so a segment holds a kept item exactly where its
  // maximum is kept, and only those are re-read and re-summed.
  const float log_min_p = log_min_p_of(rc.min_p);
  auto kept = [&](float y) {
    return order_key(y) >= thr && (!min_p || min_p_keeps<kLogits>(y, row_max, rc.min_p, log_min_p));
  };
  if (filtering) {
    for (int seg = warp; seg < nseg; seg += kPlainWarps) {
      const float m = sh.seg_max[seg];
      double s = 0.0;
      if (kept(m)) {  // the same for the whole warp
        const int64_t q = q_begin + static_cast<int64_t>(seg) * 32 + lane;
        float y[4], w[4];
        const int present = q < q_end ? load_four(xr, v, q, aligned, scale, y) : 0;
        weights_of<kLogits>(y, present, m, w);
#pragma unroll
        for (int h = 0; h < 4; ++h) w[h] = kept(y[h]) ? w[h] : 0.0f;
        s = warp_sum(lane_sum(w));
      }
      if (lane == 0) sh.seg_sum[seg] = s;
    }
    __syncthreads();
  }
  double seg_weight[kSegsPerThread], seg_before[kSegsPerThread];
#pragma unroll
  for (int k = 0; k < kSegsPerThread; ++k) seg_weight[k] = segment_weight(threadIdx.x * kSegsPerThread + k);
  double cta_total = 0.0;
  cub::BlockScan<double, kPlainThreads>(sh.scan).ExclusiveSum(seg_weight, seg_before, cta_total);
  if (threadIdx.x == 0) sh.cta_total = cta_total;
  cluster.sync();
  double cta_before = 0.0, grand = 0.0, grand_all = 0.0;
  for (unsigned r = 0; r < cluster.num_blocks(); ++r) {
    const double t = cluster.map_shared_rank(&sh, r)->cta_total;
    if (r < rank) cta_before += t;
    grand += t;
    if (raw_all) grand_all += cluster.map_shared_rank(&sh, r)->cta_all;
  }
  cluster.sync();  // no CTA leaves while another reads its shared memory

  // 4. the draws
  if (!rc.valid || row_bad || !(grand > 0.0)) {
    if (rank == 0) {
      for (int64_t s = threadIdx.x; s < samples; s += kPlainThreads) {
        tokens[row * samples + s] = 0;
        if (logprobs) logprobs[row * samples + s] = NAN;
      }
    }
    return;
  }
  // Log-probabilities: under the kept weight, or (raw) under the whole row's.
  const double log_norm = (kLogits ? static_cast<double>(row_max) : 0.0) + log(raw_all ? grand_all : grand);
  const bool own_seed = controls.seeds != nullptr;
  const PhiloxSeed gen = philox_seed(philox);
  const uint64_t key = own_seed ? static_cast<uint64_t>(controls.seeds[row]) : gen.seed;
  const uint64_t offset = own_seed ? 0 : gen.offset;
  const uint64_t sub = subsequence(own_seed ? 0 : row, quads, 0);
  if (top_p_alone) {
    return draw_top_p_by_rejection<scalar_t, kLogits>(sh, cluster, xr, v, q_begin, q_end, nseg, aligned, scale,
                                                      row_max, rc, seg_weight, seg_before, cta_before, cta_total,
                                                      grand, key, offset, own_seed ? 0 : row, tokens + row,
                                                      logprobs ? logprobs + row : nullptr, log_norm);
  }
  const double below_grand = nextafter(grand, 0.0);
  for (int64_t s = 0; s < samples; ++s) {
    const uint4 w4 = philox_block_at(key, offset / 4 + s, sub);
    const double point = min(uniform53(w4) * grand, below_grand);
    if (point < cta_before || point >= cta_before + cta_total) continue;  // another CTA's (the same in a CTA)
    // >= 0: the CTA's range holds the point, so one of its segments does
    const int seg = claim_segment(seg_weight, seg_before, cta_before, point, &sh.claim, &sh.claim_lo);
    int64_t item;
    float y;
    if (warp == 0 && walk_to_point<scalar_t, kLogits>(sh, seg, point, xr, v, q_begin, q_end, aligned, scale, row_max,
                                                      kept, item, y)) {
      tokens[row * samples + s] = item;
      if (logprobs) logprobs[row * samples + s] = static_cast<float>((kLogits ? y : log(y)) - log_norm);
    }
    __syncthreads();
  }
}

template <typename scalar_t, bool kLogits, bool kTopK>
void launch(const Call& call, at::PhiloxCudaState philox, int64_t* tokens, float* logprobs, uint8_t* deferred,
            int cluster) {
  const size_t smem = kTopK ? kTopKOffset + sizeof(TopKShared) : sizeof(PlainShared);
  if (kTopK) allow_shared_memory<plain_kernel<scalar_t, kLogits, kTopK>>(smem);
  launch_clusters(plain_kernel<scalar_t, kLogits, kTopK>, call.rows, cluster, kPlainThreads, smem,
                  call.x.const_data_ptr<scalar_t>(), call.v, call.samples, call.controls, philox, call.logprobs, tokens,
                  logprobs, deferred);
}

}  // namespace

static bool top_k_on(const Call& call) {
  return call.controls.top_k || (call.controls.top_k_value > 0 && call.controls.top_k_value < call.v);
}

// Calls whose rows may need a threshold: the top-k variant (which also draws top-p alone).
static bool thresholds(const Call& call) {
  return top_k_on(call) || call.controls.top_p || call.controls.top_p_value < 1.0f;
}

bool plain_defers(const Call& call) {
  const Controls& c = call.controls;
  return c.temperature || c.top_k || c.top_p || c.min_p;
}

bool plain_serves(const Call& call) {
  const Controls& c = call.controls;
  if (!plain_defers(call)) {  // scalar controls: decided here
    if (!(c.temperature_value > 0.0f && c.temperature_value <= FLT_MAX)) return false;  // greedy or invalid
    if (top_k_on(call) && c.top_k_value > kPlainMaxTopK) return false;
    // Top-p alone by rejection: one sample, no log-probabilities under the top-p set.
    if (!top_k_on(call) && c.top_p_value < 1.0f && (call.samples != 1 || call.logprobs == kProcessed)) return false;
  }
  return share_items(call.v, cluster_size(call.rows, call.v, false)) <= kMaxItems;
}

void launch_plain(const Call& call, at::PhiloxCudaState philox, int64_t* tokens, float* logprobs, uint8_t* deferred) {
  const int cluster = cluster_size(call.rows, call.v, false);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "sample_llm_plain", [&] {
    if (call.logits) {
      thresholds(call) ? launch<scalar_t, true, true>(call, philox, tokens, logprobs, deferred, cluster)
                       : launch<scalar_t, true, false>(call, philox, tokens, logprobs, deferred, cluster);
    } else {
      thresholds(call) ? launch<scalar_t, false, true>(call, philox, tokens, logprobs, deferred, cluster)
                       : launch<scalar_t, false, false>(call, philox, tokens, logprobs, deferred, cluster);
    }
  });
}

}  // namespace wrs::llm
