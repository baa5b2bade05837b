// _ordered_labels and _ordered_place on CUDA (place.h states the law): a block of 256
// threads per kPlaceBlock positions, 16 rounds of 256 consecutive positions. Labels are
// counted, and placed, a warp's peers at a time (__match_any_sync): a block's counts in
// shared memory take one atomic per label a warp holds, not one per position.
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "distributed/place.h"
#include "distributed/place_checks.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace wrs::place {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRounds = static_cast<int>(kPlaceBlock / kThreads);
constexpr unsigned kAll = 0xffffffffu;
constexpr int kNoLabel = static_cast<int>(kMaxParts);  // past the end: peers only of each other

__global__ void __launch_bounds__(kThreads)
    labels_kernel(const double* cdf, int parts, int64_t count, at::PhiloxCudaState philox, uint8_t* labels,
                  int64_t* block_counts) {
  __shared__ double c[kMaxParts];
  __shared__ unsigned long long counts[kMaxParts];
  for (int p = threadIdx.x; p < parts; p += kThreads) {
    c[p] = cdf[p];
    counts[p] = 0;
  }
  __syncthreads();
  const PhiloxSeed seed = philox_seed(philox);
  const int lane = threadIdx.x % 32;
  for (int r = 0; r < kRounds; ++r) {
    const int64_t t = blockIdx.x * kPlaceBlock + r * kThreads + threadIdx.x;
    int p = kNoLabel;
    if (t < count) {
      const uint4 b = philox_block_cuda(seed, static_cast<uint64_t>(t / 2));
      const uint32_t w[4] = {b.x, b.y, b.z, b.w};
      p = label_of(position_uniform(w, t), c, parts);
      labels[t] = static_cast<uint8_t>(p);
    }
    const unsigned peers = __match_any_sync(kAll, p);
    if (p != kNoLabel && lane == __ffs(peers) - 1) atomicAdd(&counts[p], static_cast<unsigned long long>(__popc(peers)));
  }
  __syncthreads();
  for (int p = threadIdx.x; p < parts; p += kThreads) {
    block_counts[blockIdx.x * static_cast<int64_t>(parts) + p] = static_cast<int64_t>(counts[p]);
  }
}

// Round by round, position t's draw is its part's next: the part's count so far in the
// block (next), the same part's positions in earlier warps of the round, then its earlier
// peers in its own warp.
template <typename scalar_t>
__global__ void __launch_bounds__(kThreads)
    place_kernel(const scalar_t* grouped, const uint8_t* labels, const int64_t* start, int parts, int64_t n,
                 scalar_t* out) {
  __shared__ unsigned long long next[kMaxParts];
  __shared__ int warp_count[kWarps][kMaxParts + 1];
  for (int p = threadIdx.x; p < parts; p += kThreads) next[p] = static_cast<unsigned long long>(start[blockIdx.x * static_cast<int64_t>(parts) + p]);
  for (int i = threadIdx.x; i < kWarps * (kMaxParts + 1); i += kThreads) (&warp_count[0][0])[i] = 0;
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = 0; r < kRounds; ++r) {
    const int64_t t = blockIdx.x * kPlaceBlock + r * kThreads + threadIdx.x;
    const int p = t < n ? min(static_cast<int>(labels[t]), parts - 1) : kNoLabel;
    const unsigned peers = __match_any_sync(kAll, p);
    const bool leader = lane == __ffs(peers) - 1;
    if (leader) warp_count[warp][p] = __popc(peers);
    __syncthreads();
    if (p != kNoLabel) {
      int64_t at = static_cast<int64_t>(next[p]) + __popc(peers & ((1u << lane) - 1));
      for (int v = 0; v < warp; ++v) at += warp_count[v][p];
      out[t] = grouped[at < 0 ? 0 : (at < n ? at : n - 1)];  // in range whatever start holds
    }
    __syncthreads();
    if (leader) {
      if (p != kNoLabel) atomicAdd(&next[p], static_cast<unsigned long long>(warp_count[warp][p]));
      warp_count[warp][p] = 0;
    }
    __syncthreads();
  }
}

std::tuple<at::Tensor, at::Tensor> ordered_labels_cuda(const at::Tensor& cdf, int64_t count,
                                                       std::optional<at::Generator> generator) {
  check_labels_args(cdf, count);
  const c10::cuda::CUDAGuard guard(cdf.device());
  const at::Tensor c = cdf.contiguous();
  const int parts = static_cast<int>(c.numel());
  const int64_t blocks = ceil_div(count, kPlaceBlock);
  at::Tensor labels = at::empty({count}, c.options().dtype(at::kByte));
  at::Tensor block_counts = at::empty({blocks, parts}, c.options().dtype(at::kLong));
  if (blocks == 0) return {labels, block_counts};
  TORCH_CHECK(blocks < (int64_t{1} << 31), "_ordered_labels: count too large for one call (", count, ")");
  const at::PhiloxCudaState philox = cuda_philox_state(generator, cdf.device().index(), 4);
  labels_kernel<<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      c.const_data_ptr<double>(), parts, count, philox, labels.mutable_data_ptr<uint8_t>(),
      block_counts.mutable_data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {labels, block_counts};
}

at::Tensor ordered_place_cuda(const at::Tensor& grouped, const at::Tensor& labels, const at::Tensor& start) {
  check_place_args(grouped, labels, start);
  const c10::cuda::CUDAGuard guard(grouped.device());
  const at::Tensor g = grouped.contiguous(), lab = labels.contiguous(), st = start.contiguous();
  at::Tensor out = at::empty_like(g);
  const int64_t blocks = st.size(0);
  if (blocks == 0) return out;
  TORCH_CHECK(blocks < (int64_t{1} << 31), "_ordered_place: too many positions for one call (", g.numel(), ")");
  AT_DISPATCH_INTEGRAL_TYPES(g.scalar_type(), "_ordered_place_cuda", [&] {
    place_kernel<scalar_t><<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        g.const_data_ptr<scalar_t>(), lab.const_data_ptr<uint8_t>(), st.const_data_ptr<int64_t>(),
        static_cast<int>(st.size(1)), g.numel(), out.mutable_data_ptr<scalar_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) {
  m.impl("_ordered_labels", &ordered_labels_cuda);
  m.impl("_ordered_place", &ordered_place_cuda);
}

}  // namespace wrs::place
