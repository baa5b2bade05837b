// top_logprobs on CUDA (top_logprobs.h states the rule). A row is cut into P chunks, a CTA
// each (P from the rows and the GPU's SMs, so that one row is read by many SMs), then a
// small kernel merges each row's chunks.
//   1. chunk: one read of the chunk as quads (a warp's 32 quads are a 128-item segment):
//      each thread keeps its share's log-sum-exp (online, float64) and the drawn tokens'
//      counts of larger items; each segment's maximum goes to shared memory. Each thread
//      then takes the largest of a few segment maxima: the n-th largest of those is a floor
//      under the chunk's n-th largest item (n distinct items reach it), so the chunk's top n
//      lie in the segments at or above it. Those are read again, their items at or above the
//      floor listed and ranked in shared memory. A list too long to rank (ties at the floor,
//      a chunk of fewer segments than n) takes the exact n-th largest key, bit by bit, over
//      the chunk. The chunk's top n go out sorted.
//   2. merge: the row's log-sum-exp from the chunks', the ranks from their counts, and each
//      chunk key's place in the row's top n by binary searches of the other chunks' lists.
// Past kFusedMaxN, the row's composite keys go through at::topk.
// sample_llm_top_logprobs draws first; where route.h's fuses_top_n holds, the thresholds
// kernel ranks the top n from its lists and these kernels serve only the rows it flags.
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "llm/dispatch_cuda.h"
#include "llm/llm_ops.h"
#include "llm/plain_cuda.cuh"
#include "llm/route.h"
#include "llm/segments_cuda.cuh"
#include "llm/top_logprobs.h"

#include <ATen/Dispatch.h>
#include <ATen/ops/topk.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cub/block/block_reduce.cuh>
#include <torch/library.h>

#include <limits>
#include <tuple>

namespace wrs::llm {

namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kMergeThreads = 256;
constexpr int kRankChunk = 4;     // drawn tokens ranked in one pass over a chunk
constexpr int kUnroll = 4;        // segments a warp has in flight
constexpr int kSegSlots = 2048;   // segment maxima a CTA keeps (segments past it fold onto them)
constexpr int kListed = 1024;     // candidates ranked in shared memory
constexpr int64_t kFusedMaxN = 64;
static_assert(kFusedMaxN == kPlainMaxTopN, "rows the thresholds kernel flags are served here, not by at::topk");
constexpr int64_t kMinChunk = 8192;  // items a CTA at least: 64 segments, a floor for any n
constexpr int64_t kMaxChunks = 32;

// Each (row, chunk)'s results, from the chunk kernel to the merge.
struct Parts {
  float* max;       // [B, P]
  double* sum;      // [B, P], relative to max
  int* bad;         // [B, P]
  int64_t* above;   // [B, P, S]
  uint64_t* top;    // [B, P, n], sorted, 0 past the chunk's items
};

struct Args {
  int64_t v, samples, n, chunks, chunk_quads;
  const float* scale;
  const int64_t* tokens;
  Parts parts;
  float* logprobs;
  int64_t* ranks;
  int64_t* top_tokens;
  float* top_lp;
  double* lse;  // [B], for the at::topk route
  const uint8_t* redo;  // [B] or nullptr: rows with 0 are done (sample_llm_top_logprobs)
  bool by_controls;  // the scale is 1 / T by llm.h's row_controls (sample_llm_top_logprobs)
  Controls controls;
};

// Row b's factor: scale[b], 1 / T of the draw's controls, or 1.
__device__ inline float row_scale(const Args& a, int64_t b) {
  return a.scale ? a.scale[b] : a.by_controls ? row_controls(a.controls, b).inv_temperature : 1.0f;
}

struct Shared {
  uint64_t list[kListed];
  uint32_t seg_max[kSegSlots];  // order keys, 0: no item
  float ytok[kRankChunk];
  int count;
  uint64_t floor_key;
  union {
    cub::BlockReduce<float, kThreads>::TempStorage max;
    cub::BlockReduce<double, kThreads>::TempStorage sum;
    cub::BlockReduce<int64_t, kThreads>::TempStorage count;
  } reduce;
};

struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <typename scalar_t>
__device__ inline float value_at(const scalar_t* xr, int64_t i, float s) {
  return static_cast<float>(xr[i]) * s;
}

// Drawn tokens [j0, j0 + k)'s values into sh.ytok (NaN: out of range).
template <typename scalar_t>
__device__ inline void load_tokens(Shared& sh, const int64_t* tok, int64_t j0, int k, const scalar_t* xr, int64_t v,
                                   float s) {
  __syncthreads();
  if (threadIdx.x < k) {
    const int64_t t = tok[j0 + threadIdx.x];
    sh.ytok[threadIdx.x] = t >= 0 && t < v ? value_at(xr, t, s) : NAN;
  }
  __syncthreads();
}

__device__ inline int rank_chunk(int64_t samples, int64_t j0) {
  return static_cast<int>(samples - j0 < kRankChunk ? samples - j0 : kRankChunk);
}

// A thread's part of the read: online log-sum-exp (float sums of a quad into a float64
// total), counts of items above the first R drawn tokens' values, the segment maxima. Lean,
// as the read is bound by its instructions (bfloat16 rows took as long as float32): NaN and
// +inf items are found by the total they make NaN, and whole aligned segments skip the bounds.
template <int R>
struct Stream {
  float m = -INFINITY;
  double sum = 0.0;  // NaN once a NaN or +inf item is read
  int above[R] = {};
};

// 2^x, subnormal results flushed to 0 (weights under 2^-126 of the row's largest).
__device__ inline float exp2_ftz(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// A warp's kUnroll segments from s0 (kWhole: all inside the chunk, of whole aligned quads).
template <bool kWhole, int R, typename scalar_t>
__device__ inline void step(Stream<R>& t, Shared& sh, const scalar_t* xr, int64_t v, int64_t q_lo, int segs,
                            int64_t q_hi, bool aligned, float s, int s0, const float (&ytok)[R]) {
  const int lane = threadIdx.x % 32;
  float y[kUnroll][4];
  int present[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {  // every load first, so that kUnroll segments are in flight
    const int64_t q = q_lo + static_cast<int64_t>(s0 + u * kWarps) * 32 + lane;
    if constexpr (kWhole) {
      const Four<scalar_t> f = reinterpret_cast<const Four<scalar_t>*>(xr)[q];
#pragma unroll
      for (int h = 0; h < 4; ++h) y[u][h] = static_cast<float>(f.item[h]) * s;
      present[u] = 4;
    } else {
      present[u] = s0 + u * kWarps < segs && q < q_hi ? load_four(xr, v, q, aligned, s, y[u]) : 0;
#pragma unroll
      for (int h = 0; h < 4; ++h) y[u][h] = h < present[u] ? y[u][h] : -INFINITY;
    }
  }
  float quad_max[kUnroll];
  float top = t.m;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    quad_max[u] = fmaxf(fmaxf(y[u][0], y[u][1]), fmaxf(y[u][2], y[u][3]));
    top = fmaxf(top, quad_max[u]);
  }
  if (top > t.m) {  // a new maximum: the total rescaled once (while every item was -inf, it is 0 or NaN)
    if (t.m > -INFINITY) t.sum *= static_cast<double>(expf(t.m - top));
    t.m = top;
  }
  const float m = t.m > -INFINITY ? t.m : 0.0f;  // every item -inf so far: each weighs exp(-inf) = 0
  constexpr float kLog2e = 1.4426950408889634f;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    float group = 0.0f;
#pragma unroll
    for (int h = 0; h < 4; ++h) group += exp2_ftz((y[u][h] - m) * kLog2e);  // y - m <= 0: exact near the top
    t.sum += static_cast<double>(group);
    if (R > 1 || quad_max[u] > ytok[0]) {  // one drawn token: most quads lie under it
#pragma unroll
      for (int h = 0; h < 4; ++h) {
#pragma unroll
        for (int j = 0; j < R; ++j) t.above[j] += y[u][h] > ytok[j];
      }
    }
    const int seg = s0 + u * kWarps;
    if (kWhole || seg < segs) {  // the same for the whole warp
      const uint32_t key = __reduce_max_sync(0xffffffffu, present[u] > 0 ? order_key(quad_max[u]) : 0u);
      if (lane == 0) {
        uint32_t& slot = sh.seg_max[seg % kSegSlots];  // slot = seg mod a multiple of kWarps: this warp's alone
        slot = max(slot, key);
      }
    }
  }
}

template <int R, typename scalar_t>
__device__ inline Stream<R> stream(Shared& sh, const scalar_t* xr, int64_t v, int64_t q_lo, int segs, int64_t q_hi,
                                   bool aligned, float s) {
  float ytok[R];
#pragma unroll
  for (int j = 0; j < R; ++j) ytok[j] = sh.ytok[j];
  // Segments of whole quads inside the chunk (q_lo <= v / 4: chunks start below the last quad).
  const int whole = aligned ? static_cast<int>(min(static_cast<int64_t>(segs), (min(q_hi, v / 4) - q_lo) / 32)) : 0;
  Stream<R> t;
  int s0 = threadIdx.x / 32;
  for (; s0 + (kUnroll - 1) * kWarps < whole; s0 += kUnroll * kWarps)
    step<true>(t, sh, xr, v, q_lo, segs, q_hi, aligned, s, s0, ytok);
  for (; s0 < segs; s0 += kUnroll * kWarps) step<false>(t, sh, xr, v, q_lo, segs, q_hi, aligned, s, s0, ytok);
  return t;
}

// The chunk's top n into `out` (sorted, 0 past the chunk's items): the floor from the segment
// maxima, then the items at or above it. Not inlined, so its registers do not crowd the
// stream's.
template <typename scalar_t>
__device__ __noinline__ void chunk_top(Shared& sh, const scalar_t* xr, int64_t v, int64_t n, int64_t lo, int64_t hi,
                                       int64_t q_lo, int64_t q_hi, int slots, bool aligned, float s, uint64_t* out) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t segs = (q_hi - q_lo + 31) / 32;
  for (int64_t r = tid; r < n; r += kThreads) out[r] = 0;
  const int64_t want = min(n, hi - lo);
  if (want == 0) return;
  // The floor: the want-th largest of the threads' maxima over their slots, each a distinct
  // item's key (0, every item, where fewer than `want` threads hold one).
  uint32_t mine = 0;
  for (int j = tid; j < slots; j += kThreads) mine = max(mine, sh.seg_max[j]);
  uint32_t floor = 0;
  if (__syncthreads_count(mine != 0) >= want) {
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t c = floor | (1u << bit);
      if (__syncthreads_count(mine >= c) >= want) floor = c;
    }
  }
  if (tid == 0) sh.count = 0;
  __syncthreads();
  for (int64_t seg = warp; seg < segs; seg += kWarps) {
    if (sh.seg_max[seg % kSegSlots] < floor) continue;  // the same for the whole warp
    const int64_t q = q_lo + seg * 32 + lane;
    float y[4];
    const int present = q < q_hi ? load_four(xr, v, q, aligned, s, y) : 0;
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      const bool take = h < present && order_key(y[h]) >= floor;
      const unsigned mask = __ballot_sync(0xffffffffu, take);
      int base = 0;
      if (lane == 0 && mask) base = atomicAdd(&sh.count, __popc(mask));
      base = __shfl_sync(0xffffffffu, base, 0);
      const int at = base + __popc(mask & ((1u << lane) - 1u));
      if (take && at < kListed) sh.list[at] = composite_key(y[h], 4 * q + h);
    }
  }
  __syncthreads();
  int c = sh.count;
  if (c > kListed) {  // the exact want-th largest key, by passes over the chunk
    uint64_t f = 0;
    for (int bit = 63; bit >= 0; --bit) {
      const uint64_t cand = f | (uint64_t{1} << bit);
      int64_t at_or_above = 0;
      for (int64_t i = lo + tid; i < hi; i += kThreads) at_or_above += composite_key(value_at(xr, i, s), i) >= cand;
      const int64_t count = cub::BlockReduce<int64_t, kThreads>(sh.reduce.count).Sum(at_or_above);
      if (tid == 0) sh.floor_key = count >= want ? cand : f;
      __syncthreads();
      f = sh.floor_key;
      __syncthreads();
    }
    if (tid == 0) sh.count = 0;
    __syncthreads();
    for (int64_t i = lo + tid; i < hi; i += kThreads) {
      const uint64_t key = composite_key(value_at(xr, i, s), i);
      if (key >= f) sh.list[atomicAdd(&sh.count, 1)] = key;  // exactly `want` (distinct keys)
    }
    __syncthreads();
    c = sh.count;
  }
  for (int e = tid; e < c; e += kThreads) {  // each candidate's place: the candidates above it
    const uint64_t key = sh.list[e];
    int place = 0;
    for (int o = 0; o < c; ++o) place += sh.list[o] > key;
    if (place < want) out[place] = key;
  }
}

template <typename scalar_t>
__global__ void __launch_bounds__(kThreads, 2) chunk_kernel(const scalar_t* __restrict__ x, Args a) {
  static_assert(kSegSlots % kWarps == 0, "a warp's segments fold onto its own slots");
  __shared__ Shared sh;
  const int64_t b = blockIdx.x / a.chunks, part = blockIdx.x % a.chunks, v = a.v;
  wait_for_previous_grid();  // launched behind the sampler, whose tokens (and redo) it reads
  let_next_grid_start();
  if (a.redo && !a.redo[b]) return;
  const int64_t quads = (v + 3) / 4;
  const int64_t q_lo = min(quads, part * a.chunk_quads), q_hi = min(quads, q_lo + a.chunk_quads);
  const int64_t lo = min(v, 4 * q_lo), hi = min(v, 4 * q_hi);
  const int segs = static_cast<int>((q_hi - q_lo + 31) / 32);
  const int slots = min(segs, kSegSlots);
  const int64_t bp = b * a.chunks + part;
  const scalar_t* xr = x + b * v;
  const bool aligned = four_aligned(xr);
  const float s = row_scale(a, b);
  const int64_t* tok = a.tokens + b * a.samples;
  const int tid = threadIdx.x;
  for (int j = tid; j < slots; j += kThreads) sh.seg_max[j] = 0;
  const int chunk = rank_chunk(a.samples, 0);
  if (tid < kRankChunk) sh.ytok[tid] = NAN;  // NaN: never exceeded
  load_tokens(sh, tok, 0, chunk, xr, v, s);

  float m;
  double sum;
  int above[kRankChunk] = {0, 0, 0, 0};
  if (chunk <= 1) {  // one drawn token, the usual case: one comparison an item
    const Stream<1> t = stream<1>(sh, xr, v, q_lo, segs, q_hi, aligned, s);
    m = t.m, sum = t.sum, above[0] = t.above[0];
  } else {
    const Stream<kRankChunk> t = stream<kRankChunk>(sh, xr, v, q_lo, segs, q_hi, aligned, s);
    m = t.m, sum = t.sum;
#pragma unroll
    for (int j = 0; j < kRankChunk; ++j) above[j] = t.above[j];
  }
  const float cta_max = cub::BlockReduce<float, kThreads>(sh.reduce.max).Reduce(m, Max());
  if (tid == 0) sh.floor_key = __float_as_uint(cta_max);
  __syncthreads();
  const float mx = __uint_as_float(static_cast<uint32_t>(sh.floor_key));
  const double rel = m > -INFINITY ? sum * exp(static_cast<double>(m) - mx) : 0.0;
  const double total = cub::BlockReduce<double, kThreads>(sh.reduce.sum).Sum(rel);
  const int any_bad = __syncthreads_or(isnan(sum) || m == INFINITY);
  if (tid == 0) a.parts.max[bp] = mx, a.parts.sum[bp] = total, a.parts.bad[bp] = any_bad;

  // The drawn tokens' counts (more tokens than a chunk: a counting pass each).
  for (int64_t j0 = 0; j0 < a.samples; j0 += kRankChunk) {
    const int k = rank_chunk(a.samples, j0);
    if (j0 > 0) {
      load_tokens(sh, tok, j0, k, xr, v, s);
      float ytok[kRankChunk];
#pragma unroll
      for (int j = 0; j < kRankChunk; ++j) above[j] = 0, ytok[j] = j < k ? sh.ytok[j] : NAN;
      for (int64_t i = lo + tid; i < hi; i += kThreads) {
        const float yi = value_at(xr, i, s);
#pragma unroll
        for (int j = 0; j < kRankChunk; ++j) above[j] += yi > ytok[j];
      }
    }
#pragma unroll
    for (int j = 0; j < kRankChunk; ++j) {
      const int64_t count = cub::BlockReduce<int64_t, kThreads>(sh.reduce.count).Sum(static_cast<int64_t>(above[j]));
      if (tid == 0 && j < k) a.parts.above[bp * a.samples + j0 + j] = count;
      __syncthreads();
    }
  }
  if (a.n == 0 || a.n > kFusedMaxN) return;

  chunk_top(sh, xr, v, a.n, lo, hi, q_lo, q_hi, slots, aligned, s, a.parts.top + bp * a.n);
}

// Keys of a descending list of n above `key` (0 pads the end).
__device__ inline int64_t count_above(const uint64_t* list, int64_t n, uint64_t key) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (list[mid] > key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

template <typename scalar_t>
__global__ void __launch_bounds__(kMergeThreads) merge_kernel(const scalar_t* __restrict__ x, Args a) {
  __shared__ double lse_shared;
  __shared__ int invalid_shared;
  const int64_t b = blockIdx.x, v = a.v, P = a.chunks;
  wait_for_previous_grid();  // launched behind the chunk kernel
  if (a.redo && !a.redo[b]) return;
  const int tid = threadIdx.x;
  if (tid < 32) {  // one warp combines the chunks (P <= kMaxChunks)
    float m = -INFINITY;
    int bad = 0;
    for (int64_t p = tid; p < P; p += 32) m = fmaxf(m, a.parts.max[b * P + p]), bad |= a.parts.bad[b * P + p];
    for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    double total = 0.0;
    for (int64_t p = tid; p < P; p += 32) {
      const float mp = a.parts.max[b * P + p];
      total += mp > -INFINITY ? a.parts.sum[b * P + p] * exp(static_cast<double>(mp) - m) : 0.0;
    }
    for (int o = 16; o > 0; o /= 2) total += __shfl_xor_sync(0xffffffffu, total, o);
    bad = __any_sync(0xffffffffu, bad);
    if (tid == 0) {
      invalid_shared = bad || !(m > -INFINITY);
      lse_shared = static_cast<double>(m) + log(total);
      if (a.lse) a.lse[b] = invalid_shared ? NAN : lse_shared;
    }
  }
  __syncthreads();
  const bool invalid = invalid_shared;
  const double lse = lse_shared;
  const float s = row_scale(a, b);
  for (int64_t j = tid; j < a.samples; j += kMergeThreads) {
    const int64_t t = a.tokens[b * a.samples + j];
    const bool ok = !invalid && t >= 0 && t < v;
    int64_t count = 0;
    for (int64_t p = 0; p < P; ++p) count += a.parts.above[(b * P + p) * a.samples + j];
    a.logprobs[b * a.samples + j] = ok ? logprob_of(value_at(x + b * v, t, s), lse) : NAN;
    a.ranks[b * a.samples + j] = ok ? count + 1 : 0;
  }
  if (a.n == 0 || a.n > kFusedMaxN) return;
  if (invalid) {
    for (int64_t r = tid; r < a.n; r += kMergeThreads) a.top_tokens[b * a.n + r] = r, a.top_lp[b * a.n + r] = NAN;
    return;
  }
  __shared__ uint64_t lists[kMaxChunks * kFusedMaxN];  // the binary searches stay out of global memory
  for (int64_t e = tid; e < P * a.n; e += kMergeThreads) lists[e] = a.parts.top[b * P * a.n + e];
  __syncthreads();
  for (int64_t e = tid; e < P * a.n; e += kMergeThreads) {  // each chunk key's place among all chunks' keys
    const uint64_t key = lists[e];
    const int64_t own = e / a.n;
    if (key == 0) continue;
    int64_t place = e - own * a.n;
    for (int64_t p = 0; p < P && place < a.n; ++p) {
      if (p != own) place += count_above(lists + p * a.n, a.n, key);
    }
    if (place < a.n) {
      a.top_tokens[b * a.n + place] = key_index(key);
      a.top_lp[b * a.n + place] = logprob_of(key_value(key), lse);
    }
  }
}

// The at::topk route: each item's composite key, as an int64 that orders as the key does.
template <typename scalar_t>
__global__ void keys_kernel(const scalar_t* __restrict__ x, const float* scale, int64_t v, int64_t total,
                            int64_t* keys) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = e / v;
    const float y = static_cast<float>(x[e]) * (scale ? scale[b] : 1.0f);
    keys[e] = static_cast<int64_t>(composite_key(y, e - b * v) ^ (uint64_t{1} << 63));
  }
}

__global__ void decode_kernel(const int64_t* keys, const double* lse, int64_t n, int64_t total, int64_t* top_tokens,
                              float* top_lp) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = e / n;
    const uint64_t key = static_cast<uint64_t>(keys[e]) ^ (uint64_t{1} << 63);
    const bool invalid = isnan(lse[b]);
    top_tokens[e] = invalid ? e - b * n : key_index(key);
    top_lp[e] = invalid ? NAN : logprob_of(key_value(key), lse[b]);
  }
}

// The op's kernels into o; controls (or nullptr): the scale by them; redo (or nullptr): the
// rows to serve.
void run_top_logprobs(const TopLogprobsCall& c, const TopLogprobsOut& o, const Controls* controls,
                      const uint8_t* redo) {
  const bool by_topk = c.n > kFusedMaxN;
  const int64_t top_n = by_topk ? 0 : c.n;
  // Chunks a row: enough CTAs for two waves of the GPU, each of at least kMinChunk items, of
  // whole segments, and no more segments than slots where kMaxChunks allows.
  static const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t segments = ceil_div(ceil_div(c.v, 4), 32);
  const int64_t wanted = std::max({int64_t{1}, std::min({kMaxChunks, ceil_div(2 * sms, c.rows), ceil_div(c.v, kMinChunk)}),
                                   std::min(kMaxChunks, ceil_div(segments, kSegSlots))});
  const int64_t chunk_quads = 32 * ceil_div(segments, wanted);
  const int64_t chunks = ceil_div(segments * 32, chunk_quads);
  TORCH_CHECK(c.rows * chunks < (int64_t{1} << 31), "top_logprobs: at most 2^26 rows, got ", c.rows);
  at::Tensor keep;
  const int64_t parts = c.rows * chunks;
  auto [pmax, psum, pbad, pabove, ptop, lse_ptr] = scratch_arrays<float, double, int, int64_t, uint64_t, double>(
      keep, c.x.options(), {parts, parts, parts, parts * c.samples, parts * top_n, by_topk ? c.rows : 0});
  Args a{c.v, c.samples, c.n, chunks, chunk_quads, c.scale.defined() ? c.scale.const_data_ptr<float>() : nullptr,
         c.tokens.const_data_ptr<int64_t>(), Parts{pmax, psum, pbad, pabove, ptop}, o.lp.data_ptr<float>(),
         o.ranks.data_ptr<int64_t>(), o.top_tokens.data_ptr<int64_t>(), o.top_lp.data_ptr<float>(),
         by_topk ? lse_ptr : nullptr, redo, controls != nullptr, controls ? *controls : Controls{}};
  TORCH_INTERNAL_ASSERT(!redo || !by_topk, "flagged rows are served by the chunk kernels");
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, c.x.scalar_type(), "top_logprobs_cuda", [&] {
    const scalar_t* x = c.x.const_data_ptr<scalar_t>();
    launch_after_previous(chunk_kernel<scalar_t>, static_cast<unsigned>(parts), kThreads, 0, stream, x, a);
    launch_after_previous(merge_kernel<scalar_t>, static_cast<unsigned>(c.rows), kMergeThreads, 0, stream, x, a);
    if (by_topk) {
      at::Tensor keys = at::empty({c.rows, c.v}, c.x.options().dtype(at::kLong));
      const int64_t total = keys.numel();
      keys_kernel<scalar_t><<<grid_for(total, 256), 256, 0, stream>>>(c.x.const_data_ptr<scalar_t>(), a.scale, c.v,
                                                                       total, keys.data_ptr<int64_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      const at::Tensor top = std::get<0>(at::topk(keys, c.n, 1, true, true)).contiguous();
      const int64_t out = c.rows * c.n;
      decode_kernel<<<grid_for(out, 256), 256, 0, stream>>>(top.const_data_ptr<int64_t>(), a.lse,
                                                            c.n, out, o.top_tokens.data_ptr<int64_t>(),
                                                            o.top_lp.data_ptr<float>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> top_logprobs_cuda(const at::Tensor& law,
                                                                              const at::Tensor& tokens, int64_t n,
                                                                              const std::optional<at::Tensor>& scale) {
  const TopLogprobsCall c = prepare_top_logprobs(law, tokens, n, scale);
  const TopLogprobsOut o = empty_top_logprobs(c);
  if (c.rows > 0) run_top_logprobs(c, o, nullptr, nullptr);
  return o.tuple();
}

// The draw and its top n in one pass where route.h's fuses_top_n holds; else the two ops.
SampleTopLogprobs sample_llm_top_logprobs_cuda(
    const at::Tensor& logits, int64_t num_samples, int64_t n, const std::optional<at::Tensor>& temperature,
    double temperature_value, const std::optional<at::Tensor>& top_k, int64_t top_k_value,
    const std::optional<at::Tensor>& top_p, double top_p_value, const std::optional<at::Tensor>& min_p,
    double min_p_value, const std::optional<at::Tensor>& seeds, std::optional<at::Generator> generator) {
  const c10::cuda::CUDAGuard guard(logits.device());
  Call call = prepare("sample_logits", logits, num_samples, true, temperature, temperature_value, top_k, top_k_value,
                      top_p, top_p_value, min_p, min_p_value, seeds, kRaw);
  check_top_n("sample_logits", n, call.v);
  if (call.rows == 0 || !fuses_top_n(call, route(call, device_sms()), n)) {
    return sample_then_top_logprobs(logits, num_samples, n, temperature, temperature_value, top_k, top_k_value, top_p,
                                    top_p_value, min_p, min_p_value, seeds, generator);
  }
  const auto f32 = logits.options().dtype(at::kFloat), i64 = logits.options().dtype(at::kLong);
  c10::SmallVector<int64_t, 6> top_shape = call.out_shape;
  top_shape.back() = n;
  at::Tensor tokens = at::empty(call.out_shape, i64), lp = at::empty(call.out_shape, f32);
  at::Tensor top_tokens = at::empty(top_shape, i64), top_lp = at::empty(top_shape, f32);
  at::Tensor ranks = at::empty(call.out_shape, i64), redo = at::empty({call.rows}, logits.options().dtype(at::kByte));
  const at::PhiloxCudaState philox =
      seeds ? at::PhiloxCudaState(0, 0) : cuda_philox_state(generator, logits.device().index(), 4 * num_samples);
  const TopNArg top{n, top_tokens.mutable_data_ptr<int64_t>(), top_lp.mutable_data_ptr<float>(),
                    ranks.mutable_data_ptr<int64_t>(), redo.mutable_data_ptr<uint8_t>()};
  draw_llm(call, philox, tokens.mutable_data_ptr<int64_t>(), lp.mutable_data_ptr<float>(), &top);
  TopLogprobsCall c;
  c.rows = call.rows, c.v = call.v, c.samples = num_samples, c.n = n;
  c.x = call.x, c.tokens = tokens.view({call.rows, num_samples});
  const TopLogprobsOut o{lp.view({call.rows, num_samples}), top_tokens.view({call.rows, n}), top_lp.view({call.rows, n}),
                         ranks.view({call.rows, num_samples})};
  run_top_logprobs(c, o, &call.controls, top.redo);
  return {tokens, lp, top_tokens, top_lp, ranks};
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) {
  m.impl("top_logprobs", &top_logprobs_cuda);
  m.impl("sample_llm_top_logprobs", &sample_llm_top_logprobs_cuda);
}

}  // namespace wrs::llm
