// standard_gamma on CUDA: persistent threads, each walking the pairs of elements
// j, j + T, j + 2T, ... (T threads in the grid; pair j is elements 2j and 2j+1, drawing
// from Philox subsequence j, see gamma.h), one rejection candidate per loop trip. A lane
// whose pair is done stores it and moves to its next pair while the others keep trying,
// so a warp never waits for its slowest lane's element: it runs about pairs / acceptance
// trips instead of the sum over pairs of the worst lane's candidate count (Ericsson 2024,
// sec. 2.7). The output depends only on the seed, not on the grid.
#include "gamma/gamma_ops.h"

#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace wrs::gamma {

namespace {

constexpr int kThreads = 256;

// Philox blocks of one pair's subsequence, in order (counter layout of curand_init).
struct SubsequenceBits {
  uint2 key;
  uint64_t block;  // offset / 4 + blocks consumed
  uint64_t subsequence;
  __device__ void start(const PhiloxSeed& seed, uint64_t pair) {
    key = make_uint2(static_cast<uint32_t>(seed.seed), static_cast<uint32_t>(seed.seed >> 32));
    block = seed.offset / 4;
    subsequence = pair;
  }
  template <typename acc_t>
  __device__ void next(CandidateWords<acc_t>& words) {
#pragma unroll
    for (int b = 0; b < kBlocksPerCandidate<acc_t>; ++b, ++block) {
      const uint4 r = curand_Philox4x32_10(
          make_uint4(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                     static_cast<uint32_t>(subsequence), static_cast<uint32_t>(subsequence >> 32)),
          key);
      words.w[4 * b] = r.x;
      words.w[4 * b + 1] = r.y;
      words.w[4 * b + 2] = r.z;
      words.w[4 * b + 3] = r.w;
    }
  }
};

template <typename scalar_t, typename Gen>
__global__ void __launch_bounds__(kThreads)
    standard_gamma_kernel(const scalar_t* __restrict__ alpha, scalar_t* __restrict__ out, int64_t n,
                          bool log_output, at::PhiloxCudaState philox, uint32_t* status) {
  using acc_t = at::opmath_type<scalar_t>;
  const PhiloxSeed seed = philox_seed(philox);
  const int64_t pairs = (n + 1) / 2;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (j >= pairs) return;
  // The next pair's alphas are loaded one pair ahead, so finishing never waits on memory.
  auto load = [&](int64_t pair, acc_t& a0, acc_t& a1) {
    a0 = static_cast<acc_t>(alpha[2 * pair]);
    a1 = 2 * pair + 1 < n ? static_cast<acc_t>(alpha[2 * pair + 1]) : acc_t(0);
  };
  acc_t a0, a1, next0 = 0, next1 = 0;
  load(j, a0, a1);
  if (j + stride < pairs) load(j + stride, next0, next1);
  Pair<acc_t, Gen> pair;
  SubsequenceBits bits;
  // A pair's start: its subsequence; block 0 holds the boost uniforms, drawn only when
  // an element needs one; the candidates follow from block 1.
  auto begin_pair = [&] {
    // validate: invalid alphas flag the status word here, once per element (they come
    // out NaN: the pair driver never loops on them).
    if (status) {
      const uint32_t flags = alpha_flags(a0) | alpha_flags(a1);
      if (flags) atomicOr(status, flags);
    }
    pair.start(a0, a1, 2 * j + 1 < n);
    bits.start(seed, j);
    if (pair.needs_boost) {
      CandidateWords<acc_t> words;
      bits.next(words);
      pair.boost_words(words);
    }
    bits.block = seed.offset / 4 + 1;
  };
  begin_pair();
  // One flat loop and no return inside it: lanes on different pairs stay converged
  // instead of splitting the warp for good.
  while (j < pairs) {
    CandidateWords<acc_t> words;
    bits.next(words);
    if (pair.step(words, log_output)) {
      out[2 * j] = static_cast<scalar_t>(pair.out[0]);
      if (2 * j + 1 < n) out[2 * j + 1] = static_cast<scalar_t>(pair.out[1]);
      j += stride;
      a0 = next0;
      a1 = next1;
      if (j + stride < pairs) load(j + stride, next0, next1);
      if (j < pairs) begin_pair();
    }
  }
}

template <typename scalar_t, typename Gen>
void launch_standard_gamma(const at::Tensor& alpha, at::Tensor& out, bool log, const at::PhiloxCudaState& philox,
                           uint32_t* status) {
  const auto kernel = standard_gamma_kernel<scalar_t, Gen>;
  static const int blocks_per_sm = [&] {
    int b = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, kThreads, 0));
    return std::max(b, 1);
  }();
  const int64_t n = alpha.numel();
  const int64_t resident = static_cast<int64_t>(blocks_per_sm) * at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int blocks = static_cast<int>(std::min(ceil_div((n + 1) / 2, kThreads), resident));
  kernel<<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      alpha.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(), n, log, philox, status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor standard_gamma_cuda(const at::Tensor& alpha, c10::string_view method, bool log, bool validate,
                               std::optional<at::Generator> generator) {
  const Method m = check_standard_gamma(alpha, method, "standard_gamma", "alpha");
  const c10::cuda::CUDAGuard guard(alpha.device());
  const at::Tensor a = alpha.contiguous();
  at::Tensor out = at::empty_like(a);
  if (a.numel() == 0) return out;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  // validate: the kernel flags invalid alphas in its own pass; one 4-byte read back,
  // skipped while the stream is capturing a CUDA graph (as torch does; NaN comes out).
  const bool read_back = validate && !stream_is_capturing(stream);
  at::Tensor status;
  if (validate) {
    status = at::empty({1}, a.options().dtype(at::kInt));
    C10_CUDA_CHECK(cudaMemsetAsync(status.mutable_data_ptr<int>(), 0, sizeof(int), stream));
  }
  uint32_t* status_ptr = validate ? reinterpret_cast<uint32_t*>(status.mutable_data_ptr<int>()) : nullptr;
  const at::PhiloxCudaState philox = cuda_philox_state(generator, a.device().index(), kDrawsPerSubsequence);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.scalar_type(), "standard_gamma_cuda", [&] {
    dispatch_method<at::opmath_type<scalar_t>>(
        m, [&](auto gen) { launch_standard_gamma<scalar_t, decltype(gen)>(a, out, log, philox, status_ptr); });
  });
  if (read_back) raise_alpha_flags(read_status_word(status, stream), "standard_gamma", "alpha");
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) {
  m.impl("standard_gamma", &standard_gamma_cuda);
}

}  // namespace wrs::gamma
