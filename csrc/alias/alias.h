#pragma once
// Alias tables: the arithmetic shared by the CPU and CUDA builds and samplers.
//
// Table format (one int64 per bucket, 8 bytes, one load per sample):
//   low 32 bits  threshold t, high 32 bits alias a.
// Bucket k returns k when a 32-bit coin c < t, else a; a full bucket has t = 2^32-1
// and a = k. So bucket k gives item k mass t / 2^32 and item a the rest.
//
// Construction is exact integer arithmetic. Each weight is quantized once to
//   Q_i = round(w_i / W * N * 2^32),
// so a bucket holds 2^32 units. Items with Q < 2^32 are light, the rest heavy. PSA
// (Huebschle-Schneider and Sanders) fills the light buckets, in index order, with the
// excess of the heavy items, in index order: that is a merge of the lights, keyed by
// the deficit summed over the lights before them, with the heavies, keyed by the
// excess summed up to and including them. Because these prefix sums are exact integers
// the merge order is exactly defined, every split (a co-rank search on the merge path)
// agrees with its neighbours, and every bucket is written exactly once, whatever the
// section size. The table then encodes Q_i exactly; only the rounding remainder
// sum(Q) - N * 2^32 (at most half a unit per nonzero item, ~sqrt(N) in practice) is
// absorbed at the end of the merge by the last heavy items.
#include "common/macros.h"

#include <cmath>
#include <cstdint>

namespace wrs::alias {

constexpr uint64_t kBucket = uint64_t(1) << 32;    // one bucket, in fixed-point units
constexpr int64_t kMaxCategories = int64_t(1) << 31;  // keeps N * kBucket < 2^63

C10_HOST_DEVICE inline int64_t pack_row(uint32_t threshold, uint32_t alias) {
  return static_cast<int64_t>((static_cast<uint64_t>(alias) << 32) | threshold);
}

// Bucket of `self` keeping `mass` units for itself and giving the rest to `alias`.
C10_HOST_DEVICE inline int64_t bucket_row(uint64_t mass, uint32_t self, uint32_t alias) {
  if (mass >= kBucket) return pack_row(0xFFFFFFFFu, self);
  return pack_row(static_cast<uint32_t>(mass), alias);
}

// ---- quantization -------------------------------------------------------------------

// Per-row constants: W = m * 2^exponent with m in [0.5, 1); scale = N * 2^32 / m.
// Scaling w by 2^-exponent first keeps every intermediate finite for any float64 W,
// denormal or huge.
struct RowScale {
  double scale;
  int32_t exponent;
};

C10_HOST_DEVICE inline RowScale row_scale(double sum, int64_t n) {
  int e = 0;
  const double m = ::frexp(sum, &e);
  return RowScale{static_cast<double>(n) * static_cast<double>(kBucket) / m, e};
}

C10_HOST_DEVICE inline uint64_t quantize(double w, const RowScale& rs, int64_t n) {
  const double q = ::rint(::ldexp(w, -rs.exponent) * rs.scale);
  const double cap = static_cast<double>(n) * static_cast<double>(kBucket);
  if (!(q > 0)) return 0;  // also maps NaN (invalid input, unchecked) to 0
  return static_cast<uint64_t>(q < cap ? q : cap);
}

// Running sums that place items in the light and heavy arrays (exact, associative).
struct ClassPrefix {
  int64_t lights;    // light items so far
  uint64_t deficit;  // sum of (2^32 - Q) over those lights
  uint64_t excess;   // sum of (Q - 2^32) over the heavies so far
};

C10_HOST_DEVICE inline ClassPrefix class_of(uint64_t q) {
  if (q < kBucket) return ClassPrefix{1, kBucket - q, 0};
  return ClassPrefix{0, 0, q - kBucket};
}

C10_HOST_DEVICE inline ClassPrefix operator+(const ClassPrefix& a, const ClassPrefix& b) {
  return ClassPrefix{a.lights + b.lights, a.deficit + b.deficit, a.excess + b.excess};
}

struct LightItem {
  uint32_t index;
  uint32_t mass;  // Q < 2^32
};

// ---- split and pack (PSA on the merge path) -------------------------------------------

constexpr uint32_t kNoHeavy = 0xFFFFFFFFu;

// A contiguous stretch of one row's merge: lights [i0, i0 + lights) and heavies
// [j0, j0 + heavies), as arrays indexed from 0 (in global or shared memory). Light i has
// key deficit_before[i]; heavy j has key excess_through[j]; on equal keys the heavy goes
// first. The two `*_after` fields carry what the merge needs from beyond the stretch.
struct MergeSlice {
  const LightItem* light;
  const uint64_t* deficit_before;
  const uint32_t* heavy;
  const uint64_t* excess_through;
  int64_t lights;
  int64_t heavies;
  uint64_t deficit_after;  // key of the row's next light, or the row's deficit total
  uint32_t heavy_after;    // the row's next heavy, else its last heavy, else kNoHeavy
};

// Number of lights among the first `n` merge steps of the slice (the split of PSA).
C10_HOST_DEVICE inline int64_t merge_corank(const MergeSlice& r, int64_t n) {
  int64_t lo = n > r.heavies ? n - r.heavies : 0;
  int64_t hi = n < r.lights ? n : r.lights;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    // Light `mid` is among the first n steps iff it precedes heavy n - mid - 1.
    if (r.deficit_before[mid] < r.excess_through[n - mid - 1]) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Writes the buckets of merge steps [begin, end) of the slice (the pack of PSA) into
// `table`, the row's table indexed by item.
C10_HOST_DEVICE inline void pack_merge_steps(const MergeSlice& r, int64_t begin, int64_t end,
                                             int64_t* table) {
  int64_t i = merge_corank(r, begin);
  int64_t j = begin - i;
  for (int64_t step = begin; step < end; ++step) {
    const bool take_heavy =
        i == r.lights || (j < r.heavies && r.excess_through[j] <= r.deficit_before[i]);
    if (take_heavy) {
      // The heavy item's residual after filling the lights before it; <= 2^32 except
      // where the row runs out of lights and absorbs the rounding remainder.
      const uint64_t filled = i < r.lights ? r.deficit_before[i] : r.deficit_after;
      const uint64_t residual = kBucket + r.excess_through[j] - filled;
      const uint32_t self = r.heavy[j];
      const uint32_t next = j + 1 < r.heavies ? r.heavy[j + 1] : r.heavy_after;
      table[self] = bucket_row(residual, self, next);
      ++j;
    } else {
      // A light is filled by the current heavy; lights past the row's last heavy (the
      // rounding remainder only) give their rest to that last heavy.
      const LightItem item = r.light[i];
      const uint32_t alias = j < r.heavies ? r.heavy[j] : r.heavy_after;
      table[item.index] = alias == kNoHeavy ? pack_row(0xFFFFFFFFu, item.index)
                                            : pack_row(item.mass, alias);
      ++i;
    }
  }
}

// The slice of a whole row, given its partitioned arrays.
C10_HOST_DEVICE inline MergeSlice whole_row(const LightItem* light, const uint64_t* deficit_before,
                                            const uint32_t* heavy, const uint64_t* excess_through,
                                            int64_t lights, int64_t heavies,
                                            uint64_t deficit_total) {
  return MergeSlice{light, deficit_before, heavy, excess_through, lights, heavies, deficit_total,
                    heavies > 0 ? heavy[heavies - 1] : kNoHeavy};
}

// ---- sampling -------------------------------------------------------------------------

// One sample from 64 random bits: the high 64 bits of r * N pick the bucket without
// bias, the next 32 bits are the coin.
C10_HOST_DEVICE inline int64_t sample_bucket(const int64_t* table, uint64_t n, uint32_t r_lo,
                                             uint32_t r_hi) {
  const uint64_t r = (static_cast<uint64_t>(r_hi) << 32) | r_lo;
  const uint64_t bucket = mul_hi64(r, n);
  const uint32_t coin = static_cast<uint32_t>((r * n) >> 32);
  const uint64_t row = static_cast<uint64_t>(table[bucket]);
  return coin < static_cast<uint32_t>(row) ? static_cast<int64_t>(bucket)
                                           : static_cast<int64_t>(row >> 32);
}

}  // namespace wrs::alias
