#pragma once
// The plain kernel's (plain_cuda.cu) sizes, shared memory and warp pieces, and the top-p
// kernel's (top_p_cuda.cu) share of them. Everything here is in an anonymous namespace.
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "llm/dispatch_cuda.h"
#include "llm/segments_cuda.cuh"
#include "llm/select_cuda.cuh"

#include <cooperative_groups.h>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

namespace wrs::llm {
namespace {

namespace cg = cooperative_groups;

constexpr int kPlainThreads = 512;
constexpr int kPlainWarps = kPlainThreads / 32;
constexpr int kSegsPerThread = 4;  // a thread's segments in the scan (blocked)
constexpr int kMaxSegments = kPlainThreads * kSegsPerThread;
constexpr int64_t kMaxItems = kMaxSegments * kSegment;  // a CTA's share: 262,144 items
static_assert(kMaxItems == kPlainMaxItems, "route.h's plain share is the kernel's");
constexpr int kSegsInFlight = 4;  // segments a warp loads before it sums any
static_assert(kSegsInFlight == 4, "the stream reduces a warp's batch with warp_reduce_four");
constexpr int kCandidates = 2048;  // items a CTA's top-k list holds; past it, selects read the row

// Top-p by rejection's float estimates of masses against the integer masses (llm.h) per item:
// __expf is within 2 + 1.2|x| ulp for |x| <= 104 (below, every mass rounds to 0), y - m rounds
// within |y - m| 2^-24, and float sums of 16 weights add 2^-20: together under 3e-5 relative,
// which 2^-12 covers eight times over; the V half-units of the integer rounding are added apart.
constexpr double kMassSlack = 0x1.0p-12;

// Top-p by rejection's integer masses: the row's, and those above each of two proposals (and
// SumPair: the float estimates of the latter).
struct Masses {
  uint64_t all, above[2];
};
struct SumMasses {
  __device__ Masses operator()(const Masses& a, const Masses& b) const {
    return Masses{a.all + b.all, {a.above[0] + b.above[0], a.above[1] + b.above[1]}};
  }
};

struct SumPair {
  __device__ double2 operator()(const double2& a, const double2& b) const { return double2{a.x + b.x, a.y + b.y}; }
};

struct PlainShared {
  float seg_max[kMaxSegments];
  double seg_sum[kMaxSegments];
  float cta_max;
  float cta_low;  // top-k: the lowest positive segment maximum (the floor's range)
  int bad;
  double cta_total;
  double cta_all;  // filtered, with raw log-probabilities: the whole share's weight
  int claim[2];  // the claimed segment of a point and where it starts (top-p: two proposals)
  double claim_lo[2];
  int64_t pick[2];  // top-p by rejection: the CTA's drawn items (-1: another CTA's), their values
  float pick_y[2];
  Masses cta_masses;
  double2 cta_pair;  // top-p by rejection: the CTA's estimated masses above two proposals
  union {
    typename cub::BlockReduce<Masses, kPlainThreads>::TempStorage mass_reduce;
    typename cub::BlockReduce<double2, kPlainThreads>::TempStorage pair_reduce;
    typename cub::BlockReduce<float, kPlainThreads>::TempStorage max_reduce;
    typename cub::BlockReduce<float2, kPlainThreads>::TempStorage range_reduce;
    typename cub::BlockScan<double, kPlainThreads>::TempStorage scan;
    typename cub::BlockReduce<double, kPlainThreads>::TempStorage sum_reduce;
  };
};

// The top-k kernel's shared memory, after PlainShared: the select's histogram, this CTA's
// list of items at or above the floor, and the cluster's lists gathered where they are short.
constexpr int kRanked = kPlainThreads;  // lists this short are ranked by counting, an item a thread
// The floor's histogram (segment_floor): the cluster's segment maxima in kPlainThreads bins of
// their score's range, counts and each bin's lowest key.
struct FloorShared {
  uint32_t count[kPlainThreads];
  uint32_t low[kPlainThreads];
  typename cub::BlockScan<uint32_t, kPlainThreads>::TempStorage scan;
  uint32_t floor;
};
struct TopKShared {
  union {
    CtaSelect select;
    FloorShared floor;
  };
  float candidates[kCandidates];
  int listed;
  uint32_t keys[kRanked];
  uint64_t masses[kRanked];
  uint32_t thr_k, thr_p;
  unsigned long long mass_k;
};
constexpr size_t kTopKOffset = (sizeof(PlainShared) + 15) / 16 * 16;

// Top-n log-probs' part, after TopKShared (plain_kernel's kTopN): the listed items' indices,
// the gathered ones', and the row's top n by composite key (value, then the lower index).
static_assert(kPlainMaxTopN <= kRanked, "the top n are ranked with the short lists");
struct TopNShared {
  int32_t listed_index[kCandidates];
  int32_t index[kRanked];
  int32_t top_index[kPlainMaxTopN];
  float top_y[kPlainMaxTopN];
  int total;  // items gathered in TopKShared::keys
  int done;   // the top n and the draws' ranks come from the lists
};
constexpr size_t kTopNOffset = (kTopKOffset + sizeof(TopKShared) + 15) / 16 * 16;

// CTA `lane`'s copy of *p for lanes below the cluster's size (`none` above): one remote load a
// lane, all in flight at once, where a loop over the CTAs waits for each in turn.
template <typename T>
__device__ inline T cluster_lane_read(cg::cluster_group& cluster, const T* p, T none) {
  const unsigned lane = threadIdx.x % 32;
  return lane < cluster.num_blocks() ? *cluster.map_shared_rank(p, lane) : none;
}

// The weights of a lane's four items relative to the segment's maximum m.
template <bool kLogits>
__device__ inline void weights_of(const float (&y)[4], int present, float m, float (&w)[4]) {
#pragma unroll
  for (int h = 0; h < 4; ++h) {
    const bool in = h < present && (kLogits ? m > -INFINITY : true);
    w[h] = in ? (kLogits ? __expf(y[h] - m) : y[h]) : 0.0f;
  }
}

// Whether a value carries weight: a finite logit, a positive probability.
template <bool kLogits>
__device__ inline bool positive_value(float y) {
  return kLogits ? y > -INFINITY : y > 0.0f;
}

struct MaxOf {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct MaxLow {  // (largest, lowest)
  __device__ float2 operator()(float2 a, float2 b) const { return float2{fmaxf(a.x, b.x), fminf(a.y, b.y)}; }
};

// A warp's walk of segment `seg` (claimed, starting at `lo`) to the item at `point` over the
// kept weights: the lane that holds it returns true, with the item and its value.
template <typename scalar_t, bool kLogits, typename Kept, typename RowT>
__device__ inline bool walk_to_point(const PlainShared& sh, int seg, double lo, double point, const RowT& xr,
                                     int64_t v, int64_t q_begin, int64_t q_end, bool aligned, float scale,
                                     float row_max, Kept kept, int64_t& item, float& value) {
  const int lane = threadIdx.x % 32;
  const int64_t q = q_begin + static_cast<int64_t>(seg) * 32 + lane;
  float y[4], w[4];
  const int present = q < q_end ? load_four(xr, v, q, aligned, scale, y) : 0;
  const float m = sh.seg_max[seg];
  weights_of<kLogits>(y, present, m, w);
#pragma unroll
  for (int h = 0; h < 4; ++h) w[h] = kept(y[h]) ? w[h] : 0.0f;
  // The point within the segment in the segment's own units (s_j, not S_j).
  const double in_seg = (point - lo) / (kLogits ? exp(static_cast<double>(m) - row_max) : 1.0);
  int h = 0;
  if (lane != walk_segment(w, in_seg, h)) return false;
  item = 4 * q + h, value = y[h];
  return true;
}

// A warp's batch of kSegsInFlight segments, seg0 + u * kPlainWarps (u < kSegsInFlight), loaded
// before any is used (one load in flight a warp leaves most of the bandwidth unused): lane's
// quads in y[u] and how many of their items exist (0 where `wanted` skips the segment).
template <typename RowT, typename Wanted>
__device__ inline void load_segments(const RowT& xr, int64_t v, int64_t q_begin, int64_t q_end, int nseg,
                                     bool aligned, float scale, int seg0, Wanted wanted,
                                     float (&y)[kSegsInFlight][4], int (&present)[kSegsInFlight]) {
  const int lane = threadIdx.x % 32;
  int64_t q[kSegsInFlight];
  bool want[kSegsInFlight];
#pragma unroll
  for (int u = 0; u < kSegsInFlight; ++u) {
    const int seg = seg0 + u * kPlainWarps;
    q[u] = q_begin + static_cast<int64_t>(seg) * 32 + lane;
    want[u] = seg < nseg && q[u] < q_end && wanted(seg);
  }
  load_quads(xr, v, q, want, aligned, scale, y, present);
}

// fn(seg, y, present) for each of the CTA's segments that `wanted` picks, a warp a segment,
// in batches (load_segments). `wanted` must be the same for the whole warp, so fn may use warp
// collectives.
template <typename RowT, typename Wanted, typename Fn>
__device__ inline void for_segments(const RowT& xr, int64_t v, int64_t q_begin, int64_t q_end, int nseg,
                                    bool aligned, float scale, Wanted wanted, Fn fn) {
  const int warp = threadIdx.x / 32;
  for (int seg0 = warp; seg0 < nseg; seg0 += kPlainWarps * kSegsInFlight) {
    float y[kSegsInFlight][4];
    int present[kSegsInFlight];
    load_segments(xr, v, q_begin, q_end, nseg, aligned, scale, seg0, wanted, y, present);
#pragma unroll
    for (int u = 0; u < kSegsInFlight; ++u) {
      const int seg = seg0 + u * kPlainWarps;
      if (seg < nseg && wanted(seg)) fn(seg, y[u], present[u]);
    }
  }
}

}  // namespace
}  // namespace wrs::llm
