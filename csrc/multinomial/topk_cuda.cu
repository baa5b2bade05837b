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
// Two passes serve few long rows (launch_two_pass; two_pass_serves): a first finds each
// chunk's largest key with the race's trips (race_trip.cuh: no lists); the k chunks with
// the largest hold the row's top k, and the k-th of those keys bounds it from below, so a
// second pass reads only those chunks and keeps the few keys above the bound.
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

// Draws the keys of a lane's quad q (items 4q .. 4q + 3 of row xr, Philox subsequence
// `sub`): kNone past the row's end, and for items that surely_below rules out against
// `beat` (which the keys only ever have to beat more), the kNone that is never admitted.
template <typename scalar_t, typename Weights>
__device__ void quad_keys(const scalar_t* xr, int64_t n, int64_t q, uint64_t sub, const Weights& wts,
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

// Between the two passes of draw_two_pass_topk, a block per row: the k largest of its
// chunks' largest keys. Their chunks hold the row's top k (were a top-k key's chunk not
// among them, k chunks would hold keys above it), and the k-th of them bounds the row's
// k-th key from below: the chunks (in `pick`) become the second pass's, the bound (less
// one ulp: the key equal to it is drawn) the row's floor. The row's flags come from the
// first pass's stats of all its chunks.
template <typename Weights, int SLOTS>
__global__ void __launch_bounds__(kThreads)
    select_chunks_kernel(int64_t k, int64_t chunks, int64_t chunk_items, const double* max_key,
                         const int64_t* max_index, const ChunkStats* stats, int64_t* pick,
                         unsigned long long* row_floor_bits, uint32_t* status) {
  __shared__ Lists<SLOTS> lists;
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int64_t row = blockIdx.x;
  WarpTop<SLOTS> top(Weights::kNone);
  block_top_k<Weights>(top, max_key + row * chunks, max_index + row * chunks, chunks, -INFINITY,
                       stats + row * chunks, chunks, k, status, lists);
  if (warp != 0) return;
#pragma unroll
  for (int s = 0; s < SLOTS; ++s) {
    if (s * kWarp + lane < k) pick[row * k + s * kWarp + lane] = top.index[s] / chunk_items;
  }
  const double kth = top.at_rank(static_cast<int>(k) - 1);
  if (lane == 0) row_floor_bits[row] = kth > Weights::kNone ? ordered_bits(::nextafter(kth, -INFINITY)) : 0;
}

// Pass 1 of the two-pass top-k: each chunk's largest key and its item, and the chunk's
// stats. The race's trips (race_trip.cuh): a running best per lane and no lists, where a
// k = 1 topk_kernel per chunk paid its lists, stage and merges for a trip or two of items
// (H100, float16 256 x 128,256, k = 64: 460 us for this pass). `warps` warps share a
// chunk, each a stretch of it; a block serves kWarpsPerBlock / warps chunks.
template <typename scalar_t, typename Weights>
__global__ void __launch_bounds__(kThreads, std::is_same_v<scalar_t, double> ? 2 : 3)
    chunk_best_kernel(const scalar_t* x, int64_t rows, int64_t n, int64_t chunks, int64_t chunk_quads, int warps,
                      Weights wts, at::PhiloxCudaState philox, double* max_key, int64_t* max_index,
                      ChunkStats* stats) {
  __shared__ double part_key[kWarpsPerBlock];
  __shared__ int64_t part_index[kWarpsPerBlock];
  __shared__ ChunkStats part_stats[kWarpsPerBlock];
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int part = warp % warps;
  const int64_t unit = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock / warps) + warp / warps;
  const bool held = unit < rows * chunks;
  const int64_t row = unit / chunks;
  const int64_t quads = (n + 3) / 4;
  const int64_t c_begin = unit % chunks * chunk_quads;
  RaceTally mine{Weights::kNone, 4 * c_begin, 0u, 0.0, 0u};
  if (held) {
    const int64_t c_end = min(quads, c_begin + chunk_quads);
    const int64_t per_warp = (c_end - c_begin + warps - 1) / warps;
    const int64_t q_begin = c_begin + part * per_warp;
    const int64_t q_end = min(c_end, q_begin + per_warp);
    const scalar_t* xr = x + row * n;
    const bool aligned = reinterpret_cast<uintptr_t>(xr) % sizeof(Quad<scalar_t>) == 0;
    const PhiloxSeed seed = philox_seed(philox);
    float warp_floor = -INFINITY;
    for (int64_t base = q_begin; base < q_end; base += kWarp * kQuadsPerLane) {  // the same trips in every lane
      race_trip<kQuadsPerLane>(xr, n, base + lane, kWarp, q_end, aligned, base == q_begin,
                               static_cast<uint64_t>(row * quads), wts, seed, mine, warp_floor);
    }
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const double other_key = __shfl_xor_sync(kFullMask, mine.key, offset);
    const int64_t other_index = __shfl_xor_sync(kFullMask, mine.index, offset);
    if (beats(other_key, other_index, mine.key, mine.index)) {
      mine.key = other_key;
      mine.index = other_index;
    }
  }
  ChunkStats chunk{__reduce_add_sync(kFullMask, mine.nonzero), __reduce_or_sync(kFullMask, mine.flags)};
  if (warps > 1) {
    if (lane == 0) {
      part_key[warp] = mine.key;
      part_index[warp] = mine.index;
      part_stats[warp] = chunk;
    }
    __syncthreads();
    if (part == 0 && lane == 0) {
      for (int w = warp + 1; w < warp + warps; ++w) {
        if (beats(part_key[w], part_index[w], mine.key, mine.index)) {
          mine.key = part_key[w];
          mine.index = part_index[w];
        }
        chunk.nonzero += part_stats[w].nonzero;
        chunk.flags |= part_stats[w].flags;
      }
    }
  }
  if (!held || part != 0 || lane != 0) return;
  max_key[unit] = mine.key;
  max_index[unit] = mine.index;
  stats[unit] = chunk;
}

// Pass 2 of the two-pass top-k: the items of each row's k picked chunks whose keys are
// above the row's floor (its k-th chunk maximum less one ulp), appended in any order to
// the row's run (run_cap keys and items; the count goes on past it). They hold the row's
// top k: the picked chunks hold it, and its k-th key is at least the k-th chunk maximum.
// Almost every item the float bound rules out against the floor; about k are appended,
// where a top-k list per picked chunk wrote and merged k candidates each. Zero weights are
// never appended: a row with k nonzero weights never draws one, and a row with fewer
// counts fewer than k and takes the lists.
template <typename scalar_t, typename Weights>
__global__ void __launch_bounds__(kThreads)
    picked_run_kernel(const scalar_t* x, int64_t rows, int64_t n, int64_t k, int64_t chunk_quads, const int64_t* pick,
                      const unsigned long long* row_floor_bits, Weights wts, at::PhiloxCudaState philox,
                      int64_t run_cap, double* run_key, int64_t* run_index, unsigned* run_count) {
  const PhiloxSeed seed = philox_seed(philox);
  const int64_t quads = (n + 3) / 4;
  const int64_t row_quads = k * chunk_quads;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < rows * row_quads;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = t / row_quads;
    const int64_t q = pick[t / chunk_quads] * chunk_quads + t % chunk_quads;
    if (q >= quads) continue;
    const scalar_t* xr = x + row * n;
    value_t<scalar_t> v[4];
    const uint32_t in_row = load_quad(xr, n, q, reinterpret_cast<uintptr_t>(xr) % sizeof(Quad<scalar_t>) == 0, v);
    const double floor = from_ordered_bits(row_floor_bits[row]);
    const float scale = ruling_scale(wts, floor);
    const uint64_t sub = static_cast<uint64_t>(row * quads + q);
    const uint4 high = philox_block_cuda(seed, sub);
    const uint32_t hi[4] = {high.x, high.y, high.z, high.w};
    uint32_t kept = 0;
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      kept |= static_cast<uint32_t>((in_row >> h & 1) && nonzero_value<Weights>(v[h]) &&
                                    !ruled_out(wts, v[h], hi[h], scale)) << h;
    }
    if (kept == 0) continue;
    bool full[4];
    bool any_full = false;
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      full[h] = (kept >> h & 1) && !surely_below(wts, v[h], hi[h], floor);
      any_full |= full[h];
    }
    if (!any_full) continue;
    const uint4 low = philox_block_cuda(PhiloxSeed{seed.seed, seed.offset + 4}, sub);
    const uint32_t lo[4] = {low.x, low.y, low.z, low.w};
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      if (!full[h]) continue;
      const double key = wts.key(static_cast<double>(v[h]), exponential(lo[h], hi[h]));
      if (!(key > floor)) continue;
      const unsigned slot = atomicAdd(run_count + row, 1u);
      if (slot < run_cap) {
        run_key[row * run_cap + slot] = key;
        run_index[row * run_cap + slot] = 4 * q + h;
      }
    }
  }
}

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
// blocks an SM: at 87 registers (two blocks) the float64 path waited on its log and
// Philox chains with a quarter of the SM's warps (1 x 2^24, k = 2^20: 0.81 -> 0.73 ms;
// float64 4,096 x 32,000, k = 1,024: 3.46 -> 3.05 ms; the same draws).
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

// Few draws (k <= K) from short rows, or from many rows (thread_rows_serve): a thread per
// row, the same keys (quad_keys) kept in decreasing order in registers by insertion; a
// warp per row would leave most of its lanes idle and sort a 32-key list for a handful
// of items, and from many rows it is the slower (kernels_cuda.cuh).
template <typename scalar_t, typename Weights, int K>
__global__ void thread_rows_kernel(const scalar_t* x, int64_t rows, int64_t n, int64_t k, Weights wts,
                                   at::PhiloxCudaState philox, int64_t* out, uint32_t* status) {
  const PhiloxSeed seed = philox_seed(philox);
  const int64_t quads = (n + 3) / 4;
  uint32_t flags = 0;
  for (int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double top[K];
    int64_t index[K];
#pragma unroll
    for (int i = 0; i < K; ++i) {
      top[i] = Weights::kNone;
      index[i] = 0;
    }
    unsigned long long nonzero = 0;
    uint32_t row_flags = 0;
    for (int64_t q = 0; q < quads; ++q) {
      double key[4];
      quad_keys(x + row * n, n, q, static_cast<uint64_t>(row * quads + q), wts, seed, top[K - 1], key, row_flags,
                nonzero);
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        double c = key[h];
        int64_t ci = 4 * q + h;
#pragma unroll
        for (int i = 0; i < K; ++i) {  // the new key sinks to its place, the rest shift down
          if (c > top[i]) {
            const double t = top[i];
            const int64_t ti = index[i];
            top[i] = c;
            index[i] = ci;
            c = t;
            ci = ti;
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < K; ++i) {
      if (i < k) out[row * k + i] = index[i];
    }
    if (nonzero == 0) row_flags |= kRowZeroSum;
    if (nonzero < static_cast<unsigned long long>(k)) row_flags |= kTooFewNonzero;
    flags |= row_flags;
  }
  flags = __reduce_or_sync(__activemask(), flags);
  if (flags && threadIdx.x % kWarp == 0) atomicOr(status, flags);
}

// How a call's rows are spread: `warps` per row (a block serves 8 / warps rows), or 8
// warps over each of `chunks` chunks of a row. About one wave of the blocks the GPU holds
// at once, each warp streaming as long a stretch as that leaves: a stretch of m items
// admits about k (1 + ln(m / k)) keys, so longer stretches admit a smaller share, and
// fewer chunks leave fewer lists to merge. But a chunk needs only two trips of each warp
// (kMinChunkItems): few rows cut into chunks of 16,384 left most SMs idle (H100, bfloat16
// 8 x 32,000, k = 8: 8 blocks, 111 us a call, against 69 us with 56 blocks).
struct Split {
  int warps;
  int64_t chunks;
};

Split split(int64_t rows, int64_t n, int64_t resident_blocks) {
  const int64_t resident_warps = resident_blocks * kWarpsPerBlock;
  int warps = 1;
  while (warps < kWarpsPerBlock && rows * warps < resident_warps && n > kItemsPerWarp * warps) warps *= 2;
  if (warps < kWarpsPerBlock) return {warps, 1};
  const int64_t most = std::max<int64_t>(1, n / kMinChunkItems);
  return {warps, std::max<int64_t>(1, std::min(resident_blocks / rows, most))};
}

template <typename scalar_t, typename Weights, int SLOTS>
int64_t resident_blocks() {
  static const int64_t blocks = [] {
    int per_sm = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, topk_kernel<scalar_t, Weights, SLOTS>,
                                                                 kThreads, 0));
    return static_cast<int64_t>(std::max(per_sm, 1)) * at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  }();
  return blocks;
}

template <typename scalar_t, typename Weights, int SLOTS>
void launch(const DrawCall& call, const Weights& wts) {
  const auto [warps, chunks] = split(call.rows, call.n, resident_blocks<scalar_t, Weights, SLOTS>());
  const scalar_t* x = call.x.const_data_ptr<scalar_t>();
  const int64_t quads = (call.n + 3) / 4;
  if (chunks == 1) {
    topk_kernel<scalar_t, Weights, SLOTS><<<ceil_div(call.rows, kWarpsPerBlock / warps), kThreads, 0, call.stream>>>(
        x, call.rows, call.n, call.k, warps, 1, quads, nullptr, wts, call.philox, call.out, nullptr, nullptr, nullptr,
        nullptr, nullptr, 0, call.status);
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
      x, call.rows, call.n, call.k, kWarpsPerBlock, chunks, ceil_div(quads, chunks), nullptr, wts, call.philox,
      call.out, cand_key, cand_index, stats, row_floor_bits, nullptr, 0, call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  merge_chunks_kernel<Weights, SLOTS><<<call.rows, kThreads, 0, call.stream>>>(
      call.k, chunks, cand_key, cand_index, stats, row_floor_bits, nullptr, nullptr, nullptr, 0, call.out,
      call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The two-pass top-k's chunks: kChunksPerDraw k per row where rows are long enough
// (the second pass then reads an eighth of the row), of kTripItems to kItemsPerWarp *
// kWarpsPerBlock items (a warp's trip; a block's 8 warps' stretches), kTripItems apart.
struct Chunking {
  int64_t quads;  // per chunk
  int64_t chunks;  // per row
  int warps;      // per chunk
};

Chunking chunking(int64_t n, int64_t k) {
  const int64_t items = std::clamp<int64_t>(n / (kChunksPerDraw * k), kTripItems, kItemsPerWarp * kWarpsPerBlock);
  const int64_t quads = items / kTripItems * kTripItems / 4;
  int warps = 1;
  while (warps < kWarpsPerBlock && 4 * quads > kItemsPerWarp * warps) warps *= 2;
  return {quads, ceil_div((n + 3) / 4, quads), warps};
}

// Pass 1 (chunk_best_kernel): each chunk's largest key and item, with its stats.
// select_chunks_kernel: the k chunks with the largest, the row's floor, the rows' flags.
// Pass 2 (picked_run_kernel): the picked chunks' keys above the floor, into each row's run.
// Rows the run does not serve (run_serves) take the top k of each picked chunk above the
// floor (topk_kernel; the others' warps return at once). Then a block per row merges its
// run or its lists.
template <typename scalar_t, typename Weights, int SLOTS>
void launch_two_pass(const DrawCall& call, const Weights& wts) {
  const auto [chunk_quads, chunks, warps] = chunking(call.n, call.k);
  TORCH_INTERNAL_ASSERT(chunks >= call.k);
  const int64_t units = call.rows * chunks;
  const int64_t lists = call.rows * call.k;
  const int64_t run_cap = kRunPerDraw * call.k;
  at::Tensor keep;
  const auto [max_key, max_index, stats, pick, row_floor_bits, cand_key, cand_index, run_key, run_index, run_count] =
      scratch_arrays<double, int64_t, ChunkStats, int64_t, unsigned long long, double, int64_t, double, int64_t,
                     unsigned>(keep, call.x.options(),
                               {units, units, units, lists, call.rows, lists * call.k, lists * call.k,
                                call.rows * run_cap, call.rows * run_cap, call.rows});
  C10_CUDA_CHECK(cudaMemsetAsync(run_count, 0, call.rows * sizeof(unsigned), call.stream));
  const scalar_t* x = call.x.const_data_ptr<scalar_t>();
  chunk_best_kernel<scalar_t, Weights><<<ceil_div(units, kWarpsPerBlock / warps), kThreads, 0, call.stream>>>(
      x, call.rows, call.n, chunks, chunk_quads, warps, wts, call.philox, max_key, max_index, stats);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  select_chunks_kernel<Weights, SLOTS><<<call.rows, kThreads, 0, call.stream>>>(
      call.k, chunks, 4 * chunk_quads, max_key, max_index, stats, pick, row_floor_bits, call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  picked_run_kernel<scalar_t, Weights><<<grid_for(lists * chunk_quads, kThreads), kThreads, 0, call.stream>>>(
      x, call.rows, call.n, call.k, chunk_quads, pick, row_floor_bits, wts, call.philox, run_cap, run_key, run_index,
      run_count);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  topk_kernel<scalar_t, Weights, SLOTS><<<ceil_div(lists, kWarpsPerBlock / warps), kThreads, 0, call.stream>>>(
      x, call.rows, call.n, call.k, warps, /*units_per_row=*/call.k, chunk_quads, pick, wts, call.philox, call.out,
      cand_key, cand_index, nullptr, row_floor_bits, run_count, run_cap, call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  merge_chunks_kernel<Weights, SLOTS><<<call.rows, kThreads, 0, call.stream>>>(
      call.k, /*lists_per_row=*/call.k, cand_key, cand_index, /*stats=*/nullptr, row_floor_bits, run_key, run_index,
      run_count, run_cap, call.out, call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename scalar_t, typename Weights, int SLOTS>
void launch_one_or_two_passes(const DrawCall& call, const Weights& wts, bool two_pass) {
  if (two_pass) {
    launch_two_pass<scalar_t, Weights, SLOTS>(call, wts);
  } else {
    launch<scalar_t, Weights, SLOTS>(call, wts);
  }
}

template <typename scalar_t, typename Weights>
void launch_for_k(const DrawCall& call, const Weights& wts, bool two_pass) {
  if (call.k <= kWarp) {
    launch_one_or_two_passes<scalar_t, Weights, 1>(call, wts, two_pass);
  } else {
    launch_one_or_two_passes<scalar_t, Weights, 2>(call, wts, two_pass);
  }
}

template <typename scalar_t, typename Weights, int K>
void launch_thread_rows(const DrawCall& call, const Weights& wts) {
  thread_rows_kernel<scalar_t, Weights, K><<<grid_for(call.rows, kThreads), kThreads, 0, call.stream>>>(
      call.x.const_data_ptr<scalar_t>(), call.rows, call.n, call.k, wts, call.philox, call.out, call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void draw_topk(const DrawCall& call) {
  TORCH_INTERNAL_ASSERT(call.k <= kMaxTopK);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "topk_cuda", [&] {
    with_weights(call, [&](const auto& wts) { launch_for_k<scalar_t>(call, wts, /*two_pass=*/false); });
  });
}

// The table above kTwoPassItemsPerDraw (kernels_cuda.cuh), a line a row.
struct TwoPassClass {
  int64_t rows_from, rows_up_to;
  bool logits_too;  // false: probabilities only
  int64_t k_from, k_up_to;
  int64_t items_per_draw;   // n >= items_per_draw * k
  int64_t call_items_from;  // rows * n >= this
};
constexpr int64_t kAnyRows = std::numeric_limits<int64_t>::max();
constexpr TwoPassClass kTwoPassClasses[] = {
    // {rows from, rows up to, logits too, k from, k up to, n >= this x k, rows x n >= this}
    {1, 256, false, 2, 7, kTwoPassItemsPerDraw, int64_t{1} << 24},
    {1, 256, false, 8, kMaxTopK, kTwoPassItemsPerDraw, 0},
    {1, 256, true, 16, kMaxTopK, kTwoPassItemsPerDraw, 0},
    {257, 1024, true, kWarp + 1, kMaxTopK, kTwoPassItemsPerDraw, 0},
    {1025, kAnyRows, true, kWarp + 1, kMaxTopK, 384, 0},
    {257, kAnyRows, false, 2, kWarp, 8192, 0},
};

bool two_pass_serves(int64_t rows, int64_t n, int64_t k, bool logits) {
  for (const TwoPassClass& c : kTwoPassClasses) {
    if (rows >= c.rows_from && rows <= c.rows_up_to && (c.logits_too || !logits) && k >= c.k_from &&
        k <= c.k_up_to && n >= c.items_per_draw * k && rows * n >= c.call_items_from) {
      return true;
    }
  }
  return false;
}

void draw_two_pass_topk(const DrawCall& call) {
  TORCH_INTERNAL_ASSERT(two_pass_serves(call.rows, call.n, call.k, call.logits));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "two_pass_topk_cuda", [&] {
    with_weights(call, [&](const auto& wts) { launch_for_k<scalar_t>(call, wts, /*two_pass=*/true); });
  });
}

bool thread_rows_serve(int64_t rows, int64_t n, int64_t k) {
  return k <= kMaxThreadRowSamples && (n <= kMaxThreadRow || (rows >= kThreadRowsFrom && n <= kMaxThreadLongRow));
}

void draw_thread_topk(const DrawCall& call) {
  TORCH_INTERNAL_ASSERT(thread_rows_serve(call.rows, call.n, call.k));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "thread_topk_cuda", [&] {
    with_weights(call, [&](const auto& wts) {
      if (call.k <= 2) {
        launch_thread_rows<scalar_t, std::decay_t<decltype(wts)>, 2>(call, wts);
      } else {
        launch_thread_rows<scalar_t, std::decay_t<decltype(wts)>, kMaxThreadRowSamples>(call, wts);
      }
    });
  });
}

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

bool chunk_max_serves(int64_t rows, int64_t n, int64_t k) {
  return k > kMaxTopK && n >= kChunkMaxItemsPerDraw * k && n >= kChunkMaxRowFrom && rows * n >= kChunkMaxFromItems;
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
