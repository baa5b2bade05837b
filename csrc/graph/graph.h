#pragma once
// Weighted graph sampling over CSR: the arithmetic shared by the CPU and CUDA kernels, so
// that the CPU is a reference for the GPU (same tables give the same draws).
//
// Table: one int64 per edge, laid out as `col`. Edge e of node v (rowptr[v] <= e <
// rowptr[v + 1]) holds bucket e - rowptr[v] of v's alias table in alias/alias.h's format:
// a 32-bit threshold in the low half and a row-local alias in the high half, so a draw is
// one 8-byte load after rowptr. A row whose weights sum to zero holds kDeadBucket in every
// bucket, so whichever bucket a draw lands in tells that the row has nothing to give.
//
// Random numbers: Philox keyed by the call's seed, subsequence = the seed node's (or the
// walk's) position in the call, so results depend only on (seed, offset), never on the
// grid or the thread count. The block layouts below bound the words any subsequence uses.
#include "alias/alias.h"
#include "common/uniform.h"

#include <c10/macros/Macros.h>

#include <cstdint>

namespace wrs::graph {

constexpr int64_t kDeadBucket = static_cast<int64_t>(uint64_t{0xFFFFFFFFu} << 32);

// Flags of bad input seen by a kernel (OR-ed into a status word).
enum GraphFlags : uint32_t {
  kNodeOutOfRange = 64u,  // a seed or start node outside [0, N)
  kBadRowptr = 128u,      // rowptr not non-decreasing from 0 to E
  kRowTooLong = 256u,     // a row of 2^31 edges or more (row-local aliases are 32-bit)
};

// One Philox block: four 32-bit words.
struct Words {
  uint32_t x, y, z, w;
};

// A row's span of edges, clamped into [0, edges] and non-decreasing, so that a malformed
// rowptr (which validate=True reports) never sends a read out of range.
struct Row {
  int64_t start;
  int64_t degree;
};

C10_HOST_DEVICE inline Row row_at(const int64_t* rowptr, int64_t v, int64_t edges) {
  int64_t a = rowptr[v], b = rowptr[v + 1];
  a = a < 0 ? 0 : (a > edges ? edges : a);
  b = b < a ? a : (b > edges ? edges : b);
  return Row{a, b - a};
}

// One draw from a row's table (or uniform when table is null) from 64 random bits: the
// row-local offset, or -1 for a row whose weights sum to zero. `entry` is the bucket's word
// (loaded by the caller, so a kernel can issue the load early).
C10_HOST_DEVICE inline int64_t resolve(const alias::BucketDraw& d, int64_t entry, uint64_t degree) {
  if (entry == kDeadBucket) return -1;
  return alias::pick(d, entry, degree);
}

C10_HOST_DEVICE inline int64_t draw_offset(const int64_t* row_table, uint64_t degree, uint32_t lo, uint32_t hi) {
  const alias::BucketDraw d = alias::draw_bucket(degree, lo, hi);
  if (row_table == nullptr) return static_cast<int64_t>(d.bucket);
  return resolve(d, row_table[d.bucket], degree);
}

// ---- neighbour sampling -----------------------------------------------------------------
// With replacement: draw j of seed i takes half j % 2 of Philox block j / 2 of subsequence i.
C10_HOST_DEVICE inline int64_t replace_blocks(int64_t k) { return (k + 1) / 2; }

// Without replacement: i.i.d. trials from the table, the first occurrences kept in order
// (successive sampling), trial t from half t % 2 of block t / 2. After a budget of trials
// (a row whose drawn items hold most of its mass rejects most trials), each remaining draw
// is exact by inversion over the rest of the row, one block each after the trials'.
C10_HOST_DEVICE inline int64_t trial_budget(int64_t k) { return (2 * k + 64 + 31) / 32 * 32; }
C10_HOST_DEVICE inline int64_t distinct_blocks(int64_t k) { return trial_budget(k) / 2 + k; }

// ---- walks ------------------------------------------------------------------------------
// Step s of walk w takes blocks [s * step_blocks, (s + 1) * step_blocks) of subsequence w.
// A first-order step is one draw (one block). A node2vec step proposes from the current
// node's table and accepts with a(t, x) / max a (one block a trial: 64 bits for the
// proposal, 53 for the coin); after kWalkTrials rejections it draws exactly by inversion
// over the row (one more block). Rejection leaves more than kWalkTrials with probability
// (1 - min a / max a)^kWalkTrials: 7e-8 for a ratio of 16.
constexpr int64_t kWalkTrials = 256;
C10_HOST_DEVICE inline int64_t step_blocks(bool second_order) { return second_order ? kWalkTrials + 1 : 1; }

// node2vec's bias a(t, x) for a step t -> v -> x, relative to its largest value.
struct Bias {
  double back, common, away;  // x == t, x a neighbour of t, otherwise; each divided by max a
};

C10_HOST_DEVICE inline Bias node2vec_bias(double p, double q) {
  const double back = 1.0 / p, away = 1.0 / q;
  const double top = back > 1.0 ? (back > away ? back : away) : (away > 1.0 ? away : 1.0);
  return Bias{back / top, 1.0 / top, away / top};
}

// Whether x is in the sorted (or, unsorted, scanned) neighbour list nbr[0, n).
template <typename col_t>
C10_HOST_DEVICE inline bool has_neighbor(const col_t* nbr, int64_t n, int64_t x, bool sorted) {
  if (!sorted) {
    for (int64_t i = 0; i < n; ++i) {
      if (static_cast<int64_t>(nbr[i]) == x) return true;
    }
    return false;
  }
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (static_cast<int64_t>(nbr[mid]) < x) lo = mid + 1; else hi = mid;
  }
  return lo < n && static_cast<int64_t>(nbr[lo]) == x;
}

}  // namespace wrs::graph
