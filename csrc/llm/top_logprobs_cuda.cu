// top_logprobs on CUDA (top_logprobs.h states the rule). A row is cut into P chunks, a CTA
// each (P from the rows and the GPU's SMs, so that one row is read by many SMs), then a
// small kernel merges each row's chunks.
//   1. chunk: each thread keeps its share's log-sum-exp (online, float64), the drawn tokens'
//      counts of larger items, and its kKeep largest items (composite keys, in registers).
//      The n-th largest of the threads' best keys is a floor under the chunk's n-th largest
//      (they are n distinct items), so the chunk's top n lie among the kept items at or
//      above it, unless a thread kept kKeep items there (it may hide more): then the n-th
//      largest key is found exactly, bit by bit, over the chunk (kKeep = 8 makes that rare:
//      8 of the top n in one thread's strided share). The chunk's top n go out sorted.
//   2. merge: the row's log-sum-exp from the chunks', the ranks from their counts, and each
//      chunk key's place in the row's top n by binary searches of the other chunks' lists.
// Past kFusedMaxN, the row's composite keys go through at::topk.
#include "common/cuda_utils.cuh"
#include "llm/top_logprobs.h"

#include <ATen/Dispatch.h>
#include <ATen/ops/topk.h>
#include <c10/cuda/CUDAException.h>
#include <cub/block/block_reduce.cuh>
#include <torch/library.h>

#include <limits>
#include <tuple>

namespace wrs::llm {

namespace {

constexpr int kThreads = 512;
constexpr int kMergeThreads = 256;
constexpr int kKeep = 8;         // items each thread keeps
constexpr int kRankChunk = 4;    // drawn tokens ranked in one pass over a chunk
constexpr int64_t kFusedMaxN = 64;
constexpr int kList = kKeep * kFusedMaxN;  // candidates: kKeep from each of at most n threads
constexpr int64_t kMinChunk = 4096;        // items a CTA at least
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
  int64_t v, samples, n, chunks, chunk_len;
  const float* scale;
  const int64_t* tokens;
  Parts parts;
  float* logprobs;
  int64_t* ranks;
  int64_t* top_tokens;
  float* top_lp;
  double* lse;  // [B], for the at::topk route
};

struct Shared {
  uint64_t list[kList];
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

// The n-th largest of every thread's `key` (0 counts as none), bit by bit from the top.
__device__ inline uint64_t nth_largest(uint64_t key, int64_t n) {
  uint64_t f = 0;
  for (int bit = 63; bit >= 0; --bit) {
    const uint64_t c = f | (uint64_t{1} << bit);
    if (__syncthreads_count(key >= c) >= n) f = c;
  }
  return f;
}

template <typename scalar_t>
__global__ void __launch_bounds__(kThreads, 2) chunk_kernel(const scalar_t* __restrict__ x, Args a) {
  __shared__ Shared sh;
  const int64_t b = blockIdx.x / a.chunks, part = blockIdx.x % a.chunks, v = a.v;
  const int64_t lo = min(v, part * a.chunk_len), hi = min(v, lo + a.chunk_len);
  const int64_t bp = b * a.chunks + part;
  const scalar_t* xr = x + b * v;
  const float s = a.scale ? a.scale[b] : 1.0f;
  const int64_t* tok = a.tokens + b * a.samples;
  const int tid = threadIdx.x;
  const int chunk = rank_chunk(a.samples, 0);
  load_tokens(sh, tok, 0, chunk, xr, v, s);

  // The pass: online log-sum-exp (float sums of four items into a float64 total), counts of
  // larger items, the kKeep largest keys (indices < 2^31).
  float m = -INFINITY;
  double sum = 0.0;
  int bad = 0;
  int above[kRankChunk] = {0, 0, 0, 0};
  float ytok[kRankChunk];
#pragma unroll
  for (int j = 0; j < kRankChunk; ++j) ytok[j] = j < chunk ? sh.ytok[j] : NAN;  // NaN: never exceeded
  float keep_y[kKeep];
  int keep_i[kKeep];
#pragma unroll
  for (int k = 0; k < kKeep; ++k) keep_y[k] = -INFINITY, keep_i[k] = -1;
  for (int64_t i0 = lo + tid; i0 < hi; i0 += 4 * kThreads) {
    float y[4];
    float top = m;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int64_t i = i0 + u * kThreads;
      y[u] = i < hi ? value_at(xr, i, s) : -INFINITY;
      bad |= isnan(y[u]) || y[u] == INFINITY;
      top = fmaxf(top, y[u]);
    }
    if (top > m) {  // a new maximum: the total rescaled once
      sum = m > -INFINITY ? sum * static_cast<double>(expf(m - top)) : 0.0;
      m = top;
    }
    float group = 0.0f;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      group += m > -INFINITY ? expf(y[u] - m) : 0.0f;
#pragma unroll
      for (int j = 0; j < kRankChunk; ++j) above[j] += y[u] > ytok[j];
    }
    sum += static_cast<double>(group);
    if (a.n > 0) {
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t i = i0 + u * kThreads;
        if (i < hi && (keep_i[kKeep - 1] < 0 || y[u] > keep_y[kKeep - 1])) {  // strictly: a later tie has the lower key
          float cy = y[u];
          int ci = static_cast<int>(i);
          bool moved = false;
#pragma unroll
          for (int k = 0; k < kKeep; ++k) {
            moved = moved || keep_i[k] < 0 || cy > keep_y[k];
            if (moved) {
              const float ty = keep_y[k];
              const int ti = keep_i[k];
              keep_y[k] = cy, keep_i[k] = ci;
              cy = ty, ci = ti;
            }
          }
        }
      }
    }
  }
  const float cta_max = cub::BlockReduce<float, kThreads>(sh.reduce.max).Reduce(m, Max());
  if (tid == 0) sh.floor_key = __float_as_uint(cta_max);
  __syncthreads();
  const float mx = __uint_as_float(static_cast<uint32_t>(sh.floor_key));
  const double rel = m > -INFINITY ? sum * exp(static_cast<double>(m) - mx) : 0.0;
  const double total = cub::BlockReduce<double, kThreads>(sh.reduce.sum).Sum(rel);
  const int any_bad = __syncthreads_or(bad);
  if (tid == 0) a.parts.max[bp] = mx, a.parts.sum[bp] = total, a.parts.bad[bp] = any_bad;

  // The drawn tokens' counts (more tokens than a chunk: a counting pass each).
  for (int64_t j0 = 0; j0 < a.samples; j0 += kRankChunk) {
    const int k = rank_chunk(a.samples, j0);
    if (j0 > 0) {
      load_tokens(sh, tok, j0, k, xr, v, s);
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

  // The chunk's top n: a floor from the threads' best keys, then the kept keys above it.
  uint64_t* out = a.parts.top + bp * a.n;
  for (int64_t r = tid; r < a.n; r += kThreads) out[r] = 0;
  uint64_t keys[kKeep];
#pragma unroll
  for (int k = 0; k < kKeep; ++k) keys[k] = keep_i[k] >= 0 ? composite_key(keep_y[k], keep_i[k]) : 0;
  const int64_t want = min(a.n, hi - lo);
  const uint64_t floor_key = want > 0 ? nth_largest(keys[0], want) : ~uint64_t{0};
  const bool hidden = __syncthreads_or(keys[kKeep - 1] != 0 && keys[kKeep - 1] >= floor_key);
  if (tid == 0) sh.count = 0;
  __syncthreads();
  if (!hidden) {
#pragma unroll
    for (int k = 0; k < kKeep; ++k) {
      if (keys[k] != 0 && keys[k] >= floor_key) sh.list[atomicAdd(&sh.count, 1)] = keys[k];  // at most kKeep n
    }
  } else {  // a thread kept kKeep items above the floor: the exact n-th largest key, by passes over the chunk
    uint64_t f = 0;
    for (int bit = 63; bit >= 0; --bit) {
      const uint64_t c = f | (uint64_t{1} << bit);
      int64_t mine = 0;
      for (int64_t i = lo + tid; i < hi; i += kThreads) mine += composite_key(value_at(xr, i, s), i) >= c;
      const int64_t count = cub::BlockReduce<int64_t, kThreads>(sh.reduce.count).Sum(mine);
      if (tid == 0) sh.floor_key = count >= want ? c : f;
      __syncthreads();
      f = sh.floor_key;
      __syncthreads();
    }
    for (int64_t i = lo + tid; i < hi; i += kThreads) {
      const uint64_t key = composite_key(value_at(xr, i, s), i);
      if (key >= f) sh.list[atomicAdd(&sh.count, 1)] = key;  // exactly `want`
    }
  }
  __syncthreads();
  const int c = sh.count;
  for (int e = tid; e < c; e += kThreads) {  // each candidate's place: the candidates above it
    const uint64_t key = sh.list[e];
    int place = 0;
    for (int o = 0; o < c; ++o) place += sh.list[o] > key;
    if (place < a.n) out[place] = key;
  }
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
  const float s = a.scale ? a.scale[b] : 1.0f;
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

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> top_logprobs_cuda(const at::Tensor& law,
                                                                              const at::Tensor& tokens, int64_t n,
                                                                              const std::optional<at::Tensor>& scale) {
  const TopLogprobsCall c = prepare_top_logprobs(law, tokens, n, scale);
  const TopLogprobsOut o = empty_top_logprobs(c);
  if (c.rows == 0) return o.tuple();
  const bool by_topk = c.n > kFusedMaxN;
  const int64_t top_n = by_topk ? 0 : c.n;
  // Chunks a row: enough CTAs for two waves of the GPU, each of at least kMinChunk items.
  static const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t chunks = std::max<int64_t>(1, std::min({kMaxChunks, ceil_div(2 * sms, c.rows), ceil_div(c.v, kMinChunk)}));
  const int64_t chunk_len = ceil_div(c.v, chunks);
  TORCH_CHECK(c.rows * chunks < (int64_t{1} << 31), "top_logprobs: at most 2^26 rows, got ", c.rows);
  at::Tensor keep;
  const int64_t parts = c.rows * chunks;
  auto [pmax, psum, pbad, pabove, ptop, lse_ptr] = scratch_arrays<float, double, int, int64_t, uint64_t, double>(
      keep, law.options(), {parts, parts, parts, parts * c.samples, parts * top_n, by_topk ? c.rows : 0});
  Args a{c.v, c.samples, c.n, chunks, chunk_len, c.scale.defined() ? c.scale.const_data_ptr<float>() : nullptr,
         c.tokens.const_data_ptr<int64_t>(), Parts{pmax, psum, pbad, pabove, ptop}, o.lp.data_ptr<float>(),
         o.ranks.data_ptr<int64_t>(), o.top_tokens.data_ptr<int64_t>(), o.top_lp.data_ptr<float>(),
         by_topk ? lse_ptr : nullptr};
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, c.x.scalar_type(), "top_logprobs_cuda", [&] {
    const scalar_t* x = c.x.const_data_ptr<scalar_t>();
    chunk_kernel<scalar_t><<<static_cast<unsigned>(parts), kThreads, 0, stream>>>(x, a);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    merge_kernel<scalar_t><<<static_cast<unsigned>(c.rows), kMergeThreads, 0, stream>>>(x, a);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
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
  return o.tuple();
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) { m.impl("top_logprobs", &top_logprobs_cuda); }

}  // namespace wrs::llm
