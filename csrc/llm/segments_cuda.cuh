#pragma once
// Warp-level pieces the LLM kernels share (plain_cuda.cu, sample_cuda.cu, speculative_cuda.cu):
// a row is read as quads of four items, a warp's 32 quads being one 128-item segment, whose
// weights are summed in float64 and, for the draw, walked in row order.
#include <cstdint>

namespace wrs::llm {

template <typename scalar_t>
struct alignas(4 * sizeof(scalar_t)) Four {
  scalar_t item[4];
};

// Items 4q .. 4q + 3 of a row, times `scale`, and how many exist (the rest read as 0).
template <typename scalar_t>
__device__ inline int load_four(const scalar_t* xr, int64_t v, int64_t q, bool aligned, float scale, float (&y)[4]) {
  if (aligned && 4 * q + 4 <= v) {
    const Four<scalar_t> f = reinterpret_cast<const Four<scalar_t>*>(xr)[q];
#pragma unroll
    for (int h = 0; h < 4; ++h) y[h] = static_cast<float>(f.item[h]) * scale;
    return 4;
  }
  const int present = static_cast<int>(min(int64_t{4}, v - 4 * q));
#pragma unroll
  for (int h = 0; h < 4; ++h) y[h] = h < present ? static_cast<float>(xr[4 * q + h]) * scale : 0.0f;
  return present;
}

template <typename scalar_t>
__device__ inline bool four_aligned(const scalar_t* p) {
  return reinterpret_cast<uintptr_t>(p) % sizeof(Four<scalar_t>) == 0;
}

__device__ inline double lane_sum(const float (&w)[4]) {
  return ((static_cast<double>(w[0]) + w[1]) + w[2]) + w[3];
}

__device__ inline double warp_sum(double x) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) x += __shfl_xor_sync(0xffffffffu, x, d);
  return x;
}

__device__ inline float warp_max(float x) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, d));
  return x;
}

struct Plus {
  __device__ double operator()(double a, double b) const { return a + b; }
};

// Four warp reductions at once: lane l returns op over the warp of a[l / 8]. Each step halves
// the values a lane carries, so it costs 6 shuffles where four warp_sum calls cost 20; each
// result is the same xor tree as warp_sum's, so bit for bit the same.
template <typename T, typename Op>
__device__ inline T warp_reduce_four(const T (&a)[4], Op op) {
  const int lane = threadIdx.x % 32;
  const bool hi16 = lane & 16, hi8 = lane & 8;
  const T b0 = op(hi16 ? a[2] : a[0], __shfl_xor_sync(0xffffffffu, hi16 ? a[0] : a[2], 16));
  const T b1 = op(hi16 ? a[3] : a[1], __shfl_xor_sync(0xffffffffu, hi16 ? a[1] : a[3], 16));
  T c = op(hi8 ? b1 : b0, __shfl_xor_sync(0xffffffffu, hi8 ? b0 : b1, 8));
#pragma unroll
  for (int d = 4; d > 0; d /= 2) c = op(c, __shfl_xor_sync(0xffffffffu, c, d));
  return c;
}

// The sum of x over lanes 0 .. this lane (a full warp).
__device__ inline double warp_inclusive_sum(double x) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const double up = __shfl_up_sync(0xffffffffu, x, d);
    if (lane >= d) x += up;
  }
  return x;
}

// A warp's walk of one segment (lane l holds the weights w of its quad): the first item
// whose cumulative weight in row order passes `target` (in the segment's own units). Where
// rounding leaves the target past the walked total, the segment's last item with weight.
// Every lane returns the chosen lane (-1: no item has weight); that lane's `h` is the item.
__device__ inline int walk_segment(const float (&w)[4], double target, int& h) {
  const int lane = threadIdx.x % 32;
  const double mine = lane_sum(w);
  double cum = warp_inclusive_sum(mine) - mine;
  int hit = -1, last = -1;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    cum += w[k];
    if (w[k] > 0.0f) last = k;
    if (hit < 0 && w[k] > 0.0f && target < cum) hit = k;
  }
  const unsigned found = __ballot_sync(0xffffffffu, hit >= 0);
  const unsigned with_weight = __ballot_sync(0xffffffffu, last >= 0);
  h = found ? hit : last;
  return found ? __ffs(found) - 1 : with_weight ? 31 - __clz(with_weight) : -1;
}

// The uniform point of a draw: [0, 1) from words x and y of a Philox block, 53 bits.
__device__ inline double uniform53(const uint4& w4) {
  return static_cast<double>(((static_cast<uint64_t>(w4.y) << 32) | w4.x) >> 11) * 0x1.0p-53;
}

// The CTA's segment holding `point`: the last with weight that starts at or below it, so no
// gap opens between segments whatever the rounding of their prefix sums. Thread t holds
// segments kPer t .. kPer t + kPer - 1: their weights and their prefix sums within the CTA,
// which starts at cta_before. Returns the segment (the same in every thread; -1 where no
// segment starts at or below the point) and sets *lo to where it starts. All threads call it.
template <int kPer>
__device__ inline int claim_segment(const double (&weight)[kPer], const double (&before)[kPer], double cta_before,
                                    double point, int* claim, double* lo) {
  if (threadIdx.x == 0) *claim = -1;
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    if (weight[k] > 0.0 && cta_before + before[k] <= point) atomicMax(claim, static_cast<int>(threadIdx.x) * kPer + k);
  }
  __syncthreads();
  const int seg = *claim;
  if (seg >= 0 && static_cast<int>(threadIdx.x) == seg / kPer) {
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      if (k == seg % kPer) *lo = cta_before + before[k];
    }
  }
  __syncthreads();
  return seg;
}

}  // namespace wrs::llm
