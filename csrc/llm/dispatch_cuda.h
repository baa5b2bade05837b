#pragma once
// The CUDA method table of the LLM samplers: how many CTAs (a cluster) share a row, and
// whether the row stays in their shared memory between passes.
//   - resident: each row stays in the cluster's shared memory (kResident items a CTA), read
//     from device memory once, where a cluster of up to 8 holds it (up to 262,144 items), and
//     is drawn from by inverse CDF over its segments; longer rows read device memory on
//     every pass and race (sample_cuda.cu).
//   - split: a call with fewer rows than the GPU has SMs splits each row further, up to 8
//     CTAs, keeping at least kItemsPerCta items in each so the cluster's combining steps
//     stay small beside the reads (docs/llm.md, "Cluster size").
#include "llm/select_cuda.cuh"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <atomic>
#include <cstdint>
#include <utility>

namespace wrs::llm {

constexpr int64_t kItemsPerCta = 4096;
constexpr int kMaxCluster = 8;

// Quads of each CTA's share when a row of v items is split over c CTAs: whole segments of
// kSegment items, so the segments (and the draw) do not depend on the split.
constexpr int64_t kSegment = 128;
C10_HOST_DEVICE inline int64_t share_quads(int64_t v, int64_t c) {
  const int64_t segments = (v + kSegment - 1) / kSegment;
  return (segments + c - 1) / c * (kSegment / 4);
}
inline int64_t share_items(int64_t v, int c) { return 4 * share_quads(v, c); }

inline bool fits_resident(int64_t v) { return share_items(v, kMaxCluster) <= kResident; }

inline int cluster_size(int64_t rows, int64_t v, bool resident) {
  static const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  int c = 1;
  while (resident && share_items(v, c) > kResident) c *= 2;
  while (c < kMaxCluster && rows * c * 2 <= sms && v >= kItemsPerCta * c * 2) c *= 2;
  return c;
}

// Lets kKernel take `bytes` of dynamic shared memory (over the 48 KB default) on the current
// device: once per device, as the attribute is the device's.
template <auto kKernel>
void allow_shared_memory(size_t bytes) {
  static std::atomic<uint64_t> done{0};
  const uint64_t bit = uint64_t{1} << (c10::cuda::current_device() % 64);
  if (done.load(std::memory_order_relaxed) & bit) return;
  C10_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  done.fetch_or(bit);
}

// Launches `kernel` on the current stream: rows x cluster CTAs of `threads`, in clusters of
// `cluster` along x (each row's CTAs form one cluster).
template <typename... Params, typename... Args>
void launch_clusters(void (*kernel)(Params...), int64_t rows, int cluster, int threads, size_t smem, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(rows * cluster));
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = at::cuda::getCurrentCUDAStream();
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace wrs::llm
