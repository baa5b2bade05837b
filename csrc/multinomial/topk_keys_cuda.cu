// Without replacement, more than 64 draws per row: every item's race key (laws.h;
// quad_keys), for torch.topk to rank, in float first where that is safe, with the
// near-ties ordered by float64 key; or, over long rows, each chunk's largest key first.
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "multinomial/kernels_cuda.cuh"
#include "multinomial/race_bounds.cuh"
#include "multinomial/race_trip.cuh"

#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>

#include <cfloat>
#include <type_traits>

namespace wrs::multinomial {
namespace {

constexpr int kThreads = 256;

// E ~ Exp(1) from the 64 bits exponential() takes, in float: u or 1 - u (whichever is below
// 1/2) converted to float (2^-23 relative, the 0.5 included) and logf or log1pf (1 ulp),
// whose condition number there is at most 1 / log 2: within 2^-21.5 relative of E.
__device__ inline float exponential_float(uint32_t lo, uint32_t hi) {
  const uint64_t r = (static_cast<uint64_t>(hi) << 32) | lo;
  constexpr float k2to64 = 0x1.0p-64f, kHalf2to64 = 0x1.0p-65f;
  if (r >> 63) return -log1pf(-(__ull2float_rn(~r) * k2to64 + kHalf2to64));
  return -logf(__ull2float_rn(r) * k2to64 + kHalf2to64);
}

// A float within key_error of an item's float64 race key (weights.key(v, E)), for inputs
// exact in float: probabilities v / E within 2^-21.3 relative plus the rounding of a
// subnormal quotient (2^-150); logits v / T - log E within 2^-22 |key| plus 2^-16.9 (|log E|
// <= 45, so |v / T| <= |key| + 45; the float 1 / T, product, log and sum each round).
// Zero weights get the float64 key's rounding (0, or -inf for -DBL_MAX).
__device__ inline float approx_key(const ProbWeights&, float v, uint32_t lo, uint32_t hi) {
  return v > 0 ? v / exponential_float(lo, hi) : 0.0f;
}
__device__ inline float approx_key(const LogitWeights& w, float v, uint32_t lo, uint32_t hi) {
  if (!(v > -INFINITY)) return -INFINITY;
  return v * static_cast<float>(w.inv_temperature) - logf(exponential_float(lo, hi));
}

// How far a float key may be from its item's float64 key, with room to spare (twice the
// bounds above, which also cover a float64 key rounded to float).
template <typename Weights>
__device__ inline float key_error(float a) {
  return fabsf(a) * 0x1.0p-20f + (Weights::kLogits ? 0x1.0p-16f : 0x1.0p-148f);
}

// Is the float64 key behind float key `above` surely larger than the one behind `below`?
// (Infinite keys never are: their errors are infinite.)
template <typename Weights>
__device__ inline bool surely_ordered(float above, float below) {
  return above - below > key_error<Weights>(above) + key_error<Weights>(below);
}

// Race keys of every item, quad q of row r from Philox subsequence r * quads + q, as
// above: float64, or rounded to float (monotone, so the order of the float keys is that of
// the float64 ones up to ties); or, with `approx` and inputs exact in float, computed in
// float within key_error of the float64 keys (approx_key: no float64 log; its own kernel,
// whose registers the float64 path would otherwise set). At most 64 registers, four
// blocks an SM: at 87 registers (two blocks) the float64 path waits on its log and
// Philox chains with a quarter of the SM's warps (docs/methods.md, "More than 64 draws
// without replacement").
template <typename scalar_t, typename Weights, typename key_t, bool kApprox>
__global__ void __launch_bounds__(kThreads, 4)
    race_keys_kernel(const scalar_t* x, int64_t rows, int64_t n, Weights wts, at::PhiloxCudaState philox, key_t* keys,
                     uint32_t* status) {
  static_assert(!kApprox || (std::is_same_v<key_t, float> && !std::is_same_v<scalar_t, double>));
  const PhiloxSeed seed = philox_seed(philox);
  const int64_t quads = (n + 3) / 4;
  uint32_t flags = 0;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < rows * quads;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = t / quads;
    const int64_t q = t - row * quads;
    key_t* out = keys + row * n + 4 * q;
    if constexpr (kApprox) {
      const uint4 high = philox_block_cuda(seed, static_cast<uint64_t>(t));
      const uint4 low = philox_block_cuda(PhiloxSeed{seed.seed, seed.offset + 4}, static_cast<uint64_t>(t));
      const uint32_t hi[4] = {high.x, high.y, high.z, high.w};
      const uint32_t lo[4] = {low.x, low.y, low.z, low.w};
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        if (4 * q + h >= n) continue;
        const float v = static_cast<float>(x[row * n + 4 * q + h]);
        flags |= Weights::kLogits ? LogitWeights::flags(v) : weight_flags(v);
        out[h] = approx_key(wts, v, lo[h], hi[h]);
      }
    } else {
      double key[4];
      unsigned long long nonzero = 0;  // unused: the caller finds rows with too few from the top k
      quad_keys(x + row * n, n, q, static_cast<uint64_t>(t), wts, seed, Weights::kNone, key, flags, nonzero);
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        if (4 * q + h < n) out[h] = static_cast<key_t>(key[h]);
      }
    }
  }
  flags = __reduce_or_sync(kFullMask, flags);
  if (threadIdx.x % kWarp == 0 && flags) atomicOr(status, flags);
}

// The float64 race key of item i of row `row` (quad_keys's for that item).
template <typename scalar_t, typename Weights>
__device__ double item_key(const scalar_t* x, int64_t n, int64_t row, int64_t i, const Weights& wts,
                           const PhiloxSeed& seed) {
  const double v = static_cast<double>(x[row * n + i]);
  if (!Weights::nonzero(v)) return wts.key(v, 1.0);
  const uint64_t sub = static_cast<uint64_t>(row * ((n + 3) / 4) + i / 4);
  const uint4 high = philox_block_cuda(seed, sub);
  const uint4 low = philox_block_cuda(PhiloxSeed{seed.seed, seed.offset + 4}, sub);
  const uint32_t hi[4] = {high.x, high.y, high.z, high.w};
  const uint32_t lo[4] = {low.x, low.y, low.z, low.w};
  return wts.key(v, exponential(lo[i % 4], hi[i % 4]));
}

// A row's candidates come in decreasing order of float keys (race_keys_kernel's): float64
// keys rounded, or with `approx` each within key_error of its float64 key. A run of them
// where no neighbour is surely below the one before (for rounded keys: equal ones) is
// sorted by float64 key (item_key), by the thread at its start;
// past a run's end every key is below all of the run's, so the first k of the runs in
// order are the draws. A lone candidate whose float key is above a zero weight's is a
// nonzero weight's and needs no float64 key (its Philox blocks and log). kFloatKeyTies
// (the caller then ranks float64 keys) where a run from the first k reaches the last
// candidate of less than the whole row (items past it could belong), and where a run is
// longer than kTieSlack (weights far outside float's range round to equal keys; sorting
// such a run here would take its length squared). Zero-sum rows and rows with too few
// nonzero weights show in the float64 keys.
template <typename scalar_t, typename Weights>
__global__ void rank_candidates_kernel(const scalar_t* x, int64_t rows, int64_t n, int64_t k, int64_t cands,
                                       Weights wts, at::PhiloxCudaState philox, bool approx, const float* cand_g,
                                       int64_t* cand_index, double* cand_key, int64_t* out, uint32_t* status) {
  const PhiloxSeed seed = philox_seed(philox);
  // Rounded float64 keys are ordered wherever they differ; approximate ones past their errors.
  const auto ordered = [approx](float above, float below) {
    return approx ? surely_ordered<Weights>(above, below) : above > below;
  };
  const double zero_key = wts.key(Weights::kLogits ? -INFINITY : 0.0, 1.0);
  const float zero_key_f = static_cast<float>(zero_key);
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < rows * cands;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = t / cands;
    const int64_t j = t - row * cands;
    if (j >= k || (j > 0 && !ordered(cand_g[t - 1], cand_g[t]))) continue;  // not a run's start
    const int64_t first = row * cands;
    int64_t end = j + 1;
    while (end < cands && end - j <= kTieSlack && !ordered(cand_g[first + end - 1], cand_g[first + end])) ++end;
    if (end - j > kTieSlack || (end == cands && cands < n)) {
      atomicOr(status, kFloatKeyTies);
      continue;
    }
    const bool exact = end > j + 1 || !(cand_g[t] > zero_key_f);  // float64 keys needed
    if (exact) {
      for (int64_t a = j; a < end; ++a) {  // insertion sort, decreasing by float64 key
        const int64_t index = cand_index[first + a];
        const double key = item_key(x, n, row, index, wts, seed);
        int64_t b = a;
        for (; b > j && cand_key[first + b - 1] < key; --b) {
          cand_key[first + b] = cand_key[first + b - 1];
          cand_index[first + b] = cand_index[first + b - 1];
        }
        cand_key[first + b] = key;
        cand_index[first + b] = index;
      }
    }
    for (int64_t p = j; p < end && p < k; ++p) out[row * k + p] = cand_index[first + p];
    uint32_t flags = 0;
    if (exact && j == 0 && cand_key[first] <= zero_key) flags |= kRowZeroSum;
    if (exact && j <= k - 1 && k - 1 < end && cand_key[first + k - 1] <= zero_key) flags |= kTooFewNonzero;
    if (flags) atomicOr(status, flags);
  }
}

// Beyond kMaxTopK draws over rows of many more items (chunk_max_serves): the largest
// float64 race key of each chunk of `chunk` items (chunk / 4 lanes of a warp, a quad each;
// the keys of race_keys_kernel). Every item of a row's top k lies in one of the k chunks
// with the largest maxima: those k chunks hold k keys at least as large as any other
// chunk's. Past the row's end, kNone.
template <typename scalar_t, typename Weights>
__global__ void chunk_max_keys_kernel(const scalar_t* x, int64_t rows, int64_t n, int64_t chunk, Weights wts,
                                      at::PhiloxCudaState philox, double* chunk_max, uint32_t* status) {
  const PhiloxSeed seed = philox_seed(philox);
  const int lanes = static_cast<int>(chunk / 4);  // a power of two <= kWarp
  const int64_t quads = (n + 3) / 4;
  const int64_t chunks = (n + chunk - 1) / chunk;
  const int64_t row_lanes = chunks * lanes;
  const int64_t total = rows * row_lanes;
  uint32_t flags = 0;
  // Whole warps per trip, so each chunk's lanes reduce together.
  for (int64_t base = blockIdx.x * static_cast<int64_t>(blockDim.x) + (threadIdx.x & ~(kWarp - 1)); base < total;
       base += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = base + threadIdx.x % kWarp;
    const int64_t row = t / row_lanes;
    const int64_t q = t - row * row_lanes;
    const bool mine = t < total && q < quads;
    // First a float bound below the chunk's largest key (the high words only, as
    // trip_key_floor); then the float64 keys of the items it does not rule out.
    uint32_t hi[4] = {0, 0, 0, 0};
    double v[4] = {0, 0, 0, 0};
    float below = -INFINITY;
    if (mine) {
      const uint4 high = philox_block_cuda(seed, static_cast<uint64_t>(row * quads + q));
      hi[0] = high.x, hi[1] = high.y, hi[2] = high.z, hi[3] = high.w;
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        if (4 * q + h >= n) continue;
        v[h] = static_cast<double>(x[row * n + 4 * q + h]);
        flags |= Weights::kLogits ? LogitWeights::flags(v[h]) : weight_flags(v[h]);
        if (Weights::nonzero(v[h])) below = fmaxf(below, key_below(wts, v[h], hi[h]));
      }
    }
    for (int offset = lanes / 2; offset > 0; offset /= 2) {
      below = fmaxf(below, __shfl_xor_sync(kFullMask, below, offset));
    }
    double best = Weights::kNone;
    bool full[4] = {false, false, false, false};
    bool any_full = false;
    if (mine) {
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        if (4 * q + h >= n) continue;
        if (!Weights::nonzero(v[h])) {
          best = fmax(best, wts.key(v[h], 1.0));
        } else if (!surely_below(wts, v[h], hi[h], static_cast<double>(below))) {
          full[h] = true;
          any_full = true;
        }
      }
    }
    if (any_full) {
      const uint4 low = philox_block_cuda(PhiloxSeed{seed.seed, seed.offset + 4}, static_cast<uint64_t>(row * quads + q));
      const uint32_t lo[4] = {low.x, low.y, low.z, low.w};
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        if (full[h]) best = fmax(best, wts.key(v[h], exponential(lo[h], hi[h])));
      }
    }
    for (int offset = lanes / 2; offset > 0; offset /= 2) best = fmax(best, __shfl_xor_sync(kFullMask, best, offset));
    if (t < total && q % lanes == 0) chunk_max[row * chunks + q / lanes] = best;
  }
  flags = __reduce_or_sync(kFullMask, flags);
  if (threadIdx.x % kWarp == 0 && flags) atomicOr(status, flags);
}

// The float64 keys of the items of each row's k picked chunks, [rows, k * chunk] in the
// order of `pick` (chunk indices, [rows, k]); kNone past the row's end.
template <typename scalar_t, typename Weights>
__global__ void picked_chunk_keys_kernel(const scalar_t* x, int64_t rows, int64_t n, int64_t k, int64_t chunk,
                                         Weights wts, at::PhiloxCudaState philox, const int64_t* pick,
                                         double* keys) {
  const PhiloxSeed seed = philox_seed(philox);
  const int64_t lanes = chunk / 4;
  const int64_t quads = (n + 3) / 4;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < rows * k * lanes;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = t / (k * lanes);
    const int64_t s = t / lanes;  // row * k + the slot of the pick
    const int64_t q = pick[s] * lanes + t % lanes;
    double key[4] = {Weights::kNone, Weights::kNone, Weights::kNone, Weights::kNone};
    if (q < quads) {
      uint32_t flags = 0;  // flagged by the first pass
      unsigned long long nonzero = 0;
      quad_keys(x + row * n, n, q, static_cast<uint64_t>(row * quads + q), wts, seed, Weights::kNone, key, flags,
                nonzero);
    }
#pragma unroll
    for (int h = 0; h < 4; ++h) keys[t * 4 + h] = key[h];
  }
}

// Draw j of a row: the item at position pos[j] of the row's picked chunks' keys.
__global__ void picked_items_kernel(int64_t rows, int64_t k, int64_t chunk, const int64_t* pick, const int64_t* pos,
                                    int64_t* out) {
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < rows * k;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = t / k;
    out[t] = pick[row * k + pos[t] / chunk] * chunk + pos[t] % chunk;
  }
}

}  // namespace

template <typename key_t>
void race_keys(const DrawCall& call, key_t* keys, bool approx) {
  const int blocks = grid_for(call.rows * ((call.n + 3) / 4), kThreads);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "race_keys_cuda", [&] {
    const scalar_t* x = call.x.const_data_ptr<scalar_t>();
    with_weights(call, [&](const auto& wts) {
      using W = std::decay_t<decltype(wts)>;
      constexpr bool kCanApprox = std::is_same_v<key_t, float> && !std::is_same_v<scalar_t, double>;
      if (kCanApprox && approx) {
        race_keys_kernel<scalar_t, W, key_t, kCanApprox>
            <<<blocks, kThreads, 0, call.stream>>>(x, call.rows, call.n, wts, call.philox, keys, call.status);
      } else {
        race_keys_kernel<scalar_t, W, key_t, false>
            <<<blocks, kThreads, 0, call.stream>>>(x, call.rows, call.n, wts, call.philox, keys, call.status);
      }
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}
template void race_keys<double>(const DrawCall& call, double* keys, bool approx);
template void race_keys<float>(const DrawCall& call, float* keys, bool approx);

void rank_candidates(const DrawCall& call, int64_t cands, bool approx, const float* cand_g, int64_t* cand_index,
                     double* cand_key) {
  const int blocks = grid_for(call.rows * cands, kThreads);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "rank_candidates_cuda", [&] {
    const scalar_t* x = call.x.const_data_ptr<scalar_t>();
    with_weights(call, [&](const auto& wts) {
      rank_candidates_kernel<<<blocks, kThreads, 0, call.stream>>>(x, call.rows, call.n, call.k, cands, wts,
                                                                  call.philox, approx, cand_g, cand_index, cand_key,
                                                                  call.out, call.status);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

int64_t chunk_max_items(int64_t n, int64_t k) {
  int64_t chunk = 4;
  while (chunk < 4 * kWarp && 4 * chunk * chunk * k <= n) chunk *= 2;  // up to about sqrt(n / k)
  return chunk;
}

void chunk_max_keys(const DrawCall& call, int64_t chunk, double* chunk_max) {
  const int64_t lanes = ceil_div(call.n, chunk) * (chunk / 4);
  const int blocks = grid_for(call.rows * lanes, kThreads);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "chunk_max_keys_cuda", [&] {
    const scalar_t* x = call.x.const_data_ptr<scalar_t>();
    with_weights(call, [&](const auto& wts) {
      chunk_max_keys_kernel<<<blocks, kThreads, 0, call.stream>>>(x, call.rows, call.n, chunk, wts, call.philox,
                                                                 chunk_max, call.status);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

void picked_chunk_keys(const DrawCall& call, int64_t chunk, const int64_t* pick, double* keys) {
  const int blocks = grid_for(call.rows * call.k * (chunk / 4), kThreads);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "picked_chunk_keys_cuda", [&] {
    const scalar_t* x = call.x.const_data_ptr<scalar_t>();
    with_weights(call, [&](const auto& wts) {
      picked_chunk_keys_kernel<<<blocks, kThreads, 0, call.stream>>>(x, call.rows, call.n, call.k, chunk, wts,
                                                                    call.philox, pick, keys);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

void picked_items(const DrawCall& call, int64_t chunk, const int64_t* pick, const int64_t* pos) {
  picked_items_kernel<<<grid_for(call.rows * call.k, kThreads), kThreads, 0, call.stream>>>(call.rows, call.k, chunk,
                                                                                           pick, pos, call.out);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace wrs::multinomial
