#pragma once
// Without replacement, up to 64 draws per row: the k largest race keys (laws.h) in
// decreasing order. Each warp streams a stretch of a row and keeps its top keys across
// its lanes (SLOTS per lane, k <= 32 * SLOTS), admitting only keys above the current k-th
// (a ballot; after the first few hundred items almost none pass). A block's warps share
// one row, several short rows, or a chunk of a long row, and the largest k-th key any of
// them holds (SharedFloor), below which none admits; the warps of a row or chunk then
// merge. A trip that admits several keys merges them as a batch (a bitonic sort and
// merge) rather than one at a time. A long row's chunks leave their top k in scratch and
// a second kernel merges them, one block per row.
//
// The stream is the hot loop, so it does the least per item: each lane takes 8 items a
// trip, a float bound on each key (from the high 32 bits of its E) rules out the items
// that could not be admitted, and only the rest draw their low 32 bits and take the
// float64 log (surely_below); a trip where no lane has a candidate offers nothing. The
// lists, and so the draws, are exactly those of computing every key.
//
// Item quad q (items 4q .. 4q + 3) of row r takes Philox subsequence r * quads + q: its
// first block holds the four items' high words, its second their low words. The keys do
// not depend on how the row is split.
//
// The one pass (topk_warp_cuda.cu) and the second pass of two (topk_two_pass_cuda.cu)
// both run these kernels; this header is included by those two files alone, each with
// its own copy.
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "multinomial/kernels_cuda.cuh"
#include "multinomial/race_bounds.cuh"
#include "multinomial/race_trip.cuh"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cub/block/block_reduce.cuh>

#include <cfloat>
#include <limits>
#include <type_traits>


namespace wrs::multinomial {
namespace {


constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarp;
constexpr int kQuadsPerLane = 2;  // a lane's quads (4 items each) per trip
constexpr int kTripItems = kWarp * 4 * kQuadsPerLane;
template <int SLOTS>
constexpr int kSlotsTotal = kWarp * SLOTS;  // a warp list's length
constexpr int64_t kItemsPerWarp = 2048;  // about this many items per warp of a row or chunk
constexpr int64_t kMinChunkItems = 2 * kTripItems * kWarpsPerBlock;  // 4,096: two trips of each warp
constexpr int kBatchFrom = 4;  // admitted keys in one trip from which one batch merge is cheaper
constexpr int64_t kChunksPerDraw = 8;  // the two-pass top-k's chunks per row, per draw, where rows allow
constexpr int64_t kRunPerDraw = 32;    // the two-pass top-k's run per row, per draw (about 1 is filled)

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

// One draw's first trip of a stretch: the largest float bound below the trip's keys (one
// extra Philox block per quad). Starting from it, quad_keys's float bound rules out all
// but the few items that could beat it, where a running maximum grown from nothing would
// take the low word and float64 log of most of the trip's items.
template <typename scalar_t, typename Weights>
__device__ double trip_key_floor(const scalar_t* xr, int64_t n, int64_t base, int64_t q_end, uint64_t row_sub,
                                 const Weights& wts, const PhiloxSeed& seed, int lane) {
  float best = -INFINITY;
#pragma unroll
  for (int j = 0; j < kQuadsPerLane; ++j) {
    const int64_t q = base + j * kWarp + lane;
    if (q >= q_end) continue;
    const uint4 high = philox_block_cuda(seed, row_sub + q);
    const uint32_t hi[4] = {high.x, high.y, high.z, high.w};
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      if (4 * q + h < n) best = fmaxf(best, key_below(wts, static_cast<double>(xr[4 * q + h]), hi[h]));
    }
  }
  return static_cast<double>(from_ordered_float_bits(__reduce_max_sync(kFullMask, ordered_float_bits(best))));
}

// A trip's candidates per warp: keys and their items' offsets from the trip's first item.
struct TripStage {
  double key[kWarpsPerBlock][kTripItems];
  int16_t item[kWarpsPerBlock][kTripItems];
};

struct ChunkStats {
  unsigned long long nonzero;
  uint32_t flags;
};

// The two-pass top-k merges a row from its run (the picked chunks' keys above the row's
// floor, in scratch of run_cap) where the run holds k to run_cap keys; other rows (fewer
// than k nonzero weights, or more keys above the floor than the run holds) from the top-k
// lists of their picked chunks.
__device__ inline bool run_serves(unsigned count, int64_t k, int64_t run_cap) {
  return count >= k && count <= run_cap;
}

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

// Merges the lists of each group of `count` warps (a power of two; warp w is part
// w % count of its group) into the group's first warp's `top`: in log2(count) rounds,
// part p takes in part p + stride's list, so that 8 warps take 3 merges' time, not 7.
// Every thread of the block calls it, after save(); `lists` then holds stale lists.
template <int SLOTS>
__device__ void merge_warps(WarpTop<SLOTS>& top, int warp, int count, int k, int lane, double none,
                            Lists<SLOTS>& lists) {
  const int part = warp % count;
  for (int stride = 1; stride < count; stride *= 2) {
    __syncthreads();  // the lists of the round before are saved
    const bool merges = part % (2 * stride) == 0;
    if (merges) {
      double key[SLOTS];
      int64_t index[SLOTS];
#pragma unroll
      for (int s = 0; s < SLOTS; ++s) {
        key[s] = lists.key[warp + stride][s][lane];
        index[s] = lists.index[warp + stride][s][lane];
      }
      top.offer_all(key, index, k, lane, none);
    }
    __syncthreads();  // every list of this round is read
    if (merges) save(top, warp, lane, lists);
  }
}

// Offers a run of `count` candidates (keys and indices) to the warp's list, 32 * SLOTS a
// trip; warp w of the block takes trips w, w + 8, ...: one load per trip, all loads of a
// warp independent of its merges' results.
template <int SLOTS>
__device__ void offer_run(WarpTop<SLOTS>& top, const double* key, const int64_t* index, int64_t count, int k,
                          int warp, int lane, double none, double floor) {
  for (int64_t first = warp * kSlotsTotal<SLOTS>; first < count; first += kThreads * SLOTS) {
    double cand[SLOTS];
    int64_t cand_index[SLOTS];
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
      const int64_t c = first + s * kWarp + lane;
      cand[s] = c < count ? key[c] : none;
      cand_index[s] = c < count ? index[c] : 0;
    }
    top.offer_all(cand, cand_index, k, lane, none, floor);
  }
}


// Work comes in units of warps_per_unit warps each (a block serves kWarpsPerBlock /
// warps_per_unit of them): a whole row (units_per_row == 1), whose top k go to `out`; or a
// chunk of unit_quads quads of a row (unit u of row u / units_per_row: chunk
// u % units_per_row, or unit_chunk[u] where given), whose top k go to the candidate lists
// and its stats to `stats` (where given). Units of a row share the floor in
// row_floor_bits (where given: zeroed, or seeded by the launch).
template <typename scalar_t, typename Weights, int SLOTS>
__global__ void __launch_bounds__(kThreads)
    topk_kernel(const scalar_t* x, int64_t rows, int64_t n, int64_t k, int warps_per_unit, int64_t units_per_row,
                int64_t unit_quads, const int64_t* unit_chunk, Weights wts, at::PhiloxCudaState philox, int64_t* out,
                double* cand_key, int64_t* cand_index, ChunkStats* stats, unsigned long long* row_floor_bits,
                const unsigned* run_count, int64_t run_cap, uint32_t* status) {
  __shared__ Lists<SLOTS> lists;
  __shared__ unsigned long long floor_bits[kWarpsPerBlock];  // per unit of the block
  __shared__ TripStage stage;
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int local_unit = warp / warps_per_unit;
  const int part = warp % warps_per_unit;
  if (threadIdx.x < kWarpsPerBlock) floor_bits[threadIdx.x] = 0;
  __syncthreads();
  const SharedFloor floor{&floor_bits[local_unit]};
  const int64_t unit = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock / warps_per_unit) + local_unit;
  const int64_t row = unit / units_per_row;
  bool held = unit < rows * units_per_row;
  // Rows whose run serves them (the two-pass top-k's second pass) need no lists.
  if (held && run_count != nullptr && run_serves(run_count[row], k, run_cap)) held = false;
  const SharedFloor row_floor{row_floor_bits == nullptr ? nullptr : row_floor_bits + row};
  WarpTop<SLOTS> top(Weights::kNone);
  uint32_t flags = 0;
  unsigned long long nonzero = 0;
  if (held) {
    const int64_t chunk = units_per_row == 1 ? 0 : unit_chunk != nullptr ? unit_chunk[unit] : unit % units_per_row;
    const scalar_t* xr = x + row * n;
    const int64_t quads = (n + 3) / 4;
    const int64_t c_begin = chunk * unit_quads;
    const int64_t c_end = min(quads, c_begin + unit_quads);
    const int64_t per_warp = (c_end - c_begin + warps_per_unit - 1) / warps_per_unit;
    const int64_t q_begin = c_begin + part * per_warp;
    const int64_t q_end = min(c_end, q_begin + per_warp);
    const PhiloxSeed seed = philox_seed(philox);
    double kth = Weights::kNone;  // this warp's k-th key (the same in every lane)
    for (int64_t base = q_begin; base < q_end; base += kWarp * kQuadsPerLane) {
      // What a key must beat to be admitted: this warp's k-th or the shared floor (read by
      // one lane: the same in every lane, as offer() needs).
      double shared = 0.0;
      if (lane == 0) shared = row_floor.bits == nullptr ? floor.read() : fmax(floor.read(), row_floor.read());
      shared = __shfl_sync(kFullMask, shared, 0);
      double beat = fmax(kth, shared);
      if constexpr (SLOTS == 1) {  // not compiled into two-slot lists' kernels (their registers)
        if (k == 1 && base == q_begin) {
          beat = fmax(beat, trip_key_floor(xr, n, base, q_end, static_cast<uint64_t>(row * quads), wts, seed, lane));
        }
      }
      double key[kQuadsPerLane][4];
      int mine = 0;  // the lane's candidates: keys above `beat`
#pragma unroll
      for (int j = 0; j < kQuadsPerLane; ++j) {
        const int64_t q = base + j * kWarp + lane;
#pragma unroll
        for (int h = 0; h < 4; ++h) key[j][h] = Weights::kNone;
        if (q < q_end) {
          quad_keys(xr, n, q, static_cast<uint64_t>(row * quads + q), wts, seed, beat, key[j], flags, nonzero);
        }
#pragma unroll
        for (int h = 0; h < 4; ++h) mine += key[j][h] > beat;
      }
      if (!__any_sync(kFullMask, mine > 0)) continue;
      // The trip's candidates, packed in lane order into the warp's shared stage, are
      // offered 32 * SLOTS at a time: usually one offer_all per trip.
      int at = mine;  // inclusive prefix sum over the lanes
#pragma unroll
      for (int offset = 1; offset < kWarp; offset *= 2) {
        const int below = __shfl_up_sync(kFullMask, at, offset);
        if (lane >= offset) at += below;
      }
      const int total = __shfl_sync(kFullMask, at, kWarp - 1);
      at -= mine;
#pragma unroll
      for (int j = 0; j < kQuadsPerLane; ++j) {
#pragma unroll
        for (int h = 0; h < 4; ++h) {
          if (key[j][h] > beat) {
            stage.key[warp][at] = key[j][h];
            stage.item[warp][at] = 4 * (j * kWarp + lane) + h;  // from the trip's first item
            ++at;
          }
        }
      }
      __syncwarp();
      for (int first = 0; first < total; first += kSlotsTotal<SLOTS>) {
        double cand[SLOTS];
        int64_t index[SLOTS];
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
          const int c = first + s * kWarp + lane;
          cand[s] = c < total ? stage.key[warp][c] : Weights::kNone;
          index[s] = c < total ? 4 * base + stage.item[warp][c] : 0;
        }
        top.offer_all(cand, index, static_cast<int>(k), lane, Weights::kNone, shared);
      }
      __syncwarp();
      kth = top.at_rank(static_cast<int>(k) - 1);
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
  merge_warps(top, warp, warps_per_unit, static_cast<int>(k), lane, Weights::kNone, lists);
  if (!held || part != 0) return;
  for (int w = warp + 1; w < warp + warps_per_unit; ++w) {
    nonzero += lists.nonzero[w];
    flags |= lists.flags[w];
  }
  if (units_per_row == 1) {
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
      cand_key[unit * k + s * kWarp + lane] = top.key[s];
      cand_index[unit * k + s * kWarp + lane] = top.index[s];
    }
  }
  if (lane == 0 && stats != nullptr) stats[unit] = ChunkStats{nonzero, flags};
}

// Sums a row's stats (a block per row) into the flags of the row: value flags, a zero
// sum, fewer than k nonzero weights. Every thread calls it; the result is thread 0's.
template <int SLOTS>
__device__ uint32_t row_flags_of(const ChunkStats* stats, int64_t count, int64_t k, int warp, int lane,
                                 Lists<SLOTS>& lists) {
  unsigned long long nonzero = 0;
  uint32_t flags = 0;
  for (int64_t c = threadIdx.x; c < count; c += kThreads) {
    nonzero += stats[c].nonzero;
    flags |= stats[c].flags;
  }
  flags = __reduce_or_sync(kFullMask, flags);
  for (int offset = kWarp / 2; offset > 0; offset /= 2) nonzero += __shfl_xor_sync(kFullMask, nonzero, offset);
  if (lane == 0) {
    lists.nonzero[warp] = nonzero;
    lists.flags[warp] = flags;
  }
  __syncthreads();
  if (threadIdx.x != 0) return 0;
  for (int w = 1; w < kWarpsPerBlock; ++w) {
    nonzero += lists.nonzero[w];
    flags |= lists.flags[w];
  }
  if (nonzero == 0) flags |= kRowZeroSum;
  if (nonzero < static_cast<unsigned long long>(k)) flags |= kTooFewNonzero;
  return flags;
}

// A block's top k of a run of `count` candidates above `floor`, in warp 0's `top` (the
// warps' lists merged); the flags of the row whose stats are given (`stats_count` of them;
// none where nullptr) OR-ed into *status. Every thread of the block calls it.
template <typename Weights, int SLOTS>
__device__ void block_top_k(WarpTop<SLOTS>& top, const double* key, const int64_t* index, int64_t count, double floor,
                            const ChunkStats* stats, int64_t stats_count, int64_t k, uint32_t* status,
                            Lists<SLOTS>& lists) {
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  offer_run(top, key, index, count, static_cast<int>(k), warp, lane, Weights::kNone, floor);
  if (stats != nullptr) {  // the same in every thread
    const uint32_t flags = row_flags_of(stats, stats_count, k, warp, lane, lists);
    if (threadIdx.x == 0 && flags) atomicOr(status, flags);
  }
  save(top, warp, lane, lists);
  merge_warps(top, warp, kWarpsPerBlock, static_cast<int>(k), lane, Weights::kNone, lists);
}

// A block per row merges its `lists_per_row` lists of k candidates (one run, offer_run),
// or its run where run_serves, then the warps' lists; with the lists' stats (where given:
// else the row's flags are taken already).
template <typename Weights, int SLOTS>
__global__ void __launch_bounds__(kThreads)
    merge_chunks_kernel(int64_t k, int64_t lists_per_row, const double* cand_key, const int64_t* cand_index,
                        const ChunkStats* stats, const unsigned long long* row_floor_bits, const double* run_key,
                        const int64_t* run_index, const unsigned* run_count, int64_t run_cap, int64_t* out,
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
  const int64_t lists_run = lists_per_row * k;
  const bool from_run = run_count != nullptr && run_serves(run_count[row], k, run_cap);
  block_top_k<Weights>(top, from_run ? run_key + row * run_cap : cand_key + row * lists_run,
                       from_run ? run_index + row * run_cap : cand_index + row * lists_run,
                       from_run ? static_cast<int64_t>(run_count[row]) : lists_run, floor,
                       stats == nullptr ? nullptr : stats + row * lists_per_row, lists_per_row, k, status, lists);
  if (warp != 0) return;
#pragma unroll
  for (int s = 0; s < SLOTS; ++s) {
    if (s * kWarp + lane < k) out[row * k + s * kWarp + lane] = top.index[s];
  }
}

// Calls f(std::integral_constant<int, SLOTS>{}) with the slots per lane a warp list of k
// keys takes.
template <typename F>
void with_slots(int64_t k, F&& f) {
  if (k <= kWarp) {
    f(std::integral_constant<int, 1>{});
  } else {
    f(std::integral_constant<int, 2>{});
  }
}

}  // namespace
}  // namespace wrs::multinomial
