#pragma once
// Warp-level pieces the LLM kernels share (plain_cuda.cu, sample_cuda.cu, top_p_cuda.cu,
// speculative_cuda.cu): a row is read as quads of four items, raw or through a penalty plan
// (RawRow, PlanRow), a warp's 32 quads being one 128-item segment, whose weights are summed
// in float64 and, for the draw, walked in row order.
#include "llm/penalties.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

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

// A row as the samplers read it. RawRow is the input pointer alone, so kernels without a
// penalty plan are those of a plain row; PlanRow reads the row through a plan (penalties.h),
// its CTA's share of the prefixes and override values staged in shared memory (make_row)
// so that an overridden item costs a shared-memory read, not a dependent trip to L2.
template <typename scalar_t>
struct RawRow {
  const scalar_t* x;
};

template <typename scalar_t>
struct PlanRow {
  const scalar_t* x;
  const int32_t* plan;    // the row's plan
  const int32_t* staged;  // shared: prefix[k0, k0 + words), then values[n0, n0 + values)
  int k0, words, n0, values;
  int cap;
};

template <bool kPlan, typename scalar_t>
using RowOf = std::conditional_t<kPlan, PlanRow<scalar_t>, RawRow<scalar_t>>;

template <typename scalar_t>
__device__ inline bool four_aligned(const RawRow<scalar_t>& s) {
  return four_aligned(s.x);
}
template <typename scalar_t>
__device__ inline bool four_aligned(const PlanRow<scalar_t>& s) {
  return four_aligned(s.x);
}

// A call's penalty plan as the kernels take it (base nullptr: none).
struct PlanArg {
  const int32_t* base;
  int64_t stride;
  int64_t cap;
  int stage_words = 0;  // what a CTA may stage in shared memory (make_row)
  int stage_values = 0;
  // The staging a CTA over `items` of a row takes: up to 2,048 values and its words'
  // prefixes, within `budget` bytes (the rest are read from the plan in device memory).
  static constexpr int64_t kMaxStageValues = 2048;
  void stage_for(int64_t items, int64_t budget) {
    stage_values = static_cast<int>(kMaxStageValues);
    const int64_t fit = budget / static_cast<int64_t>(sizeof(int32_t)) - kMaxStageValues;
    stage_words = static_cast<int>(std::max<int64_t>(0, std::min((items + 31) / 32 + 1, fit)));
  }
  size_t stage_bytes() const { return base ? sizeof(int32_t) * (stage_words + stage_values) : 0; }
};

// Item t's override value (its override bit set in `over`): staged where the CTA staged it,
// else from the plan in device memory.
template <typename scalar_t>
__device__ inline float override_value(const PlanRow<scalar_t>& s, int64_t v, uint32_t over, int64_t t) {
  const int64_t k = t >> 5, kk = k - s.k0;
  const int32_t pre = kk >= 0 && kk < s.words ? s.staged[kk] : s.plan[2 * plan_words(v) + k];
  const int64_t i = plan_rank(pre, over, t), j = i - s.n0;
  if (j >= 0 && j < s.values) return __int_as_float(s.staged[s.words + j]);
  return i >= 0 && i < s.cap ? __int_as_float(s.plan[plan_values_at(v) + i]) : NAN;
}

// n ints from global memory to shared, eight loads in flight a thread.
__device__ inline void stage_copy(int32_t* to, const int32_t* from, int n) {
  constexpr int kBatch = 8;
  for (int j0 = threadIdx.x; j0 < n; j0 += kBatch * blockDim.x) {
    int32_t t[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int j = j0 + u * blockDim.x;
      t[u] = j < n ? from[j] : 0;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int j = j0 + u * blockDim.x;
      if (j < n) to[j] = t[u];
    }
  }
}

// Row `row`'s reader; with a plan, the CTA stages the prefixes of the words over quads
// [q_begin, q_end) and their override values (up to `max_words` and `max_values`) in
// `staging` (shared memory) and synchronises the block. Every thread of the block calls it.
template <bool kPlan, typename scalar_t>
__device__ inline RowOf<kPlan, scalar_t> make_row(const PlanArg& p, const scalar_t* x, int64_t row, int64_t v,
                                                   int64_t q_begin, int64_t q_end, int32_t* staging, int max_words,
                                                   int max_values) {
  if constexpr (!kPlan) {
    return {x + row * v};
  } else {
    PlanRow<scalar_t> r{x + row * v, p.base + row * p.stride, staging, 0, 0, 0, 0, static_cast<int>(p.cap)};
    const int64_t words = plan_words(v), k0 = q_begin >> 3, k1 = min(words, (q_end + 7) >> 3);
    const int32_t* prefix = r.plan + 2 * words;
    r.k0 = static_cast<int>(k0);
    if (k1 > k0 && k1 - k0 <= max_words) {
      r.words = static_cast<int>(k1 - k0);
      // Clamped to the row's values, so that a tensor penalty_plan did not build reads no
      // memory outside its row.
      r.n0 = static_cast<int>(min(max(int64_t{prefix[k0]}, int64_t{0}), p.cap));
      const int64_t n1 = k1 < words ? min(int64_t{prefix[k1]}, p.cap) : p.cap;
      r.values = static_cast<int>(max(int64_t{0}, min(n1 - r.n0, static_cast<int64_t>(max_values))));
      stage_copy(staging, prefix + k0, r.words);
      stage_copy(staging + r.words, r.plan + plan_values_at(v) + r.n0, r.values);
      __syncthreads();
    }
    return r;
  }
}

// The allowed and override bits of the 32 items around quad q: one 8-byte load.
template <typename scalar_t>
__device__ inline uint2 plan_bits(const PlanRow<scalar_t>& s, int64_t q) {
  return reinterpret_cast<const uint2*>(s.plan)[q >> 3];
}

// A plan's rule over items 4q .. 4q + 3 (their raw values, times scale, in y), from their
// word of bits w (plan_bits).
template <typename scalar_t>
__device__ inline void apply_plan(const PlanRow<scalar_t>& s, int64_t v, int64_t q, uint2 w, int present, float scale,
                                  float (&y)[4]) {
  const int shift = static_cast<int>(4 * (q & 7));
  const uint32_t exists = present >= 4 ? 0xFu : (1u << present) - 1u;
  const uint32_t allowed = (w.x >> shift) | ~exists, over = (w.y >> shift) & exists & 0xFu;
  // Selects for the bitmask, a branch only for the few overridden items: the stream's
  // iterations stay short, so its loads follow each other closely.
#pragma unroll
  for (int h = 0; h < 4; ++h) y[h] = (allowed >> h) & 1u ? y[h] : -INFINITY;
  if (over == 0) return;
#pragma unroll
  for (int h = 0; h < 4; ++h) {
    if ((over >> h) & 1u) y[h] = override_value(s, v, w.y, 4 * q + h) * scale;
  }
}

template <typename scalar_t>
__device__ inline int load_four(const RawRow<scalar_t>& s, int64_t v, int64_t q, bool aligned, float scale,
                                float (&y)[4]) {
  return load_four(s.x, v, q, aligned, scale, y);
}

template <typename scalar_t>
__device__ inline int load_four(const PlanRow<scalar_t>& s, int64_t v, int64_t q, bool aligned, float scale,
                                float (&y)[4]) {
  const int present = load_four(s.x, v, q, aligned, scale, y);
  apply_plan(s, v, q, plan_bits(s, q), present, scale, y);
  return present;
}

template <typename RowT>
struct IsPlanRow : std::false_type {};
template <typename scalar_t>
struct IsPlanRow<PlanRow<scalar_t>> : std::true_type {};

// N quads q[u] (those `want` picks; present[u] = 0 for the rest): every load issued before
// any plan is applied, as a plan's branches between loads would leave one load in flight.
template <int N, typename RowT>
__device__ inline void load_quads(const RowT& s, int64_t v, const int64_t (&q)[N], const bool (&want)[N], bool aligned,
                                  float scale, float (&y)[N][4], int (&present)[N]) {
#pragma unroll
  for (int u = 0; u < N; ++u) present[u] = want[u] ? load_four(s.x, v, q[u], aligned, scale, y[u]) : 0;
  if constexpr (IsPlanRow<RowT>::value) {
    uint2 w[N];
#pragma unroll
    for (int u = 0; u < N; ++u) w[u] = present[u] ? plan_bits(s, q[u]) : make_uint2(~0u, 0u);
#pragma unroll
    for (int u = 0; u < N; ++u) apply_plan(s, v, q[u], w[u], present[u], scale, y[u]);
  }
}

// Item i's value, unscaled.
template <typename scalar_t>
__device__ inline float item_value(const RawRow<scalar_t>& s, int64_t, int64_t i) {
  return static_cast<float>(s.x[i]);
}
template <typename scalar_t>
__device__ inline float item_value(const PlanRow<scalar_t>& s, int64_t v, int64_t i) {
  const uint32_t allowed = static_cast<uint32_t>(s.plan[2 * (i >> 5)]), over = static_cast<uint32_t>(s.plan[2 * (i >> 5) + 1]);
  if ((over >> (i & 31)) & 1u) return override_value(s, v, over, i);
  return ((allowed >> (i & 31)) & 1u) ? static_cast<float>(s.x[i]) : -INFINITY;
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

// An item's log-probability, log(w / total), from its value y (log_total = log(total)):
// y - M first for logits, so that values near float's range keep their digits (M + log(total)
// rounds the log away there).
template <bool kLogits>
__device__ inline double log_share(float y, float row_max, double log_total) {
  return (kLogits ? static_cast<double>(y) - row_max : log(y)) - log_total;
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
