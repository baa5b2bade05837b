// Alias tables on CUDA. The build runs entirely on the device (no host round trip):
//   1. row sums in float64 and value checks (CUB reduce),
//   2. quantize, classify and scan the class prefixes by row (CUB scan-by-key),
//   3. scatter into light and heavy arrays that carry their merge keys,
//   4. split + pack: each thread finds its section's start on the merge path and packs.
// Only validate=True reads one status word back to raise a RuntimeError.
#include "alias/alias_ops.h"
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_reduce.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <torch/library.h>

namespace wrs::alias {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kSection = 128;  // merge steps per pack thread

struct RowSum {
  double sum;
  uint32_t flags;
};

struct AddRowSum {
  __host__ __device__ RowSum operator()(const RowSum& a, const RowSum& b) const {
    return RowSum{a.sum + b.sum, a.flags | b.flags};
  }
};

template <typename scalar_t>
struct ReadWeight {
  const scalar_t* w;
  __host__ __device__ RowSum operator()(int64_t k) const {
    const double x = static_cast<double>(w[k]);
    return RowSum{x, weight_flags(x)};
  }
};

struct RowStart {
  int64_t n;
  __host__ __device__ int64_t operator()(int64_t b) const { return b * n; }
};

struct RowOf {
  int64_t n;
  __host__ __device__ int64_t operator()(int64_t k) const { return k / n; }
};

template <typename scalar_t>
struct Classify {
  const scalar_t* w;
  const RowScale* scale;
  int64_t n;
  __host__ __device__ ClassPrefix operator()(int64_t k) const {
    return class_of(quantize(static_cast<double>(w[k]), scale[k / n], n));
  }
};

struct AddClassPrefix {
  __host__ __device__ ClassPrefix operator()(const ClassPrefix& a, const ClassPrefix& b) const {
    return a + b;
  }
};

__global__ void row_scale_kernel(const RowSum* sums, int64_t rows, int64_t n, RowScale* scale,
                                 uint32_t* status) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= rows) return;
  const RowSum s = sums[b];
  uint32_t flags = s.flags;
  if (s.sum == 0) flags |= kRowZeroSum;
  if (!isfinite(s.sum)) flags |= kRowSumOverflow;
  if (flags) atomicOr(status, flags);
  scale[b] = row_scale(s.sum, n);
}

struct Arrays {
  LightItem* light;
  uint64_t* deficit_before;
  uint32_t* heavy;
  uint64_t* excess_through;
  int64_t* lights;          // per row
  uint64_t* deficit_total;  // per row
  int64_t n;

  __device__ PartitionedRow row(int64_t b) const {
    const int64_t base = b * n;
    return PartitionedRow{light + base,  deficit_before + base, heavy + base,
                          excess_through + base, lights[b], n - lights[b],
                          deficit_total[b]};
  }
};

template <typename scalar_t>
__global__ void scatter_kernel(Classify<scalar_t> classify, const ClassPrefix* before,
                               int64_t total, Arrays a) {
  const int64_t n = a.n;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = k / n;
    const int64_t local = k - b * n;
    const uint64_t q = quantize(static_cast<double>(classify.w[k]), classify.scale[b], n);
    const ClassPrefix cls = class_of(q);
    const ClassPrefix p = before[k];
    if (cls.lights) {
      a.light[b * n + p.lights] = LightItem{static_cast<uint32_t>(local), static_cast<uint32_t>(q)};
      a.deficit_before[b * n + p.lights] = p.deficit;
    } else {
      const int64_t h = local - p.lights;
      a.heavy[b * n + h] = static_cast<uint32_t>(local);
      a.excess_through[b * n + h] = p.excess + cls.excess;
    }
    if (local == n - 1) {
      a.lights[b] = p.lights + cls.lights;
      a.deficit_total[b] = p.deficit + cls.deficit;
    }
  }
}

__global__ void pack_kernel(Arrays a, int64_t rows, int64_t* table) {
  const int64_t n = a.n;
  const int64_t per_row = (n + kSection - 1) / kSection;
  for (int64_t s = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; s < rows * per_row;
       s += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = s / per_row;
    const int64_t begin = (s - b * per_row) * kSection;
    pack_merge_steps(a.row(b), begin, begin + kSection < n ? begin + kSection : n, table + b * n);
  }
}

template <typename scalar_t>
void build_rows(const at::Tensor& w, int64_t rows, int64_t n, bool validate, at::Tensor& table) {
  const auto stream = at::cuda::getCurrentCUDAStream();
  const auto opts = w.options();
  const int64_t total = rows * n;
  const scalar_t* wp = w.const_data_ptr<scalar_t>();
  auto bytes = [&](int64_t count, size_t size) {
    return at::empty({count * static_cast<int64_t>(size)}, opts.dtype(at::kByte));
  };

  // 1. Row sums (float64) and value flags.
  at::Tensor sums = bytes(rows, sizeof(RowSum));
  auto* sums_p = reinterpret_cast<RowSum*>(sums.data_ptr());
  auto values = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0),
                                                ReadWeight<scalar_t>{wp});
  if (rows == 1) {
    cub_call([&](void* tmp, size_t& tmp_bytes) {
      return cub::DeviceReduce::Reduce(tmp, tmp_bytes, values, sums_p, total, AddRowSum{},
                                       RowSum{0.0, 0u}, stream);
    });
  } else {
    auto starts = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), RowStart{n});
    cub_call([&](void* tmp, size_t& tmp_bytes) {
      return cub::DeviceSegmentedReduce::Reduce(tmp, tmp_bytes, values, sums_p, rows, starts,
                                                starts + 1, AddRowSum{}, RowSum{0.0, 0u}, stream);
    });
  }
  at::Tensor scale = bytes(rows, sizeof(RowScale));
  auto* scale_p = reinterpret_cast<RowScale*>(scale.data_ptr());
  at::Tensor status = at::zeros({1}, opts.dtype(at::kInt));
  row_scale_kernel<<<ceil_div(rows, kThreads), kThreads, 0, stream>>>(
      sums_p, rows, n, scale_p, reinterpret_cast<uint32_t*>(status.data_ptr<int>()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (validate) {
    TORCH_CHECK(!stream_is_capturing(stream),
                "alias_table: validate=True reads the value checks back to the host, which "
                "CUDA-graph capture forbids; pass validate=False when capturing");
    raise_weight_flags(static_cast<uint32_t>(status.item<int>()), "alias_table", "weights");
  }

  // 2. Class prefixes, exclusive within each row.
  const Classify<scalar_t> classify{wp, scale_p, n};
  auto classes = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), classify);
  auto keys = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), RowOf{n});
  at::Tensor prefix = bytes(total, sizeof(ClassPrefix));
  auto* prefix_p = reinterpret_cast<ClassPrefix*>(prefix.data_ptr());
  cub_call([&](void* tmp, size_t& tmp_bytes) {
    return cub::DeviceScan::ExclusiveScanByKey(tmp, tmp_bytes, keys, classes, prefix_p,
                                               AddClassPrefix{}, ClassPrefix{0, 0, 0}, total,
                                               cuda::std::equal_to<>{}, stream);
  });

  // 3. Partition into light and heavy arrays.
  at::Tensor light = bytes(total, sizeof(LightItem));
  at::Tensor deficit = bytes(total, sizeof(uint64_t));
  at::Tensor heavy = bytes(total, sizeof(uint32_t));
  at::Tensor excess = bytes(total, sizeof(uint64_t));
  at::Tensor lights = bytes(rows, sizeof(int64_t));
  at::Tensor deficit_total = bytes(rows, sizeof(uint64_t));
  const Arrays arrays{reinterpret_cast<LightItem*>(light.data_ptr()),
                      reinterpret_cast<uint64_t*>(deficit.data_ptr()),
                      reinterpret_cast<uint32_t*>(heavy.data_ptr()),
                      reinterpret_cast<uint64_t*>(excess.data_ptr()),
                      reinterpret_cast<int64_t*>(lights.data_ptr()),
                      reinterpret_cast<uint64_t*>(deficit_total.data_ptr()),
                      n};
  scatter_kernel<<<grid_for(total, kThreads), kThreads, 0, stream>>>(classify, prefix_p, total,
                                                                     arrays);
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  // 4. Split + pack.
  const int64_t sections = rows * ((n + kSection - 1) / kSection);
  pack_kernel<<<grid_for(sections, kThreads), kThreads, 0, stream>>>(
      arrays, rows, table.mutable_data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor alias_table_cuda(const at::Tensor& weights, bool validate) {
  check_weights(weights);
  const c10::cuda::CUDAGuard guard(weights.device());
  const at::Tensor w = weights.contiguous();
  at::Tensor table = at::empty(w.sizes(), w.options().dtype(at::kLong));
  const int64_t n = w.size(-1);
  const int64_t rows = w.numel() / n;
  if (rows == 0) return table;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, w.scalar_type(), "alias_table_cuda",
                                  [&] { build_rows<scalar_t>(w, rows, n, validate, table); });
  return table;
}

__global__ void sample_kernel(const int64_t* table, int64_t n, int64_t num_samples, int64_t total,
                              at::PhiloxCudaState philox, int64_t* out) {
  const int64_t pairs = (total + 1) / 2;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < pairs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    auto rng = philox_stream(philox, static_cast<uint64_t>(p));
    const uint4 r = curand4(&rng);
    const int64_t e = 2 * p;
    out[e] = sample_bucket(table + (e / num_samples) * n, n, r.x, r.y);
    if (e + 1 < total) {
      out[e + 1] = sample_bucket(table + ((e + 1) / num_samples) * n, n, r.z, r.w);
    }
  }
}

at::Tensor alias_sample_cuda(const at::Tensor& table_in, int64_t num_samples,
                             std::optional<at::Generator> generator) {
  check_table(table_in);
  check_num_samples(num_samples);
  const c10::cuda::CUDAGuard guard(table_in.device());
  const at::Tensor table = table_in.contiguous();
  at::Tensor out = at::empty(sample_shape(table, num_samples), table.options());
  const int64_t total = out.numel();
  if (total == 0) return out;
  // Each pair of samples reads one Philox block of its own subsequence: 4 draws.
  const auto philox = cuda_philox_state(generator, table.device().index(), 4);
  const int64_t pairs = (total + 1) / 2;
  sample_kernel<<<grid_for(pairs, kThreads), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      table.const_data_ptr<int64_t>(), table.size(-1), num_samples, total, philox,
      out.mutable_data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) {
  m.impl("alias_table", &alias_table_cuda);
  m.impl("alias_sample", &alias_sample_cuda);
}

}  // namespace wrs::alias
