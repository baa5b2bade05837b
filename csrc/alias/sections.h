#pragma once
// Sectioned (unordered) sampling, shared by the CPU and CUDA kernels.
//
// Every bucket of an alias table is drawn with the same probability, so the number of a
// row's num_samples draws that land in a run of buckets is binomial in the run's length.
// The row's buckets are cut into sections of `section_buckets`; a binary tree over the
// sections splits each node's count between its children with an exact binomial
// deviate, so the section counts are exactly multinomial. Each section then draws its
// count uniformly from its own buckets, which the GPU stages in shared memory (or
// leaves in L1): the output is the right multiset, grouped by section.
//
// Each tree node draws from its own Philox subsequence (kNodeStream | row << 32 | node),
// so every thread that walks through a node gets the same split without communicating
// (as in Sanders et al.'s Algorithm R), and a leaf's walk yields its count and offset.
#include "common/binomial.h"

#include <c10/macros/Macros.h>

#include <algorithm>
#include <cstdint>

namespace wrs::alias {

// Subsequences at or above this serve tree nodes; samples use pair indices below it.
constexpr uint64_t kNodeStream = uint64_t{1} << 63;

// Philox blocks (of 4 draws) a node's binomial may use; the generator's offset advances
// by this much per call. Inversion takes one block; BTRS one block per round, and more
// than 64 rounds has probability below 0.14^64 < 1e-54 (a walk past the bound would
// reuse numbers of the next call's same node).
constexpr uint64_t kNodeBlocks = 64;

enum class SampleMethod { kBaseline, kCached, kShared };

// Section sizes, fixed (not read from the device) so results depend only on the seed.
// shared: 48 KB of table staged per block, four blocks per SM on Hopper (228 KB), so
// staging in one block overlaps drawing in the others.
// cached (the paper's "limited" variant): 128 KB read through L1, one block per SM.
constexpr int64_t kSharedSectionBuckets = 6144;
constexpr int64_t kCachedSectionBuckets = 16384;
// A section's draws are cut into parts of about this many, one block (task) each, so a
// row of few sections still fills the device.
constexpr int64_t kSamplesPerPart = 65536;

struct SectionGrid {
  int64_t buckets;          // per row
  int64_t section_buckets;  // per section (the last one of a row may be shorter)
  int64_t sections;         // per row
  int64_t num_samples;      // per row
};

inline SectionGrid section_grid(SampleMethod method, int64_t buckets, int64_t num_samples) {
  const int64_t section_buckets =
      method == SampleMethod::kCached ? kCachedSectionBuckets : kSharedSectionBuckets;
  return SectionGrid{buckets, section_buckets, (buckets + section_buckets - 1) / section_buckets,
                     num_samples};
}

// Parts per section: from the expected draws of a full section (counts concentrate
// there), so the grid is known on the host without reading any count back.
inline int64_t parts_per_section(const SectionGrid& g) {
  const double expected = static_cast<double>(g.num_samples) *
                          static_cast<double>(std::min(g.section_buckets, g.buckets)) /
                          static_cast<double>(g.buckets);
  return std::clamp<int64_t>(static_cast<int64_t>(expected / kSamplesPerPart) + 1, 1, 1 << 16);
}

// Part j of p takes draws [count * j / p, count * (j + 1) / p) of its section. One part,
// the usual case, skips the 128-bit division (a software routine on the GPU, run by
// every thread of every block).
C10_HOST_DEVICE inline int64_t part_begin(int64_t count, int64_t part, int64_t parts) {
  if (parts == 1) return part == 0 ? 0 : count;
  return static_cast<int64_t>(static_cast<unsigned __int128>(count) * part / parts);
}

struct SectionSpan {
  int64_t count;   // draws from this section
  int64_t offset;  // where they start in the row's output
};

// `streams(subsequence)` returns a source of 32-bit draws for that Philox subsequence.
template <typename Streams>
C10_HOST_DEVICE inline SectionSpan section_span(const SectionGrid& g, int64_t row, int64_t section,
                                                const Streams& streams) {
  int64_t lo = 0, hi = g.sections, count = g.num_samples, offset = 0;
  uint64_t node = 1;  // heap numbering: children of v are 2v and 2v + 1
  while (hi - lo > 1 && count > 0) {
    const int64_t mid = lo + (hi - lo) / 2;
    const int64_t left = (mid - lo) * g.section_buckets;
    const int64_t right = std::min(hi * g.section_buckets, g.buckets) - mid * g.section_buckets;
    auto bits = streams(kNodeStream | (static_cast<uint64_t>(row) << 32) | node);
    const int64_t to_left = binomial(count, static_cast<double>(left) / static_cast<double>(left + right), bits);
    if (section < mid) {
      hi = mid;
      count = to_left;
      node = 2 * node;
    } else {
      lo = mid;
      offset += to_left;
      count -= to_left;
      node = 2 * node + 1;
    }
  }
  return SectionSpan{count, offset};
}

}  // namespace wrs::alias
