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
#include "common/quantize.h"  // Q_i, shared with multinomial and radix forests

#include <cmath>
#include <cstdint>

namespace wrs::alias {

constexpr int64_t kMaxCategories = int64_t(1) << 31;  // keeps N * kBucket < 2^63

C10_HOST_DEVICE inline int64_t pack_row(uint32_t threshold, uint32_t alias) {
  return static_cast<int64_t>((static_cast<uint64_t>(alias) << 32) | threshold);
}

// Running sums that place items in the light and heavy arrays (exact, associative).
struct ClassPrefix {
  int64_t lights;    // light items so far
  int64_t heavies;   // heavy items so far
  uint64_t deficit;  // sum of (2^32 - Q) over those lights
  uint64_t excess;   // sum of (Q - 2^32) over those heavies
};

C10_HOST_DEVICE inline ClassPrefix class_of(uint64_t q) {
  if (q < kBucket) return ClassPrefix{1, 0, kBucket - q, 0};
  return ClassPrefix{0, 1, 0, q - kBucket};
}

C10_HOST_DEVICE inline ClassPrefix operator+(const ClassPrefix& a, const ClassPrefix& b) {
  return ClassPrefix{a.lights + b.lights, a.heavies + b.heavies, a.deficit + b.deficit,
                     a.excess + b.excess};
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
// `table`, the row's table indexed by item. Each step reads everything either kind of
// step could need, independently, and selects: no branch for warps to diverge on.
C10_HOST_DEVICE inline void pack_merge_steps(const MergeSlice& r, int64_t begin, int64_t end,
                                             int64_t* table) {
  int64_t i = merge_corank(r, begin);
  int64_t j = begin - i;
  for (int64_t step = begin; step < end; ++step) {
    const bool lights_left = i < r.lights;
    const bool heavies_left = j < r.heavies;
    // Deficit of the lights packed so far (the key of the next light, or all of it).
    const uint64_t filled = lights_left ? r.deficit_before[i] : r.deficit_after;
    const uint64_t excess = heavies_left ? r.excess_through[j] : 0;
    const uint32_t heavy = heavies_left ? r.heavy[j] : r.heavy_after;  // the current heavy
    const uint32_t next = j + 1 < r.heavies ? r.heavy[j + 1] : r.heavy_after;
    const LightItem light = lights_left ? r.light[i] : LightItem{0, 0};
    const bool take_heavy = !lights_left || (heavies_left && excess <= filled);
    // Heavy step: the heavy keeps its residual after filling the lights before it
    // (<= 2^32, except where the row runs out of lights and absorbs the rounding
    // remainder) and gives the rest to the next heavy. Light step: the light keeps its
    // mass and the current heavy fills it; lights past the row's last heavy give their
    // rest to that last heavy; with no heavy at all a light fills its own bucket.
    const uint64_t residual = kBucket + excess - filled;
    const uint32_t self = take_heavy ? heavy : light.index;
    const bool full = take_heavy ? residual >= kBucket : heavy == kNoHeavy;
    const uint32_t threshold = full ? 0xFFFFFFFFu : (take_heavy ? static_cast<uint32_t>(residual) : light.mass);
    const uint32_t alias = full ? self : (take_heavy ? next : heavy);
    table[self] = pack_row(threshold, alias);
    i += take_heavy ? 0 : 1;
    j += take_heavy ? 1 : 0;
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

// ---- PSA+: greedy packing of a stretch before the global PSA ----------------------------
//
// A stretch of a row (a tile) partitioned on its own, with keys counted from zero, can
// pack its lights with its own heavies along its own merge as long as every bucket it
// finishes has its alias at hand. It stops either just before its last heavy would need
// the next heavy (enough deficit: state (i*, H-1)) or, once its lights are used up, at
// the first heavy still holding excess (state (L, j*)). Everything before the stop is
// final; what is left (lights i* .., the stopped heavy with its residual mass, heavies
// after it) joins the global PSA as ordinary items. Mass is conserved exactly.

struct GreedyStop {
  int64_t lights;     // lights packed locally (i*)
  int64_t heavies;    // heavies packed locally (j*); heavy j* is the stopped one
  uint64_t filled;    // deficit of the packed lights (the merge key at the stop)
  uint64_t residual;  // mass the stopped heavy keeps; it is light if < 2^32
};

C10_HOST_DEVICE inline GreedyStop greedy_stop(const uint64_t* deficit_before, int64_t lights,
                                              uint64_t deficit_total,
                                              const uint64_t* excess_through, int64_t heavies) {
  if (heavies == 0) return GreedyStop{0, 0, 0, 0};  // no heavy: every light is left over
  const uint64_t last = excess_through[heavies - 1];
  if (deficit_total >= last) {
    int64_t lo = 0, hi = lights;  // first light whose key reaches the last heavy's
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (deficit_before[mid] < last) lo = mid + 1; else hi = mid;
    }
    const uint64_t filled = lo < lights ? deficit_before[lo] : deficit_total;
    return GreedyStop{lo, heavies - 1, filled, kBucket + last - filled};
  }
  int64_t lo = 0, hi = heavies - 1;  // first heavy with excess beyond all the deficit
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (excess_through[mid] <= deficit_total) lo = mid + 1; else hi = mid;
  }
  return GreedyStop{lights, lo, deficit_total, kBucket + excess_through[lo] - deficit_total};
}

// The merge a stretch packs locally (steps [0, stop.lights + stop.heavies)).
C10_HOST_DEVICE inline MergeSlice greedy_slice(const LightItem* light, const uint64_t* deficit_before,
                                               const uint32_t* heavy, const uint64_t* excess_through,
                                               const GreedyStop& stop) {
  return MergeSlice{light, deficit_before, heavy, excess_through, stop.lights, stop.heavies,
                    stop.filled, heavy[stop.heavies]};
}

// Class totals of what a stretch leaves over for the global PSA.
C10_HOST_DEVICE inline ClassPrefix leftover_totals(const GreedyStop& stop, int64_t lights,
                                                   uint64_t deficit_total,
                                                   const uint64_t* excess_through, int64_t heavies) {
  ClassPrefix left{lights - stop.lights, 0, deficit_total - stop.filled, 0};
  if (heavies == 0) return left;
  left = left + class_of(stop.residual);
  left.heavies += heavies - 1 - stop.heavies;
  left.excess += excess_through[heavies - 1] - excess_through[stop.heavies];
  return left;
}

// Leftover r of a stretch's lights / heavies, with its key in the row's leftover merge.
// Order: lights i*.., the stopped heavy if it became light | the stopped heavy if it is
// still heavy, heavies j*+1... `before` is what earlier stretches of the row left over;
// `sums` the stretch's own class totals (keys counted from zero, as staged).
struct Leftover {
  uint32_t index;
  uint32_t mass;  // lights only
  uint64_t key;
};

C10_HOST_DEVICE inline Leftover leftover_light(int64_t r, const GreedyStop& stop, const ClassPrefix& sums,
                                               const LightItem* light, const uint64_t* deficit_before,
                                               const uint32_t* heavy, const ClassPrefix& before) {
  const int64_t plain = sums.lights - stop.lights;
  if (r < plain) {
    const LightItem item = light[stop.lights + r];
    return Leftover{item.index, item.mass, before.deficit + (deficit_before[stop.lights + r] - stop.filled)};
  }
  return Leftover{heavy[stop.heavies], static_cast<uint32_t>(stop.residual),
                  before.deficit + (sums.deficit - stop.filled)};
}

C10_HOST_DEVICE inline Leftover leftover_heavy(int64_t r, const GreedyStop& stop, const ClassPrefix& sums,
                                               const uint32_t* heavy, const uint64_t* excess_through,
                                               const ClassPrefix& before) {
  const bool stopped_heavy = sums.heavies > 0 && stop.residual >= kBucket;
  const uint64_t head = stopped_heavy ? stop.residual - kBucket : 0;
  if (stopped_heavy && r == 0) return Leftover{heavy[stop.heavies], 0, before.excess + head};
  const int64_t j = stop.heavies + 1 + r - (stopped_heavy ? 1 : 0);
  return Leftover{heavy[j], 0, before.excess + head + (excess_through[j] - excess_through[stop.heavies])};
}

// ---- sampling -------------------------------------------------------------------------

// One sample from 64 random bits: the high 64 bits of r * N pick the bucket without
// bias, the next 32 bits are the coin. Split in two so a kernel can issue the table
// loads of several samples before it uses any.
struct BucketDraw {
  uint64_t bucket;
  uint32_t coin;
};

C10_HOST_DEVICE inline BucketDraw draw_bucket(uint64_t n, uint32_t r_lo, uint32_t r_hi) {
  const uint64_t r = (static_cast<uint64_t>(r_hi) << 32) | r_lo;
  return BucketDraw{mul_hi64(r, n), static_cast<uint32_t>((r * n) >> 32)};
}

// `first_bucket`: where the drawn-from run of buckets starts (a section of the row);
// `n`: the row's buckets. An alias outside [0, n) (a table alias_table did not make)
// returns the bucket itself, so every index is in range whatever the table holds.
C10_HOST_DEVICE inline int64_t pick(const BucketDraw& d, int64_t row, uint64_t n, int64_t first_bucket = 0) {
  const uint64_t bits = static_cast<uint64_t>(row);
  const uint64_t alias = bits >> 32;
  const int64_t own = first_bucket + static_cast<int64_t>(d.bucket);
  return d.coin < static_cast<uint32_t>(bits) || alias >= n ? own : static_cast<int64_t>(alias);
}

}  // namespace wrs::alias
