#pragma once
// Prioritized replay: a wide sum tree over B buffers of N priorities, the arithmetic shared
// by the CPU and CUDA kernels (the CPU is a reference for the GPU: same state, same draws).
//
// Layout. leaves is float64 [2, B, W0]: row 0 the raw priorities p as written (-inf where
// never written), row 1 the transformed t = (p + eps)^alpha (0 where p + eps <= 0, so such
// a slot is never drawn, whatever eps); W0 = N rounded up to kFan, the padding never written. Inner level l = 1..top holds
// ceil(n_{l-1} / kFan) nodes per buffer (stride W_l, a multiple of kFan below the root; the
// root level, l = top, holds one node per buffer, stride 1). nodes is float64 [3, T], the
// levels one after another: row 0 the sum of the children's t, row 1 the largest p below,
// row 2 the smallest p below among drawable items (t > 0; +inf where none).
//
// No drift: a node's sum is always recomputed from its kFan children, so the root is the
// same function of the leaves however many updates came before.
//
// Updates (last write wins within a batch, only touched paths recomputed) run in phases
// over the batch's entries j: claim (the largest j per leaf owns it), write, then one phase
// per level, where the first entry to claim a node's mark recomputes it and the marks of the
// level below are reset. marks is int32 [B * W0 + T], -1 between calls.
#include <c10/macros/Macros.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace wrs::replay {

constexpr int kFan = 32;
constexpr int kFanBits = 5;
constexpr int kMaxLevels = 8;  // 32^7 leaves (2^35) and more than int32 indices allow

// Flags of bad input (OR-ed into a status word).
enum ReplayFlags : uint32_t {
  kIndexOutOfRange = 1u,  // an index outside [0, N) other than -1
  kBadPriority = 2u,      // a priority NaN, infinite or negative
  kEmpty = 4u,            // a draw from a buffer whose priorities sum to 0
  kTotalOverflow = 8u,    // transformed priorities summing past float64's range
};

struct Levels {
  int64_t buffers = 1;   // B
  int64_t capacity = 0;  // N
  int top = 1;           // inner levels; level `top` is the root
  int64_t count[kMaxLevels + 1] = {};  // nodes a buffer has at each level (count[0] = N)
  int64_t width[kMaxLevels + 1] = {};  // stride of a buffer at each level
  int64_t base[kMaxLevels + 1] = {};   // offset of inner level l in nodes' rows (base[1] = 0)
  int64_t inner = 0;                   // T: inner nodes in all

  C10_HOST_DEVICE int64_t node(int l, int64_t b, int64_t v) const { return base[l] + b * width[l] + v; }
  C10_HOST_DEVICE int64_t leaf(int64_t b, int64_t i) const { return b * width[0] + i; }
  C10_HOST_DEVICE int64_t root(int64_t b) const { return base[top] + b; }
};

inline Levels make_levels(int64_t buffers, int64_t capacity) {
  Levels s;
  s.buffers = buffers;
  s.capacity = capacity;
  s.count[0] = capacity;
  s.width[0] = (capacity + kFan - 1) / kFan * kFan;
  int l = 0;
  do {
    ++l;
    s.count[l] = (s.count[l - 1] + kFan - 1) / kFan;
  } while (s.count[l] > 1 && l < kMaxLevels);
  s.top = l;
  int64_t offset = 0;
  for (int k = 1; k <= s.top; ++k) {
    s.width[k] = k == s.top ? 1 : (s.count[k] + kFan - 1) / kFan * kFan;
    s.base[k] = offset;
    offset += buffers * s.width[k];
  }
  s.inner = offset;
  return s;
}

C10_HOST_DEVICE inline double transform(double p, double alpha, double eps) {
  const double x = p + eps;
  return x > 0 ? (alpha == 1.0 ? x : ::pow(x, alpha)) : 0.0;
}

C10_HOST_DEVICE inline bool bad_priority(double p) { return !(p >= 0) || p == std::numeric_limits<double>::infinity(); }

struct Node {
  double sum, max, min;
};

// One node from its kFan children, added in order on the CPU (a GPU warp adds them in its
// shuffle scan's order: each device's sum is a fixed function of the children, so nothing
// drifts, and the two agree to the last bits or so).
inline Node combine(const double* t, const double* p_max, const double* p_min, bool leaves) {
  Node n{0.0, 0.0, std::numeric_limits<double>::infinity()};
  for (int c = 0; c < kFan; ++c) {
    n.sum += t[c];
    n.max = p_max[c] > n.max ? p_max[c] : n.max;
    const bool live = leaves ? t[c] > 0 : true;  // a leaf below min only while drawable
    n.min = live && p_min[c] < n.min ? p_min[c] : n.min;
  }
  return n;
}

// Node v of level l (l >= 1) of buffer b, recomputed from the level below (the CPU's way;
// tree_cuda.cuh has the warp's).
inline void recompute(const Levels& s, double* leaves, double* nodes, int l, int64_t b, int64_t v) {
  const int64_t rows = s.inner;
  Node n;
  if (l == 1) {
    const int64_t first = s.leaf(b, v * kFan);
    const double* raw = leaves + first;
    const double* t = leaves + s.buffers * s.width[0] + first;
    n = combine(t, raw, raw, true);
  } else {
    const int64_t first = s.node(l - 1, b, v * kFan);
    n = combine(nodes + first, nodes + rows + first, nodes + 2 * rows + first, false);
  }
  const int64_t at = s.node(l, b, v);
  nodes[at] = n.sum;
  nodes[rows + at] = n.max;
  nodes[2 * rows + at] = n.min;
}

// Where mass u (relative to a node) goes, given child c's mass t, its inclusive prefix and
// the one before it: the first child with t > 0 and u < its prefix, or, where rounding left
// u past them all, the last with t > 0; u becomes relative to the child, within [0, t].
C10_HOST_DEVICE inline double into_child(double u, double before, double t, bool hit) {
  const double r = u - before;
  return hit ? (r < 0 ? 0.0 : r) : (r > t ? t : r);
}

// The child that mass u falls in (-1: no child has mass), with the prefixes added in order
// as combine adds them (the CPU, and a GPU thread a draw); u becomes relative to it.
C10_HOST_DEVICE inline int pick_child(const double* t, double& u) {
  double acc = 0.0, last_before = 0.0, last_t = 0.0;
  int last = -1;
#pragma unroll
  for (int c = 0; c < kFan; ++c) {
    if (t[c] > 0) {
      if (u < acc + t[c]) {
        u = into_child(u, acc, t[c], true);
        return c;
      }
      last = c;
      last_before = acc;
      last_t = t[c];
    }
    acc += t[c];
  }
  if (last >= 0) u = into_child(u, last_before, last_t, false);
  return last;
}

// The leaf of buffer b that mass u (in [0, total)) falls in, or -1 for a buffer with no mass.
// `load` gives the kFan children's masses at a pointer (so a GPU thread can stage them).
template <typename Load>
C10_HOST_DEVICE inline int64_t descend(const Levels& s, const double* leaves, const double* nodes, int64_t b, double u,
                                       Load load) {
  int64_t v = 0;
  for (int l = s.top; l >= 1; --l) {
    const double* children = l == 1 ? leaves + s.buffers * s.width[0] + s.leaf(b, v * kFan)
                                    : nodes + s.node(l - 1, b, v * kFan);
    const int c = pick_child(load(children), u);
    if (c < 0) return -1;
    v = v * kFan + c;
  }
  return v;
}

// Draw i of n from buffer b: stratified (segment i of the total) or not, from a uniform
// x in (0, 1).
C10_HOST_DEVICE inline double draw_mass(double total, int64_t i, int64_t n, bool stratified, double x) {
  return stratified ? (static_cast<double>(i) + x) * (total / static_cast<double>(n)) : x * total;
}

}  // namespace wrs::replay
