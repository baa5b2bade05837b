#pragma once
// Small CUDA helpers shared by every family: launch sizing, CUB temp storage from
// torch's caching allocator, and graph-capture detection.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>

#include <ATen/ops/empty.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <tuple>
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

// Programmatic dependent launch (sm_90 and later): a kernel launched with the attribute below
// may start while the kernel before it in the stream still runs, which hides its launch behind
// that kernel; it must call wait_for_previous_grid() before it reads what that kernel wrote.
// let_next_grid_start() lets the next such kernel start (without it, only once this one ends).
__device__ inline void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ inline void let_next_grid_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// Adds the attribute to attrs[n] where the current GPU has it; returns the attributes' count.
inline unsigned add_after_previous(cudaLaunchAttribute* attrs, unsigned n) {
  static const bool has = at::cuda::getCurrentDeviceProperties()->major >= 9;
  if (!has) return n;
  attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[n].val.programmaticStreamSerializationAllowed = 1;
  return n + 1;
}

// kernel<<<grid, threads, smem, stream>>>(args...), started early behind the kernel before it
// (above): the kernel waits for it before reading its outputs.
template <typename... Params, typename... Args>
void launch_after_previous(void (*kernel)(Params...), unsigned grid, unsigned threads, size_t smem,
                           cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  config.attrs = attr;
  config.numAttrs = add_after_previous(attr, 0);
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
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

// Several uninitialised scratch arrays (counts[i] of the i-th type) carved from one
// allocation, kept alive by `keep`: where a small call needs several, each allocation
// is host time it feels. Each array starts 16-byte aligned.
template <typename... T>
std::tuple<T*...> scratch_arrays(at::Tensor& keep, const at::TensorOptions& opts,
                                 const std::array<int64_t, sizeof...(T)>& counts) {
  constexpr int64_t kAlign = 16;
  constexpr std::array<int64_t, sizeof...(T)> sizes{static_cast<int64_t>(sizeof(T))...};
  std::array<int64_t, sizeof...(T)> offsets{};
  int64_t bytes = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    offsets[i] = bytes;
    bytes += ceil_div(counts[i] * sizes[i], kAlign) * kAlign;
  }
  keep = at::empty({std::max<int64_t>(bytes, 1)}, opts.dtype(at::kByte));
  char* base = static_cast<char*>(keep.mutable_data_ptr());
  size_t i = 0;
  return std::tuple<T*...>{reinterpret_cast<T*>(base + offsets[i++])...};  // braces: left to right
}

inline bool stream_is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

// A device status word (flags OR-ed by the threads that saw a problem), zeroed
// on `stream` by a memset (not at::zeros: a fill kernel through the dispatcher is host
// time that a small call would feel).
inline at::Tensor zeroed_status_word(const at::TensorOptions& opts, cudaStream_t stream) {
  at::Tensor status = at::empty({1}, opts.dtype(at::kInt));
  C10_CUDA_CHECK(cudaMemsetAsync(status.mutable_data_ptr<int>(), 0, sizeof(int), stream));
  return status;
}

inline uint32_t* status_bits(const at::Tensor& status) {
  return reinterpret_cast<uint32_t*>(status.mutable_data_ptr<int>());
}

}  // namespace wrs
