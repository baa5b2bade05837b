// Without replacement, 2 <= k <= 64 draws from rows of up to kMaxFloorRow items, a block
// per row: a floor below the row's k-th race key, then the exact keys of the few items
// that could reach it. No lists and one read of the row from memory (the few quads that
// are read again are in cache).
//
// 1. Each thread takes quads t, t + 256, ...: their high words (one Philox block a quad),
//    and from them alone float bounds below and above every key (race_bounds.cuh:
//    key_range; no log for probabilities). It keeps the largest bound below, and each
//    quad's largest bound above (its ceiling, in shared memory).
// 2. The floor: each warp's ceil(k / 8)-th largest of its lanes' bounds below, the
//    smallest over the 8 warps. At least k items, each a different thread's, have keys at
//    or above it, so the row's top k are too.
// 3. Only quads whose ceiling reaches the floor are read again: their items' float64
//    keys (the low words too), those at or above the floor appended to the candidates:
//    a few more than k where the heavy items are spread over the threads. Were there
//    more than a block ranks (heavy items in few threads' quads: sorted rows, rows
//    mostly zero), the k-th largest of those held becomes the floor and step 3 runs
//    again.
// 4. Each candidate's rank is the number of candidates before it (larger key, or equal
//    key and lower item): those ranked below k are the draws, in order.
//
// The keys are those of every race kernel (laws.h; item quad q of row r takes Philox
// subsequence r * quads + q, the high words from the call's offset, the low words from
// the block after), so the draws are the first k of the row's keys, as draw_topk's.
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "multinomial/kernels_cuda.cuh"
#include "multinomial/race_bounds.cuh"
#include "multinomial/race_trip.cuh"

#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>

namespace wrs::multinomial {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;
constexpr int kCandidates = kThreads;  // a thread per candidate ranks them

// This thread's candidate's rank among the `held` in shared memory: how many come before
// it (a larger key, or an equal key and a lower item, so that equal keys, which laws.h
// bounds at 2^-49 a draw, still rank the same on every run).
__device__ inline unsigned candidate_rank(const double* cand_key, const int32_t* cand_item, unsigned held) {
  const double key = cand_key[threadIdx.x];
  const int32_t item = cand_item[threadIdx.x];
  unsigned rank = 0;
  for (unsigned j = 0; j < held; ++j) {
    const double other = cand_key[j];
    rank += other > key || (other == key && cand_item[j] < item);
  }
  return rank;
}

template <typename scalar_t, typename Weights>
__global__ void __launch_bounds__(kThreads)
    floor_topk_kernel(const scalar_t* x, int64_t n, int64_t k, Weights wts, at::PhiloxCudaState philox, int64_t* out,
                      uint32_t* status) {
  using V = value_t<scalar_t>;
  extern __shared__ float quad_ceiling[];  // per quad of the row: at or above its items' keys
  __shared__ double cand_key[kCandidates];
  __shared__ int32_t cand_item[kCandidates];
  __shared__ uint32_t warp_floor[kWarps];
  __shared__ unsigned count;
  __shared__ double next_floor;
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int64_t row = blockIdx.x;
  const int64_t quads = (n + 3) / 4;
  const scalar_t* xr = x + row * n;
  const bool aligned = reinterpret_cast<uintptr_t>(xr) % sizeof(Quad<scalar_t>) == 0;
  const PhiloxSeed seed = philox_seed(philox);
  const uint64_t row_sub = static_cast<uint64_t>(row * quads);

  // 1. Bounds from the high words.
  float best_below = -INFINITY;
  V smallest = V(0), largest = V(0);  // 0 past the row's end, which flags nothing
  bool nan = false;
  for (int64_t q = threadIdx.x; q < quads; q += kThreads) {
    V v[4];
    const uint32_t in_row = load_quad(xr, n, q, aligned, v);
    const uint4 high = philox_block_cuda(seed, row_sub + q);
    const uint32_t hi[4] = {high.x, high.y, high.z, high.w};
    float ceiling = -INFINITY;
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      smallest = fmin(smallest, v[h]);  // NaN aside
      largest = fmax(largest, v[h]);
      nan |= v[h] != v[h];
      const KeyRange range = key_range(wts, v[h], hi[h]);
      if ((in_row >> h & 1) && nonzero_value<Weights>(v[h])) {
        best_below = fmaxf(best_below, range.below);
        ceiling = fmaxf(ceiling, range.above);
      }
    }
    quad_ceiling[q] = ceiling;
  }
  const uint32_t flags = __reduce_or_sync(
      kFullMask, value_flags<Weights>(smallest) | value_flags<Weights>(largest) | (nan ? kWeightNaN : 0u));
  if (lane == 0 && flags) atomicOr(status, flags);

  // 2. The floor: drop the warp's largest bounds one at a time (one lane each, ties too).
  uint32_t mine = ordered_float_bits(best_below);  // above 0, which marks a dropped lane
  const int per_warp = static_cast<int>((k + kWarps - 1) / kWarps);
  for (int i = 1; i < per_warp; ++i) {
    const uint32_t top = __reduce_max_sync(kFullMask, mine);
    if (lane == __ffs(__ballot_sync(kFullMask, mine == top)) - 1) mine = 0;
  }
  const uint32_t warp_share = __reduce_max_sync(kFullMask, mine);
  if (lane == 0) warp_floor[warp] = warp_share;
  if (threadIdx.x == 0) count = 0;
  __syncthreads();
  uint32_t floor_bits = warp_floor[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) floor_bits = min(floor_bits, warp_floor[w]);
  double floor = static_cast<double>(from_ordered_float_bits(floor_bits));

  // 3. The candidates: every item whose key is at or above the floor.
  const PhiloxSeed low_seed{seed.seed, seed.offset + 4};
  unsigned held;
  for (;;) {
    for (int64_t q = threadIdx.x; q < quads; q += kThreads) {
      const float ceiling = quad_ceiling[q];
      if (!(ceiling > -INFINITY && static_cast<double>(ceiling) >= floor)) continue;
      V v[4];
      const uint32_t in_row = load_quad(xr, n, q, aligned, v);
      const uint4 high = philox_block_cuda(seed, row_sub + q);
      const uint4 low = philox_block_cuda(low_seed, row_sub + q);
      const uint32_t hi[4] = {high.x, high.y, high.z, high.w};
      const uint32_t lo[4] = {low.x, low.y, low.z, low.w};
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        if (!((in_row >> h & 1) && nonzero_value<Weights>(v[h]))) continue;
        const double key = wts.key(static_cast<double>(v[h]), exponential(lo[h], hi[h]));
        if (!(key >= floor)) continue;
        const unsigned slot = atomicAdd(&count, 1u);
        if (slot < kCandidates) {
          cand_key[slot] = key;
          cand_item[slot] = static_cast<int32_t>(4 * q + h);
        }
      }
    }
    __syncthreads();
    const unsigned total = count;
    held = min(total, static_cast<unsigned>(kCandidates));
    if (total <= kCandidates) break;
    // More than a block ranks: the k-th largest key held is a higher floor (k items are at
    // or above it), so step 3 runs again and keeps fewer.
    if (threadIdx.x < held && candidate_rank(cand_key, cand_item, held) == static_cast<uint64_t>(k - 1)) {
      next_floor = cand_key[threadIdx.x];
    }
    __syncthreads();
    const double raised = next_floor;
    if (!(raised > floor)) break;  // keys tied across the held candidates (only infinite ones): rank those
    floor = raised;
    __syncthreads();  // every thread has read the count and next_floor
    if (threadIdx.x == 0) count = 0;
    __syncthreads();
  }

  // 4. Ranks.
  if (threadIdx.x < held) {
    const unsigned rank = candidate_rank(cand_key, cand_item, held);
    if (rank < static_cast<uint64_t>(k)) out[row * k + rank] = cand_item[threadIdx.x];
  }
  // Fewer candidates than draws happens only with the floor at -inf, so they are all the
  // row's nonzero weights: the row is flagged, and (as every top-k path gives, under
  // capture) its first zero weights follow them.
  if (threadIdx.x == 0 && held < static_cast<uint64_t>(k)) {
    atomicOr(status, kTooFewNonzero | (held == 0 ? static_cast<uint32_t>(kRowZeroSum) : 0u));
    int64_t rank = held;
    for (int64_t i = 0; i < n && rank < k; ++i) {
      if (!nonzero_value<Weights>(static_cast<V>(xr[i]))) out[row * k + rank++] = i;
    }
  }
}

}  // namespace

void draw_floor_topk(const DrawCall& call) {
  TORCH_INTERNAL_ASSERT(floor_topk_serves(call.rows, call.n, call.k));
  const size_t shared_bytes = static_cast<size_t>((call.n + 3) / 4) * sizeof(float);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "floor_topk_cuda", [&] {
    with_weights(call, [&](const auto& wts) {
      floor_topk_kernel<<<static_cast<unsigned>(call.rows), kThreads, shared_bytes, call.stream>>>(
          call.x.const_data_ptr<scalar_t>(), call.n, call.k, wts, call.philox, call.out, call.status);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace wrs::multinomial
