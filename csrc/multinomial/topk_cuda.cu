// Without replacement, up to 64 draws per row: the k largest race keys (laws.h) in
// decreasing order. Each warp streams a stretch of a row and keeps its top keys across
// its lanes (SLOTS per lane, k <= 32 * SLOTS), admitting only keys above the current k-th
// (a ballot; after the first few hundred items almost none pass). A block's warps share
// one row, several short rows, or a chunk of a long row; the warps of a row or chunk then
// merge. A long row's chunks leave their top k in scratch and a second kernel merges
// them, one block per row.
//
// Item pair p of row r takes Philox block r * pairs + p (64 bits per item), so the keys
// do not depend on how the row is split.
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "multinomial/kernels_cuda.cuh"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cub/block/block_reduce.cuh>


namespace wrs::multinomial {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarp;
constexpr int64_t kPairsPerWarp = 1024;  // about 2,048 items per warp of a row or chunk

// A warp's best (key, index) so far: rank r = s * 32 + lane is held in slot s of lane `lane`.
template <int SLOTS>
struct WarpTop {
  double key[SLOTS];
  int64_t index[SLOTS];

  __device__ explicit WarpTop(double none) {
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
      key[s] = none;
      index[s] = 0;
    }
  }

  __device__ double at_rank(int r) const {  // r is the same in every lane
    double v = key[0];
#pragma unroll
    for (int s = 1; s < SLOTS; ++s) v = r / kWarp == s ? key[s] : v;
    return __shfl_sync(kFullMask, v, r % kWarp);
  }

  // Offers each lane's candidate; those above the current k-th go in, one at a time.
  __device__ void offer(double cand, int64_t cand_index, int k, int lane) {
    double kth = at_rank(k - 1);
    unsigned pending = __ballot_sync(kFullMask, cand > kth);
    while (pending) {
      const int src = __ffs(pending) - 1;
      pending &= pending - 1;
      const double v = __shfl_sync(kFullMask, cand, src);
      const int64_t vi = __shfl_sync(kFullMask, cand_index, src);
      if (!(v > kth)) continue;  // the k-th rose since the ballot (the same on every lane)
      int pos = 0;
#pragma unroll
      for (int s = 0; s < SLOTS; ++s) pos += __popc(__ballot_sync(kFullMask, key[s] >= v));
      // Ranks from pos on move up by one: from the lane below, or lane 31 of the slot below.
      double up_key[SLOTS];
      int64_t up_index[SLOTS];
#pragma unroll
      for (int s = 0; s < SLOTS; ++s) {
        up_key[s] = __shfl_up_sync(kFullMask, key[s], 1);
        up_index[s] = __shfl_up_sync(kFullMask, index[s], 1);
        const double wrap_key = __shfl_sync(kFullMask, key[s > 0 ? s - 1 : 0], kWarp - 1);
        const int64_t wrap_index = __shfl_sync(kFullMask, index[s > 0 ? s - 1 : 0], kWarp - 1);
        if (lane == 0) {
          up_key[s] = wrap_key;
          up_index[s] = wrap_index;
        }
      }
#pragma unroll
      for (int s = 0; s < SLOTS; ++s) {
        const int rank = s * kWarp + lane;
        if (rank == pos) {
          key[s] = v;
          index[s] = vi;
        } else if (rank > pos) {
          key[s] = up_key[s];
          index[s] = up_index[s];
        }
      }
      kth = at_rank(k - 1);
    }
  }
};

struct ChunkStats {
  unsigned long long nonzero;
  uint32_t flags;
};

template <int SLOTS>
struct Lists {
  double key[kWarpsPerBlock][SLOTS][kWarp];
  int64_t index[kWarpsPerBlock][SLOTS][kWarp];
  unsigned long long nonzero[kWarpsPerBlock];
  uint32_t flags[kWarpsPerBlock];
};

template <int SLOTS>
__device__ void save(const WarpTop<SLOTS>& top, int warp, int lane, Lists<SLOTS>& lists) {
#pragma unroll
  for (int s = 0; s < SLOTS; ++s) {
    lists.key[warp][s][lane] = top.key[s];
    lists.index[warp][s][lane] = top.index[s];
  }
}

// Warps [first, first + count) of the block hold one list each in `lists`; the calling
// warp (first) merges the others into its own.
template <int SLOTS>
__device__ void merge_warps(WarpTop<SLOTS>& top, int first, int count, int k, int lane, const Lists<SLOTS>& lists) {
  for (int w = first + 1; w < first + count; ++w) {
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) top.offer(lists.key[w][s][lane], lists.index[w][s][lane], k, lane);
  }
}

// A block serves kWarpsPerBlock / warps_per_row rows (chunks == 1), or chunk
// blockIdx.x % chunks of row blockIdx.x / chunks with all its warps. The rows' (or
// chunks') top k go to `out` (chunks == 1) or to the candidate lists, with their stats.
template <typename scalar_t, typename Weights, int SLOTS>
__global__ void __launch_bounds__(kThreads)
    topk_kernel(const scalar_t* x, int64_t rows, int64_t n, int64_t k, int warps_per_row, int64_t chunks,
                int64_t chunk_pairs, Weights wts, at::PhiloxCudaState philox, int64_t* out, double* cand_key,
                int64_t* cand_index, ChunkStats* stats, uint32_t* status) {
  __shared__ Lists<SLOTS> lists;
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int local_row = warp / warps_per_row;
  const int part = warp % warps_per_row;
  const int64_t row = chunks == 1 ? blockIdx.x * static_cast<int64_t>(kWarpsPerBlock / warps_per_row) + local_row
                                  : blockIdx.x / chunks;
  const int64_t chunk = chunks == 1 ? 0 : blockIdx.x % chunks;
  WarpTop<SLOTS> top(Weights::kNone);
  uint32_t flags = 0;
  unsigned long long nonzero = 0;
  if (row < rows) {
    const scalar_t* xr = x + row * n;
    const int64_t pairs = (n + 1) / 2;
    const int64_t c_begin = chunk * chunk_pairs;
    const int64_t c_end = min(pairs, c_begin + chunk_pairs);
    const int64_t per_warp = (c_end - c_begin + warps_per_row - 1) / warps_per_row;
    const int64_t p_begin = c_begin + part * per_warp;
    const int64_t p_end = min(c_end, p_begin + per_warp);
    const PhiloxSeed seed = philox_seed(philox);
    for (int64_t base = p_begin; base < p_end; base += kWarp) {
      const int64_t p = base + lane;
      double key[2] = {Weights::kNone, Weights::kNone};
      if (p < p_end) {
        const uint4 r = philox_block_cuda(seed, static_cast<uint64_t>(row * pairs + p));
        const uint32_t bits[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (2 * p + h >= n) break;
          const double v = static_cast<double>(xr[2 * p + h]);
          flags |= Weights::kLogits ? LogitWeights::flags(v) : weight_flags(v);
          nonzero += Weights::nonzero(v);
          key[h] = wts.key(v, exponential(bits[2 * h], bits[2 * h + 1]));
        }
      }
      top.offer(key[0], 2 * p, static_cast<int>(k), lane);
      top.offer(key[1], 2 * p + 1, static_cast<int>(k), lane);
    }
  }
  flags = __reduce_or_sync(kFullMask, flags);
  for (int offset = kWarp / 2; offset > 0; offset /= 2) nonzero += __shfl_xor_sync(kFullMask, nonzero, offset);
  save(top, warp, lane, lists);
  if (lane == 0) {
    lists.nonzero[warp] = nonzero;
    lists.flags[warp] = flags;
  }
  __syncthreads();
  if (row >= rows || part != 0) return;
  merge_warps(top, warp, warps_per_row, static_cast<int>(k), lane, lists);
  for (int w = warp + 1; w < warp + warps_per_row; ++w) {
    nonzero += lists.nonzero[w];
    flags |= lists.flags[w];
  }
  if (chunks == 1) {
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
      if (s * kWarp + lane < k) out[row * k + s * kWarp + lane] = top.index[s];
    }
    if (lane == 0) {
      if (nonzero == 0) flags |= kRowZeroSum;
      if (nonzero < static_cast<unsigned long long>(k)) flags |= kTooFewNonzero;
      if (flags) atomicOr(status, flags);
    }
    return;
  }
#pragma unroll
  for (int s = 0; s < SLOTS; ++s) {
    if (s * kWarp + lane < k) {
      cand_key[blockIdx.x * k + s * kWarp + lane] = top.key[s];
      cand_index[blockIdx.x * k + s * kWarp + lane] = top.index[s];
    }
  }
  if (lane == 0) stats[blockIdx.x] = ChunkStats{nonzero, flags};
}

// One block per row: warp w merges chunks w, w + 8, ...; then warp 0 merges the warps.
template <typename Weights, int SLOTS>
__global__ void __launch_bounds__(kThreads)
    merge_chunks_kernel(int64_t k, int64_t chunks, const double* cand_key, const int64_t* cand_index,
                        const ChunkStats* stats, int64_t* out, uint32_t* status) {
  __shared__ Lists<SLOTS> lists;
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int64_t row = blockIdx.x;
  WarpTop<SLOTS> top(Weights::kNone);
  unsigned long long nonzero = 0;
  uint32_t flags = 0;
  for (int64_t c = warp; c < chunks; c += kWarpsPerBlock) {
    const int64_t list = row * chunks + c;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
      const int64_t r = s * kWarp + lane;
      const bool held = r < k;
      top.offer(held ? cand_key[list * k + r] : Weights::kNone, held ? cand_index[list * k + r] : 0,
                static_cast<int>(k), lane);
    }
    nonzero += stats[list].nonzero;
    flags |= stats[list].flags;
  }
  save(top, warp, lane, lists);
  if (lane == 0) {
    lists.nonzero[warp] = nonzero;
    lists.flags[warp] = flags;
  }
  __syncthreads();
  if (warp != 0) return;
  merge_warps(top, 0, kWarpsPerBlock, static_cast<int>(k), lane, lists);
#pragma unroll
  for (int s = 0; s < SLOTS; ++s) {
    if (s * kWarp + lane < k) out[row * k + s * kWarp + lane] = top.index[s];
  }
  if (lane == 0) {
    for (int w = 1; w < kWarpsPerBlock; ++w) {
      nonzero += lists.nonzero[w];
      flags |= lists.flags[w];
    }
    if (nonzero == 0) flags |= kRowZeroSum;
    if (nonzero < static_cast<unsigned long long>(k)) flags |= kTooFewNonzero;
    if (flags) atomicOr(status, flags);
  }
}

// Race keys of every item, pair p of row r from Philox block r * pairs + p, as above.
template <typename scalar_t, typename Weights>
__global__ void race_keys_kernel(const scalar_t* x, int64_t rows, int64_t n, Weights wts,
                                 at::PhiloxCudaState philox, double* keys, uint32_t* status) {
  const PhiloxSeed seed = philox_seed(philox);
  const int64_t pairs = (n + 1) / 2;
  uint32_t flags = 0;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < rows * pairs;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = t / pairs;
    const int64_t p = t - row * pairs;
    const uint4 r = philox_block_cuda(seed, static_cast<uint64_t>(t));
    const uint32_t bits[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (2 * p + h >= n) break;
      const double v = static_cast<double>(x[row * n + 2 * p + h]);
      flags |= Weights::kLogits ? LogitWeights::flags(v) : weight_flags(v);
      keys[row * n + 2 * p + h] = wts.key(v, exponential(bits[2 * h], bits[2 * h + 1]));
    }
  }
  flags = __reduce_or_sync(kFullMask, flags);
  if (threadIdx.x % kWarp == 0 && flags) atomicOr(status, flags);
}

// Warps per row for short rows: about 2,048 items or more each, at most 8.
int warps_per_row(int64_t n) {
  int warps = 1;
  while (warps < kWarpsPerBlock && n > 2 * kPairsPerWarp * warps) warps *= 2;
  return warps;
}

template <typename scalar_t, typename Weights, int SLOTS>
void launch(const DrawCall& call, const Weights& wts, int64_t chunks) {
  const scalar_t* x = call.x.const_data_ptr<scalar_t>();
  const int64_t pairs = (call.n + 1) / 2;
  if (chunks == 1) {
    const int warps = warps_per_row(call.n);
    topk_kernel<scalar_t, Weights, SLOTS><<<ceil_div(call.rows, kWarpsPerBlock / warps), kThreads, 0, call.stream>>>(
        x, call.rows, call.n, call.k, warps, 1, pairs, wts, call.philox, call.out, nullptr, nullptr, nullptr,
        call.status);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  const int64_t blocks = call.rows * chunks;
  at::Tensor keep;
  const auto [cand_key, cand_index, stats] =
      scratch_arrays<double, int64_t, ChunkStats>(keep, call.x.options(), {blocks * call.k, blocks * call.k, blocks});
  topk_kernel<scalar_t, Weights, SLOTS><<<blocks, kThreads, 0, call.stream>>>(
      x, call.rows, call.n, call.k, kWarpsPerBlock, chunks, ceil_div(pairs, chunks), wts, call.philox, call.out,
      cand_key, cand_index, stats, call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  merge_chunks_kernel<Weights, SLOTS><<<call.rows, kThreads, 0, call.stream>>>(call.k, chunks, cand_key, cand_index,
                                                                             stats, call.out, call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename scalar_t, typename Weights>
void launch_for_k(const DrawCall& call, const Weights& wts, int64_t chunks) {
  if (call.k <= kWarp) {
    launch<scalar_t, Weights, 1>(call, wts, chunks);
  } else {
    launch<scalar_t, Weights, 2>(call, wts, chunks);
  }
}

}  // namespace

// Chunks per row: one while the rows alone give every SM about 8 warps, else enough
// chunks (8 warps each, about 2,048 items a warp) to do so.
int64_t topk_chunks(int64_t rows, int64_t n) {
  static const int64_t fill = 8 * at::cuda::getCurrentDeviceProperties()->multiProcessorCount;  // blocks
  const int64_t row_blocks = ceil_div(rows * warps_per_row(n), kWarpsPerBlock);
  if (row_blocks >= fill || n <= 2 * kPairsPerWarp * kWarpsPerBlock) return 1;
  const int64_t most = ceil_div(n, 2 * kPairsPerWarp * kWarpsPerBlock);
  return std::max<int64_t>(1, std::min(ceil_div(fill, rows), most));
}

void draw_topk(const DrawCall& call, int64_t chunks) {
  TORCH_INTERNAL_ASSERT(call.k <= kMaxTopK);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "topk_cuda", [&] {
    with_weights(call, [&](const auto& wts) { launch_for_k<scalar_t>(call, wts, chunks); });
  });
}

void race_keys(const DrawCall& call, double* keys) {
  const int blocks = grid_for(call.rows * ((call.n + 1) / 2), kThreads);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "race_keys_cuda", [&] {
    const scalar_t* x = call.x.const_data_ptr<scalar_t>();
    with_weights(call, [&](const auto& wts) {
      race_keys_kernel<<<blocks, kThreads, 0, call.stream>>>(x, call.rows, call.n, wts, call.philox, keys, call.status);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace wrs::multinomial
