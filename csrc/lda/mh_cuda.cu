// _lda_mh on CUDA (lda/mh.h states the chain): a thread per token, its whole chain in
// registers, so a phase is one kernel whatever the number of cycles.
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "lda/mh_ops.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace wrs::lda {
namespace {

constexpr int kThreads = 256;

struct CudaBlock {  // Philox block b of subsequence `token`
  PhiloxSeed seed;
  uint64_t token;
  __device__ void operator()(uint64_t b, uint32_t* words) const {
    const uint4 r = philox_block_at(seed.seed, seed.offset / 4 + b, token);
    words[0] = r.x;
    words[1] = r.y;
    words[2] = r.z;
    words[3] = r.w;
  }
};

__global__ void __launch_bounds__(kThreads) mh_kernel(MhView a, at::PhiloxCudaState philox, int64_t* out) {
  const PhiloxSeed seed = philox_seed(philox);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < a.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t doc, word, topic;
    token_of(a, i, doc, word, topic);
    TokenBits<CudaBlock> bits{CudaBlock{seed, static_cast<uint64_t>(i)}};
    out[i] = mh_token(a.now, a.proposals, a.model, i, doc, word, topic, bits);
  }
}

at::Tensor lda_mh_cuda(const at::Tensor& d, const at::Tensor& w, const at::Tensor& s0, const at::Tensor& n_dk,
                       const at::Tensor& n_wk, const at::Tensor& n_k, const at::Tensor& start_n_dk,
                       const at::Tensor& start_n_wk, const at::Tensor& start_n_k, const at::Tensor& q_word,
                       const at::Tensor& word_table, const at::Tensor& z, const at::Tensor& doc_start,
                       const at::Tensor& doc_length, int64_t phase, int64_t phases, int64_t cycles, double alpha,
                       double beta, std::optional<at::Generator> generator) {
  const c10::cuda::CUDAGuard guard(d.device());
  const MhArgs args = mh_args(d, w, s0, n_dk, n_wk, n_k, start_n_dk, start_n_wk, start_n_k, q_word, word_table, z,
                              doc_start, doc_length, phase, phases, cycles, alpha, beta);
  at::Tensor out = at::empty({args.view.n}, d.options());
  if (args.view.n == 0) return out;
  const auto philox = cuda_philox_state(generator, d.device().index(), kWordsPerCycle * static_cast<uint64_t>(cycles));
  mh_kernel<<<grid_for(ceil_div(args.view.n, int64_t{1}), kThreads), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      args.view, philox, out.mutable_data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) { m.impl("_lda_mh", &lda_mh_cuda); }

}  // namespace wrs::lda
