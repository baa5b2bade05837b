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
constexpr int kQuadsPerLane = 2;  // a lane's quads (4 items each) per trip
constexpr int kTripItems = kWarp * 4 * kQuadsPerLane;
template <int SLOTS>
constexpr int kSlotsTotal = kWarp * SLOTS;  // a warp list's length
constexpr int64_t kItemsPerWarp = 2048;  // about this many items per warp of a row or chunk
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

// A lower bound of E, in float, from the high word of its 64 bits as exponential() takes
// them: E >= -log((hi + 1) 2^-32), computed in float (__logf: 2^-21.41 absolute near 1, 3
// ulp elsewhere; the float conversions 2^-24 relative) and shrunk by 2^-12 relative and
// 2^-20 absolute, well past those errors.
__device__ inline float e_below(uint32_t hi) {
  const float u_above = (static_cast<float>(hi) + 1.0f) * 0x1.0p-32f;  // >= u, in (0, 1]
  return fmaxf(-__logf(u_above) * (1.0f - 0x1.0p-12f) - 0x1.0p-20f, 0.0f);
}

// Is the key of item value v, with E drawn from high word `hi`, surely below t (what it
// must beat)? A float bound, so that most items skip the low word and the float64 log;
// true only where the exact key is below t.
// Probabilities, key v / E: below t > 0 when v < t e_below, with the product shrunk by
// 2^-12 relative past its float errors.
__device__ inline bool surely_below(const ProbWeights&, double v, uint32_t hi, double t) {
  const float vf = static_cast<float>(v), tf = static_cast<float>(t);
  if (!(vf >= FLT_MIN && tf >= FLT_MIN && tf <= 1e30f)) return false;  // normal floats only
  return vf < tf * e_below(hi) * (1.0f - 0x1.0p-12f);
}
// Logits, key v / T - log E: below t when v / T - log(e_below) is, past a margin of 2^-16
// relative to the terms plus 2^-16 absolute. The float errors it covers: v / T and t
// rounded to float (2^-22.4 and 2^-24 relative), __logf (2^-21.4 absolute or relative),
// the sum (2^-24 relative).
__device__ inline bool surely_below(const LogitWeights& w, double v, uint32_t hi, double t) {
  const float vt = static_cast<float>(v) * static_cast<float>(w.inv_temperature);
  const float tf = static_cast<float>(t);
  const float e = e_below(hi);
  if (!(fabsf(vt) <= 1e30f && fabsf(tf) <= 1e30f && e >= FLT_MIN)) return false;
  const float minus_log_e = -__logf(e);  // >= -log E
  const float margin = (fabsf(vt) + fabsf(minus_log_e) + fabsf(tf)) * 0x1.0p-16f + 0x1.0p-16f;
  return vt + minus_log_e + margin < tf;
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

// A block serves kWarpsPerBlock / warps_per_row rows (chunks == 1), or chunk
// blockIdx.x % chunks of row blockIdx.x / chunks with all its warps. The rows' (or
// chunks') top k go to `out` (chunks == 1) or to the candidate lists, with their stats.
template <typename scalar_t, typename Weights, int SLOTS>
__global__ void __launch_bounds__(kThreads)
    topk_kernel(const scalar_t* x, int64_t rows, int64_t n, int64_t k, int warps_per_row, int64_t chunks,
                int64_t chunk_quads, Weights wts, at::PhiloxCudaState philox, int64_t* out, double* cand_key,
                int64_t* cand_index, ChunkStats* stats, unsigned long long* row_floor_bits, uint32_t* status) {
  __shared__ Lists<SLOTS> lists;
  __shared__ unsigned long long floor_bits[kWarpsPerBlock];  // per row (or chunk) of the block
  __shared__ TripStage stage;
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
    const int64_t quads = (n + 3) / 4;
    const int64_t c_begin = chunk * chunk_quads;
    const int64_t c_end = min(quads, c_begin + chunk_quads);
    const int64_t per_warp = (c_end - c_begin + warps_per_row - 1) / warps_per_row;
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
      const double beat = fmax(kth, shared);
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

// Race keys of every item, quad q of row r from Philox subsequence r * quads + q, as
// above: float64, or rounded to float (monotone, so the order of the float keys is that of
// the float64 ones up to ties).
template <typename scalar_t, typename Weights, typename key_t>
__global__ void race_keys_kernel(const scalar_t* x, int64_t rows, int64_t n, Weights wts,
                                 at::PhiloxCudaState philox, key_t* keys, uint32_t* status) {
  const PhiloxSeed seed = philox_seed(philox);
  const int64_t quads = (n + 3) / 4;
  uint32_t flags = 0;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < rows * quads;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = t / quads;
    const int64_t q = t - row * quads;
    double key[4];
    unsigned long long nonzero = 0;  // unused: the caller finds rows with too few from the top k
    quad_keys(x + row * n, n, q, static_cast<uint64_t>(t), wts, seed, Weights::kNone, key, flags, nonzero);
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      if (4 * q + h < n) keys[row * n + 4 * q + h] = static_cast<key_t>(key[h]);
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

// The float64 keys of each row's `cands` candidates (torch.topk's pick by float keys).
template <typename scalar_t, typename Weights>
__global__ void candidate_keys_kernel(const scalar_t* x, int64_t rows, int64_t n, int64_t cands, Weights wts,
                                      at::PhiloxCudaState philox, const int64_t* cand_index, double* cand_key) {
  const PhiloxSeed seed = philox_seed(philox);
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < rows * cands;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    cand_key[t] = item_key(x, n, t / cands, cand_index[t], wts, seed);
  }
}

// Each run of equal float keys among a row's candidates (in decreasing float order) is
// sorted by float64 key, by the thread at its start; the first k are the draws. Since
// rounding to float is monotone, only equal float keys can be out of float64 order, and
// when the row's last candidate's float key is below its k-th, every item whose float key
// ties one of the first k is a candidate: else kFloatKeyTies (the caller ranks float64
// keys). Zero-sum rows and rows with too few nonzero weights show in the float64 keys.
__global__ void rank_candidates_kernel(int64_t rows, int64_t k, int64_t cands, double zero_key, const float* cand_g,
                                       int64_t* cand_index, double* cand_key, int64_t* out, uint32_t* status) {
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < rows * cands;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = t / cands;
    const int64_t j = t - row * cands;
    if (j >= k || (j > 0 && cand_g[t] == cand_g[t - 1])) continue;  // not the start of a run that matters
    const int64_t first = row * cands;
    int64_t end = j + 1;
    while (end < cands && cand_g[first + end] == cand_g[t]) ++end;
    for (int64_t a = j + 1; a < end; ++a) {  // insertion sort, decreasing by float64 key
      const double key = cand_key[first + a];
      const int64_t index = cand_index[first + a];
      int64_t b = a;
      for (; b > j && cand_key[first + b - 1] < key; --b) {
        cand_key[first + b] = cand_key[first + b - 1];
        cand_index[first + b] = cand_index[first + b - 1];
      }
      cand_key[first + b] = key;
      cand_index[first + b] = index;
    }
    for (int64_t p = j; p < end && p < k; ++p) out[row * k + p] = cand_index[first + p];
    uint32_t flags = 0;
    if (j == 0) {
      if (cand_key[first] <= zero_key) flags |= kRowZeroSum;
      if (!(cand_g[first + cands - 1] < cand_g[first + k - 1])) flags |= kFloatKeyTies;
    }
    if (j <= k - 1 && k - 1 < end && cand_key[first + k - 1] <= zero_key) flags |= kTooFewNonzero;
    if (flags) atomicOr(status, flags);
  }
}

// Short rows (n <= kMaxThreadRow items, k <= K draws): a thread per row, the same keys
// (quad_keys) kept in decreasing order in registers by insertion; a warp per row would
// leave most of its lanes idle and sort a 32-key list for a handful of items.
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
// at once, each warp streaming as long a stretch as that leaves (at least kItemsPerWarp
// items): a stretch of m items admits about k (1 + ln(m / k)) keys, so longer stretches
// admit a smaller share, and fewer chunks leave fewer lists to merge.
struct Split {
  int warps;
  int64_t chunks;
};

Split split(int64_t rows, int64_t n, int64_t resident_blocks) {
  const int64_t resident_warps = resident_blocks * kWarpsPerBlock;
  int warps = 1;
  while (warps < kWarpsPerBlock && rows * warps < resident_warps && n > kItemsPerWarp * warps) warps *= 2;
  if (warps < kWarpsPerBlock) return {warps, 1};
  const int64_t most = std::max<int64_t>(1, n / (kItemsPerWarp * kWarpsPerBlock));
  return {warps, std::max<int64_t>(1, std::min(resident_blocks / rows, most))};
}

template <typename scalar_t, typename Weights, int SLOTS>
void launch(const DrawCall& call, const Weights& wts) {
  static const int64_t resident_blocks = [] {
    int per_sm = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, topk_kernel<scalar_t, Weights, SLOTS>,
                                                                 kThreads, 0));
    return static_cast<int64_t>(std::max(per_sm, 1)) * at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  }();
  const auto [warps, chunks] = split(call.rows, call.n, resident_blocks);
  const scalar_t* x = call.x.const_data_ptr<scalar_t>();
  const int64_t quads = (call.n + 3) / 4;
  if (chunks == 1) {
    topk_kernel<scalar_t, Weights, SLOTS><<<ceil_div(call.rows, kWarpsPerBlock / warps), kThreads, 0, call.stream>>>(
        x, call.rows, call.n, call.k, warps, 1, quads, wts, call.philox, call.out, nullptr, nullptr, nullptr, nullptr,
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
      x, call.rows, call.n, call.k, kWarpsPerBlock, chunks, ceil_div(quads, chunks), wts, call.philox, call.out,
      cand_key, cand_index, stats, row_floor_bits, call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  merge_chunks_kernel<Weights, SLOTS><<<call.rows, kThreads, 0, call.stream>>>(
      call.k, chunks, cand_key, cand_index, stats, row_floor_bits, call.out, call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename scalar_t, typename Weights>
void launch_for_k(const DrawCall& call, const Weights& wts) {
  if (call.k <= kWarp) {
    launch<scalar_t, Weights, 1>(call, wts);
  } else {
    launch<scalar_t, Weights, 2>(call, wts);
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
    with_weights(call, [&](const auto& wts) { launch_for_k<scalar_t>(call, wts); });
  });
}

bool thread_rows_serve(int64_t n, int64_t k) { return n <= kMaxThreadRow && k <= kMaxThreadRowSamples; }

void draw_thread_topk(const DrawCall& call) {
  TORCH_INTERNAL_ASSERT(thread_rows_serve(call.n, call.k));
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
void race_keys(const DrawCall& call, key_t* keys) {
  const int blocks = grid_for(call.rows * ((call.n + 3) / 4), kThreads);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "race_keys_cuda", [&] {
    const scalar_t* x = call.x.const_data_ptr<scalar_t>();
    with_weights(call, [&](const auto& wts) {
      race_keys_kernel<<<blocks, kThreads, 0, call.stream>>>(x, call.rows, call.n, wts, call.philox, keys, call.status);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}
template void race_keys<double>(const DrawCall& call, double* keys);
template void race_keys<float>(const DrawCall& call, float* keys);

void rank_candidates(const DrawCall& call, int64_t cands, const float* cand_g, int64_t* cand_index,
                     double* cand_key) {
  const int blocks = grid_for(call.rows * cands, kThreads);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "candidate_keys_cuda", [&] {
    const scalar_t* x = call.x.const_data_ptr<scalar_t>();
    with_weights(call, [&](const auto& wts) {
      candidate_keys_kernel<<<blocks, kThreads, 0, call.stream>>>(x, call.rows, call.n, cands, wts, call.philox,
                                                                 cand_index, cand_key);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  const double zero_key = call.logits ? LogitWeights{1.0}.key(-INFINITY, 1.0) : ProbWeights{1.0}.key(0.0, 1.0);
  rank_candidates_kernel<<<blocks, kThreads, 0, call.stream>>>(call.rows, call.k, cands, zero_key, cand_g, cand_index,
                                                              cand_key, call.out, call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace wrs::multinomial
