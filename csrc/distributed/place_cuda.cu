// _ordered_labels, _ordered_place and _ordered_fill on CUDA (place.h states the law): a
// block of 256 threads per kPlaceBlock positions. Labels are counted, and placed, a warp's
// peers at a time (__match_any_sync): a block's counts in shared memory take one update
// per label a warp holds, not one per position.
#include "alias/alias.h"
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

// Up to kFewParts parts, each thread counts its labels in registers and a warp adds them
// up once (one REDUX a part); more parts, a warp's peers at a time (__match_any_sync).
constexpr int kFewParts = 8;

template <bool kFew>
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
  unsigned few[kFewParts] = {};
  // A thread labels positions t and t + 1 (t even) of one Philox block a round.
  for (int r = 0; r < kRounds / 2; ++r) {
    const int64_t t = blockIdx.x * kPlaceBlock + 2 * (r * kThreads + threadIdx.x);
    int p[2] = {kNoLabel, kNoLabel};
    if (t < count) {
      const uint4 b = philox_block_cuda(seed, static_cast<uint64_t>(t / 2));
      const uint32_t w[4] = {b.x, b.y, b.z, b.w};
      p[0] = label_of(position_uniform(w, t), c, parts);
      if (t + 1 < count) {
        p[1] = label_of(position_uniform(w, t + 1), c, parts);
        reinterpret_cast<uchar2*>(labels)[t / 2] = make_uchar2(static_cast<uint8_t>(p[0]), static_cast<uint8_t>(p[1]));
      } else {
        labels[t] = static_cast<uint8_t>(p[0]);
      }
    }
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      if (kFew) {
#pragma unroll
        for (int q = 0; q < kFewParts; ++q) few[q] += p[k] == q;
      } else {
        const unsigned peers = __match_any_sync(kAll, p[k]);
        if (p[k] != kNoLabel && lane == __ffs(peers) - 1) {
          atomicAdd(&counts[p[k]], static_cast<unsigned long long>(__popc(peers)));
        }
      }
    }
  }
  if (kFew) {
#pragma unroll
    for (int q = 0; q < kFewParts; ++q) {
      const unsigned total = __reduce_add_sync(kAll, few[q]);
      if (q < parts && lane == 0 && total) atomicAdd(&counts[q], static_cast<unsigned long long>(total));
    }
  }
  __syncthreads();
  for (int p = threadIdx.x; p < parts; p += kThreads) {
    block_counts[blockIdx.x * static_cast<int64_t>(parts) + p] = static_cast<int64_t>(counts[p]);
  }
}

// Where positions labelled `part` draw from in _ordered_fill: this shard's alias table,
// position t as alias_sample's baseline draw t (half t % 2 of Philox block t / 2).
// part -1: no position draws here (_ordered_place).
struct OwnTable {
  const int64_t* table;
  int64_t buckets;
  int part;
};

// Warp w of a block places positions [w * kPerWarp, (w + 1) * kPerWarp) of the block's
// kPlaceBlock, 32 consecutive a round. Position t's draw is its part's start in the block,
// plus that part's count in the earlier warps, in the warp's earlier rounds and among its
// earlier peers of the round, plus the part's offset (none without `offsets`). The ranks
// come first (shared-memory counts, two block barriers in all), then every load of a
// thread (gathers, and the table draws of the own part) is issued before any store, so
// each thread keeps kPerLane loads in flight.
constexpr int kPerWarp = static_cast<int>(kPlaceBlock / kWarps);
constexpr int kPerLane = kPerWarp / 32;

template <typename src_t, typename out_t>
__global__ void __launch_bounds__(kThreads)
    place_kernel(const src_t* grouped, int64_t grouped_n, const uint8_t* labels, const int64_t* start,
                 const int64_t* offsets, int parts, int64_t n, OwnTable own, at::PhiloxCudaState philox, out_t* out) {
  __shared__ long long next[kMaxParts];
  __shared__ long long shift[kMaxParts];
  __shared__ unsigned seen[kWarps][kMaxParts];  // a warp's counts, then the earlier warps'
  for (int p = threadIdx.x; p < parts; p += kThreads) {
    next[p] = start[blockIdx.x * static_cast<int64_t>(parts) + p];
    shift[p] = offsets != nullptr ? offsets[p] : 0;
  }
  for (int i = threadIdx.x; i < kWarps * kMaxParts; i += kThreads) (&seen[0][0])[i] = 0;
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t base = blockIdx.x * kPlaceBlock + warp * kPerWarp + lane;
  // A position's part and its rank among the part's positions of the warp (so far), in
  // one word: part | rank << kPartBits (ranks < kPlaceBlock), fewer registers a thread.
  constexpr int kPartBits = 9;
  uint32_t meta[kPerLane];
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int64_t t = base + r * 32;
    const int part = t < n ? min(static_cast<int>(labels[t]), parts - 1) : kNoLabel;
    const unsigned peers = __match_any_sync(kAll, part);
    const unsigned so_far = part != kNoLabel ? seen[warp][part] : 0;
    meta[r] = part | (so_far + __popc(peers & ((1u << lane) - 1))) << kPartBits;
    __syncwarp();
    if (part != kNoLabel && lane == __ffs(peers) - 1) seen[warp][part] = so_far + __popc(peers);
    __syncwarp();
  }
  __syncthreads();
  for (int p = threadIdx.x; p < parts; p += kThreads) {  // exclusive scan over the warps
    unsigned run = 0;
    for (int w = 0; w < kWarps; ++w) {
      const unsigned c = seen[w][p];
      seen[w][p] = run;
      run += c;
    }
  }
  __syncthreads();
  const PhiloxSeed seed = own.part >= 0 ? philox_seed(philox) : PhiloxSeed{0, 0};
  src_t v[kPerLane];
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int part = meta[r] & ((1u << kPartBits) - 1);
    if (part == kNoLabel) continue;
    if (part == own.part) {  // the shard's own draw (within the shard: below 2^31)
      const int64_t t = base + r * 32;
      const uint4 b = philox_block_cuda(seed, static_cast<uint64_t>(t / 2));
      const alias::BucketDraw d = t % 2 == 0 ? alias::draw_bucket(own.buckets, b.x, b.y)
                                             : alias::draw_bucket(own.buckets, b.z, b.w);
      v[r] = static_cast<src_t>(alias::pick(d, own.table[d.bucket], own.buckets));
    } else {  // in range whatever start holds
      const int64_t at = next[part] + seen[warp][part] + (meta[r] >> kPartBits);
      v[r] = grouped_n > 0 ? grouped[at < 0 ? 0 : (at < grouped_n ? at : grouped_n - 1)] : src_t{0};
    }
  }
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int part = meta[r] & ((1u << kPartBits) - 1);
    if (part != kNoLabel) out[base + r * 32] = static_cast<out_t>(shift[part] + static_cast<int64_t>(v[r]));
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
  const auto kernel = parts <= kFewParts ? &labels_kernel<true> : &labels_kernel<false>;
  kernel<<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
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
    place_kernel<scalar_t, scalar_t><<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        g.const_data_ptr<scalar_t>(), g.numel(), lab.const_data_ptr<uint8_t>(), st.const_data_ptr<int64_t>(), nullptr,
        static_cast<int>(st.size(1)), g.numel(), OwnTable{nullptr, 0, -1}, at::PhiloxCudaState{},
        out.mutable_data_ptr<scalar_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

at::Tensor ordered_fill_cuda(const at::Tensor& received, const at::Tensor& labels, const at::Tensor& start,
                             const at::Tensor& offsets, const at::Tensor& table, int64_t own,
                             std::optional<at::Generator> generator) {
  check_fill_args(received, labels, start, offsets, table, own);
  const c10::cuda::CUDAGuard guard(labels.device());
  const at::Tensor g = received.contiguous(), lab = labels.contiguous(), st = start.contiguous();
  const at::Tensor off = offsets.contiguous(), tab = table.contiguous();
  at::Tensor out = at::empty({lab.numel()}, lab.options().dtype(at::kLong));
  const int64_t blocks = st.size(0);
  if (blocks == 0) return out;
  TORCH_CHECK(blocks < (int64_t{1} << 31), "_ordered_fill: too many positions for one call (", lab.numel(), ")");
  const OwnTable mine{own >= 0 ? tab.const_data_ptr<int64_t>() : nullptr, own >= 0 ? tab.numel() : 0,
                      static_cast<int>(own)};
  const at::PhiloxCudaState philox = own >= 0 ? cuda_philox_state(generator, labels.device().index(), 4)
                                              : at::PhiloxCudaState{};
  AT_DISPATCH_INDEX_TYPES(g.scalar_type(), "_ordered_fill_cuda", [&] {
    place_kernel<index_t, int64_t><<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        g.const_data_ptr<index_t>(), g.numel(), lab.const_data_ptr<uint8_t>(), st.const_data_ptr<int64_t>(),
        off.const_data_ptr<int64_t>(), static_cast<int>(st.size(1)), lab.numel(), mine, philox,
        out.mutable_data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) {
  m.impl("_ordered_labels", &ordered_labels_cuda);
  m.impl("_ordered_place", &ordered_place_cuda);
  m.impl("_ordered_fill", &ordered_fill_cuda);
}

}  // namespace wrs::place
