#pragma once
// CUDA launch helpers of the LLM samplers; the method table (which kernel, how many CTAs a
// row) is route.h's.
#include "llm/route.h"
#include "common/cuda_utils.cuh"
#include "llm/select_cuda.cuh"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <atomic>
#include <cstdint>
#include <utility>

namespace wrs::llm {

// The current GPU's multiprocessors (route.h's sms).
inline int64_t device_sms() {
  static const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  return sms;
}

inline int cluster_size(int64_t rows, int64_t v, bool resident) { return cluster_size(rows, v, resident, device_sms()); }

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
// `cluster` along x (each row's CTAs form one cluster); after_previous: started early behind
// the kernel before it (cuda_utils.cuh's launch_after_previous).
template <typename... Params, typename... Args>
void launch_clusters(bool after_previous, void (*kernel)(Params...), int64_t rows, int cluster, int threads,
                     size_t smem, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(rows * cluster));
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = at::cuda::getCurrentCUDAStream();
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = after_previous ? add_after_previous(attr, 1) : 1;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace wrs::llm
