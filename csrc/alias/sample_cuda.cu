// Alias-table sampling on CUDA (alias_sample): the baseline sampler draws in i.i.d.
// order with random gathers; the sectioned samplers (sections.h) draw grouped by table
// section, staging each section in shared memory or reading it through L1.
#include "alias/alias_ops.h"
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace wrs::alias {
namespace {

constexpr int kThreads = 256;
// Pairs of output values, stored in one 16-byte (int64) or 8-byte (int32) access.
template <typename out_t> struct PairOf;
template <> struct PairOf<int64_t> { using type = longlong2; };
template <> struct PairOf<int32_t> { using type = int2; };

// Stores draws 2p and 2p + 1 where they fall in [e_begin, e_end), both in one access
// when both do (out is 16-byte aligned, so pair p's slot is too).
template <typename out_t>
__device__ inline void store_pair(out_t* out, int64_t p, int64_t e_begin, int64_t e_end, int64_t v0, int64_t v1) {
  const bool has0 = 2 * p >= e_begin && 2 * p < e_end;
  const bool has1 = 2 * p + 1 >= e_begin && 2 * p + 1 < e_end;
  if (has0 && has1) {
    reinterpret_cast<typename PairOf<out_t>::type*>(out)[p] = {static_cast<out_t>(v0), static_cast<out_t>(v1)};
  } else if (has0) {
    out[2 * p] = static_cast<out_t>(v0);
  } else if (has1) {
    out[2 * p + 1] = static_cast<out_t>(v1);
  }
}

// The bucket draws of pairs p0 + k * stride, k < K, from `buckets` buckets: pair p takes
// Philox block p, one half per draw.
template <int K>
__device__ inline void draw_pairs(const PhiloxSeed& seed, int64_t p0, int64_t stride, uint64_t buckets,
                                  BucketDraw* draw) {
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const uint4 r = philox_block_cuda(seed, static_cast<uint64_t>(p0 + k * stride));
    draw[2 * k] = draw_bucket(buckets, r.x, r.y);
    draw[2 * k + 1] = draw_bucket(buckets, r.z, r.w);
  }
}

// Baseline sampling: sample e uses half of Philox block e / 2, so one block serves two
// samples and the output depends only on (seed, offset), not on the grid. Each thread
// takes kPairs pairs per step and issues all their table loads before using
// any (the loads are random gathers: latency, not bandwidth, is what limits). kOneRow
// skips the 64-bit division that finds a sample's row in a batch.
constexpr int kPairs = 4;

template <typename out_t, bool kOneRow>
__global__ void __launch_bounds__(kThreads, 4)  // registers <= 64: 4 blocks per SM
    sample_kernel(const int64_t* table, int64_t n, int64_t num_samples, int64_t total,
                  at::PhiloxCudaState philox, out_t* out) {
  const PhiloxSeed seed = philox_seed(philox);
  const int64_t pairs = (total + 1) / 2;
  // A step covers pairs p0 + k * threads: each store instruction stays coalesced.
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p0 = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p0 < pairs;
       p0 += threads * kPairs) {
    BucketDraw draw[2 * kPairs];
    int64_t row[2 * kPairs];
    draw_pairs<kPairs>(seed, p0, threads, n, draw);
#pragma unroll
    for (int k = 0; k < 2 * kPairs; ++k) {
      const int64_t e = 2 * (p0 + (k / 2) * threads) + (k % 2);
      const int64_t* t = kOneRow ? table : table + (e / num_samples) * n;
      row[k] = e < total ? t[draw[k].bucket] : 0;
    }
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      store_pair(out, p0 + k * threads, 0, total, pick(draw[2 * k], row[2 * k], n),
                 pick(draw[2 * k + 1], row[2 * k + 1], n));
    }
  }
}

// ---- sectioned sampling (ordered=False; sections.h) -------------------------------------

// One thread per (row, section): walks the binomial tree to its section's count and offset.
__global__ void section_span_kernel(SectionGrid grid, int64_t rows, at::PhiloxCudaState philox,
                                    SectionSpan* spans) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= rows * grid.sections) return;
  const CurandStreams streams{philox_seed(philox)};
  spans[k] = section_span(grid, k / grid.sections, k % grid.sections, streams);
}

constexpr int kSharedThreads = 512;   // four 48 KB blocks per SM (measured best of 2-5)
constexpr int kSectionPairs = 2;
constexpr int kCachedThreads = 1024;  // one block per SM
// The cached method reserves shared memory it never touches, so that only one block
// fits per SM and its section owns the L1 (the paper's "limited" variant).
constexpr int kCachedReservedBytes = 64 * 1024;
constexpr int kCachedCarveoutPercent = 40;  // ~91 KB shared, the rest of the 256 KB is L1

// Copies a section of `len` buckets to shared memory (16-byte loads where aligned).
__device__ inline void stage_section(const int64_t* section, int64_t len, int64_t* staged) {
  if (reinterpret_cast<uintptr_t>(section) % 16 == 0) {
    for (int64_t i = threadIdx.x; i < len / 2; i += blockDim.x) {
      reinterpret_cast<longlong2*>(staged)[i] = reinterpret_cast<const longlong2*>(section)[i];
    }
    if (threadIdx.x == 0 && len % 2) staged[len - 1] = section[len - 1];
  } else {
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) staged[i] = section[i];
  }
  __syncthreads();
}

// Draws e in [e_begin, e_end) of the output, by the block, from the `len` buckets at
// `section` (bucket `first` of a row of `n`). Pairs [e_begin / 2, ceil(e_end / 2)) hold
// them; each thread takes kSectionPairs pairs per step, all loads issued before any is used.
template <typename out_t>
__device__ inline void draw_section(const int64_t* section, int64_t len, int64_t first, int64_t n, int64_t e_begin,
                                    int64_t e_end, const PhiloxSeed& seed, out_t* out) {
  const int64_t stride = blockDim.x;
  for (int64_t p0 = e_begin / 2 + threadIdx.x; 2 * p0 < e_end; p0 += stride * kSectionPairs) {
    BucketDraw draw[2 * kSectionPairs];
    int64_t bucket[2 * kSectionPairs];
    draw_pairs<kSectionPairs>(seed, p0, stride, len, draw);
#pragma unroll
    for (int k = 0; k < 2 * kSectionPairs; ++k) {
      const int64_t e = 2 * (p0 + (k / 2) * stride) + (k % 2);
      bucket[k] = e >= e_begin && e < e_end ? section[draw[k].bucket] : 0;
    }
#pragma unroll
    for (int k = 0; k < kSectionPairs; ++k) {
      store_pair(out, p0 + k * stride, e_begin, e_end, pick(draw[2 * k], bucket[2 * k], n, first),
                 pick(draw[2 * k + 1], bucket[2 * k + 1], n, first));
    }
  }
}

// Block b draws part b % parts of section b / parts. kStaged: the section is copied to
// shared memory first (coalesced), then every draw reads it there; otherwise draws read
// the table through L1. Draw e uses half e % 2 of Philox block e / 2, as the baseline.
template <typename out_t, bool kStaged>
__global__ void __launch_bounds__(kCachedThreads) sectioned_kernel(const int64_t* table, SectionGrid grid, int64_t parts, const SectionSpan* spans,
                                 at::PhiloxCudaState philox, out_t* out) {
  extern __shared__ int64_t staged[];
  const int64_t section_id = blockIdx.x / parts;
  const int64_t part = blockIdx.x % parts;
  const int64_t row = section_id / grid.sections;
  const int64_t first = (section_id % grid.sections) * grid.section_buckets;
  const int64_t len = min(grid.section_buckets, grid.buckets - first);
  const SectionSpan span = spans[section_id];
  const int64_t e0 = row * grid.num_samples + span.offset;
  const int64_t e_begin = e0 + part_begin(span.count, part, parts);
  const int64_t e_end = e0 + part_begin(span.count, part + 1, parts);
  if (e_begin == e_end) return;  // (the whole block) nothing drawn here
  const int64_t* section = table + row * grid.buckets + first;
  if (kStaged) {
    stage_section(section, len, staged);
    section = staged;
  }
  draw_section(section, len, first, grid.buckets, e_begin, e_end, philox_seed(philox), out);
}

template <typename out_t>
void launch_sectioned(const at::Tensor& table, int64_t rows, SampleMethod how, int64_t num_samples,
                      std::optional<at::Generator> generator, out_t* out) {
  const SectionGrid grid = section_grid(how, table.size(-1), num_samples);
  const int64_t parts = parts_per_section(grid);
  const int64_t sections = rows * grid.sections;
  TORCH_CHECK(sections * parts < (int64_t{1} << 31), "alias_sample: ", sections * parts,
              " sectioned blocks exceed the CUDA grid; use ordered=True");
  // Tree nodes take up to kNodeBlocks Philox blocks each; a sample pair takes one.
  const auto philox = cuda_philox_state(generator, table.device().index(), 4 * kNodeBlocks);
  const auto stream = at::cuda::getCurrentCUDAStream();
  at::Tensor spans = at::empty({sections * static_cast<int64_t>(sizeof(SectionSpan))},
                               table.options().dtype(at::kByte));
  auto* span_ptr = reinterpret_cast<SectionSpan*>(spans.mutable_data_ptr());
  section_span_kernel<<<ceil_div(sections, 128), 128, 0, stream>>>(grid, rows, philox, span_ptr);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const int blocks = static_cast<int>(sections * parts);
  // Attributes are per device, so they are set on every call (a cheap driver call).
  const bool staged = how == SampleMethod::kShared;
  const auto kernel = staged ? &sectioned_kernel<out_t, true> : &sectioned_kernel<out_t, false>;
  const int bytes = staged ? static_cast<int>(grid.section_buckets * sizeof(int64_t)) : kCachedReservedBytes;
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                      staged ? cudaSharedmemCarveoutMaxShared : kCachedCarveoutPercent));
  kernel<<<blocks, staged ? kSharedThreads : kCachedThreads, bytes, stream>>>(table.const_data_ptr<int64_t>(), grid,
                                                                              parts, span_ptr, philox, out);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename out_t>
void launch_baseline(const at::Tensor& table, int64_t num_samples, int64_t total,
                     std::optional<at::Generator> generator, out_t* out) {
  // Each pair of samples reads one Philox block of its own subsequence: 4 draws.
  const auto philox = cuda_philox_state(generator, table.device().index(), 4);
  const int64_t pairs = (total + 1) / 2;
  const int blocks = grid_for(ceil_div(pairs, kPairs), kThreads);
  const auto stream = at::cuda::getCurrentCUDAStream();
  if (total == num_samples) {
    sample_kernel<out_t, true><<<blocks, kThreads, 0, stream>>>(table.const_data_ptr<int64_t>(), table.size(-1),
                                                                num_samples, total, philox, out);
  } else {
    sample_kernel<out_t, false><<<blocks, kThreads, 0, stream>>>(table.const_data_ptr<int64_t>(), table.size(-1),
                                                                 num_samples, total, philox, out);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor alias_sample_cuda(const at::Tensor& table_in, int64_t num_samples, bool ordered, c10::string_view method,
                             std::optional<at::ScalarType> dtype, std::optional<at::Generator> generator) {
  check_table(table_in);
  check_num_samples(num_samples);
  const at::ScalarType out_type = sample_dtype(dtype);
  const c10::cuda::CUDAGuard guard(table_in.device());
  const at::Tensor table = table_in.contiguous();
  const int64_t n = table.size(-1);
  const int64_t rows = table.numel() / n;
  const SampleMethod how = sample_method(ordered, method, n, num_samples, rows);
  at::Tensor out = at::empty(sample_shape(table, num_samples), table.options().dtype(out_type));
  const int64_t total = out.numel();
  if (total == 0) return out;
  auto run = [&](auto* o) {
    if (how == SampleMethod::kBaseline) {
      launch_baseline(table, num_samples, total, generator, o);
    } else {
      launch_sectioned(table, rows, how, num_samples, generator, o);
    }
  };
  if (out_type == at::kLong) {
    run(out.mutable_data_ptr<int64_t>());
  } else {
    run(out.mutable_data_ptr<int32_t>());
  }
  return out;
}

// ---- segments (_alias_sample_segments, alias_ops.h) ------------------------------------
// One pass over the run of buckets serves every segment: a block per (section, part)
// stages its section once and draws each segment's share of it, so k segments read the
// table once rather than k times.

// One thread per (segment, section): segment a's count and offset in the section.
__global__ void segment_span_kernel(SectionGrid grid, int segments, SegmentStarts starts, at::PhiloxCudaState philox,
                                    SectionSpan* spans) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= segments * grid.sections) return;
  const int64_t a = k / grid.sections;
  SectionGrid mine = grid;
  mine.num_samples = starts.at[a + 1] - starts.at[a];
  spans[k] = section_span(mine, a, k % grid.sections, CurandStreams{philox_seed(philox)});
}

// Block b: part b % parts of section b / parts of the run at bucket `begin` of a row of n.
template <typename out_t>
__global__ void __launch_bounds__(kSharedThreads, 3)  // registers <= 42: three blocks per SM, as sectioned_kernel
    segments_kernel(const int64_t* table, int64_t n, int64_t begin, SectionGrid grid, int64_t parts, int segments,
                    SegmentStarts starts, const SectionSpan* spans, at::PhiloxCudaState philox, out_t* out) {
  extern __shared__ int64_t staged[];
  const int64_t section = blockIdx.x / parts;
  const int64_t part = blockIdx.x % parts;
  const int64_t first = section * grid.section_buckets;
  const int64_t len = min(grid.section_buckets, grid.buckets - first);
  int any = 0;
  for (int a = threadIdx.x; a < segments; a += blockDim.x) {
    const int64_t count = spans[a * grid.sections + section].count;
    any |= part_begin(count, part + 1, parts) > part_begin(count, part, parts);
  }
  if (!__syncthreads_or(any)) return;  // (the whole block) nothing drawn here
  stage_section(table + begin + first, len, staged);
  const PhiloxSeed seed = philox_seed(philox);
  for (int a = 0; a < segments; ++a) {
    const SectionSpan span = spans[a * grid.sections + section];
    const int64_t e0 = starts.at[a] + span.offset;
    draw_section(staged, len, begin + first, n, e0 + part_begin(span.count, part, parts),
                 e0 + part_begin(span.count, part + 1, parts), seed, out);
  }
}

at::Tensor alias_sample_segments_cuda(const at::Tensor& table_in, at::IntArrayRef counts, int64_t begin, int64_t end,
                                      std::optional<at::ScalarType> dtype, std::optional<at::Generator> generator) {
  const SegmentPlan plan = segment_plan(table_in, counts, begin, end);
  const at::ScalarType out_type = sample_dtype(dtype);
  const c10::cuda::CUDAGuard guard(table_in.device());
  const at::Tensor table = table_in.contiguous();
  at::Tensor out = at::empty({plan.total}, table.options().dtype(out_type));
  if (plan.total == 0) return out;
  const SectionGrid grid = section_grid(SampleMethod::kShared, plan.end - plan.begin, plan.total);
  const int64_t parts = parts_per_section(grid);
  TORCH_CHECK(grid.sections * parts < (int64_t{1} << 31), "_alias_sample_segments: ", grid.sections * parts,
              " sectioned blocks exceed the CUDA grid");
  const auto philox = cuda_philox_state(generator, table.device().index(), 4 * kNodeBlocks);
  const auto stream = at::cuda::getCurrentCUDAStream();
  const int64_t span_count = plan.segments * grid.sections;
  at::Tensor spans = at::empty({span_count * static_cast<int64_t>(sizeof(SectionSpan))}, table.options().dtype(at::kByte));
  auto* span_ptr = reinterpret_cast<SectionSpan*>(spans.mutable_data_ptr());
  segment_span_kernel<<<ceil_div(span_count, 128), 128, 0, stream>>>(grid, plan.segments, plan.starts, philox, span_ptr);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const int bytes = static_cast<int>(grid.section_buckets * sizeof(int64_t));
  auto run = [&](auto* o) {
    using out_t = std::remove_pointer_t<decltype(o)>;
    const auto kernel = &segments_kernel<out_t>;
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                        cudaSharedmemCarveoutMaxShared));
    kernel<<<static_cast<int>(grid.sections * parts), kSharedThreads, bytes, stream>>>(
        table.const_data_ptr<int64_t>(), table.numel(), plan.begin, grid, parts, plan.segments, plan.starts, span_ptr,
        philox, o);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  if (out_type == at::kLong) {
    run(out.mutable_data_ptr<int64_t>());
  } else {
    run(out.mutable_data_ptr<int32_t>());
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) {
  m.impl("alias_sample", &alias_sample_cuda);
  m.impl("_alias_sample_segments", &alias_sample_segments_cuda);
}

}  // namespace wrs::alias
