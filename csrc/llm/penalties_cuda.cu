// penalize_logits on CUDA (penalties.h states the rule): one grid-stride pass writes the
// float32 row through the bitmask, then a block a row applies the masked ids, the bias and,
// through a hash table of the row's history ids (in global memory, cleared by the block),
// each distinct id's penalty once; penalty_plan: the same rule as a plan that the samplers
// apply in their own read of the row (a block a row). Nothing is read back to the host.
#include "common/cuda_utils.cuh"
#include "llm/penalties.h"
#include "llm/penalties_ops.h"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cub/block/block_scan.cuh>
#include <torch/library.h>

#include <algorithm>
#include <limits>

namespace wrs::llm {

namespace {

constexpr int kThreads = 256;
constexpr int kPlanThreads = 512;
constexpr size_t kPlanSharedBytes = 48 * 1024;  // a table of up to 4,096 slots (2,048 ids) in shared memory

struct RowArgs {
  const int32_t* bitmask;  // [B, words] or nullptr
  const float* repetition; // [B] or nullptr
  const float* frequency;
  const float* presence;
  const int64_t* masked;   // [B, n_masked] or nullptr
  const int64_t* bias_ids;
  const float* bias_values;
  const int64_t* output;   // [B, n_output] or nullptr
  const int64_t* prompt;
  int64_t n_masked, n_bias, n_output, n_prompt;
  int64_t v, words;
  int32_t* table;          // [B, 2 * capacity]: keys, then counts
  int64_t capacity;        // a power of two >= 2 (n_output + n_prompt)
};

// A row a grid row (blockIdx.y, strided where rows pass the grid's 65,535), its items
// strided over the grid's columns: no division an item.
template <typename scalar_t>
__global__ void dense_kernel(const scalar_t* __restrict__ x, float* __restrict__ out, int64_t rows, RowArgs a) {
  for (int64_t b = blockIdx.y; b < rows; b += gridDim.y) {
    const float r = a.repetition ? a.repetition[b] : 1.0f;
    const int32_t* bits = a.bitmask ? a.bitmask + b * a.words : nullptr;
    const scalar_t* xr = x + b * a.v;
    float* o = out + b * a.v;
    for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < a.v;
         t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const float y = allowed(bits, t) ? static_cast<float>(xr[t]) : -std::numeric_limits<float>::infinity();
      o[t] = r > 0.0f ? y : std::numeric_limits<float>::quiet_NaN();
    }
  }
}

__device__ inline uint32_t slot_of(int64_t id, int64_t capacity) {
  return static_cast<uint32_t>((static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull) >> 32) &
         static_cast<uint32_t>(capacity - 1);
}

// Finds or claims id's slot; counts it where `count`.
__device__ inline void insert(int32_t* keys, int32_t* counts, int64_t capacity, int32_t id, bool count) {
  uint32_t h = slot_of(id, capacity);
  while (true) {
    const int32_t old = atomicCAS(keys + h, -1, id);
    if (old == -1 || old == id) {
      if (count) atomicAdd(counts + h, 1);
      return;
    }
    h = (h + 1) & static_cast<uint32_t>(capacity - 1);
  }
}

__global__ void sparse_kernel(float* __restrict__ out, RowArgs a) {
  const int64_t b = blockIdx.x;
  const float r = a.repetition ? a.repetition[b] : 1.0f;
  if (!(r > 0.0f)) return;  // the row is NaN already
  float* row = out + b * a.v;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t j = threadIdx.x; j < a.n_masked; j += blockDim.x) {
    const int64_t t = a.masked[b * a.n_masked + j];
    if (t >= 0 && t < a.v) row[t] = kNegInf;
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < a.n_bias; j += blockDim.x) {
    const int64_t t = a.bias_ids[b * a.n_bias + j];
    if (t >= 0 && t < a.v) atomicAdd(row + t, a.bias_values[b * a.n_bias + j]);
  }
  if (a.n_output + a.n_prompt == 0) return;
  int32_t* keys = a.table + b * 2 * a.capacity;
  int32_t* counts = keys + a.capacity;
  for (int64_t h = threadIdx.x; h < a.capacity; h += blockDim.x) {
    keys[h] = -1;
    counts[h] = 0;
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < a.n_output + a.n_prompt; j += blockDim.x) {
    const bool out_id = j < a.n_output;
    const int64_t t = out_id ? a.output[b * a.n_output + j] : a.prompt[b * a.n_prompt + (j - a.n_output)];
    if (t >= 0 && t < a.v) insert(keys, counts, a.capacity, static_cast<int32_t>(t), out_id);
  }
  __syncthreads();
  const PenaltyRow p{r, a.frequency ? a.frequency[b] : 0.0f, a.presence ? a.presence[b] : 0.0f};
  for (int64_t h = threadIdx.x; h < a.capacity; h += blockDim.x) {
    const int32_t t = keys[h];
    if (t >= 0) row[t] = penalized(row[t], counts[h], p);
  }
}

constexpr int32_t kSeen = 1 << 30, kMasked = 1 << 29, kCountMask = kMasked - 1;

// Inserts id into a plan's ordered table (penalties.h): at each slot the larger id stays and
// the smaller moves on, so concurrent inserts end in the one layout of the set.
__device__ inline void insert_ordered(int32_t* keys, int64_t cap, int32_t id) {
  volatile int32_t* slots = keys;  // reads that see the other threads' swaps
  uint32_t h = plan_slot(id, cap);
  while (true) {
    const int32_t c = slots[h];
    if (c == id) return;
    if (c < id) {  // empty (-1) or a smaller id: take the slot
      if (atomicCAS(keys + h, c, id) != c) continue;  // changed meanwhile: look again
      if (c == -1) return;
      id = c;  // the displaced id goes on along its run
    }
    h = (h + 1) & static_cast<uint32_t>(cap - 1);
  }
}

// penalty_plan: a block a row builds its plan (penalties.h) in penalize_logits' order: the
// bits and the table of listed ids, their counts and flags, then each id's value from the
// bitmask and the masked ids, the bias, the penalties of the ids seen; last the prefixes of
// the override bits and the values in id order. The table is built in shared memory where it
// fits (the phases are chains of dependent probes), then copied out.
template <typename scalar_t>
__global__ void __launch_bounds__(kPlanThreads) plan_kernel(const scalar_t* __restrict__ x, int32_t* __restrict__ plan,
                                                            int64_t stride, int64_t cap, bool in_shared, RowArgs a) {
  extern __shared__ int32_t shared_table[];
  using Scan = cub::BlockScan<int32_t, kPlanThreads>;
  __shared__ typename Scan::TempStorage scan;
  const int64_t b = blockIdx.x;
  int32_t* row = plan + b * stride;
  int32_t* prefix = row + 2 * a.words;
  float* sorted = reinterpret_cast<float*>(row + plan_values_at(a.v));
  int32_t* scratch = row + plan_values_at(a.v) + cap;
  int32_t* keys = in_shared ? shared_table : scratch;
  float* values = reinterpret_cast<float*>(keys + cap);
  int32_t* flags = keys + 2 * cap;
  const float r = a.repetition ? a.repetition[b] : 1.0f;
  const bool invalid = !(r > 0.0f);
  const int32_t* bits = a.bitmask ? a.bitmask + b * a.words : nullptr;
  constexpr int kBatch = 4;  // loads issued before the stores, which may alias them
  for (int64_t k0 = threadIdx.x; k0 < a.words; k0 += kBatch * kPlanThreads) {
    int32_t word[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t k = k0 + u * kPlanThreads;
      word[u] = invalid ? 0 : bits && k < a.words ? bits[k] : -1;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t k = k0 + u * kPlanThreads;
      if (k < a.words) reinterpret_cast<int2*>(row)[k] = make_int2(word[u], 0);
    }
  }
  if (threadIdx.x == 0) row[3 * a.words] = 0;  // the pad word where W is odd (or values[0])
  for (int64_t h = threadIdx.x; h < cap; h += blockDim.x) sorted[h] = 0.0f, keys[h] = -1, values[h] = 0.0f, flags[h] = 0;
  __syncthreads();
  auto each = [&](const int64_t* ids, int64_t n, auto&& fn) {
    for (int64_t j = threadIdx.x; j < n && !invalid; j += blockDim.x) {
      const int64_t t = ids[b * n + j];
      if (t >= 0 && t < a.v) fn(static_cast<int32_t>(t), j);
    }
  };
  if (invalid && threadIdx.x == 0) {
    keys[plan_slot(0, cap)] = 0;
    values[plan_slot(0, cap)] = NAN;
    row[1] = 1;
  }
  auto insert = [&](int32_t t, int64_t) { insert_ordered(keys, cap, t); };
  each(a.masked, a.n_masked, insert);
  each(a.bias_ids, a.n_bias, insert);
  each(a.output, a.n_output, insert);
  each(a.prompt, a.n_prompt, insert);
  __syncthreads();
  each(a.masked, a.n_masked, [&](int32_t t, int64_t) { atomicOr(flags + plan_find(keys, cap, t), kMasked); });
  each(a.output, a.n_output, [&](int32_t t, int64_t) { atomicAdd(flags + plan_find(keys, cap, t), 1); });
  each(a.prompt, a.n_prompt, [&](int32_t t, int64_t) { atomicOr(flags + plan_find(keys, cap, t), kSeen); });
  __syncthreads();
  const scalar_t* xr = x + b * a.v;
  for (int64_t h0 = threadIdx.x; h0 < cap && !invalid; h0 += kBatch * kPlanThreads) {
    int32_t t[kBatch];
    float y[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t h = h0 + u * kPlanThreads;
      t[u] = h < cap ? keys[h] : -1;
      y[u] = t[u] >= 0 && allowed(bits, t[u]) && !(flags[h] & kMasked) ? static_cast<float>(xr[t[u]]) : -INFINITY;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (t[u] < 0) continue;
      values[h0 + u * kPlanThreads] = y[u];
      atomicOr(row + 2 * (t[u] >> 5) + 1, static_cast<int32_t>(1u << (t[u] & 31)));
    }
  }
  __syncthreads();
  // Duplicate biased ids add in the atomics' order, as in penalize_logits.
  each(a.bias_ids, a.n_bias,
       [&](int32_t t, int64_t j) { atomicAdd(values + plan_find(keys, cap, t), a.bias_values[b * a.n_bias + j]); });
  __syncthreads();
  const PenaltyRow p{r, a.frequency ? a.frequency[b] : 0.0f, a.presence ? a.presence[b] : 0.0f};
  for (int64_t h = threadIdx.x; h < cap && !invalid; h += blockDim.x) {
    const int32_t f = flags[h];
    if (keys[h] >= 0 && (f & (kSeen | kCountMask))) values[h] = penalized(values[h], f & kCountMask, p);
  }
  __syncthreads();
  {  // prefixes of the override bits: a thread a run of words, one scan (a scan a word-block
     // would wait on a round trip to L2 per block)
    const int64_t per = (a.words + kPlanThreads - 1) / kPlanThreads;
    const int64_t k0 = min(a.words, threadIdx.x * per), k1 = min(a.words, k0 + per);
    int32_t n = 0;
    for (int64_t k = k0; k < k1; ++k) n += __popc(static_cast<uint32_t>(row[2 * k + 1]));
    int32_t before;
    Scan(scan).ExclusiveSum(n, before);
    for (int64_t k = k0; k < k1; ++k) {
      prefix[k] = before;
      before += __popc(static_cast<uint32_t>(row[2 * k + 1]));
    }
  }
  __syncthreads();
  for (int64_t h0 = threadIdx.x; h0 < cap; h0 += kBatch * kPlanThreads) {
    int32_t t[kBatch], at[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t h = h0 + u * kPlanThreads;
      t[u] = h < cap ? keys[h] : -1;
      at[u] = t[u] >= 0 ? plan_rank(prefix[t[u] >> 5], static_cast<uint32_t>(row[2 * (t[u] >> 5) + 1]), t[u]) : 0;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (t[u] >= 0) sorted[at[u]] = values[h0 + u * kPlanThreads];
    }
  }
  if (!in_shared) return;
  for (int64_t h = threadIdx.x; h < 3 * cap; h += blockDim.x) scratch[h] = keys[h];
}

template <typename T>
const T* ptr(const at::Tensor& t) {
  return t.defined() ? t.const_data_ptr<T>() : nullptr;
}

int64_t cols(const at::Tensor& t) { return t.defined() ? t.size(1) : 0; }

at::Tensor penalize_logits_cuda(const at::Tensor& logits, const std::optional<at::Tensor>& allowed_bitmask,
                                const std::optional<at::Tensor>& masked_ids, const std::optional<at::Tensor>& bias_ids,
                                const std::optional<at::Tensor>& bias_values,
                                const std::optional<at::Tensor>& output_ids,
                                const std::optional<at::Tensor>& prompt_ids,
                                const std::optional<at::Tensor>& repetition_penalty,
                                const std::optional<at::Tensor>& frequency_penalty,
                                const std::optional<at::Tensor>& presence_penalty) {
  PenaltyCall c = prepare_penalties(logits, allowed_bitmask, masked_ids, bias_ids, bias_values, output_ids,
                                    prompt_ids, repetition_penalty, frequency_penalty, presence_penalty);
  at::Tensor out = at::empty({c.rows, c.v}, logits.options().dtype(at::kFloat));
  if (out.numel() == 0) return out;
  RowArgs a{ptr<int32_t>(c.bitmask), ptr<float>(c.repetition), ptr<float>(c.frequency), ptr<float>(c.presence),
            ptr<int64_t>(c.masked), ptr<int64_t>(c.bias_ids), ptr<float>(c.bias_values), ptr<int64_t>(c.output),
            ptr<int64_t>(c.prompt), cols(c.masked), cols(c.bias_ids), cols(c.output), cols(c.prompt), c.v,
            (c.v + 31) / 32, nullptr, 0};
  at::Tensor table;
  if (a.n_output + a.n_prompt > 0) {
    a.capacity = 2;
    while (a.capacity < 2 * (a.n_output + a.n_prompt)) a.capacity *= 2;
    table = at::empty({c.rows, 2 * a.capacity}, logits.options().dtype(at::kInt));
    a.table = table.data_ptr<int32_t>();
  }
  const auto stream = at::cuda::getCurrentCUDAStream();
  const dim3 grid(static_cast<unsigned>(ceil_div(c.v, int64_t{4} * kThreads)),
                  static_cast<unsigned>(std::min<int64_t>(c.rows, 65535)));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, c.x.scalar_type(), "penalize_logits_cuda", [&] {
    dense_kernel<scalar_t><<<grid, kThreads, 0, stream>>>(c.x.const_data_ptr<scalar_t>(), out.data_ptr<float>(),
                                                          c.rows, a);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (a.n_masked + a.n_bias + a.n_output + a.n_prompt > 0) {
    sparse_kernel<<<static_cast<unsigned>(c.rows), kThreads, 0, stream>>>(out.data_ptr<float>(), a);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return out;
}

at::Tensor penalty_plan_cuda(const at::Tensor& logits, const std::optional<at::Tensor>& allowed_bitmask,
                             const std::optional<at::Tensor>& masked_ids, const std::optional<at::Tensor>& bias_ids,
                             const std::optional<at::Tensor>& bias_values, const std::optional<at::Tensor>& output_ids,
                             const std::optional<at::Tensor>& prompt_ids,
                             const std::optional<at::Tensor>& repetition_penalty,
                             const std::optional<at::Tensor>& frequency_penalty,
                             const std::optional<at::Tensor>& presence_penalty) {
  const c10::cuda::CUDAGuard guard(logits.device());
  PenaltyCall c = prepare_penalties(logits, allowed_bitmask, masked_ids, bias_ids, bias_values, output_ids,
                                    prompt_ids, repetition_penalty, frequency_penalty, presence_penalty);
  const int64_t cap = plan_capacity(c);
  at::Tensor plan = at::empty({c.rows, plan_stride(c.v, cap)}, logits.options().dtype(at::kInt));
  if (c.rows == 0) return plan;
  const RowArgs a{ptr<int32_t>(c.bitmask), ptr<float>(c.repetition), ptr<float>(c.frequency),
                  ptr<float>(c.presence), ptr<int64_t>(c.masked), ptr<int64_t>(c.bias_ids),
                  ptr<float>(c.bias_values), ptr<int64_t>(c.output), ptr<int64_t>(c.prompt), cols(c.masked),
                  cols(c.bias_ids), cols(c.output), cols(c.prompt), c.v, plan_words(c.v), nullptr, 0};
  const size_t table_bytes = 3 * cap * sizeof(int32_t);
  const bool in_shared = table_bytes <= kPlanSharedBytes;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, c.x.scalar_type(), "penalty_plan_cuda", [&] {
    plan_kernel<scalar_t><<<static_cast<unsigned>(c.rows), kPlanThreads, in_shared ? table_bytes : 0,
                            at::cuda::getCurrentCUDAStream()>>>(c.x.const_data_ptr<scalar_t>(), plan.data_ptr<int32_t>(),
                                                                plan.size(1), cap, in_shared, a);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return plan;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) {
  m.impl("penalize_logits", &penalize_logits_cuda);
  m.impl("penalty_plan", &penalty_plan_cuda);
}

}  // namespace wrs::llm
