#pragma once
// One trip of a thread over its quads of a row, keeping the thread's running best race
// key: the inner loop of the one-draw race (race_cuda.cu) and of the two-pass top-k's
// chunk maxima (topk_cuda.cu). Item quad q of row r takes Philox subsequence r * quads + q
// (row_sub + q): the high words from the call's offset, the low words from the block
// after, as every race kernel's keys.
//
// Most items cost a Philox block per quad and a float bound (race_bounds.cuh): an item
// whose key is surely below what its warp already holds draws no low word and takes no
// float64 log. The warp shares a float below its best key after each trip (one redux),
// and the first trip starts from the float bound below its own keys. Every lane of the
// warp calls it on the same trips (the reduxes take the whole warp).
#include "common/philox_cuda.cuh"
#include "multinomial/kernels_cuda.cuh"
#include "multinomial/race_bounds.cuh"

#include <limits>
#include <type_traits>

namespace wrs::multinomial {

// Values as the bounds take them: float for every input but float64 (exact either way).
template <typename scalar_t>
using value_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;

template <typename scalar_t>
struct alignas(4 * sizeof(scalar_t)) Quad {
  scalar_t item[4];
};

// The items of quad q below n: one vector load where the row is aligned and the quad whole.
template <typename scalar_t>
__device__ inline void load_quad(const scalar_t* xr, int64_t n, int64_t q, bool aligned, value_t<scalar_t> (&v)[4],
                                 bool (&item)[4]) {
  if (aligned && 4 * q + 3 < n) {
    const Quad<scalar_t> quad = reinterpret_cast<const Quad<scalar_t>*>(xr)[q];
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      v[h] = static_cast<value_t<scalar_t>>(quad.item[h]);
      item[h] = true;
    }
    return;
  }
#pragma unroll
  for (int h = 0; h < 4; ++h) {
    item[h] = 4 * q + h < n;
    v[h] = item[h] ? static_cast<value_t<scalar_t>>(xr[4 * q + h]) : value_t<scalar_t>(0);
  }
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
// below q_end); `first_trip` starts warp_floor from the trip's own bound.
template <int QUADS, typename scalar_t, typename Weights>
__device__ inline void race_trip(const scalar_t* xr, int64_t n, int64_t first, int64_t stride, int64_t q_end,
                                 bool aligned, bool first_trip, uint64_t row_sub, const Weights& wts,
                                 const PhiloxSeed& seed, RaceTally& mine, float& warp_floor) {
  using V = value_t<scalar_t>;
  V v[QUADS][4];
  bool item[QUADS][4];
  uint32_t hi[QUADS][4];
#pragma unroll
  for (int j = 0; j < QUADS; ++j) {
    const int64_t q = first + j * stride;
    if (q < q_end) {
      load_quad(xr, n, q, aligned, v[j], item[j]);
    } else {
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        item[j][h] = false;
        v[j][h] = V(0);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < QUADS; ++j) {
    const int64_t q = first + j * stride;
    const uint4 high = q < q_end ? philox_block_cuda(seed, row_sub + q) : make_uint4(0, 0, 0, 0);
    hi[j][0] = high.x, hi[j][1] = high.y, hi[j][2] = high.z, hi[j][3] = high.w;
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      if (!item[j][h]) continue;
      mine.flags |= value_flags<Weights>(v[j][h]);
      mine.nonzero += nonzero_value<Weights>(v[j][h]);
      if constexpr (!Weights::kLogits) mine.sum += static_cast<double>(v[j][h]);
    }
  }
  if (first_trip) {  // start from the float bound below the trip's keys
    float below = -INFINITY;
#pragma unroll
    for (int j = 0; j < QUADS; ++j) {
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        if (item[j][h] && nonzero_value<Weights>(v[j][h])) below = fmaxf(below, key_below(wts, v[j][h], hi[j][h]));
      }
    }
    warp_floor = from_ordered_float_bits(__reduce_max_sync(kFullMask, ordered_float_bits(below)));
  }
#pragma unroll
  for (int j = 0; j < QUADS; ++j) {
    const int64_t q = first + j * stride;
    const double beat = fmax(mine.key, static_cast<double>(warp_floor));
    bool full[4] = {false, false, false, false};
    bool any_full = false;
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      if (!item[j][h]) continue;
      if (!nonzero_value<Weights>(v[j][h])) {
        const double key = wts.key(static_cast<double>(v[j][h]), 1.0);  // no E: a zero weight's key
        if (key > mine.key) {  // a thread's items come in increasing order: ties keep the first
          mine.key = key;
          mine.index = 4 * q + h;
        }
      } else if (!surely_below(wts, v[j][h], hi[j][h], beat)) {
        full[h] = true;
        any_full = true;
      }
    }
    if (any_full) {
      const uint4 low = philox_block_cuda(PhiloxSeed{seed.seed, seed.offset + 4}, row_sub + q);
      const uint32_t lo[4] = {low.x, low.y, low.z, low.w};
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        if (!full[h]) continue;
        const double key = wts.key(static_cast<double>(v[j][h]), exponential(lo[h], hi[j][h]));
        if (key > mine.key) {
          mine.key = key;
          mine.index = 4 * q + h;
        }
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
