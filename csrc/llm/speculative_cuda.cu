// CUDA kernel of speculative_accept (the law in llm_cpu.cpp's speculative_rows, which this
// follows draw for draw): a block per row; one thread walks the drafts' acceptance tests,
// then the block draws the last token by inverse CDF of the residual max(0, q - p) (or of
// the bonus row), in row order, stopping at the tile that holds the point.
#include "common/philox_cuda.cuh"
#include "llm/llm_ops.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <torch/library.h>

namespace wrs::llm {
namespace {

constexpr int kSpecThreads = 256;

template <typename scalar_t, typename token_t>
__global__ void __launch_bounds__(kSpecThreads) speculative_kernel(const scalar_t* draft, const token_t* draft_tokens,
                                                                   const scalar_t* target, int64_t s_count, int64_t v,
                                                                   at::PhiloxCudaState philox, int64_t* out,
                                                                   int64_t* accepted) {
  __shared__ union {
    typename cub::BlockReduce<double, kSpecThreads>::TempStorage sum;
    typename cub::BlockScan<double, kSpecThreads>::TempStorage scan;
  } reduce;
  __shared__ int64_t acc_shared, token_shared;
  __shared__ double total_shared;
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
  auto weight = [&](int64_t i, bool residual) {
    const float q = static_cast<float>(q_row[i]);
    const float w = residual ? fmaxf(0.0f, q - static_cast<float>(p_row[i])) : q;
    return w > 0.0f && w <= 3.402823466e38f ? w : 0.0f;
  };
  // The residual's total (the target row's where the residual is all zero), then the
  // inverse CDF at a 53-bit uniform point, tile by tile in row order.
  double total = 0.0;
  bool residual = p_row != nullptr;
  for (int attempt = 0; attempt < 2; ++attempt) {
    double mine = 0.0;
    for (int64_t i = threadIdx.x; i < v; i += kSpecThreads) mine += weight(i, residual);
    total = cub::BlockReduce<double, kSpecThreads>(reduce.sum).Sum(mine);
    if (threadIdx.x == 0) total_shared = total;
    __syncthreads();
    total = total_shared;
    __syncthreads();
    if (total > 0.0 || !residual) break;
    residual = false;
  }
  const uint4 w4 = philox_block_at(seed.seed, seed.offset / 4, subsequence(b, quads, 0));
  const double point = static_cast<double>(((static_cast<uint64_t>(w4.y) << 32) | w4.x) >> 11) * 0x1.0p-53 * total;
  if (threadIdx.x == 0) token_shared = -1;
  double before_tile = 0.0;
  for (int64_t tile = 0; tile < v; tile += kSpecThreads * 4) {
    float w[4];
    double sum = 0.0;
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      const int64_t i = tile + 4 * threadIdx.x + h;
      w[h] = i < v ? weight(i, residual) : 0.0f;
      sum += w[h];
    }
    double before = 0.0, tile_total = 0.0;
    cub::BlockScan<double, kSpecThreads>(reduce.scan).ExclusiveSum(sum, before, tile_total);
    double cum = before_tile + before;
    if (point >= cum && point < cum + sum) {
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        cum += w[h];
        if (token_shared < 0 && w[h] > 0.0f && point < cum) {
          token_shared = tile + 4 * threadIdx.x + h;
          break;
        }
      }
    }
    before_tile += tile_total;
    __syncthreads();
    if (token_shared >= 0) break;
  }
  if (threadIdx.x == 0) {
    // Float64 rounding can leave the point past the last range (probability ~2^-50): the
    // last item of positive weight then.
    int64_t token = token_shared;
    for (int64_t i = v - 1; token < 0 && i >= 0; --i) token = weight(i, residual) > 0.0f ? i : -1;
    out[b * (s_count + 1) + acc] = token < 0 ? 0 : token;
    accepted[b] = acc;
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
