// Radix forests on CUDA. The build is load-balanced over items, never over trees:
//   1. float64 row sums and value checks (common/row_sums.cuh), per-row quantization,
//   2. one CUB exclusive scan of the quantized weights of all rows (exact uint64 sums),
//   3. one thread per item: its cdf value, the last item of each cell, and Algorithm 1
//      (merge upwards with one atomicExch per merge),
//   4. one CUB scan over all cells: each cell learns the last item before it, which is
//      the interval covering it when it holds no key, and its first item's node when it does.
// Only validate=True reads anything back (one status word).
#include "radix_forest/radix_forest_ops.h"
#include "alias/alias.h"  // the shared weight quantization
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "common/row_sums.cuh"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <cub/device/device_scan.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/iterator/transform_output_iterator.h>
#include <torch/library.h>

namespace wrs::radix {
namespace {

constexpr int kThreads = 256;

// k / n for the flat index k of a [rows, n] array, without a 64-bit division: a float64
// reciprocal is off by at most one for k < 2^50, and one correction fixes that.
struct RowOf {
  int64_t n;
  double inverse;
  explicit RowOf(int64_t n_) : n(n_), inverse(1.0 / static_cast<double>(n_)) {}
  __host__ __device__ int64_t operator()(int64_t k) const {
    int64_t r = static_cast<int64_t>(static_cast<double>(k) * inverse);
    if (r * n > k) --r;
    if ((r + 1) * n <= k) ++r;
    return r;
  }
};

__global__ void row_scale_kernel(const RowSum* sums, int64_t rows, alias::RowScale* scale, uint32_t* status) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  const uint32_t flags = row_flags(sums[r].sum, sums[r].flags);
  if (flags) atomicOr(status, flags);
  scale[r] = alias::row_scale(sums[r].sum, kQuantizeN);
}

// Quantized weight of flat item k; 0 past the end, so the scan's last output is the total.
template <typename scalar_t>
struct QuantizedWeight {
  const scalar_t* w;
  const alias::RowScale* scale;
  RowOf row_of;
  int64_t items;
  __device__ uint64_t operator()(int64_t k) const {
    if (k >= items) return 0;
    return alias::quantize(static_cast<double>(w[k]), scale[row_of(k)], kQuantizeN);
  }
};

// cdf values of one row from the scan of all rows (exclusive sums, wrapping mod 2^64).
struct RowKeys {
  const uint64_t* prefix;  // the row's first item's exclusive sum
  uint64_t base, total;
  double scale;
  __device__ RowKeys(const uint64_t* sums, int64_t row, int64_t n) : prefix(sums + row * n) {
    base = prefix[0];
    total = prefix[n] - base;
    scale = cdf_scale(total);
  }
  __device__ int64_t operator()(int64_t j) const { return cdf_value(prefix[j] - base, total, scale); }
};

struct AtomicExchange {
  __device__ int32_t operator()(int32_t* p, int32_t v) const { return atomicExch(p, v); }
};

__global__ void __launch_bounds__(kThreads)
    build_kernel(const uint64_t* sums, int64_t items, int64_t n, int cell_bits, RowOf row_of, int64_t* cdf,
                 int32_t* nodes, int32_t* other_bound, int32_t* last_in_cell) {
  const int shift = kFractionBits - cell_bits;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < items;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = row_of(k), i = k - r * n;
    const RowKeys key(sums, r, n);
    const int64_t mine = key(i);
    cdf[k] = mine;
    const int64_t cell = mine >> shift;
    if (i + 1 == n || (key(i + 1) >> shift) != cell) {
      last_in_cell[(r << cell_bits) + cell] = static_cast<int32_t>(i);
    }
    merge_up(i, n, shift, key, nodes + 2 * r * n, other_bound + r * n, AtomicExchange{});
  }
}

// The guide scan: a summary of a run of cells (within one row, from its last row start):
// the largest last-item over all its cells but the last, and the last cell's own.
struct CellRun {
  int32_t before;  // -1: none
  int32_t own;     // -1: the last cell holds no key
  bool starts_row;
};

struct ConcatCellRuns {
  __host__ __device__ CellRun operator()(const CellRun& a, const CellRun& b) const {
    if (b.starts_row) return b;
    const int32_t m = a.before > a.own ? a.before : a.own;
    return CellRun{m > b.before ? m : b.before, b.own, a.starts_row};
  }
};

struct CellRunOf {
  const int32_t* last_in_cell;
  int64_t cells_mask;
  __host__ __device__ CellRun operator()(int64_t c) const {
    return CellRun{-1, last_in_cell[c], (c & cells_mask) == 0};
  }
};

// A cell holding keys points at its first item's node (one past the last item before it);
// an empty one lies inside the interval of the last item before it.
struct GuideEntry {
  __host__ __device__ int32_t operator()(const CellRun& run) const {
    if (run.own >= 0) return run.before + 1;
    return ~(run.before > 0 ? run.before : 0);
  }
};

void raise_if_flagged(const at::Tensor& status) {
  check_host_read_allowed(status, "radix_forest", "the weight checks");
  raise_weight_flags(static_cast<uint32_t>(status.item<int>()), "radix_forest", "weights");
}

template <typename scalar_t>
void build_cuda(const scalar_t* w, int64_t rows, int64_t n, int bits, bool validate, int64_t* cdf, int32_t* guide,
                int32_t* nodes, const at::TensorOptions& opts, cudaStream_t stream) {
  std::vector<at::Tensor> keep;  // scratch from torch's caching allocator
  const int64_t items = rows * n;
  const int64_t cells = rows << bits;
  const RowOf row_of(n);

  // 1. Row sums, checks and quantization scales.
  const RowSum* sums = row_sums_cuda(w, rows, n, keep, opts, stream);
  auto* scale = scratch<alias::RowScale>(keep, opts, rows);
  const at::Tensor status = at::zeros({1}, opts.dtype(at::kInt));
  row_scale_kernel<<<ceil_div(rows, kThreads), kThreads, 0, stream>>>(
      sums, rows, scale, reinterpret_cast<uint32_t*>(status.data_ptr<int>()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (validate) raise_if_flagged(status);

  // 2. Exclusive sums of the quantized weights, items + 1 of them (the last is the total).
  auto* prefix = scratch<uint64_t>(keep, opts, items + 1);
  auto quantized = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0),
                                                   QuantizedWeight<scalar_t>{w, scale, row_of, items});
  cub_call([&](void* tmp, size_t& bytes) {
    return cub::DeviceScan::ExclusiveSum(tmp, bytes, quantized, prefix, items + 1, stream);
  });

  // 3. cdf, last item per cell, and the trees.
  auto* other_bound = scratch<int32_t>(keep, opts, items);
  auto* last_in_cell = scratch<int32_t>(keep, opts, cells);
  C10_CUDA_CHECK(cudaMemsetAsync(other_bound, 0xFF, items * sizeof(int32_t), stream));
  C10_CUDA_CHECK(cudaMemsetAsync(last_in_cell, 0xFF, cells * sizeof(int32_t), stream));
  build_kernel<<<grid_for(items, kThreads), kThreads, 0, stream>>>(prefix, items, n, bits, row_of, cdf, nodes,
                                                                    other_bound, last_in_cell);
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  // 4. Guide.
  auto runs = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0),
                                              CellRunOf{last_in_cell, (int64_t(1) << bits) - 1});
  auto entries = thrust::make_transform_output_iterator(guide, GuideEntry{});
  cub_call([&](void* tmp, size_t& bytes) {
    return cub::DeviceScan::InclusiveScan(tmp, bytes, runs, entries, ConcatCellRuns{}, cells, stream);
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> radix_forest_cuda(const at::Tensor& weights,
                                                                 std::optional<int64_t> cells, bool validate) {
  check_weights(weights);
  const int bits = cell_bits(weights.size(-1), cells);
  const c10::cuda::CUDAGuard guard(weights.device());
  const at::Tensor w = weights.contiguous();
  at::Tensor cdf = at::empty(w.sizes(), w.options().dtype(at::kLong));
  at::Tensor guide = at::empty(guide_shape(w, bits), w.options().dtype(at::kInt));
  at::Tensor nodes = at::empty(nodes_shape(w), w.options().dtype(at::kInt));
  const int64_t n = w.size(-1);
  const int64_t rows = w.numel() / n;
  if (rows == 0) return {cdf, guide, nodes};
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, w.scalar_type(), "radix_forest_cuda", [&] {
    build_cuda(w.const_data_ptr<scalar_t>(), rows, n, bits, validate, cdf.mutable_data_ptr<int64_t>(),
               guide.mutable_data_ptr<int32_t>(), nodes.mutable_data_ptr<int32_t>(), w.options(), stream);
  });
  return {cdf, guide, nodes};
}

// ---- lookups -----------------------------------------------------------------------------

struct Forest {
  const int64_t* cdf;
  const int32_t* guide;
  const int32_t* nodes;
  int64_t rows, n;
  int cell_bits;
  __device__ int64_t operator()(int64_t x, int64_t row) const {
    return lookup(x, cdf + row * n, guide + (row << cell_bits), nodes + 2 * row * n, n, kFractionBits - cell_bits);
  }
};

Forest forest_of(const at::Tensor& cdf, const at::Tensor& guide, const at::Tensor& nodes) {
  const ForestShape f = forest_shape(cdf, guide);
  return Forest{cdf.const_data_ptr<int64_t>(), guide.const_data_ptr<int32_t>(), nodes.const_data_ptr<int32_t>(),
                f.rows, f.n, f.cell_bits};
}

// u[k] looked up in forest row[k] (row given), or k / per_row.
template <typename scalar_t>
__global__ void __launch_bounds__(kThreads)
    inverse_kernel(Forest forest, const scalar_t* u, const int64_t* row, int64_t count, RowOf row_of, int64_t* out) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < count;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r = row ? row[k] : row_of(k);
    r = r < 0 ? 0 : (r < forest.rows ? r : forest.rows - 1);
    out[k] = forest(key_of(static_cast<double>(u[k])), r);
  }
}

// Sample e uses half of Philox block e / 2 (as the CPU and the alias sampler do).
__global__ void __launch_bounds__(kThreads)
    sample_kernel(Forest forest, int64_t count, RowOf row_of, at::PhiloxCudaState philox, int64_t* out) {
  const PhiloxSeed seed = philox_seed(philox);
  const int64_t pairs = (count + 1) / 2;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < pairs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint4 b = philox_block_cuda(seed, static_cast<uint64_t>(p));
    out[2 * p] = forest(key_of_bits(b.x, b.y), row_of(2 * p));
    if (2 * p + 1 < count) out[2 * p + 1] = forest(key_of_bits(b.z, b.w), row_of(2 * p + 1));
  }
}

at::Tensor inverse_cdf_cuda(const at::Tensor& cdf_in, const at::Tensor& guide_in, const at::Tensor& nodes_in,
                            const at::Tensor& u_in, const std::optional<at::Tensor>& row_in, bool validate) {
  check_forest(cdf_in, guide_in, nodes_in, "inverse_cdf");
  check_lookup(cdf_in, u_in, row_in, validate);
  const c10::cuda::CUDAGuard guard(cdf_in.device());
  const at::Tensor cdf = cdf_in.contiguous(), guide = guide_in.contiguous(), nodes = nodes_in.contiguous();
  const at::Tensor u = u_in.contiguous();
  at::Tensor out = at::empty(u.sizes(), u.options().dtype(at::kLong));
  if (u.numel() == 0) return out;
  const at::Tensor row = row_in.has_value() ? row_in->contiguous().to(at::kLong) : at::Tensor();
  const int64_t per_row = cdf.dim() > 1 && !row.defined() ? u.size(-1) : u.numel();
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, u.scalar_type(), "inverse_cdf_cuda", [&] {
    inverse_kernel<scalar_t><<<grid_for(u.numel(), kThreads), kThreads, 0, stream>>>(
        forest_of(cdf, guide, nodes), u.const_data_ptr<scalar_t>(),
        row.defined() ? row.const_data_ptr<int64_t>() : nullptr, u.numel(), RowOf(per_row),
        out.mutable_data_ptr<int64_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

at::Tensor radix_forest_sample_cuda(const at::Tensor& cdf_in, const at::Tensor& guide_in, const at::Tensor& nodes_in,
                                    int64_t num_samples, std::optional<at::Generator> generator) {
  check_forest(cdf_in, guide_in, nodes_in, "radix_forest_sample");
  check_num_samples(num_samples);
  const c10::cuda::CUDAGuard guard(cdf_in.device());
  const at::Tensor cdf = cdf_in.contiguous(), guide = guide_in.contiguous(), nodes = nodes_in.contiguous();
  auto shape = cdf.sizes().vec();
  shape.back() = num_samples;
  at::Tensor out = at::empty(shape, cdf.options());
  const int64_t count = out.numel();
  if (count == 0) return out;
  // Each pair of samples reads one Philox block of its own subsequence: 4 draws.
  const auto philox = cuda_philox_state(generator, cdf.device().index(), 4);
  const auto stream = at::cuda::getCurrentCUDAStream();
  sample_kernel<<<grid_for((count + 1) / 2, kThreads), kThreads, 0, stream>>>(
      forest_of(cdf, guide, nodes), count, RowOf(num_samples), philox, out.mutable_data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) {
  m.impl("radix_forest", &radix_forest_cuda);
  m.impl("inverse_cdf", &inverse_cdf_cuda);
  m.impl("radix_forest_sample", &radix_forest_sample_cuda);
}

}  // namespace wrs::radix
