// CUDA kernel of speculative_accept (the law in llm_cpu.cpp's speculative_rows, which this
// follows draw for draw): a block per row; one thread walks the drafts' acceptance tests,
// then the block races the residual max(0, q - p) (or the bonus row) for the last token.
#include "common/philox_cuda.cuh"
#include "llm/llm_ops.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cub/block/block_reduce.cuh>
#include <torch/library.h>

namespace wrs::llm {
namespace {

constexpr int kSpecThreads = 256;

struct Best {
  float key;
  int64_t index;
};
struct BestOf {
  __device__ Best operator()(const Best& a, const Best& b) const {
    return (b.key > a.key || (b.key == a.key && b.index < a.index)) ? b : a;
  }
};

template <typename scalar_t, typename token_t>
__global__ void __launch_bounds__(kSpecThreads) speculative_kernel(const scalar_t* draft, const token_t* draft_tokens,
                                                                   const scalar_t* target, int64_t s_count, int64_t v,
                                                                   at::PhiloxCudaState philox, int64_t* out,
                                                                   int64_t* accepted) {
  __shared__ typename cub::BlockReduce<Best, kSpecThreads>::TempStorage reduce;
  __shared__ int64_t acc_shared;
  __shared__ Best best_shared;
  const int64_t b = blockIdx.x;
  const PhiloxSeed seed = philox_seed(philox);
  const int64_t quads = (v + 3) / 4;
  if (threadIdx.x == 0) {
    int64_t acc = 0;
    for (; acc < s_count; ++acc) {
      const int64_t tok = static_cast<int64_t>(draft_tokens[b * s_count + acc]);
      const bool in_range = tok >= 0 && tok < v;
      const double p = in_range ? static_cast<double>(draft[(b * s_count + acc) * v + tok]) : 0.0;
      const double q = in_range ? static_cast<double>(target[(b * (s_count + 1) + acc) * v + tok]) : 0.0;
      const uint4 w4 = philox_block_at(seed.seed, seed.offset / 4 + 1 + acc / 4, subsequence(b, quads, 0));
      const uint32_t w = acc % 4 == 0 ? w4.x : acc % 4 == 1 ? w4.y : acc % 4 == 2 ? w4.z : w4.w;
      const double u = (w + 0.5) * 0x1.0p-32;
      if (!(u * p < q)) break;
    }
    acc_shared = acc;
  }
  __syncthreads();
  const int64_t acc = acc_shared;
  for (int64_t j = threadIdx.x; j <= s_count; j += kSpecThreads) {
    out[b * (s_count + 1) + j] = j < acc ? static_cast<int64_t>(draft_tokens[b * s_count + j]) : -1;
  }
  const scalar_t* q_row = target + (b * (s_count + 1) + acc) * v;
  const scalar_t* p_row = acc < s_count ? draft + (b * s_count + acc) * v : nullptr;
  for (int attempt = p_row ? 0 : 1; attempt < 2; ++attempt) {  // 0: the residual, 1: the target row
    Best mine{-INFINITY, INT64_MAX};
    for (int64_t quad = threadIdx.x; quad < quads; quad += kSpecThreads) {
      uint4 w4{};
      bool drawn = false;
      for (int h = 0; h < 4 && 4 * quad + h < v; ++h) {
        const int64_t i = 4 * quad + h;
        const float q = static_cast<float>(q_row[i]);
        const float w = attempt == 0 ? fmaxf(0.0f, q - static_cast<float>(p_row[i])) : q;
        if (!(w > 0.0f) || w > 3.402823466e38f) continue;
        if (!drawn) w4 = philox_block_at(seed.seed, seed.offset / 4, subsequence(b, quads, i)), drawn = true;
        const uint32_t bits = h == 0 ? w4.x : h == 1 ? w4.y : h == 2 ? w4.z : w4.w;
        const float key = race_key(__logf(w), bits);
        if (key > mine.key) mine = Best{key, i};
      }
    }
    const Best best = cub::BlockReduce<Best, kSpecThreads>(reduce).Reduce(mine, BestOf());
    if (threadIdx.x == 0) best_shared = best;
    __syncthreads();
    if (best_shared.index != INT64_MAX || attempt == 1) {
      if (threadIdx.x == 0) {
        out[b * (s_count + 1) + acc] = best_shared.index == INT64_MAX ? 0 : best_shared.index;
        accepted[b] = acc;
      }
      return;
    }
    __syncthreads();  // `reduce` and best_shared are used again
  }
}

std::tuple<at::Tensor, at::Tensor> speculative_accept_cuda(const at::Tensor& draft_probs,
                                                           const at::Tensor& draft_tokens,
                                                           const at::Tensor& target_probs,
                                                           std::optional<at::Generator> generator) {
  check_speculative(draft_probs, draft_tokens, target_probs);
  const c10::cuda::CUDAGuard guard(draft_probs.device());
  const int64_t b = draft_probs.size(0), s = draft_probs.size(1), v = draft_probs.size(2);
  const auto dtype = at::promote_types(draft_probs.scalar_type(), target_probs.scalar_type());
  const at::Tensor draft = draft_probs.to(dtype).contiguous();
  const at::Tensor target = target_probs.to(dtype).contiguous();
  const at::Tensor tokens = draft_tokens.contiguous();
  at::Tensor out = at::empty({b, s + 1}, draft_probs.options().dtype(at::kLong));
  at::Tensor accepted = at::empty({b}, draft_probs.options().dtype(at::kLong));
  if (b == 0) return {out, accepted};
  const at::PhiloxCudaState philox = cuda_philox_state(generator, draft_probs.device().index(), 4 * (2 + s / 4));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "speculative_accept_cuda", [&] {
    AT_DISPATCH_INDEX_TYPES(tokens.scalar_type(), "speculative_accept_cuda", [&] {
      speculative_kernel<scalar_t, index_t><<<b, kSpecThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
          draft.const_data_ptr<scalar_t>(), tokens.const_data_ptr<index_t>(), target.const_data_ptr<scalar_t>(), s,
          v, philox, out.mutable_data_ptr<int64_t>(), accepted.mutable_data_ptr<int64_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return {out, accepted};
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) { m.impl("speculative_accept", &speculative_accept_cuda); }

}  // namespace wrs::llm
