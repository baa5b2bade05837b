// Radix forests on CUDA. The build is load-balanced over items, never over trees:
//   1. float64 row sums and value checks (common/row_sums.cuh), per-row quantization,
//   2. one CUB exclusive scan of the quantized weights of all rows (exact uint64 sums),
//   3. one thread per item: its cdf value (normalized once, here), the gap code to its
//      right neighbour and the last item of each cell; then one thread per item again for
//      Algorithm 1 (merge upwards with one atomicExch per merge) on the 2-byte gap codes,
//   4. one CUB scan over all cells: each cell learns the last item before it, which is
//      the interval covering it when it holds no key, and its first item's node when it does.
// Only validate=True reads anything back (one status word).
#include "radix_forest/radix_forest_ops.h"
#include "common/quantize.h"  // the shared weight quantization
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

__global__ void row_scale_kernel(const RowSum* sums, int64_t rows, wrs::RowScale* scale, uint32_t* status) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  const uint32_t flags = row_flags(sums[r].sum, sums[r].flags);
  if (flags) atomicOr(status, flags);
  scale[r] = wrs::row_scale(sums[r].sum, kQuantizeN);
}

// Quantized weight of flat item k; 0 past the end, so the scan's last output is the total.
template <typename scalar_t>
struct QuantizedWeight {
  const scalar_t* w;
  const wrs::RowScale* scale;
  RowOf row_of;
  int64_t items;
  __device__ uint64_t operator()(int64_t k) const {
    if (k >= items) return 0;
    return wrs::quantize(static_cast<double>(w[k]), scale[row_of(k)], kQuantizeN);
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
  __device__ uint64_t operator()(uint64_t* p, uint64_t v) const {
    return atomicExch(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  }
};

// One thread per item, blocks in index order: the items a block touches (and their
// neighbours' cdf, nodes and exchange slots) are contiguous and touched once, so lines
// are complete in L2 when written back. (A grid-stride loop over 10^8 items spread each
// block's items over the whole array and ran ~10x slower, DRAM-latency bound.)
template <typename Body>
__device__ inline void for_each_item(int64_t items, const Body& body) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k < items) body(k);
}

__global__ void __launch_bounds__(kThreads)
    cdf_kernel(const uint64_t* sums, int64_t items, int64_t n, int cell_bits, RowOf row_of, int64_t* cdf,
               uint16_t* gaps, int32_t* last_in_cell) {
  const int shift = kFractionBits - cell_bits;
  for_each_item(items, [&](int64_t k) {
    const int64_t r = row_of(k), i = k - r * n;
    const RowKeys key(sums, r, n);
    const int64_t mine = key(i);
    cdf[k] = mine;
    const uint16_t gap = i + 1 < n ? gap_code(mine, key(i + 1), i, shift) : kGapBoundary;
    gaps[k] = gap;
    if (gap == kGapBoundary) last_in_cell[(r << cell_bits) + (mine >> shift)] = static_cast<int32_t>(i);
  });
}

__global__ void __launch_bounds__(kThreads)
    merge_kernel(const uint16_t* gaps, const int64_t* cdf, int64_t items, int64_t n, RowOf row_of, int64_t* nodes,
                 uint64_t* waiting) {
  for_each_item(items, [&](int64_t k) {
    const int64_t r = row_of(k);
    const uint16_t* row_gaps = gaps + r * n;
    merge_up(k - r * n, n, [&](int64_t a) { return row_gaps[a]; }, cdf + r * n, nodes + 2 * r * n, waiting + r * n,
             AtomicExchange{});
  });
}

// The guide scan runs over one 64-bit word per cell, summarising a run of cells within
// one row (from its last row start): bit 63 says the run holds a row start; bits 62-32
// hold 1 + the largest last-item over all its cells but the last (0: none); bits 31-0
// hold 1 + the last cell's own last item (0: the cell holds no key).
struct CellRun {
  static __host__ __device__ uint64_t make(bool starts_row, int64_t before, int64_t own) {
    return (uint64_t(starts_row) << 63) | (uint64_t(before + 1) << 32) | uint64_t(own + 1);
  }
  static __host__ __device__ bool starts_row(uint64_t v) { return v >> 63; }
  static __host__ __device__ int64_t before(uint64_t v) { return int64_t((v >> 32) & 0x7FFFFFFF) - 1; }
  static __host__ __device__ int64_t own(uint64_t v) { return int64_t(v & 0xFFFFFFFF) - 1; }
};

struct ConcatCellRuns {
  __host__ __device__ uint64_t operator()(uint64_t a, uint64_t b) const {
    if (CellRun::starts_row(b)) return b;
    int64_t m = CellRun::before(a) > CellRun::own(a) ? CellRun::before(a) : CellRun::own(a);
    m = m > CellRun::before(b) ? m : CellRun::before(b);
    return CellRun::make(CellRun::starts_row(a), m, CellRun::own(b));
  }
};

struct CellRunOf {
  const int32_t* last_in_cell;
  int64_t cells_mask;
  __host__ __device__ uint64_t operator()(int64_t c) const {
    return CellRun::make((c & cells_mask) == 0, -1, last_in_cell[c]);
  }
};

// A cell holding keys points at its first item's node (one past the last item before it);
// an empty one lies inside the interval of the last item before it.
struct GuideEntry {
  __host__ __device__ int32_t operator()(uint64_t run) const {
    const int64_t before = CellRun::before(run);
    if (CellRun::own(run) >= 0) return static_cast<int32_t>(before + 1);
    return ~static_cast<int32_t>(before > 0 ? before : 0);
  }
};

void raise_if_flagged(const at::Tensor& status) {
  check_host_read_allowed(status, "radix_forest", "the weight checks");
  raise_weight_flags(static_cast<uint32_t>(status.item<int>()), "radix_forest", "weights");
}

template <typename scalar_t>
void build_cuda(const scalar_t* w, int64_t rows, int64_t n, int bits, bool validate, int64_t* cdf, int32_t* guide,
                int64_t* nodes, const at::TensorOptions& opts, cudaStream_t stream) {
  std::vector<at::Tensor> keep;  // scratch from torch's caching allocator
  const int64_t items = rows * n;
  const int64_t cells = rows << bits;
  const RowOf row_of(n);

  // 1. Row sums, checks and quantization scales.
  const RowSum* sums = row_sums_cuda(w, rows, n, keep, opts, stream);
  auto* scale = scratch<wrs::RowScale>(keep, opts, rows);
  const at::Tensor status = zeroed_status_word(opts, stream);
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
  auto* waiting = scratch<uint64_t>(keep, opts, items);
  auto* last_in_cell = scratch<int32_t>(keep, opts, cells);
  C10_CUDA_CHECK(cudaMemsetAsync(waiting, 0xFF, items * sizeof(uint64_t), stream));  // kNoSibling
  C10_CUDA_CHECK(cudaMemsetAsync(last_in_cell, 0xFF, cells * sizeof(int32_t), stream));
  auto* gaps = scratch<uint16_t>(keep, opts, items);
  cdf_kernel<<<ceil_div(items, kThreads), kThreads, 0, stream>>>(prefix, items, n, bits, row_of, cdf, gaps,
                                                                   last_in_cell);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  merge_kernel<<<ceil_div(items, kThreads), kThreads, 0, stream>>>(gaps, cdf, items, n, row_of, nodes, waiting);
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
  at::Tensor nodes = at::empty(nodes_shape(w), w.options().dtype(at::kLong));
  const int64_t n = w.size(-1);
  const int64_t rows = w.numel() / n;
  if (rows == 0) return {cdf, guide, nodes};
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, w.scalar_type(), "radix_forest_cuda", [&] {
    build_cuda(w.const_data_ptr<scalar_t>(), rows, n, bits, validate, cdf.mutable_data_ptr<int64_t>(),
               guide.mutable_data_ptr<int32_t>(), nodes.mutable_data_ptr<int64_t>(), w.options(), stream);
  });
  return {cdf, guide, nodes};
}

// ---- lookups -----------------------------------------------------------------------------

struct Forest {
  const int32_t* guide;
  const int64_t* nodes;
  int64_t rows, n;
  int cell_bits;
};

// Contiguous nodes on a 16-byte boundary (a lookup step is one 16-byte load).
at::Tensor aligned_nodes(const at::Tensor& nodes) {
  const at::Tensor c = nodes.contiguous();
  return reinterpret_cast<uintptr_t>(c.const_data_ptr()) % 16 == 0 ? c : c.clone();
}

Forest forest_of(const at::Tensor& cdf, const at::Tensor& guide, const at::Tensor& nodes) {
  const ForestShape f = forest_shape(cdf, guide);
  return Forest{guide.const_data_ptr<int32_t>(), nodes.const_data_ptr<int64_t>(), f.rows, f.n, f.cell_bits};
}

// Lookups in flight per thread: independent load chains hide the latency of each.
constexpr int kLookups = 4;

// Looks up keys x[k] in forest rows row[k] and stores the indices at out[e[k]] (those
// below count).
__device__ inline void lookup_and_store(const Forest& f, const int64_t (&e)[kLookups], const int64_t (&x)[kLookups],
                                        const int64_t (&row)[kLookups], int64_t count, int64_t* out) {
  int64_t i[kLookups];
  const int32_t* guide[kLookups];
  const int64_t* nodes[kLookups];
#pragma unroll
  for (int k = 0; k < kLookups; ++k) {
    const int64_t r = row[k] < 0 ? 0 : (row[k] < f.rows ? row[k] : f.rows - 1);
    guide[k] = f.guide + (r << f.cell_bits);
    nodes[k] = f.nodes + 2 * r * f.n;
  }
  lookup<kLookups>(x, guide, nodes, f.n, kFractionBits - f.cell_bits, i);
#pragma unroll
  for (int k = 0; k < kLookups; ++k) {
    if (e[k] < count) out[e[k]] = i[k];
  }
}

// u[e] looked up in forest row[e] (row given), or e / per_row. A thread takes elements
// e0 + k * threads, so every load and store instruction is coalesced across the warp.
// kOneRow (one forest) skips the row arithmetic.
template <typename scalar_t, bool kOneRow>
__global__ void __launch_bounds__(kThreads)
    inverse_kernel(Forest forest, const scalar_t* u, const int64_t* row, int64_t count, RowOf row_of, int64_t* out) {
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e0 = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e0 < count;
       e0 += threads * kLookups) {
    int64_t e[kLookups], x[kLookups], r[kLookups];
#pragma unroll
    for (int k = 0; k < kLookups; ++k) {
      e[k] = e0 + k * threads;
      const bool valid = e[k] < count;
      x[k] = valid ? key_of(static_cast<double>(u[e[k]])) : 0;
      r[k] = kOneRow || !valid ? 0 : (row ? row[e[k]] : row_of(e[k]));
    }
    lookup_and_store(forest, e, x, r, count, out);
  }
}

// Samples 2p and 2p + 1 use the two halves of Philox block p (as on the CPU, and as the
// alias sampler does); a thread takes pairs p0 and p0 + threads.
template <bool kOneRow>
__global__ void __launch_bounds__(kThreads)
    sample_kernel(Forest forest, int64_t count, RowOf row_of, at::PhiloxCudaState philox, int64_t* out) {
  const PhiloxSeed seed = philox_seed(philox);
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t pairs = (count + 1) / 2;
  for (int64_t p0 = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p0 < pairs;
       p0 += threads * (kLookups / 2)) {
    int64_t e[kLookups], x[kLookups], r[kLookups];
#pragma unroll
    for (int k = 0; k < kLookups; k += 2) {
      const int64_t p = p0 + (k / 2) * threads;
      const uint4 b = philox_block_cuda(seed, static_cast<uint64_t>(p));
      e[k] = 2 * p;
      e[k + 1] = 2 * p + 1;
      x[k] = key_of_bits(b.x, b.y);
      x[k + 1] = key_of_bits(b.z, b.w);
      r[k] = kOneRow || e[k] >= count ? 0 : row_of(e[k]);
      r[k + 1] = kOneRow || e[k + 1] >= count ? 0 : row_of(e[k + 1]);
    }
    lookup_and_store(forest, e, x, r, count, out);
  }
}

at::Tensor inverse_cdf_cuda(const at::Tensor& cdf_in, const at::Tensor& guide_in, const at::Tensor& nodes_in,
                            const at::Tensor& u_in, const std::optional<at::Tensor>& row_in, bool validate) {
  check_forest(cdf_in, guide_in, nodes_in, "inverse_cdf");
  check_lookup(cdf_in, u_in, row_in, validate);
  const c10::cuda::CUDAGuard guard(cdf_in.device());
  const at::Tensor cdf = cdf_in.contiguous(), guide = guide_in.contiguous(), nodes = aligned_nodes(nodes_in);
  const at::Tensor u = u_in.contiguous();
  at::Tensor out = at::empty(u.sizes(), u.options().dtype(at::kLong));
  if (u.numel() == 0) return out;
  const at::Tensor row = row_in.has_value() ? row_in->contiguous().to(at::kLong) : at::Tensor();
  const int64_t per_row = cdf.dim() > 1 && !row.defined() ? u.size(-1) : u.numel();
  const Forest forest = forest_of(cdf, guide, nodes);
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, u.scalar_type(), "inverse_cdf_cuda", [&] {
    const auto kernel = forest.rows == 1 ? inverse_kernel<scalar_t, true> : inverse_kernel<scalar_t, false>;
    kernel<<<grid_for(ceil_div(u.numel(), kLookups), kThreads), kThreads, 0, stream>>>(
        forest, u.const_data_ptr<scalar_t>(), row.defined() ? row.const_data_ptr<int64_t>() : nullptr, u.numel(),
        RowOf(per_row), out.mutable_data_ptr<int64_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

at::Tensor radix_forest_sample_cuda(const at::Tensor& cdf_in, const at::Tensor& guide_in, const at::Tensor& nodes_in,
                                    int64_t num_samples, std::optional<at::Generator> generator) {
  check_forest(cdf_in, guide_in, nodes_in, "radix_forest_sample");
  check_num_samples(num_samples);
  const c10::cuda::CUDAGuard guard(cdf_in.device());
  const at::Tensor cdf = cdf_in.contiguous(), guide = guide_in.contiguous(), nodes = aligned_nodes(nodes_in);
  at::Tensor out = at::empty(sample_shape(cdf, num_samples), cdf.options());
  const int64_t count = out.numel();
  if (count == 0) return out;
  // Each pair of samples reads one Philox block of its own subsequence: 4 draws.
  const auto philox = cuda_philox_state(generator, cdf.device().index(), 4);
  const auto stream = at::cuda::getCurrentCUDAStream();
  const Forest forest = forest_of(cdf, guide, nodes);
  const auto kernel = forest.rows == 1 ? sample_kernel<true> : sample_kernel<false>;
  kernel<<<grid_for(ceil_div((count + 1) / 2, kLookups / 2), kThreads), kThreads, 0, stream>>>(
      forest, count, RowOf(num_samples), philox, out.mutable_data_ptr<int64_t>());
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
