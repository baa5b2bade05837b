#pragma once
// Radix tree forests (Binder and Keller 2019): a guide table over [0, 1) plus one radix
// tree per guide cell, for a monotone inverse CDF. The arithmetic shared by the CPU and
// CUDA builds and lookups.
//
// Per row of N weights the structure is three arrays:
//   cdf   int64 [N]      cdf[i] = floor(2^63 * (w_0 + ... + w_{i-1}) / W): interval i is
//                        [cdf[i], cdf[i+1]), 63-bit fixed point, exactly non-decreasing;
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
// distance between adjacent keys is their XOR (the highest differing bit is the level of
// the implicit bisection of [0, 1) that separates them). The parent of a right child is
// node lo, of a left child node hi + 1 (Apetrei's enumeration). The second child to
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
// The weights are quantized as alias tables quantize them (alias::quantize) with this
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

// Distance between adjacent items a and a + 1: their keys' XOR, ties (equal keys, from
// zero weights) broken by the XOR of their indices so runs of equal keys still form
// balanced trees. Compared lexicographically; cell and row boundaries are the maximum.
struct Distance {
  uint64_t key;
  uint32_t index;
  C10_HOST_DEVICE bool operator>(const Distance& o) const {
    return key != o.key ? key > o.key : index > o.index;
  }
};

constexpr Distance kBoundary{~uint64_t(0), ~uint32_t(0)};

// Where child c (0 or 1) of node j lives in a row's nodes viewed as int32 (little endian).
C10_HOST_DEVICE inline int64_t child_slot(int64_t j, int c) { return 4 * j + 2 + c; }

// Merges item i of a row upwards until it is the first child to reach a parent.
// key(j): cdf of item j of the row; cell_shift: 63 - log2(cells); children: the row's
// nodes viewed as int32 (child_slot); other_bound: the row's [n] exchange array (all -1);
// exchange(p, v): atomically stores v at p and returns the old value.
template <typename Key, typename Exchange>
C10_HOST_DEVICE inline void merge_up(int64_t i, int64_t n, int cell_shift, const Key& key, int32_t* children,
                                     int32_t* other_bound, const Exchange& exchange) {
  const int64_t cell = key(i) >> cell_shift;
  // Distance between items a and a + 1, or kBoundary where they are in different cells.
  auto distance = [&](int64_t a) {
    if (a < 0 || a + 1 >= n) return kBoundary;
    const int64_t ka = key(a), kb = key(a + 1);
    if ((ka >> cell_shift) != cell || (kb >> cell_shift) != cell) return kBoundary;
    return Distance{static_cast<uint64_t>(ka ^ kb), static_cast<uint32_t>(a ^ (a + 1))};
  };
  if (i == 0 || (key(i - 1) >> cell_shift) != cell) {
    // First item of its cell: node i is the cell's entry; its left child is the interval
    // reaching in from the left (never taken when the cell starts exactly at cdf[i]).
    children[child_slot(i, 0)] = ~static_cast<int32_t>(i > 0 ? i - 1 : 0);
  }
  int32_t node = ~static_cast<int32_t>(i);
  int64_t lo = i, hi = i;
  while (true) {
    const bool right_child = !(distance(lo - 1) > distance(hi));
    const int64_t parent = right_child ? lo : hi + 1;
    children[child_slot(parent, right_child ? 1 : 0)] = node;
    const int32_t other = exchange(other_bound + parent, static_cast<int32_t>(right_child ? hi : lo));
    if (other < 0) return;  // the sibling is still on its way; it carries the merge up
    (right_child ? lo : hi) = other;
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
