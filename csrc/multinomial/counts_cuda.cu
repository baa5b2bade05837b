// multinomial_counts on CUDA: one thread per row, each a chain of binomials (counts.h).
// The weight checks cost one 4-byte read back, skipped while the stream is capturing a
// CUDA graph (invalid rows then give all-zero counts).
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "common/status_word.h"
#include "multinomial/counts.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace wrs::multinomial {
namespace {

template <typename scalar_t>
__global__ void counts_kernel(const scalar_t* w, int64_t rows, int64_t m, int64_t total,
                              at::PhiloxCudaState philox, int64_t* out, uint32_t* status) {
  const CurandStreams streams{philox_seed(philox)};
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x) {
    const uint32_t flags = count_row(w + r * m, m, total, r, streams, out + r * m);
    if (flags) atomicOr(status, flags);
  }
}

at::Tensor multinomial_counts_cuda(const at::Tensor& weights, int64_t total,
                                   std::optional<at::Generator> generator) {
  check_floating(weights, "multinomial_counts", "weights");
  check_has_last_dim(weights, "multinomial_counts", "weights");
  TORCH_CHECK(total >= 0, "multinomial_counts: total_count must be non-negative, got ", total);
  const c10::cuda::CUDAGuard guard(weights.device());
  const at::Tensor w = weights.contiguous();
  at::Tensor out = at::empty(weights.sizes(), weights.options().dtype(at::kLong));
  const int64_t m = w.size(-1), rows = w.numel() / m;
  if (rows == 0) return out;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  StatusWord status(w.options(), stream);
  const auto philox = cuda_philox_state(generator, w.device().index(), 4 * kCountBlocks);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, w.scalar_type(), "multinomial_counts_cuda", [&] {
    counts_kernel<<<grid_for(rows, 128), 128, 0, stream>>>(
        w.const_data_ptr<scalar_t>(), rows, m, total, philox, out.mutable_data_ptr<int64_t>(),
        status.bits());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (!status.capturing()) raise_count_flags(status.read());
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) { m.impl("multinomial_counts", &multinomial_counts_cuda); }

}  // namespace wrs::multinomial
