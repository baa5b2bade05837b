#pragma once
// multinomial_counts: how many of `total` i.i.d. draws from w / W land on each category,
// without drawing them. The counts are exactly multinomial (up to float64 rounding of
// w_i / remaining weight): category i takes Binomial(draws left, w_i / weight left), the
// chain of conditional binomials, with the exact deviates of common/binomial.h. Shared by
// the CPU and CUDA kernels, which give the same counts for the same (seed, offset).
#include "common/binomial.h"
#include "common/checks.h"

#include <c10/macros/Macros.h>

#include <cstdint>

namespace wrs::multinomial {

// Philox blocks one binomial may use (as alias::kNodeBlocks: more than 64 BTRS rounds has
// probability below 1e-54). Binomial i of row r draws from subsequence r * m + i.
constexpr uint64_t kCountBlocks = 64;

// Writes row `row`'s m counts (out[i * out_stride]) and returns the row's weight flags;
// a row with flags gets all-zero counts (in range, never used: the caller raises).
template <typename scalar_t, typename Streams>
C10_HOST_DEVICE inline uint32_t count_row(const scalar_t* w, int64_t m, int64_t total, int64_t row,
                                          const Streams& streams, int64_t* out) {
  double weight = 0;
  uint32_t flags = 0;
  int64_t last = -1;  // the last positive weight takes what is left: never a zero weight
  for (int64_t i = 0; i < m; ++i) {
    const double wi = static_cast<double>(w[i]);
    flags |= weight_flags(wi);
    weight += wi;
    if (wi > 0) last = i;
  }
  flags = row_flags(weight, flags);
  int64_t left = (flags == 0) ? total : 0;
  for (int64_t i = 0; i < m; ++i) {
    const double wi = static_cast<double>(w[i]);
    int64_t c = 0;
    if (left > 0 && wi > 0) {
      if (i == last) {
        c = left;
      } else {
        auto bits = streams(static_cast<uint64_t>(row) * static_cast<uint64_t>(m) + static_cast<uint64_t>(i));
        c = binomial(left, wi >= weight ? 1.0 : wi / weight, bits);
      }
    }
    out[i] = c;
    left -= c;
    weight -= wi;
  }
  return flags;
}

inline void raise_count_flags(uint32_t flags) {
  raise_weight_flags(flags, "multinomial_counts", "weights");
}

}  // namespace wrs::multinomial
