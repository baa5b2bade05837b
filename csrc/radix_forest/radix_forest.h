#pragma once
// Radix tree forests (Binder and Keller 2019): a guide table over [0, 1) plus one radix
// tree per guide cell, for a monotone inverse CDF. The arithmetic shared by the CPU and
// CUDA builds and lookups.
//
// Per row of N weights the structure is three arrays:
//   cdf   int64 [N]      cdf[i] ~ 2^63 * (w_0 + ... + w_{i-1}) / W, from exact integer sums
//                        of the quantized weights (so exactly non-decreasing, and equal
//                        where a weight is zero), normalised in float64 (error ~2^-52 of
//                        the value). Interval i is [cdf[i], cdf[i+1]);
//   guide int32 [M]      M = 2^k cells; cell g covers fixed-point values with top bits g.
//                        A cell inside a single interval i holds ~i (negative); any other
//                        holds the node id of its tree's root;
//   nodes int64 [N, 2]   node j splits at key cdf[j]: x < key goes to child 0, else child 1.
//                        nodes[j] = (key, child 0 | child 1 << 32), one 16-byte load per
//                        step of a lookup. A child >= 0 is a node id, < 0 is ~(the item).
// The lookup returns the largest i with cdf[i] <= x: the same index as a binary search,
// so the mapping is monotone, and a zero weight (cdf[i] == cdf[i+1]) is never returned.
//
// Build (Algorithm 1 of the paper): every item starts as a leaf and merges upwards in
// parallel. A range [lo, hi] is the child of the neighbour it is closer to, where the
// distance between adjacent keys is the highest bit in which they differ (the level of
// the implicit bisection of [0, 1) that separates them; gap_code below). The parent of
// a right child is node lo, of a left child node hi + 1 (Apetrei's enumeration). The second child to
// arrive at a parent (an atomic exchange tells) carries the merged range further up.
// Ranges never merge across a cell boundary, so each cell gets its own tree, whose root
// becomes the right child of node `first` (the cell's first item, whose own slot is
// free); its left child is the interval reaching into the cell from the left.
#include "common/macros.h"

#include <cstdint>
#include <limits>

namespace wrs::radix {

constexpr int kFractionBits = 63;
constexpr int64_t kSaturated = std::numeric_limits<int64_t>::max();  // above every lookup key
constexpr int64_t kMaxItems = std::numeric_limits<int32_t>::max();   // node ids are int32
constexpr int kMaxCellBits = 30;
// The weights are quantized as alias tables quantize them (wrs::quantize) with this
// "N", so a row totals about 2^62 units: scans of up to 2^31 items cannot overflow.
constexpr int64_t kQuantizeN = int64_t(1) << 30;
// Lookups stop after this many steps: a tree over 63-bit keys and 31-bit indices is at
// most ~96 deep, so only a corrupted forest reaches it (and then stays in bounds).
constexpr int kMaxDepth = 128;

// Fixed-point cdf value of an exclusive prefix `prefix` of a row whose quantized total
// is `total` (scale = 2^63 / total). Monotone in prefix; items whose prefix is the whole
// row (trailing zero weights) get kSaturated, which no lookup key reaches.
C10_HOST_DEVICE inline int64_t cdf_value(uint64_t prefix, uint64_t total, double scale) {
  if (prefix == 0) return 0;
  if (prefix >= total) return kSaturated;
  const double c = static_cast<double>(prefix) * scale;
  return c < 0x1p63 ? static_cast<int64_t>(c) : kSaturated;
}

C10_HOST_DEVICE inline double cdf_scale(uint64_t total) {
  return total == 0 ? 0.0 : 0x1p63 / static_cast<double>(total);
}

// Lookup key of a uniform u in [0, 1]: floor(u * 2^63), exact for every float dtype.
// u = 1 maps to the largest key (the last item of nonzero weight); u < 0 and NaN to 0.
C10_HOST_DEVICE inline int64_t key_of(double u) {
  if (!(u > 0)) return 0;
  if (u >= 1) return kSaturated - 1;
  return static_cast<int64_t>(u * 0x1p63);
}

// Lookup key from 64 random bits (two 32-bit Philox words).
C10_HOST_DEVICE inline int64_t key_of_bits(uint32_t hi, uint32_t lo) {
  return static_cast<int64_t>(((static_cast<uint64_t>(hi) << 32) | lo) >> 1);
}

// How far apart adjacent items a and a + 1 are, as one 16-bit code: the level of the
// highest bit in which their keys differ (1..63, 0 for equal keys), then the trailing
// ones of a (the level of a ^ (a + 1), so runs of equal keys, from zero weights, still
// form balanced trees). Items in different cells are kGapBoundary apart. A range merges
// across the nearer of its two gaps, ties to the left: a strict order, so every merge
// order gives the same tree.
constexpr uint16_t kGapBoundary = 0xFFFF;

C10_HOST_DEVICE inline int highest_bit_level(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return 64 - __clzll(static_cast<long long>(x));
#else
  return x == 0 ? 0 : 64 - __builtin_clzll(x);
#endif
}

C10_HOST_DEVICE inline uint16_t gap_code(int64_t key_a, int64_t key_b, int64_t a, int cell_shift) {
  if ((key_a >> cell_shift) != (key_b >> cell_shift)) return kGapBoundary;
  const int trailing_ones = highest_bit_level(static_cast<uint64_t>(a ^ (a + 1))) - 1;
  return static_cast<uint16_t>(highest_bit_level(static_cast<uint64_t>(key_a ^ key_b)) << 8 | trailing_ones);
}

// Node j of a row: key and children in one 16-byte record, written in one store.
C10_HOST_DEVICE inline void store_node(int64_t* nodes, int64_t j, int64_t key, int32_t left, int32_t right) {
  const int64_t children =
      static_cast<int64_t>((static_cast<uint64_t>(static_cast<uint32_t>(right)) << 32) | static_cast<uint32_t>(left));
#if defined(__CUDA_ARCH__)
  reinterpret_cast<longlong2*>(nodes)[j] = longlong2{key, children};
#else
  nodes[2 * j] = key;
  nodes[2 * j + 1] = children;
#endif
}

// What a child leaves at its parent for its sibling: its outer range bound and node id.
constexpr uint64_t kNoSibling = ~uint64_t(0);
C10_HOST_DEVICE inline uint64_t sibling_word(int64_t bound, int32_t node) {
  return (static_cast<uint64_t>(bound) << 32) | static_cast<uint32_t>(node);
}

// Merges item i of a row upwards until it is the first child to reach a parent.
// gap(a): gap_code of items a and a + 1 of the row (only called for 0 <= a < n - 1);
// cdf, nodes: the row's; waiting: the row's [n] exchange words (all kNoSibling at the
// start); exchange(p, v): atomically stores v at p and returns the old value. The second
// child to arrive knows both children and writes the parent's whole record, so every
// node is written once, in one store.
template <typename Gap, typename Exchange>
C10_HOST_DEVICE inline void merge_up(int64_t i, int64_t n, const Gap& gap, const int64_t* cdf, int64_t* nodes,
                                     uint64_t* waiting, const Exchange& exchange) {
  auto distance = [&](int64_t a) { return a < 0 || a + 1 >= n ? kGapBoundary : gap(a); };
  int32_t node = ~static_cast<int32_t>(i);
  int64_t lo = i, hi = i;
  while (true) {
    const uint16_t left_gap = distance(lo - 1);
    const bool right_child = !(left_gap > distance(hi));
    const int64_t parent = right_child ? lo : hi + 1;
    if (right_child && left_gap == kGapBoundary) {
      // The whole cell: its root hangs right of node `lo`, the cell's entry, whose left
      // child is the interval reaching into the cell from the left (never taken when the
      // cell starts exactly at cdf[lo]).
      store_node(nodes, lo, cdf[lo], ~static_cast<int32_t>(lo > 0 ? lo - 1 : 0), node);
      return;
    }
    const uint64_t theirs = exchange(waiting + parent, sibling_word(right_child ? hi : lo, node));
    if (theirs == kNoSibling) return;  // the sibling is still on its way; it carries the merge up
    const int32_t sibling = static_cast<int32_t>(static_cast<uint32_t>(theirs));
    store_node(nodes, parent, cdf[parent], right_child ? sibling : node, right_child ? node : sibling);
    (right_child ? lo : hi) = static_cast<int64_t>(theirs >> 32);
    node = static_cast<int32_t>(parent);
  }
}

// Node j of a row: its key and both children, in one 16-byte load on the GPU.
C10_HOST_DEVICE inline void load_node(const int64_t* nodes, int32_t j, int64_t& key, int32_t& left, int32_t& right) {
#if defined(__CUDA_ARCH__)
  const longlong2 v = reinterpret_cast<const longlong2*>(nodes)[j];
  key = v.x;
  const uint64_t c = static_cast<uint64_t>(v.y);
#else
  key = nodes[2 * j];
  const uint64_t c = static_cast<uint64_t>(nodes[2 * j + 1]);
#endif
  left = static_cast<int32_t>(static_cast<uint32_t>(c));
  right = static_cast<int32_t>(static_cast<uint32_t>(c >> 32));
}

// Inverse CDF of K keys at once (K independent chains of loads in flight): for each,
// the largest i with cdf[i] <= x on its row (guide and nodes: that row's).
template <int K>
C10_HOST_DEVICE inline void lookup(const int64_t (&x)[K], const int32_t* const (&guide)[K],
                                   const int64_t* const (&nodes)[K], int64_t n, int cell_shift, int64_t (&out)[K]) {
  int32_t j[K];
#pragma unroll
  for (int k = 0; k < K; ++k) j[k] = guide[k][x[k] >> cell_shift];
  for (int step = 0; step < kMaxDepth; ++step) {
    bool more = false;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (j[k] >= 0 && j[k] < n) {
        int64_t key;
        int32_t left, right;
        load_node(nodes[k], j[k], key, left, right);
        j[k] = x[k] < key ? left : right;
        more = true;
      }
    }
    if (!more) break;
  }
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t i = j[k] < 0 ? ~static_cast<int64_t>(j[k]) : 0;
    out[k] = i < n ? i : n - 1;
  }
}

}  // namespace wrs::radix
