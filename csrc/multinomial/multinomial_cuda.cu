// torch.multinomial with replacement on short rows in one pass: a block per row reads
// the row once, quantizes it exactly as alias tables do (Q_i = round(w_i / W * N * 2^32),
// so both paths sample the same law), scans the integers and draws each sample by
// inverse CDF on them. Integer prefixes make every thread's range exact: each draw lands
// in exactly one thread, and a zero weight (Q = 0) owns no range. Other shapes use the
// composite (alias tables, or exponential keys without replacement).
#include "alias/alias.h"
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "multinomial/multinomial.h"

#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <torch/library.h>

namespace wrs::multinomial {
namespace {

constexpr int kItems = 9;                   // items per thread (odd: see alias_cuda.cu)
constexpr int64_t kMaxRow = 256 * kItems;   // longest row of the one-pass kernel
constexpr int64_t kMaxSamples = 64;         // most samples per row it draws

template <typename scalar_t, int THREADS>
__global__ void __launch_bounds__(THREADS)
    rows_kernel(const scalar_t* w, int64_t n, int64_t k, at::PhiloxCudaState philox, int64_t* out,
                uint32_t* status) {
  __shared__ union {
    typename cub::BlockReduce<double, THREADS>::TempStorage reduce;
    typename cub::BlockScan<uint64_t, THREADS, cub::BLOCK_SCAN_WARP_SCANS>::TempStorage scan;
  } tmp;
  __shared__ alias::RowScale scale;
  __shared__ uint64_t target[kMaxSamples];
  const int64_t row = blockIdx.x;
  double x[kItems];
  double mine = 0;
  uint32_t flags = 0;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int64_t i = threadIdx.x * kItems + j;
    x[j] = i < n ? static_cast<double>(w[row * n + i]) : 0.0;
    flags |= weight_flags(x[j]);
    mine += x[j];
  }
  if (flags) atomicOr(status, flags);
  const double sum = cub::BlockReduce<double, THREADS>(tmp.reduce).Sum(mine);
  if (threadIdx.x == 0) {
    const uint32_t problems = row_flags(sum, 0);
    if (problems) atomicOr(status, problems);
    scale = alias::row_scale(sum, n);
  }
  __syncthreads();
  uint64_t q[kItems];
  uint64_t units = 0;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    q[j] = alias::quantize(x[j], scale, n);
    units += q[j];
  }
  uint64_t before, total;
  cub::BlockScan<uint64_t, THREADS, cub::BLOCK_SCAN_WARP_SCANS>(tmp.scan).ExclusiveSum(units, before, total);
  // Sample s: 64 random bits of its own Philox block; the high half of r * total is a
  // uniform point in [0, total) (no modulo bias).
  const PhiloxSeed seed = philox_seed(philox);
  for (int64_t s = threadIdx.x; s < k; s += THREADS) {
    const uint4 r = philox_block_cuda(seed, static_cast<uint64_t>(row * k + s));
    target[s] = mul_hi64((static_cast<uint64_t>(r.y) << 32) | r.x, total);
  }
  __syncthreads();
  for (int64_t s = 0; s < k; ++s) {
    const uint64_t v = target[s];
    if (v < before || v >= before + units) continue;  // another thread's range
    uint64_t end = before;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      end += q[j];
      if (v < end) {
        out[row * k + s] = threadIdx.x * kItems + j;
        break;
      }
    }
  }
}

template <typename scalar_t>
void launch_rows(const scalar_t* w, int64_t rows, int64_t n, int64_t k, const at::PhiloxCudaState& philox,
                 int64_t* out, uint32_t* status, cudaStream_t stream) {
  if (n <= 32 * kItems) {
    rows_kernel<scalar_t, 32><<<rows, 32, 0, stream>>>(w, n, k, philox, out, status);
  } else if (n <= 64 * kItems) {
    rows_kernel<scalar_t, 64><<<rows, 64, 0, stream>>>(w, n, k, philox, out, status);
  } else if (n <= 128 * kItems) {
    rows_kernel<scalar_t, 128><<<rows, 128, 0, stream>>>(w, n, k, philox, out, status);
  } else {
    rows_kernel<scalar_t, 256><<<rows, 256, 0, stream>>>(w, n, k, philox, out, status);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor multinomial_cuda(const at::Tensor& input, int64_t num_samples, bool replacement,
                            std::optional<at::Generator> generator) {
  check_shape(input, num_samples, replacement);
  const c10::cuda::CUDAGuard guard(input.device());
  const auto stream = at::cuda::getCurrentCUDAStream();
  TORCH_CHECK(!stream_is_capturing(stream), kOp,
              ": checks the input's values on the host, which CUDA-graph capture forbids; inside "
              "graphs build tables with alias_table(..., validate=False) and sample with alias_sample");
  const int64_t n = input.size(-1);
  if (!replacement || n > kMaxRow || num_samples > kMaxSamples) {
    return multinomial_composite(input, num_samples, replacement, generator);
  }
  const at::Tensor w = input.contiguous();
  auto shape = w.sizes().vec();
  shape.back() = num_samples;
  at::Tensor out = at::empty(shape, w.options().dtype(at::kLong));
  const int64_t rows = w.numel() / n;
  if (rows == 0) return out;
  const at::Tensor status = at::zeros({1}, w.options().dtype(at::kInt));
  const auto philox = cuda_philox_state(generator, w.device().index(), 4);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, w.scalar_type(), "multinomial_cuda", [&] {
    launch_rows(w.const_data_ptr<scalar_t>(), rows, n, num_samples, philox, out.mutable_data_ptr<int64_t>(),
                reinterpret_cast<uint32_t*>(status.data_ptr<int>()), stream);
  });
  raise_value_flags(static_cast<uint32_t>(status.item<int>()));  // the output is ours: dropped on error
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) {
  m.impl("multinomial", &multinomial_cuda);
}

}  // namespace wrs::multinomial
