#pragma once
// Row sums of [rows, n] weights in float64 with the value checks (common/checks.h), on
// CUDA: per-tile sums, then a segmented reduce of the tiles per row (CUB). Used by every
// family that normalises rows (alias tables, radix forests).
#include "common/checks.h"
#include "common/cuda_utils.cuh"

#include <cub/block/block_reduce.cuh>
#include <cub/device/device_segmented_reduce.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <vector>

namespace wrs {

struct RowSum {
  double sum;
  uint32_t flags;
};

struct AddRowSum {
  __host__ __device__ RowSum operator()(const RowSum& a, const RowSum& b) const {
    return RowSum{a.sum + b.sum, a.flags | b.flags};
  }
};

struct MulBy {
  int64_t k;
  __host__ __device__ int64_t operator()(int64_t x) const { return x * k; }
};

constexpr int kRowSumThreads = 256;
constexpr int kRowSumItems = 32;  // items per thread
constexpr int64_t kRowSumTile = kRowSumThreads * kRowSumItems;

template <typename scalar_t>
__global__ void __launch_bounds__(kRowSumThreads)
    tile_sum_kernel(const scalar_t* w, int64_t n, int64_t tiles_per_row, RowSum* tile_sums) {
  __shared__ typename cub::BlockReduce<RowSum, kRowSumThreads>::TempStorage tmp;
  const int64_t row = blockIdx.x / tiles_per_row;
  const int64_t first = (blockIdx.x - row * tiles_per_row) * kRowSumTile;
  const int64_t count = n - first < kRowSumTile ? n - first : kRowSumTile;
  const scalar_t* p = w + row * n + first;
  RowSum mine{0.0, 0u};
#pragma unroll
  for (int k = 0; k < kRowSumItems; ++k) {
    const int64_t i = k * kRowSumThreads + threadIdx.x;  // striped: coalesced
    if (i < count) {
      const double x = static_cast<double>(p[i]);
      mine = AddRowSum{}(mine, RowSum{x, weight_flags(x)});
    }
  }
  const RowSum total = cub::BlockReduce<RowSum, kRowSumThreads>(tmp).Reduce(mine, AddRowSum{});
  if (threadIdx.x == 0) tile_sums[blockIdx.x] = total;
}

// Float64 sums and weight flags of each row, in scratch kept alive by `keep`.
template <typename scalar_t>
RowSum* row_sums_cuda(const scalar_t* w, int64_t rows, int64_t n, std::vector<at::Tensor>& keep,
                      const at::TensorOptions& opts, cudaStream_t stream) {
  const int64_t tiles_per_row = ceil_div(n, kRowSumTile);
  auto* tile_sums = scratch<RowSum>(keep, opts, rows * tiles_per_row);
  tile_sum_kernel<scalar_t><<<rows * tiles_per_row, kRowSumThreads, 0, stream>>>(w, n, tiles_per_row, tile_sums);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  auto* sums = scratch<RowSum>(keep, opts, rows);
  auto starts = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), MulBy{tiles_per_row});
  cub_call([&](void* tmp, size_t& bytes) {
    return cub::DeviceSegmentedReduce::Reduce(tmp, bytes, tile_sums, sums, rows, starts, starts + 1, AddRowSum{},
                                              RowSum{0.0, 0u}, stream);
  });
  return sums;
}

}  // namespace wrs
