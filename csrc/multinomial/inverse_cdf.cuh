#pragma once
// With replacement, any row length, few draws per row: an exact integer inverse CDF over
// chunks of the row, reading the row about twice instead of building an alias table.
//
// A row is cut into `chunks` chunks of whole 1,024-item tiles, one block each:
//   1. summarize: each chunk's float64 sum (for logits: its max and sum of exp), flags;
//   2. units: each block reduces its row's chunk summaries (the same fixed order in every
//      block, so all agree on the row's scale), quantizes its items as alias tables do
//      and writes their integer total;
//   3. draw: each block finds the row's integer total and the units before its chunk,
//      draws the row's k uniform points (sample s from Philox block row * k + s), keeps
//      those inside its own range, and only if there are any, reads its chunk once more
//      to find their items with a block scan, tile by tile (where draws are sparse, a
//      look-ahead of a tile per warp skips the tiles that hold none).
// A few draws a row (kMaxBoundedDraws) skip step 2: each chunk's summary bounds its units,
// and a block per draw finds its chunk against those bounds, with rejection
// (one_draw_kernel). Chunks of several tiles are cut into single tiles there, a warp each,
// where a row has at most kMaxChunks tiles (summarize_tiles_kernel).
// With one chunk per row (enough rows to fill the GPU) one kernel does all three steps,
// its later reads of the row served by L1 and L2.
//
// The draws are inverse_cdf_cuda.cu's; cdf_search_cuda.cu stores the same units' CDF for
// many draws. This header holds the block-level steps both take.
//
// Every sample's slot is first set to item 0, so the output stays in range whatever the
// input (under CUDA-graph capture nothing checks it on the host).
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "multinomial/kernels_cuda.cuh"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/warp/warp_reduce.cuh>

#include <algorithm>



// Included by inverse_cdf_cuda.cu and cdf_search_cuda.cu alone: each gets its own copy.
namespace wrs::multinomial {
namespace {

constexpr int kThreads = 256;
constexpr int kItems = 4;                     // items per thread per tile (blocked: index order)
constexpr int64_t kTile = kThreads * kItems;  // 1,024
constexpr int64_t kMaxChunks = kMaxInverseCdfChunks;  // per row: keeps each block's look at its row cheap
static_assert(kTile == kInverseCdfTile, "the method table's tiles");
constexpr int kRowHits = kMaxRowSamples;      // a block per row holds all its row's draws

template <typename Weights>
struct CombineSummaries {
  __device__ Summary operator()(const Summary& a, const Summary& b) const { return Weights::combine(a, b); }
};

// A row's largest shift over its chunks that hold weight, and their flags.
struct ShiftFlags {
  double shift;
  uint32_t flags;
};
struct MaxShiftOrFlags {
  __device__ ShiftFlags operator()(const ShiftFlags& a, const ShiftFlags& b) const {
    return ShiftFlags{a.shift > b.shift ? a.shift : b.shift, a.flags | b.flags};
  }
};

using SummaryReduce = cub::BlockReduce<Summary, kThreads>;
using ShiftFlagsReduce = cub::BlockReduce<ShiftFlags, kThreads>;
using SumReduce = cub::BlockReduce<double, kThreads>;
using UnitsReduce = cub::BlockReduce<uint64_t, kThreads>;
using UnitsScan = cub::BlockScan<uint64_t, kThreads, cub::BLOCK_SCAN_WARP_SCANS>;

struct Hit {
  int64_t sample;   // which of the row's k draws
  uint64_t offset;  // its point, in units from the chunk's start
};

template <int HITS>  // capacity for the draws that land in one block's chunk
struct Shared {
  union {
    typename SummaryReduce::TempStorage summary;
    typename ShiftFlagsReduce::TempStorage shift_flags;
    typename SumReduce::TempStorage sum;
    typename UnitsReduce::TempStorage units;
    typename UnitsScan::TempStorage scan;
  } tmp;
  RowLaw law;
  double row_shift;
  uint64_t before;  // units of the row before this chunk
  uint64_t total;   // units of the whole row
  uint64_t tile_units[kThreads / kWarp];  // find_hits' look ahead: a tile's units per warp
  int hits;
  Hit hit[HITS];
  Hit sorted[HITS];
};
using ReduceShared = Shared<1>;

// Chunk `c` of row `row`: items [first, first + count).
struct ChunkOf {
  int64_t row, c, first, count;
  __device__ ChunkOf(int64_t block, int64_t n, int64_t chunks, int64_t chunk_items) {
    row = block / chunks;
    c = block - row * chunks;
    first = c * chunk_items;
    count = n - first < chunk_items ? n - first : chunk_items;
  }
};

// Values of a group of consecutive items.
template <typename V, int G>
struct Values {
  V v[G];
};

// Calls f(values) on each group of `count` items at x, as V, shared by `threads` threads
// (this one `t`): thread t takes groups t, t + threads, ... of kGroup consecutive items (one
// 16-byte load each where x is 16-byte aligned, else item by item), then the tail one item
// a group. Each thread sees the same items in the same order wherever x lies, so a float64
// sum over them does not depend on alignment.
template <typename V, typename scalar_t, typename F>
__device__ void for_each_group(const scalar_t* x, int64_t count, int t, int threads, F&& f) {
  constexpr int kGroup = 16 / sizeof(scalar_t);
  struct alignas(16) Group {
    scalar_t v[kGroup];
  };
  const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const int64_t groups = count / kGroup;
#pragma unroll 4
  for (int64_t g = t; g < groups; g += threads) {
    Group items;
    if (aligned) {
      items = reinterpret_cast<const Group*>(x)[g];
    } else {
#pragma unroll
      for (int h = 0; h < kGroup; ++h) items.v[h] = x[g * kGroup + h];
    }
    Values<V, kGroup> values;
#pragma unroll
    for (int h = 0; h < kGroup; ++h) values.v[h] = static_cast<V>(items.v[h]);
    f(values);
  }
  for (int64_t i = groups * kGroup + t; i < count; i += threads) f(Values<V, 1>{{static_cast<V>(x[i])}});
}

// Calls f(value) on each item, as for_each_group orders them (float64 by default).
template <typename V = double, typename scalar_t, typename F>
__device__ void for_each_item(const scalar_t* x, int64_t count, int t, int threads, F&& f) {
  for_each_group<V>(x, count, t, threads, [&](const auto& values) {
#pragma unroll
    for (int h = 0; h < static_cast<int>(sizeof(values.v) / sizeof(values.v[0])); ++h) f(values.v[h]);
  });
}

template <typename scalar_t, typename Weights, typename SH>
__device__ Summary summarize(const scalar_t* x, int64_t count, const Weights& wts, SH& sh) {
  Summary mine = Weights::empty();
  for_each_item(x, count, threadIdx.x, kThreads, [&](double v) { mine = wts.add(mine, v); });
  return SummaryReduce(sh.tmp.summary).Reduce(mine, CombineSummaries<Weights>{});  // thread 0's
}

// The row's summary from its chunks' (in thread 0), the same in every block of the row.
// Logits: the largest shift first, then each chunk's sum rescaled to it, so the float64
// exps run side by side, one a chunk, not one after another down a reduction tree.
template <typename Weights, typename SH>
__device__ Summary row_summary(const Summary* chunk, int64_t chunks, SH& sh) {
  if constexpr (!Weights::kLogits) {
    Summary mine = Weights::empty();
    for (int64_t c = threadIdx.x; c < chunks; c += kThreads) mine = Weights::combine(mine, chunk[c]);
    return SummaryReduce(sh.tmp.summary).Reduce(mine, CombineSummaries<Weights>{});
  } else {
    ShiftFlags mine{-INFINITY, 0u};
    for (int64_t c = threadIdx.x; c < chunks; c += kThreads) {
      mine.flags |= chunk[c].flags;
      if (chunk[c].sum != 0 && chunk[c].shift > mine.shift) mine.shift = chunk[c].shift;  // as combine(): empty chunks aside
    }
    const ShiftFlags all = ShiftFlagsReduce(sh.tmp.shift_flags).Reduce(mine, MaxShiftOrFlags{});
    if (threadIdx.x == 0) sh.row_shift = all.shift;
    __syncthreads();
    const double shift = sh.row_shift;
    double sum = 0.0;
    for (int64_t c = threadIdx.x; c < chunks; c += kThreads) {
      if (chunk[c].sum != 0) sum += chunk[c].sum * ::exp(chunk[c].shift - shift);
    }
    sum = SumReduce(sh.tmp.sum).Sum(sum);
    return Summary{shift, sum, all.flags};
  }
}

template <typename scalar_t, typename Weights, typename SH>
__device__ uint64_t chunk_units(const scalar_t* x, int64_t count, const Weights& wts, const RowLaw& law,
                                int64_t n, SH& sh) {
  uint64_t mine = 0;
  for_each_item(x, count, threadIdx.x, kThreads, [&](double v) { mine += units(wts, v, law, n); });
  return UnitsReduce(sh.tmp.units).Sum(mine);  // thread 0's
}

// The units of the kWarpsPerBlock tiles from `tile` into sh.tile_units, a warp per tile
// (0 past the end).
template <typename scalar_t, typename Weights, typename SH>
__device__ void tile_units(const scalar_t* x, int64_t count, int64_t tile, const Weights& wts, const RowLaw& law,
                           int64_t n, SH& sh) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t first = tile + warp * kTile;
  uint64_t mine = 0;
  if (first < count) {
    const int64_t items = count - first < kTile ? count - first : kTile;
    for_each_item(x + first, items, lane, kWarp, [&](double v) { mine += units(wts, v, law, n); });
  }
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) mine += __shfl_xor_sync(kFullMask, mine, o);
  if (lane == 0) sh.tile_units[warp] = mine;
}

// Sorts sh.hit[0, sh.hits) by offset into sh.sorted (a rank count: O(hits^2 / threads)).
template <typename SH>
__device__ void sort_hits(SH& sh) {
  const int hits = sh.hits;
  for (int i = threadIdx.x; i < hits; i += kThreads) {
    const Hit h = sh.hit[i];
    int rank = 0;
    for (int j = 0; j < hits; ++j) {
      const uint64_t o = sh.hit[j].offset;
      rank += o < h.offset || (o == h.offset && j < i);
    }
    sh.sorted[rank] = h;
  }
  __syncthreads();
}

// Writes the item of each sorted hit, reading the chunk tile by tile: thread t holds
// items t * kItems + j of a tile, so a block scan of their units follows index order.
template <typename scalar_t, typename Weights, typename SH>
__device__ void find_hits(const scalar_t* x, int64_t count, const Weights& wts, const RowLaw& law, int64_t n,
                          int64_t first, SH& sh, int64_t* out) {
  const int hits = sh.hits;
  // Hits sparse against the tiles: look ahead a tile per warp and skip the tiles without
  // one, so the block scans only the tiles that hold hits (one draw in a chunk of 100
  // tiles: about 7 look-aheads and 1 scan, not 50 scans one after another).
  const bool sparse = (count + kTile - 1) / kTile > 4 * static_cast<int64_t>(hits);
  constexpr int kAhead = kThreads / kWarp;
  int next = 0;           // first hit not yet found (the same in every thread)
  uint64_t running = 0;   // units of the tiles before this one
  for (int64_t tile = 0; tile < count && next < hits; tile += kTile) {
    if (sparse) {
      tile_units(x, count, tile, wts, law, n, sh);
      __syncthreads();
      const uint64_t v = sh.sorted[next].offset;
      int skip = 0;
      while (skip < kAhead && v - running >= sh.tile_units[skip]) running += sh.tile_units[skip++];
      __syncthreads();  // sh.tile_units is written again
      tile += skip * kTile;
      if (skip == kAhead || tile >= count) {
        tile -= kTile;  // the loop steps on to the next look-ahead
        continue;
      }
    }
    uint64_t q[kItems];
    uint64_t mine = 0;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int64_t i = tile + threadIdx.x * kItems + j;
      q[j] = i < count ? units(wts, static_cast<double>(x[i]), law, n) : 0;
      mine += q[j];
    }
    uint64_t before, tile_total;
    UnitsScan(sh.tmp.scan).ExclusiveSum(mine, before, tile_total);
    const uint64_t start = running + before;
    int end = next;
    while (end < hits && sh.sorted[end].offset - running < tile_total) ++end;
    for (int h = next; h < end; ++h) {
      const uint64_t v = sh.sorted[h].offset;
      if (v - start >= mine) continue;  // another thread's items
      uint64_t through = start;
#pragma unroll
      for (int j = 0; j < kItems; ++j) {
        through += q[j];
        if (v < through) {
          out[sh.sorted[h].sample] = first + tile + threadIdx.x * kItems + j;
          break;
        }
      }
    }
    next = end;
    running += tile_total;
    __syncthreads();  // the scan's storage is reused
  }
}

// Keeps the row's draws that land in [sh.before, sh.before + mine) in sh.hit.
template <typename SH>
__device__ void collect_hits(const PhiloxSeed& seed, int64_t row, int64_t k, uint64_t mine, SH& sh) {
  for (int64_t s = threadIdx.x; s < k; s += kThreads) {
    const uint4 r = philox_block_cuda(seed, static_cast<uint64_t>(row * k + s));
    const uint64_t offset = uniform_point(r.x, r.y, sh.total) - sh.before;  // wraps below the chunk
    if (offset < mine) sh.hit[atomicAdd(&sh.hits, 1)] = Hit{s, offset};
  }
  __syncthreads();
}

template <typename scalar_t, typename Weights>
__global__ void __launch_bounds__(kThreads)
    units_kernel(const scalar_t* x, int64_t n, int64_t chunks, int64_t chunk_items, Weights wts,
                 const Summary* summaries, uint64_t* chunk_total) {
  __shared__ ReduceShared sh;
  const ChunkOf ch(blockIdx.x, n, chunks, chunk_items);
  const Summary s = row_summary<Weights>(summaries + ch.row * chunks, chunks, sh);
  if (threadIdx.x == 0) sh.law = row_law<Weights>(s, n);
  __syncthreads();
  const uint64_t total = chunk_units(x + ch.row * n + ch.first, ch.count, wts, sh.law, n, sh);
  if (threadIdx.x == 0) chunk_total[blockIdx.x] = total;
}

// A few draws a row from rows cut into chunks: two kernels, no units pass. summarize_kernel
// writes each chunk's summary as an upper bound on its weights; one_draw_kernel, a block
// per draw, turns each into an upper bound B_c on the chunk's units (chunk_units_bound),
// draws a point of [0, sum B_c), and reads only the chunk c holding it: if the point
// lies within the chunk's exact units (its items quantized as alias tables do) the item
// holding it is the draw, else the point is rejected and a fresh one drawn. Each item is
// then drawn with probability proportional to its units Q_i, the quantized law of every
// other path (laws.h), whatever the bounds, as long as B_c >= the chunk's units; a tight
// bound only saves retries, and no units pass reads the row before the draw.
//
// Attempt a of draw d (sample s of row r: d = r k + s) takes Philox subsequence
// d + a rows k (one block), so one draw's points are those of one draw before. Valid
// rows accept with probability above 1 - 2^-10 per attempt (the bounds' margins, and
// count + 2 units a chunk for rounding, against n 2^32 units a row), so kMaxBoundAttempts
// attempts all fail with probability below 2^-160; the row then keeps item 0 (a bias
// far below the quantized law's 2^-33). Rows of invalid values (flagged, raised outside
// capture) stop there too, with an item in range (laws.h: chunk_units_bound,
// kMaxBoundAttempts).
//
// A block per draw reads one chunk; past 32 draws a row, or 2,048 draws in all, the
// blocks per chunk of draw_kernel (after the units pass), which read each chunk once for
// all its draws, cost less (docs/methods.md, "A block per draw").
constexpr int64_t kMaxBoundedDraws = 32;
constexpr int64_t kMaxBoundedDrawBlocks = 2048;

// Fast logit bound for 32- and 16-bit logits: one read in float, where the exact summary
// takes a float64 exp per item. Each thread keeps its largest x, m, and s = sum of
// exp2f((x - m) c) with c = log2(e) / T in float, a group of items at a time, rescaling s
// when m grows. Then
// sum exp(x / T - m / T), in the law's float64 arithmetic (laws.h: LogitWeights), is at
// most s * factor + j 2^-110 for a block of 256 threads of at most j items each:
// - Each factor of an item's chain (its own exp2f, the rescales after it) carries
//   relative errors 2^-24 from x - m, from the product with c and from c itself, on an
//   exponent p <= 0, and exp2f's 2 ulp (CUDA's documented bound: 2^-22 relative). The
//   chain's exponents sum to the item's own y = (x - m) c, so for y >= -150 the
//   exponent errors add to at most 3.01 * 2^-24 * 150 (< 2^-15 relative to the weight),
//   and the 2 ulp to j 2^-22; the sum's roundings to 2j 2^-24. Items with y < -150
//   weigh below 2^-150 (the j 2^-110).
// - The law evaluates x / T in float64: fl(x / T) - fl(m / T) is within (|x| + |m|) / T
//   2^-53 of (x - m) / T, below 2^-16 for |m / T| < 2^35 and the items within 150 of it.
//   For |m / T| >= 2^35 any float x < m is at least 2^-24 |m| below it, so x / T lies
//   2^11 below m / T and its float64 weight is 0 (exp underflows): s counts each x = m
//   as exactly 1, which bounds the rest.
// The block's threads then combine in float (CombineFastBounds: one more rescale and one
// more rounding per step, up to 12 steps), so with j the items a thread holds plus 32,
// factor = 1 + 2^-14 + j 2^-20 (+ 2^-15 where |m / T| < 2^35) covers every case.
// A NaN or +inf in the chunk (s NaN or m = +inf) sends the block to the exact summary.
struct FastLogitBound {
  float m = -3.402823466e38f;  // no finite logit yet (-inf logits leave it and s alone)
  float s = 0.0f;
  // A group's items at once: their exps are independent (an item at a time would chain
  // each exp2f to the last through m and s; docs/methods.md, "The inverse CDF"). fmaxf
  // skips NaN, whose exp2f then makes s NaN.
  template <int G>
  __device__ void add(const Values<float, G>& x, float c) {
    float top = x.v[0];
#pragma unroll
    for (int h = 1; h < G; ++h) top = fmaxf(top, x.v[h]);
    const float next = fmaxf(m, top);
    float sum = 0.0f;
#pragma unroll
    for (int h = 0; h < G; ++h) sum += exp2f((x.v[h] - next) * c);
    s = fmaf(s, exp2f((m - next) * c), sum);
    m = next;
  }
  __device__ bool exact() const { return !(s == s && s <= 3.402823466e38f && m <= 3.402823466e38f); }
  // items: at most the thread's items.
  __device__ Summary summary(double inv_temperature, int items) const {
    if (s == 0.0f) return LogitWeights::empty();
    const double shift = static_cast<double>(m) * inv_temperature;
    const double factor =
        1.0 + 0x1.0p-14 + static_cast<double>(items) * 0x1.0p-20 + (::fabs(shift) < 0x1.0p35 ? 0x1.0p-15 : 0.0);
    return Summary{shift, static_cast<double>(s) * factor + static_cast<double>(items) * 0x1.0p-110, 0u};
  }
};

// Two threads' fast bounds, rescaled to the larger m (in float: no float64 exp in the
// reduction tree).
struct CombineFastBounds {
  float c;
  __device__ FastLogitBound operator()(const FastLogitBound& a, const FastLogitBound& b) const {
    FastLogitBound r;
    r.m = fmaxf(a.m, b.m);
    r.s = fmaf(a.s, exp2f((a.m - r.m) * c), b.s * exp2f((b.m - r.m) * c));
    return r;
  }
};
using FastBoundReduce = cub::BlockReduce<FastLogitBound, kThreads>;

// Step 1: each chunk's summary, exact in float64; or, for 16- and 32-bit logits where
// log2e_over_t > 0 (one_draw_kernel's calls), an upper bound from float arithmetic. Sets
// the rows' k output slots to item 0 first.
template <typename scalar_t, typename Weights>
__global__ void __launch_bounds__(kThreads)
    summarize_kernel(const scalar_t* x, int64_t n, int64_t k, int64_t chunks, int64_t chunk_items, Weights wts,
                     float log2e_over_t, Summary* summaries, int64_t* out) {
  __shared__ ReduceShared sh;
  const ChunkOf ch(blockIdx.x, n, chunks, chunk_items);
  if (ch.c == 0) {
    for (int64_t s = threadIdx.x; s < k; s += kThreads) out[ch.row * k + s] = 0;
  }
  const scalar_t* xc = x + ch.row * n + ch.first;
  if constexpr (Weights::kLogits && sizeof(scalar_t) <= 4) {
    if (log2e_over_t > 0) {
      FastLogitBound mine;
      for_each_group<float>(xc, ch.count, threadIdx.x, kThreads, [&](const auto& v) { mine.add(v, log2e_over_t); });
      if (!__syncthreads_or(mine.exact())) {
        __shared__ typename FastBoundReduce::TempStorage fast;
        const FastLogitBound b = FastBoundReduce(fast).Reduce(mine, CombineFastBounds{log2e_over_t});
        // A thread's share of for_each_group's items, at most, and the reduction's steps.
        const int items = static_cast<int>(ch.count / kThreads) + 16 + 16;
        if (threadIdx.x == 0) summaries[blockIdx.x] = b.summary(wts.inv_temperature, items);
        return;
      }
    }
  }
  const Summary s = summarize(xc, ch.count, wts, sh);  // float64 (as a bound: within 2^-31)
  if (threadIdx.x == 0) summaries[blockIdx.x] = s;
}

// Step 1 for one_draw_kernel where a row has at most kMaxChunks tiles: chunks of one
// tile, a warp each, summarized as summarize_kernel does a chunk but with a warp
// reduction and no barrier. Chunks of a few tiles, a block each, spend more of their
// instructions on the block reduction than on the items (docs/methods.md, "The inverse
// CDF"), and the draw then walks its chunk's tiles one after another.
template <typename scalar_t, typename Weights>
__global__ void __launch_bounds__(kThreads)
    summarize_tiles_kernel(const scalar_t* x, int64_t n, int64_t k, int64_t rows, int64_t chunks, Weights wts,
                           float log2e_over_t, Summary* summaries, int64_t* out) {
  constexpr int kWarps = kThreads / kWarp;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t chunk = blockIdx.x * static_cast<int64_t>(kWarps) + warp;
  if (chunk >= rows * chunks) return;  // the whole warp
  const ChunkOf ch(chunk, n, chunks, kTile);
  if (ch.c == 0) {
    for (int64_t s = lane; s < k; s += kWarp) out[ch.row * k + s] = 0;
  }
  const scalar_t* xc = x + ch.row * n + ch.first;
  if constexpr (Weights::kLogits && sizeof(scalar_t) <= 4) {
    if (log2e_over_t > 0) {
      FastLogitBound mine;
      for_each_group<float>(xc, ch.count, lane, kWarp, [&](const auto& v) { mine.add(v, log2e_over_t); });
      if (!__any_sync(kFullMask, mine.exact())) {
        using FastWarpReduce = cub::WarpReduce<FastLogitBound>;
        __shared__ typename FastWarpReduce::TempStorage fast[kWarps];
        const FastLogitBound b = FastWarpReduce(fast[warp]).Reduce(mine, CombineFastBounds{log2e_over_t});
        // As summarize_kernel's: a lane's items at most, and more than the reduction's steps.
        const int items = static_cast<int>(ch.count / kWarp) + 16 + 16;
        if (lane == 0) summaries[chunk] = b.summary(wts.inv_temperature, items);
        return;
      }
    }
  }
  Summary mine = Weights::empty();
  for_each_item(xc, ch.count, lane, kWarp, [&](double v) { mine = wts.add(mine, v); });
  using SummaryWarpReduce = cub::WarpReduce<Summary>;
  __shared__ typename SummaryWarpReduce::TempStorage exact[kWarps];
  const Summary s = SummaryWarpReduce(exact[warp]).Reduce(mine, CombineSummaries<Weights>{});
  if (lane == 0) summaries[chunk] = s;
}

}  // namespace
}  // namespace wrs::multinomial
