// Without replacement, up to 64 draws per row: the k largest race keys (laws.h) in
// decreasing order. Each warp streams a stretch of a row and keeps its top keys across
// its lanes (SLOTS per lane, k <= 32 * SLOTS), admitting only keys above the current k-th
// (a ballot; after the first few hundred items almost none pass). A block's warps share
// one row, several short rows, or a chunk of a long row, and the largest k-th key any of
// them holds (SharedFloor), below which none admits; the warps of a row or chunk then
// merge. A trip that admits several keys merges them as a batch (a bitonic sort and
// merge) rather than one at a time. A long row's chunks leave their top k in scratch and
// a second kernel merges them, one block per row. For probability weights, items whose
// key a float bound puts below what they must beat skip the float64 log
// (key_surely_below): the lists, and so the draws, are exactly those of computing every
// key.
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

#include <cfloat>

namespace wrs::multinomial {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarp;
constexpr int64_t kPairsPerWarp = 1024;  // about 2,048 items per warp of a row or chunk
constexpr int kBatchFrom = 4;  // admitted keys in one trip from which one batch merge is cheaper

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

  // Starts the list from one candidate per lane and slot (cand[s], its index idx[s];
  // kNone where there is none) in one bitonic sort across the warp, instead of 32 * SLOTS
  // one-at-a-time insertions (each a warp-wide chain of shuffles): decreasing by key,
  // rank r = s * 32 + lane as offer() keeps it.
  __device__ void fill_sorted(const double (&cand)[SLOTS], const int64_t (&idx)[SLOTS], double none, int lane) {
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
      key[s] = cand[s];
      index[s] = cand[s] > none ? idx[s] : 0;  // an empty rank keeps an index in range
    }
    constexpr int kSize = SLOTS * kWarp;
#pragma unroll
    for (int size = 2; size <= kSize; size *= 2) {
#pragma unroll
      for (int stride = size / 2; stride > 0; stride /= 2) compare_exchange(stride, size, lane);
    }
  }

  // One step of a bitonic network over the ranks: ranks r and r ^ stride compare; runs of
  // `size` ranks alternate decreasing and increasing (a run of the whole list decreases),
  // and the lower rank of a pair takes the larger key in a decreasing run.
  __device__ void compare_exchange(int stride, int size, int lane) {
    if (stride == kWarp) {  // SLOTS == 2: ranks lane and 32 + lane, in a decreasing run
      if (key[SLOTS - 1] > key[0]) {
        const double k0 = key[0];
        const int64_t i0 = index[0];
        key[0] = key[SLOTS - 1];
        index[0] = index[SLOTS - 1];
        key[SLOTS - 1] = k0;
        index[SLOTS - 1] = i0;
      }
      return;
    }
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
      const double other_key = __shfl_xor_sync(kFullMask, key[s], stride);
      const int64_t other_index = __shfl_xor_sync(kFullMask, index[s], stride);
      const int rank = s * kWarp + lane;
      const bool lower = (rank & stride) == 0;
      const bool decreasing = (rank & size) == 0;
      if (lower == decreasing ? other_key > key[s] : other_key < key[s]) {
        key[s] = other_key;
        index[s] = other_index;
      }
    }
  }

  // Merges a batch of 32 * SLOTS candidates (one per lane and slot) into the list at once:
  // sort the batch, pair rank r of the list with rank N - 1 - r of the batch and keep the
  // larger (the top N of both, as a bitonic sequence), then one bitonic merge. About
  // 6 log N steps, where inserting m admitted keys one at a time costs m warp-wide
  // insertions: the first few hundred items of a stream admit many.
  __device__ void merge_batch(const double (&cand)[SLOTS], const int64_t (&idx)[SLOTS], double none, int lane) {
    constexpr int kSize = SLOTS * kWarp;
    WarpTop batch(none);
    batch.fill_sorted(cand, idx, none, lane);
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
      const double other_key = __shfl_sync(kFullMask, batch.key[SLOTS - 1 - s], kWarp - 1 - lane);
      const int64_t other_index = __shfl_sync(kFullMask, batch.index[SLOTS - 1 - s], kWarp - 1 - lane);
      if (other_key > key[s]) {
        key[s] = other_key;
        index[s] = other_index;
      }
    }
#pragma unroll
    for (int stride = kSize / 2; stride > 0; stride /= 2) compare_exchange(stride, kSize, lane);
  }

  // Offers one candidate per lane and slot: as a batch where several would be admitted,
  // else one at a time.
  __device__ void offer_all(const double (&cand)[SLOTS], const int64_t (&idx)[SLOTS], int k, int lane, double none,
                            double floor = -INFINITY) {
    const double kth = fmax(at_rank(k - 1), floor);
    int admitted = 0;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) admitted += __popc(__ballot_sync(kFullMask, cand[s] > kth));
    if (admitted >= kBatchFrom) {
      merge_batch(cand, idx, none, lane);
      return;
    }
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) offer(cand[s], idx[s], k, lane, floor);
  }

  __device__ double at_rank(int r) const {  // r is the same in every lane
    double v = key[0];
#pragma unroll
    for (int s = 1; s < SLOTS; ++s) v = r / kWarp == s ? key[s] : v;
    return __shfl_sync(kFullMask, v, r % kWarp);
  }

  // Offers each lane's candidate; those above the current k-th, and above `floor` (a
  // lower bound of the final k-th key that other warps found), go in, one at a time.
  __device__ void offer(double cand, int64_t cand_index, int k, int lane, double floor = -INFINITY) {
    double kth = fmax(at_rank(k - 1), floor);
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
      kth = fmax(at_rank(k - 1), floor);
    }
  }
};

// Keys as unsigned integers in the same order (for atomicMax); 0 lies below every key.
__device__ inline unsigned long long ordered_bits(double key) {
  const auto b = static_cast<unsigned long long>(__double_as_longlong(key));
  return b >> 63 ? ~b : b | (1ull << 63);
}
__device__ inline double from_ordered_bits(unsigned long long o) {
  if (o == 0) return -INFINITY;
  const unsigned long long b = o >> 63 ? o & ~(1ull << 63) : ~o;
  return __longlong_as_double(static_cast<long long>(b));
}

// The floor the warps of one row or chunk share: the largest k-th key any of them holds
// is a lower bound of the row's final k-th key, so a key at or below it is never drawn.
// Publishing it lets every warp skip what one warp has outgrown: each warp would otherwise
// admit about k (1 + ln(items / k)) keys of its own stretch, one warp-wide insertion each.
struct SharedFloor {
  unsigned long long* bits;  // in shared memory (a block's warps) or global (a long row's chunks)
  __device__ double read() const { return from_ordered_bits(*reinterpret_cast<volatile unsigned long long*>(bits)); }
  __device__ void raise(double kth) const { atomicMax(bits, ordered_bits(kth)); }
};

// For probability weights: can item weight v, with E drawn from (lo, hi) as exponential()
// does, have a key v / E above t > 0? A float bound, so that most items skip the float64
// log: E >= -log((hi + 1) 2^-32), computed in float (__logf: 2^-21.41 absolute near 1, 3
// ulp elsewhere; the float conversions 2^-24 relative) and shrunk by 2^-12 relative and
// 2^-20 absolute, well past those errors. Returns true only where the exact key is below t.
__device__ inline bool key_surely_below(double v, uint32_t hi, double t) {
  const float vf = static_cast<float>(v), tf = static_cast<float>(t);
  if (!(vf >= FLT_MIN && tf >= FLT_MIN && tf <= 1e30f)) return false;  // normal floats only
  const float u_above = (static_cast<float>(hi) + 1.0f) * 0x1.0p-32f;   // >= u, in (0, 1]
  const float e_below = fmaxf(-__logf(u_above) * (1.0f - 0x1.0p-12f) - 0x1.0p-20f, 0.0f);
  return vf < tf * e_below * (1.0f - 0x1.0p-12f);
}

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
__device__ void merge_warps(WarpTop<SLOTS>& top, int first, int count, int k, int lane, double none,
                            const Lists<SLOTS>& lists) {
  for (int w = first + 1; w < first + count; ++w) {
    double key[SLOTS];
    int64_t index[SLOTS];
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
      key[s] = lists.key[w][s][lane];
      index[s] = lists.index[w][s][lane];
    }
    top.offer_all(key, index, k, lane, none);
  }
}

// A block serves kWarpsPerBlock / warps_per_row rows (chunks == 1), or chunk
// blockIdx.x % chunks of row blockIdx.x / chunks with all its warps. The rows' (or
// chunks') top k go to `out` (chunks == 1) or to the candidate lists, with their stats.
template <typename scalar_t, typename Weights, int SLOTS>
__global__ void __launch_bounds__(kThreads)
    topk_kernel(const scalar_t* x, int64_t rows, int64_t n, int64_t k, int warps_per_row, int64_t chunks,
                int64_t chunk_pairs, Weights wts, at::PhiloxCudaState philox, int64_t* out, double* cand_key,
                int64_t* cand_index, ChunkStats* stats, unsigned long long* row_floor_bits, uint32_t* status) {
  __shared__ Lists<SLOTS> lists;
  __shared__ unsigned long long floor_bits[kWarpsPerBlock];  // per row (or chunk) of the block
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int local_row = warp / warps_per_row;
  const int part = warp % warps_per_row;
  if (threadIdx.x < kWarpsPerBlock) floor_bits[threadIdx.x] = 0;
  __syncthreads();
  const SharedFloor floor{&floor_bits[local_row]};
  // A long row's chunks also share one floor in global memory (zeroed by the launch).
  const SharedFloor row_floor{row_floor_bits == nullptr ? nullptr : row_floor_bits + blockIdx.x / chunks};
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
      // What a key must beat to be admitted: this warp's k-th or the shared floor (read by
      // one lane: the same in every lane, as offer() needs).
      double shared = 0.0;
      if (lane == 0) shared = row_floor.bits == nullptr ? floor.read() : fmax(floor.read(), row_floor.read());
      shared = __shfl_sync(kFullMask, shared, 0);
      const double beat = fmax(top.at_rank(static_cast<int>(k) - 1), shared);
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
          // Keys that could not be admitted need no float64 log (the same lists result).
          if (!Weights::kLogits && beat > 0 && key_surely_below(v, bits[2 * h + 1], beat)) continue;
          key[h] = wts.key(v, exponential(bits[2 * h], bits[2 * h + 1]));
        }
      }
      if (base == p_begin) {  // the first trip fills the empty list in one sort
        if constexpr (SLOTS == 2) {
          top.fill_sorted(key, {2 * p, 2 * p + 1}, Weights::kNone, lane);
        } else {
          top.fill_sorted({key[0]}, {2 * p}, Weights::kNone, lane);
          top.offer(key[1], 2 * p + 1, static_cast<int>(k), lane, shared);
        }
      } else if constexpr (SLOTS == 2) {
        top.offer_all(key, {2 * p, 2 * p + 1}, static_cast<int>(k), lane, Weights::kNone, shared);
      } else {
        top.offer_all({key[0]}, {2 * p}, static_cast<int>(k), lane, Weights::kNone, shared);
        top.offer_all({key[1]}, {2 * p + 1}, static_cast<int>(k), lane, Weights::kNone, shared);
      }
      const double kth = top.at_rank(static_cast<int>(k) - 1);
      if (lane == 0 && kth > shared && kth > Weights::kNone) {
        floor.raise(kth);
        if (row_floor.bits != nullptr) row_floor.raise(kth);
      }
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
  merge_warps(top, warp, warps_per_row, static_cast<int>(k), lane, Weights::kNone, lists);
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
                        const ChunkStats* stats, const unsigned long long* row_floor_bits, int64_t* out,
                        uint32_t* status) {
  __shared__ Lists<SLOTS> lists;
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int64_t row = blockIdx.x;
  WarpTop<SLOTS> top(Weights::kNone);
  // Every key of the row's top k is at or above the floor the chunks shared (the one equal
  // to it is held by the chunk that published it), so candidates below it can be passed
  // over: most of the chunks' lists.
  const double floor = ::nextafter(from_ordered_bits(row_floor_bits[row]), -INFINITY);
  unsigned long long nonzero = 0;
  uint32_t flags = 0;
  for (int64_t c = warp; c < chunks; c += kWarpsPerBlock) {
    const int64_t list = row * chunks + c;
    double key[SLOTS];
    int64_t index[SLOTS];
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
      const int64_t r = s * kWarp + lane;
      const bool held = r < k;
      key[s] = held ? cand_key[list * k + r] : Weights::kNone;
      index[s] = held ? cand_index[list * k + r] : 0;
    }
    top.offer_all(key, index, static_cast<int>(k), lane, Weights::kNone, floor);
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
  merge_warps(top, 0, kWarpsPerBlock, static_cast<int>(k), lane, Weights::kNone, lists);
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
        x, call.rows, call.n, call.k, warps, 1, pairs, wts, call.philox, call.out, nullptr, nullptr, nullptr, nullptr,
        call.status);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  const int64_t blocks = call.rows * chunks;
  at::Tensor keep;
  const auto [cand_key, cand_index, stats, row_floor_bits] =
      scratch_arrays<double, int64_t, ChunkStats, unsigned long long>(
          keep, call.x.options(), {blocks * call.k, blocks * call.k, blocks, call.rows});
  C10_CUDA_CHECK(cudaMemsetAsync(row_floor_bits, 0, call.rows * sizeof(unsigned long long), call.stream));
  topk_kernel<scalar_t, Weights, SLOTS><<<blocks, kThreads, 0, call.stream>>>(
      x, call.rows, call.n, call.k, kWarpsPerBlock, chunks, ceil_div(pairs, chunks), wts, call.philox, call.out,
      cand_key, cand_index, stats, row_floor_bits, call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  merge_chunks_kernel<Weights, SLOTS><<<call.rows, kThreads, 0, call.stream>>>(
      call.k, chunks, cand_key, cand_index, stats, row_floor_bits, call.out, call.status);
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
