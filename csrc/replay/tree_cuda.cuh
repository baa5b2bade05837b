#pragma once
// A warp's share of the tree (tree.h): lane c holds child c, so a node's children are one
// coalesced 256-byte load, and sums and prefixes come from a shuffle scan (Hillis-Steele).
#include "replay/tree.h"

#include <cstdint>

namespace wrs::replay {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ inline double warp_scan(double v, int lane) {
#pragma unroll
  for (int d = 1; d < kFan; d *= 2) {
    const double up = __shfl_up_sync(kFullMask, v, d);
    if (lane >= d) v = up + v;
  }
  return v;
}

__device__ inline double warp_max(double v) {
#pragma unroll
  for (int d = kFan / 2; d >= 1; d /= 2) v = fmax(v, __shfl_xor_sync(kFullMask, v, d));
  return v;
}

__device__ inline double warp_min(double v) {
#pragma unroll
  for (int d = kFan / 2; d >= 1; d /= 2) v = fmin(v, __shfl_xor_sync(kFullMask, v, d));
  return v;
}

// Up to kBatch nodes of level l recomputed by a whole warp (lane c holds child c): their
// children are loaded together, so the loads' latency is paid once for the batch. The sum
// is the shuffle scan's last prefix (the descent's prefixes end at it).
constexpr int kBatch = 4;

__device__ inline void recompute_batch(const Levels& s, double* leaves, double* nodes, int l, const int64_t* b,
                                       const int64_t* v, int count, int lane) {
  const int64_t rows = s.inner;
  double t[kBatch], p_max[kBatch], p_min[kBatch];
#pragma unroll
  for (int k = 0; k < kBatch; ++k) {
    if (k >= count) break;
    if (l == 1) {
      const int64_t at = s.leaf(b[k], v[k] * kFan + lane);
      p_max[k] = leaves[at];
      t[k] = leaves[s.buffers * s.width[0] + at];
    } else {
      const int64_t at = s.node(l - 1, b[k], v[k] * kFan + lane);
      t[k] = nodes[at];
      p_max[k] = nodes[rows + at];
      p_min[k] = nodes[2 * rows + at];
    }
  }
#pragma unroll
  for (int k = 0; k < kBatch; ++k) {
    if (k >= count) break;
    if (l == 1) p_min[k] = t[k] > 0 ? p_max[k] : std::numeric_limits<double>::infinity();  // only drawable leaves
    const double sum = __shfl_sync(kFullMask, warp_scan(t[k], lane), kFan - 1);
    const double hi = warp_max(fmax(p_max[k], 0.0));  // as combine, from 0
    const double lo = warp_min(p_min[k]);
    if (lane == 0) {
      const int64_t at = s.node(l, b[k], v[k]);
      nodes[at] = sum;
      nodes[rows + at] = hi;
      nodes[2 * rows + at] = lo;
    }
  }
}

// pick_child (tree.h) by a whole warp, u the same in every lane, with the scan's prefixes.
__device__ inline int pick_child_warp(const double* children, double& u, int lane) {
  const double t = children[lane];
  const double incl = warp_scan(t, lane);
  double before = __shfl_up_sync(kFullMask, incl, 1);
  if (lane == 0) before = 0.0;
  const unsigned hit = __ballot_sync(kFullMask, t > 0 && u < incl);
  const unsigned live = __ballot_sync(kFullMask, t > 0);
  if (live == 0) return -1;
  const int c = hit ? __ffs(hit) - 1 : 31 - __clz(live);
  u = into_child(u, __shfl_sync(kFullMask, before, c), __shfl_sync(kFullMask, t, c), hit != 0);
  return c;
}

// descend (tree.h) by a whole warp.
__device__ inline int64_t descend_warp(const Levels& s, const double* leaves, const double* nodes, int64_t b, double u,
                                       int lane) {
  int64_t v = 0;
  for (int l = s.top; l >= 1; --l) {
    const double* children = l == 1 ? leaves + s.buffers * s.width[0] + s.leaf(b, v * kFan)
                                    : nodes + s.node(l - 1, b, v * kFan);
    const int c = pick_child_warp(children, u, lane);
    if (c < 0) return -1;
    v = v * kFan + c;
  }
  return v;
}

}  // namespace wrs::replay
