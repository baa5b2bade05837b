// Without replacement, few draws (thread_rows_serve): a thread per row keeps its top k
// race keys (laws.h; quad_keys, the keys every top-k kernel draws) in registers.
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "multinomial/kernels_cuda.cuh"
#include "multinomial/race_bounds.cuh"
#include "multinomial/race_trip.cuh"

#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>

#include <type_traits>

namespace wrs::multinomial {
namespace {

constexpr int kThreads = 256;

// Few draws (k <= K) from short rows, or from many rows (thread_rows_serve): a thread per
// row, the same keys (quad_keys) kept in decreasing order in registers by insertion; a
// warp per row would leave most of its lanes idle and sort a 32-key list for a handful
// of items, and from many rows it is the slower (docs/methods.md).
template <typename scalar_t, typename Weights, int K>
__global__ void thread_rows_kernel(const scalar_t* x, int64_t rows, int64_t n, int64_t k, Weights wts,
                                   at::PhiloxCudaState philox, int64_t* out, uint32_t* status) {
  const PhiloxSeed seed = philox_seed(philox);
  const int64_t quads = (n + 3) / 4;
  uint32_t flags = 0;
  for (int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double top[K];
    int64_t index[K];
#pragma unroll
    for (int i = 0; i < K; ++i) {
      top[i] = Weights::kNone;
      index[i] = 0;
    }
    unsigned long long nonzero = 0;
    uint32_t row_flags = 0;
    for (int64_t q = 0; q < quads; ++q) {
      double key[4];
      quad_keys(x + row * n, n, q, static_cast<uint64_t>(row * quads + q), wts, seed, top[K - 1], key, row_flags,
                nonzero);
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        double c = key[h];
        int64_t ci = 4 * q + h;
#pragma unroll
        for (int i = 0; i < K; ++i) {  // the new key sinks to its place, the rest shift down
          if (c > top[i]) {
            const double t = top[i];
            const int64_t ti = index[i];
            top[i] = c;
            index[i] = ci;
            c = t;
            ci = ti;
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < K; ++i) {
      if (i < k) out[row * k + i] = index[i];
    }
    if (nonzero == 0) row_flags |= kRowZeroSum;
    if (nonzero < static_cast<unsigned long long>(k)) row_flags |= kTooFewNonzero;
    flags |= row_flags;
  }
  flags = __reduce_or_sync(__activemask(), flags);
  if (flags && threadIdx.x % kWarp == 0) atomicOr(status, flags);
}

template <typename scalar_t, typename Weights, int K>
void launch_thread_rows(const DrawCall& call, const Weights& wts) {
  thread_rows_kernel<scalar_t, Weights, K><<<grid_for(call.rows, kThreads), kThreads, 0, call.stream>>>(
      call.x.const_data_ptr<scalar_t>(), call.rows, call.n, call.k, wts, call.philox, call.out, call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void draw_thread_topk(const DrawCall& call) {
  TORCH_INTERNAL_ASSERT(thread_rows_serve(call.rows, call.n, call.k));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "thread_topk_cuda", [&] {
    with_weights(call, [&](const auto& wts) {
      if (call.k <= 2) {
        launch_thread_rows<scalar_t, std::decay_t<decltype(wts)>, 2>(call, wts);
      } else {
        launch_thread_rows<scalar_t, std::decay_t<decltype(wts)>, kMaxThreadRowSamples>(call, wts);
      }
    });
  });
}

}  // namespace wrs::multinomial
