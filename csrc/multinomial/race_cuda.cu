// One draw per row from rows longer than the warp rows take: the exponential race's winner
// (laws.h), the item with the largest race key. Its keys are those of every race kernel
// (item quad q of row r from Philox subsequence r * quads + q: the high words from the
// call's offset, the low words from the block after), so the draw is the first draw
// without replacement that the top-k kernels (topk_*_cuda.cu) make with the same seed.
//
// One read of the row and one launch (the LLM decode case: a few rows of 32,000-152,000
// logits, where each launch and each extra pass is time the call feels):
//   - a block per chunk of a row, two quads per thread per trip (their loads in flight
//     together, one vector load each where the row is aligned), a running best (key, item)
//     per thread;
//   - most items cost a Philox block per quad and a float bound (race_trip.cuh): an item
//     whose key is surely below what its warp already holds draws no low word and takes
//     no float64 log;
//   - the block reduces (cub::BlockReduce); a row of several chunks is finished by the
//     block that completes it last (a counter per row), which reduces the chunks' bests.
// Equal keys (probability about 2^-50 a row) go to the lower index, wherever the row is cut.
//
// Validation: each warp ORs its items' value flags into the status word; the finishing
// block adds a zero or overflowing float64 sum (probabilities) or a row without a finite
// logit, as the inverse CDF flags them. The draw is an item of the row whatever the input.
#include "common/cuda_utils.cuh"
#include "multinomial/race_trip.cuh"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cub/block/block_reduce.cuh>

#include <limits>
#include <tuple>

namespace wrs::multinomial {
namespace {

constexpr int kThreads = 256;
constexpr int kQuadsPerThread = 2;  // per trip
constexpr int kTripQuads = kQuadsPerThread * kThreads;
constexpr int kMaxTripsPerChunk = 8;

// A stretch's best key and its item, and (probabilities) the float64 sum of its weights.
struct Best {
  double key;
  int64_t index;
  double sum;
};

struct CombineBest {
  __device__ Best operator()(const Best& a, const Best& b) const {
    const bool b_wins = beats(b.key, b.index, a.key, a.index);
    return Best{b_wins ? b.key : a.key, b_wins ? b.index : a.index, a.sum + b.sum};
  }
};

using BestReduce = cub::BlockReduce<Best, kThreads>;

// The row's draw and flags from its best: the value flags are the warps'; a zero or
// non-finite sum (probabilities), or no finite logit, is the row's.
template <typename Weights>
__device__ void finish_row(const Best& best, int64_t row, int64_t* out, uint32_t* status) {
  out[row] = best.index;
  const double sum = Weights::kLogits ? (best.key > -1.7976931348623157e308 ? 1.0 : 0.0) : best.sum;
  const uint32_t flags = row_flags(sum, 0u);
  if (flags) atomicOr(status, flags);
}

template <typename scalar_t, typename Weights>
__global__ void __launch_bounds__(kThreads, 4)
    race_kernel(const scalar_t* x, int64_t n, int64_t chunks, int64_t chunk_quads, Weights wts,
                at::PhiloxCudaState philox, Best* chunk_best, unsigned int* chunks_done, int64_t* out,
                uint32_t* status) {
  __shared__ typename BestReduce::TempStorage reduce;
  __shared__ bool finishes;
  const int64_t row = blockIdx.x / chunks;
  const int64_t chunk = blockIdx.x % chunks;
  const int64_t quads = (n + 3) / 4;
  const int64_t q_begin = chunk * chunk_quads;
  const int64_t q_end = min(quads, q_begin + chunk_quads);
  const scalar_t* xr = x + row * n;
  const bool aligned = reinterpret_cast<uintptr_t>(xr) % sizeof(Quad<scalar_t>) == 0;
  const uint64_t row_sub = static_cast<uint64_t>(row * quads);
  const PhiloxSeed seed = philox_seed(philox);
  RaceTally mine{Weights::kNone, 4 * q_begin, 0u, 0.0, 0u};
  float warp_floor = -INFINITY;  // below a key some lane of the warp holds (or will this trip)
  for (int64_t base = q_begin; base < q_end; base += kTripQuads) {  // the same trips in every lane
    race_trip<kQuadsPerThread>(xr, n, base + threadIdx.x, kThreads, q_end, aligned, base == q_begin, row_sub, wts,
                               seed, mine, warp_floor);
  }
  const uint32_t flags = __reduce_or_sync(kFullMask, mine.flags);
  if (threadIdx.x % kWarp == 0 && flags) atomicOr(status, flags);

  Best best = BestReduce(reduce).Reduce(Best{mine.key, mine.index, mine.sum}, CombineBest());
  if (chunks == 1) {
    if (threadIdx.x == 0) finish_row<Weights>(best, row, out, status);
    return;
  }
  if (threadIdx.x == 0) {
    chunk_best[blockIdx.x] = best;
    __threadfence();  // the chunk's best is visible before the count says so
    finishes = atomicAdd(&chunks_done[row], 1u) == chunks - 1;
  }
  __syncthreads();
  if (!finishes) return;
  __threadfence();
  Best row_best{Weights::kNone, 0, 0.0};
  for (int64_t c = threadIdx.x; c < chunks; c += kThreads) {
    const Best* b = chunk_best + row * chunks + c;  // past L1: other blocks wrote them
    const Best other{__ldcg(&b->key), static_cast<int64_t>(__ldcg(reinterpret_cast<const long long*>(&b->index))),
                     __ldcg(&b->sum)};
    row_best = CombineBest()(row_best, other);
  }
  __syncthreads();  // `reduce` is reused
  row_best = BestReduce(reduce).Reduce(row_best, CombineBest());
  if (threadIdx.x == 0) finish_row<Weights>(row_best, row, out, status);
}

// Quads per chunk: up to kMaxTripsPerChunk trips of the block (fewer block reductions) as
// long as the grid keeps about four blocks per SM (the kernel's residency); one at least.
int64_t chunk_quads(int64_t rows, int64_t n) {
  static const int64_t enough_blocks =
      4 * static_cast<int64_t>(at::cuda::getCurrentDeviceProperties()->multiProcessorCount);
  const int64_t quads = (n + 3) / 4;
  for (int64_t trips = kMaxTripsPerChunk; trips > 1; trips /= 2) {
    if (rows * ceil_div(quads, trips * kTripQuads) >= enough_blocks) return trips * kTripQuads;
  }
  return kTripQuads;
}

template <typename scalar_t, typename Weights>
void launch_race(const DrawCall& call, const Weights& wts) {
  const int64_t quads_per_chunk = chunk_quads(call.rows, call.n);
  const int64_t chunks = ceil_div((call.n + 3) / 4, quads_per_chunk);
  const int64_t blocks = call.rows * chunks;
  TORCH_INTERNAL_ASSERT(blocks <= std::numeric_limits<int32_t>::max());  // chunks of >= 1,024 items
  at::Tensor keep;
  Best* chunk_best = nullptr;
  unsigned int* chunks_done = nullptr;
  if (chunks > 1) {
    std::tie(chunk_best, chunks_done) = scratch_arrays<Best, unsigned int>(keep, call.x.options(), {blocks, call.rows});
    C10_CUDA_CHECK(cudaMemsetAsync(chunks_done, 0, call.rows * sizeof(unsigned int), call.stream));
  }
  race_kernel<scalar_t, Weights><<<blocks, kThreads, 0, call.stream>>>(
      call.x.const_data_ptr<scalar_t>(), call.n, chunks, quads_per_chunk, wts, call.philox, chunk_best, chunks_done,
      call.out, call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void draw_race(const DrawCall& call) {
  TORCH_INTERNAL_ASSERT(call.k == 1);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "race_cuda", [&] {
    with_weights(call, [&](const auto& wts) { launch_race<scalar_t>(call, wts); });
  });
}

}  // namespace wrs::multinomial
