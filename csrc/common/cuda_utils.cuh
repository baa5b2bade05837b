#pragma once
// Small CUDA helpers shared by every family: launch sizing, CUB temp storage from
// torch's caching allocator, and graph-capture detection.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>

#include <ATen/ops/empty.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace wrs {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks for a grid-stride loop over `items`: enough to fill the device, no more.
inline int grid_for(int64_t items, int threads) {
  static const int max_blocks = [] {
    const auto* p = at::cuda::getCurrentDeviceProperties();
    return p->multiProcessorCount * (p->maxThreadsPerMultiProcessor / 256) * 4;
  }();
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(ceil_div(items, threads), max_blocks)));
}

// Runs a CUB device-wide algorithm twice (size query, then work) with temp storage
// taken from torch's caching allocator, so no cudaMalloc per call.
template <typename F>
void cub_call(F&& f) {
  size_t bytes = 0;
  C10_CUDA_CHECK(f(nullptr, bytes));
  auto storage = c10::cuda::CUDACachingAllocator::get()->allocate(std::max<size_t>(bytes, 1));
  C10_CUDA_CHECK(f(storage.get(), bytes));
}

// Asks for the largest shared-memory carveout for `kernel`, so as many blocks as the
// SM's shared memory allows run at once (the default split can hold fewer).
template <typename Kernel>
void prefer_shared_memory(Kernel kernel) {
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                      cudaSharedmemCarveoutMaxShared));
}

// Uninitialised scratch of `count` T's from torch's caching allocator, kept alive by `keep`.
template <typename T>
T* scratch(std::vector<at::Tensor>& keep, const at::TensorOptions& opts, int64_t count) {
  keep.push_back(at::empty({count * static_cast<int64_t>(sizeof(T))}, opts.dtype(at::kByte)));
  return reinterpret_cast<T*>(keep.back().data_ptr());
}

inline bool stream_is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

// A kernel's 4-byte status word (flags OR-ed by the threads that saw a problem), read
// back into pinned memory: one small copy and a stream sync, no dispatcher round trip.
inline uint32_t read_status_word(const at::Tensor& status, cudaStream_t stream) {
  const at::Tensor host = at::empty({1}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
  C10_CUDA_CHECK(cudaMemcpyAsync(host.mutable_data_ptr<int>(), status.const_data_ptr<int>(), sizeof(int),
                                 cudaMemcpyDeviceToHost, stream));
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  return static_cast<uint32_t>(*host.const_data_ptr<int>());
}

}  // namespace wrs
