#pragma once
// One trip of a thread over its quads of a row, keeping the thread's running best race
// key: the inner loop of the one-draw race (race_cuda.cu) and of the two-pass top-k's
// chunk maxima (topk_two_pass_cuda.cu); and quad_keys, the keys of one quad, which every
// top-k kernel draws. Item quad q of row r takes Philox subsequence r * quads + q
// (row_sub + q): the high words from the call's offset, the low words from the block
// after, as every race kernel's keys.
//
// Most items cost a Philox block per quad and a float test with no log (race_bounds.cuh:
// ruled_out): an item whose key is surely below what its warp already holds draws no low
// word and takes no float64 log. The warp shares a float below its best key after each
// trip (one redux), and the first trip starts from the float bound below one key per
// lane. Every lane of the warp calls it on the same trips (the reduxes take the whole
// warp).
#include "common/philox_cuda.cuh"
#include "multinomial/kernels_cuda.cuh"
#include "multinomial/race_bounds.cuh"

#include <limits>
#include <type_traits>

namespace wrs::multinomial {

// Draws the keys of a lane's quad q (items 4q .. 4q + 3 of row xr, Philox subsequence
// `sub`): kNone past the row's end, and for items that surely_below rules out against
// `beat` (which the keys only ever have to beat more), the kNone that is never admitted.
template <typename scalar_t, typename Weights>
__device__ inline void quad_keys(const scalar_t* xr, int64_t n, int64_t q, uint64_t sub, const Weights& wts,
                          const PhiloxSeed& seed, double beat, double (&key)[4], uint32_t& flags,
                          unsigned long long& nonzero) {
  const uint4 high = philox_block_cuda(seed, sub);
  const uint32_t hi[4] = {high.x, high.y, high.z, high.w};
  double v[4];
  bool full[4];
  bool any_full = false;
#pragma unroll
  for (int h = 0; h < 4; ++h) {
    key[h] = Weights::kNone;
    full[h] = false;
    if (4 * q + h >= n) continue;
    v[h] = static_cast<double>(xr[4 * q + h]);
    flags |= Weights::kLogits ? LogitWeights::flags(v[h]) : weight_flags(v[h]);
    const bool nz = Weights::nonzero(v[h]);
    nonzero += nz;
    if (!nz) {
      key[h] = wts.key(v[h], 1.0);  // a zero weight's key does not depend on E
    } else if (!surely_below(wts, v[h], hi[h], beat)) {
      full[h] = true;
      any_full = true;
    }
  }
  if (!any_full) return;
  const uint4 low = philox_block_cuda(PhiloxSeed{seed.seed, seed.offset + 4}, sub);
  const uint32_t lo[4] = {low.x, low.y, low.z, low.w};
#pragma unroll
  for (int h = 0; h < 4; ++h) {
    if (full[h]) key[h] = wts.key(v[h], exponential(lo[h], hi[h]));
  }
}

// Values as the bounds take them: float for every input but float64 (exact either way).
template <typename scalar_t>
using value_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;

template <typename scalar_t>
struct alignas(4 * sizeof(scalar_t)) Quad {
  scalar_t item[4];
};

// The items of quad q (below the row's quads) as values, 0 past the row's end, and which
// are in the row (bit h: item 4 q + h): one vector load where the row is aligned and the
// quad whole.
template <typename scalar_t>
__device__ inline uint32_t load_quad(const scalar_t* xr, int64_t n, int64_t q, bool aligned,
                                     value_t<scalar_t> (&v)[4]) {
  const int64_t left = n - 4 * q;
  if (aligned && left >= 4) {
    const Quad<scalar_t> quad = reinterpret_cast<const Quad<scalar_t>*>(xr)[q];
#pragma unroll
    for (int h = 0; h < 4; ++h) v[h] = static_cast<value_t<scalar_t>>(quad.item[h]);
    return 0xfu;
  }
#pragma unroll
  for (int h = 0; h < 4; ++h) v[h] = h < left ? static_cast<value_t<scalar_t>>(xr[4 * q + h]) : value_t<scalar_t>(0);
  return left >= 4 ? 0xfu : (1u << left) - 1u;
}

// weight_flags / LogitWeights::flags in the value's own type.
template <typename Weights, typename T>
__device__ inline uint32_t value_flags(T v) {
  if (v != v) return kWeightNaN;
  if (!Weights::kLogits && v < 0) return kWeightNegative;
  return v > std::numeric_limits<T>::max() ? kWeightInf : 0u;
}

template <typename Weights, typename T>
__device__ inline bool nonzero_value(T v) {
  return Weights::kLogits ? v > -std::numeric_limits<T>::infinity() : v > 0;
}

// A thread's stretch so far: its best key and item (the first of equal keys), its value
// flags, and the float64 sum (probabilities) and count of its nonzero weights.
struct RaceTally {
  double key;
  int64_t index;
  uint32_t flags;
  double sum;
  uint32_t nonzero;
};

// The trip's quads of this thread are first, first + stride, ... (QUADS of them, those
// below q_end); `first_trip` starts warp_floor from the trip's own bound. The items go by
// bit masks, with no branch per item where nothing is drawn: the value flags from the
// trip's smallest and largest value, then per quad a first test with no log (ruled_out)
// and, only for the few items it keeps, surely_below and the full key.
template <int QUADS, typename scalar_t, typename Weights>
__device__ inline void race_trip(const scalar_t* xr, int64_t n, int64_t first, int64_t stride, int64_t q_end,
                                 bool aligned, bool first_trip, uint64_t row_sub, const Weights& wts,
                                 const PhiloxSeed& seed, RaceTally& mine, float& warp_floor) {
  static_assert(4 * QUADS <= 32, "a trip's items are bits of one word");
  using V = value_t<scalar_t>;
  V v[QUADS][4];  // 0 past the row's end, which neither flags nor counts
  uint32_t hi[QUADS][4];
  uint32_t in_row = 0;   // bit 4 j + h: item h of quad j is in the row
  uint32_t nonzero = 0;  // its weight is nonzero (not NaN)
#pragma unroll
  for (int j = 0; j < QUADS; ++j) {
    const int64_t q = first + j * stride;
    if (q < q_end) {
      in_row |= load_quad(xr, n, q, aligned, v[j]) << (4 * j);
    } else {
#pragma unroll
      for (int h = 0; h < 4; ++h) v[j][h] = V(0);
    }
#pragma unroll
    for (int h = 0; h < 4; ++h) nonzero |= static_cast<uint32_t>(nonzero_value<Weights>(v[j][h])) << (4 * j + h);
  }
  const uint32_t weighted = in_row & nonzero;
  const uint32_t unweighted = in_row & ~nonzero;  // zero weights (and NaN)
  V smallest = V(0), largest = V(0);
  bool nan = false;
#pragma unroll
  for (int j = 0; j < QUADS; ++j) {
    const int64_t q = first + j * stride;
    const uint4 high = q < q_end ? philox_block_cuda(seed, row_sub + q) : make_uint4(0, 0, 0, 0);
    hi[j][0] = high.x, hi[j][1] = high.y, hi[j][2] = high.z, hi[j][3] = high.w;
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      smallest = fmin(smallest, v[j][h]);  // NaN aside
      largest = fmax(largest, v[j][h]);
      nan |= v[j][h] != v[j][h];
      if constexpr (!Weights::kLogits) mine.sum += static_cast<double>(v[j][h]);
    }
  }
  mine.flags |= value_flags<Weights>(smallest) | value_flags<Weights>(largest) | (nan ? kWeightNaN : 0u);
  mine.nonzero += __popc(weighted);
  if (first_trip) {  // start from the float bound below one key per lane: the likeliest best
    bool have = false;
    V best_v = V(0);
    uint32_t best_hi = 0;
    float best_rank = 0.0f;
#pragma unroll
    for (int j = 0; j < QUADS; ++j) {
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        const float rank = rough_rank(wts, v[j][h], hi[j][h]);
        if ((weighted >> (4 * j + h) & 1) && (!have || rank > best_rank)) {
          have = true;
          best_rank = rank;
          best_v = v[j][h];
          best_hi = hi[j][h];
        }
      }
    }
    const float below = have ? key_below(wts, best_v, best_hi) : -INFINITY;
    warp_floor = from_ordered_float_bits(__reduce_max_sync(kFullMask, ordered_float_bits(below)));
  }
#pragma unroll
  for (int j = 0; j < QUADS; ++j) {
    const int64_t q = first + j * stride;
    const uint32_t zeros = unweighted >> (4 * j) & 0xfu;
    if (zeros != 0) {
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        if (!(zeros >> h & 1)) continue;
        const double key = wts.key(static_cast<double>(v[j][h]), 1.0);  // no E: a zero weight's key
        if (key > mine.key) {  // a thread's items come in increasing order: ties keep the first
          mine.key = key;
          mine.index = 4 * q + h;
        }
      }
    }
    const double beat = fmax(mine.key, static_cast<double>(warp_floor));
    const float scale = ruling_scale(wts, beat);
    uint32_t kept = 0;
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      kept |= static_cast<uint32_t>((weighted >> (4 * j + h) & 1) && !ruled_out(wts, v[j][h], hi[j][h], scale)) << h;
    }
    if (kept == 0) continue;
    uint32_t full = 0;
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      if ((kept >> h & 1) && !surely_below(wts, v[j][h], hi[j][h], beat)) full |= 1u << h;
    }
    if (full == 0) continue;
    const uint4 low = philox_block_cuda(PhiloxSeed{seed.seed, seed.offset + 4}, row_sub + q);
    const uint32_t lo[4] = {low.x, low.y, low.z, low.w};
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      if (!(full >> h & 1)) continue;
      const double key = wts.key(static_cast<double>(v[j][h]), exponential(lo[h], hi[j][h]));
      if (key > mine.key) {
        mine.key = key;
        mine.index = 4 * q + h;
      }
    }
  }
  // Each lane's best rounded down to float: the warp's largest is at most a key it holds.
  warp_floor = fmaxf(warp_floor, from_ordered_float_bits(
      __reduce_max_sync(kFullMask, ordered_float_bits(__double2float_rd(mine.key)))));
}

// The better of two stretches' bests: the larger key, the lower item of equal keys.
__device__ inline bool beats(double key, int64_t index, double other_key, int64_t other_index) {
  return key > other_key || (key == other_key && index < other_index);
}

}  // namespace wrs::multinomial
