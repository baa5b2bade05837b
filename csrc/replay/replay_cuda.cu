// Prioritized replay on CUDA: batched updates in phases (tree.h), with no host read unless
// validating; draws a warp each while they are few, a thread each past that.
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "common/status_word.h"
#include "common/uniform.h"
#include "replay/replay_ops.h"
#include "replay/tree_cuda.cuh"

#include <ATen/Dispatch.h>
#include <ATen/ops/empty_like.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <optional>

namespace wrs::replay {
namespace {

constexpr int kThreads = 256;
constexpr int kOneBlockThreads = 1024;

// Entry (b, j)'s priority, or the insert value (the buffer's largest, 1.0 where that is 0).
template <typename P>
struct Priority {
  const P* p;  // null: insert
  int64_t sb, sj;
  const double* top_max;
  __device__ double operator()(int64_t b, int64_t j) const {
    if (p != nullptr) return static_cast<double>(p[b * sb + j * sj]);
    const double m = top_max[b];
    return m > 0 ? m : 1.0;
  }
};

struct Update {
  Levels s;
  double* leaves;
  double* nodes;
  int32_t* marks;
  const int64_t* index;
  int64_t k, entries;
  double alpha, eps;
};

// Entry e's part of phase 0 (claim its leaf: the largest e wins) or 1 (write it).
template <typename P>
__device__ void write_entry(const Update& a, const Priority<P>& prio, int phase, int64_t e) {
  const Levels& s = a.s;
  const int64_t b = e / a.k, i = a.index[e];
  const double p = prio(b, e - b * a.k);
  if (i < 0 || i >= s.capacity || bad_priority(p)) return;
  const int64_t leaf = s.leaf(b, i);
  if (phase == 0) {
    atomicMax(a.marks + leaf, static_cast<int32_t>(e));
  } else if (a.marks[leaf] == static_cast<int32_t>(e)) {
    a.leaves[leaf] = p + 0.0;  // -0.0 stored as 0.0
    a.leaves[s.buffers * s.width[0] + leaf] = transform(p, a.alpha, a.eps);
  }
}

// Entry e's part of level l's phase: reset the mark below it and claim its node's (the
// root's: the buffer's first entry). Bad entries claimed no leaf; the resets and recomputes
// they cause are harmless, so only the index's range matters here. Returns whether e
// claimed, with the node in (b, v).
__device__ inline bool claim_node(const Update& a, int l, int64_t e, int64_t& b, int64_t& v) {
  const Levels& s = a.s;
  int32_t* level_marks = a.marks + s.buffers * s.width[0];
  b = e / a.k;
  const int64_t i = a.index[e];
  const bool in_range = i >= 0 && i < s.capacity;
  if (in_range) {
    if (l == 1) a.marks[s.leaf(b, i)] = -1;
    else level_marks[s.node(l - 1, b, i >> (kFanBits * (l - 1)))] = -1;
  }
  if (l == s.top) {
    v = 0;
    return e == b * a.k;
  }
  v = i >> (kFanBits * l);
  return in_range && atomicCAS(level_marks + s.node(l, b, v), -1, static_cast<int32_t>(e)) == -1;
}

// A warp's 32 entries from `base` in level l's phase: each claims, then the warp recomputes
// the claimed nodes kBatch at a time.
__device__ void level_warp(const Update& a, int l, int64_t base, int lane) {
  int64_t b = 0, v = 0;
  const bool claimed = base + lane < a.entries && claim_node(a, l, base + lane, b, v);
  unsigned mask = __ballot_sync(kFullMask, claimed);
  while (mask != 0) {
    int64_t bs[kBatch], vs[kBatch];
    int count = 0;
    for (; count < kBatch && mask != 0; ++count, mask &= mask - 1) {
      const int src = __ffs(mask) - 1;
      bs[count] = __shfl_sync(kFullMask, b, src);
      vs[count] = __shfl_sync(kFullMask, v, src);
    }
    recompute_batch(a.s, a.leaves, a.nodes, l, bs, vs, count, lane);
  }
}

// Every phase in one block: the claimed nodes of a level are listed in shared memory and
// shared out among all the block's warps, kBatch at a time.
template <typename P>
__global__ void update_one_block_kernel(Update a, Priority<P> prio) {
  __shared__ int64_t listed_b[kOneBlockEntries], listed_v[kOneBlockEntries];
  __shared__ int listed;
  for (int phase = 0; phase < 2; ++phase) {
    for (int64_t e = threadIdx.x; e < a.entries; e += blockDim.x) write_entry(a, prio, phase, e);
    __syncthreads();  // the block's writes are seen by all of it from here
  }
  const int lane = threadIdx.x % kFan, warp = threadIdx.x / kFan, warps = blockDim.x / kFan;
  for (int l = 1; l <= a.s.top; ++l) {
    if (threadIdx.x == 0) listed = 0;
    __syncthreads();
    for (int64_t e = threadIdx.x; e < a.entries; e += blockDim.x) {
      int64_t b, v;
      if (claim_node(a, l, e, b, v)) {
        const int at = atomicAdd(&listed, 1);
        listed_b[at] = b;
        listed_v[at] = v;
      }
    }
    __syncthreads();
    for (int first = warp * kBatch; first < listed; first += warps * kBatch) {
      const int count = listed - first < kBatch ? listed - first : kBatch;
      recompute_batch(a.s, a.leaves, a.nodes, l, listed_b + first, listed_v + first, count, lane);
    }
    __syncthreads();
  }
}

template <typename P>
__global__ void write_kernel(Update a, Priority<P> prio, int phase) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < a.entries;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    write_entry(a, prio, phase, e);
  }
}

__global__ void level_kernel(Update a, int l) {
  const int lane = threadIdx.x % kFan;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t base = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x - lane; base < a.entries;
       base += stride) {
    level_warp(a, l, base, lane);
  }
}

// Every node of level l, a warp each; at level 1 also the reset of the leaves the batch claimed.
__global__ void rebuild_level_kernel(Update a, int l) {
  const Levels& s = a.s;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (l == 1) {
    for (int64_t x = first; x < a.entries; x += stride) {
      const int64_t i = a.index[x];
      if (i >= 0 && i < s.capacity) a.marks[s.leaf(x / a.k, i)] = -1;
    }
  }
  const int lane = threadIdx.x % kFan;
  const int64_t nodes = s.buffers * s.count[l];
  for (int64_t w = first / kFan; w < nodes; w += stride / kFan) {
    const int64_t b = w / s.count[l], v = w % s.count[l];
    recompute_batch(s, a.leaves, a.nodes, l, &b, &v, 1, lane);
  }
}

__global__ void transform_kernel(double* leaves, int64_t slots, double alpha, double eps) {
  for (int64_t x = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; x < slots;
       x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    leaves[slots + x] = transform(leaves[x], alpha, eps);
  }
}

template <typename P>
__global__ void check_kernel(const int64_t* index, int64_t entries, int64_t k, int64_t capacity, Priority<P> prio,
                             uint32_t* status) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < entries;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = index[e];
    uint32_t flags = i != -1 && (i < 0 || i >= capacity) ? kIndexOutOfRange : 0u;
    if (bad_priority(prio(e / k, e % k))) flags |= kBadPriority;
    if (flags) atomicOr(status, flags);
  }
}

// A CUDA kernel was picked because some argument is on CUDA: the state must be too.
void check_cuda_state(const char* op, const at::Tensor& leaves) {
  TORCH_CHECK(leaves.is_cuda(), op, ": an argument is on CUDA but the sampler's state is on ", leaves.device());
}

template <typename F>
void with_priority(const Batch& batch, const Levels& s, const double* nodes, const F& f) {
  if (!batch.priority.defined()) {
    f(Priority<double>{nullptr, 0, 0, nodes + s.inner + s.base[s.top]});
    return;
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, batch.priority.scalar_type(), "priority_update", [&] {
    f(Priority<scalar_t>{batch.priority.const_data_ptr<scalar_t>(), batch.priority.stride(0),
                         batch.priority.stride(1), nullptr});
  });
}

void priority_update_cuda(const at::Tensor& leaves, const at::Tensor& nodes, const at::Tensor& marks,
                          const at::Tensor& index, const std::optional<at::Tensor>& priority, int64_t capacity,
                          double alpha, double eps, bool validate) {
  constexpr const char* op = "PrioritySampler.update_";
  check_cuda_state(op, leaves);
  const c10::cuda::CUDAGuard guard(leaves.device());
  const Levels s = check_state(op, leaves, nodes, capacity);
  check_marks(op, marks, s, leaves);
  const Batch batch = check_batch(op, s, leaves, index, priority);
  const int64_t entries = s.buffers * batch.k;
  if (entries == 0) return;
  const auto stream = at::cuda::getCurrentCUDAStream();
  const Update a{s, leaves.mutable_data_ptr<double>(), nodes.mutable_data_ptr<double>(), marks.mutable_data_ptr<int32_t>(),
                 batch.index.const_data_ptr<int64_t>(), batch.k, entries, alpha, eps};
  with_priority(batch, s, a.nodes, [&](auto prio) {
    if (validate && !stream_is_capturing(stream)) {  // all or nothing: raise before anything is written
      StatusWord status(leaves.options(), stream);
      check_kernel<<<grid_for(entries, kThreads), kThreads, 0, stream>>>(a.index, entries, batch.k, capacity, prio,
                                                                         status.bits());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      raise_replay_flags(status.read(), op);
    }
    const UpdateMethod method = choose_update_cuda(s.buffers, capacity, entries);
    if (method == UpdateMethod::kOneBlock) {
      update_one_block_kernel<<<1, kOneBlockThreads, 0, stream>>>(a, prio);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      return;
    }
    const int grid = grid_for(entries, kThreads);
    write_kernel<<<grid, kThreads, 0, stream>>>(a, prio, 0);
    write_kernel<<<grid, kThreads, 0, stream>>>(a, prio, 1);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    for (int l = 1; l <= s.top; ++l) {
      if (method == UpdateMethod::kRebuild) {
        const int64_t n = std::max(l == 1 ? entries : 0, s.buffers * s.count[l] * kFan);
        rebuild_level_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(a, l);
      } else {
        level_kernel<<<grid, kThreads, 0, stream>>>(a, l);
      }
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  });
}

void priority_rebuild_cuda(const at::Tensor& leaves, const at::Tensor& nodes, int64_t capacity, double alpha,
                           double eps) {
  constexpr const char* op = "PrioritySampler.rebuild_";
  check_cuda_state(op, leaves);
  const c10::cuda::CUDAGuard guard(leaves.device());
  const Levels s = check_state(op, leaves, nodes, capacity);
  const auto stream = at::cuda::getCurrentCUDAStream();
  const int64_t slots = s.buffers * s.width[0];
  transform_kernel<<<grid_for(slots, kThreads), kThreads, 0, stream>>>(leaves.mutable_data_ptr<double>(), slots,
                                                                       alpha, eps);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const Update a{s, leaves.mutable_data_ptr<double>(), nodes.mutable_data_ptr<double>(), nullptr, nullptr, 1, 0,
                 alpha, eps};
  for (int l = 1; l <= s.top; ++l) {
    rebuild_level_kernel<<<grid_for(s.buffers * s.count[l] * kFan, kThreads), kThreads, 0, stream>>>(a, l);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

// Draw d's result, or the documented one for a buffer with nothing to draw.
__device__ inline void put_draw(int64_t d, int64_t leaf, double total, const double* t_row, int64_t* index,
                                double* prob, uint32_t* status) {
  if (leaf < 0) {
    if (status != nullptr) atomicOr(status, total > 0 ? kTotalOverflow : kEmpty);
    index[d] = 0;
    prob[d] = __longlong_as_double(0x7ff8000000000000LL);
  } else {
    index[d] = leaf;
    prob[d] = t_row[leaf] / total;
  }
}

__device__ inline bool drawable(double total) { return total > 0 && total <= 1.7976931348623157e308; }

// A thread a draw (many draws): the children of each node on the way down are loaded
// together, two 16-byte loads at a time, then added in order (the CPU's pick_child).
__global__ void sample_thread_kernel(Levels s, const double* leaves, const double* nodes, int64_t n, bool stratified,
                                     at::PhiloxCudaState philox, int64_t* index, double* prob, uint32_t* status) {
  const PhiloxSeed seed = philox_seed(philox);
  const double* t = leaves + s.buffers * s.width[0];
  for (int64_t d = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; d < s.buffers * n;
       d += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = d / n;
    const double total = nodes[s.root(b)];
    int64_t leaf = -1;
    if (drawable(total)) {
      const uint4 w = philox_block_cuda(seed, static_cast<uint64_t>(d));
      double staged[kFan];
      auto load = [&staged](const double* c) {
        const double2* c2 = reinterpret_cast<const double2*>(c);
#pragma unroll
        for (int q = 0; q < kFan / 2; ++q) {
          const double2 x = __ldg(c2 + q);
          staged[2 * q] = x.x;
          staged[2 * q + 1] = x.y;
        }
        return static_cast<const double*>(staged);
      };
      leaf = descend(s, leaves, nodes, b, draw_mass(total, d - b * n, n, stratified, open_uniform(w.x, w.y)), load);
    }
    put_draw(d, leaf, total, t + s.leaf(b, 0), index, prob, status);
  }
}

// A warp a draw (few draws): one coalesced 256-byte load a level, prefixes from the warp's scan.
__global__ void sample_warp_kernel(Levels s, const double* leaves, const double* nodes, int64_t n, bool stratified,
                                   at::PhiloxCudaState philox, int64_t* index, double* prob, uint32_t* status) {
  const PhiloxSeed seed = philox_seed(philox);
  const double* t = leaves + s.buffers * s.width[0];
  const int lane = threadIdx.x % kFan;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / kFan;
  for (int64_t d = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kFan; d < s.buffers * n;
       d += warps) {
    const int64_t b = d / n;
    const double total = nodes[s.root(b)];
    int64_t leaf = -1;
    if (drawable(total)) {
      const uint4 w = philox_block_cuda(seed, static_cast<uint64_t>(d));
      leaf = descend_warp(s, leaves, nodes, b, draw_mass(total, d - b * n, n, stratified, open_uniform(w.x, w.y)),
                          lane);
    }
    if (lane == 0) put_draw(d, leaf, total, t + s.leaf(b, 0), index, prob, status);
  }
}

std::tuple<at::Tensor, at::Tensor> priority_sample_cuda(const at::Tensor& leaves, const at::Tensor& nodes,
                                                        int64_t capacity, int64_t n, bool stratified, bool validate,
                                                        std::optional<at::Generator> generator) {
  constexpr const char* op = "PrioritySampler.sample";
  check_cuda_state(op, leaves);
  const c10::cuda::CUDAGuard guard(leaves.device());
  const Levels s = check_state(op, leaves, nodes, capacity);
  TORCH_CHECK(n >= 0, op, ": n must be non-negative, got ", n);
  at::Tensor index = at::empty({s.buffers, n}, leaves.options().dtype(at::kLong));
  at::Tensor prob = at::empty({s.buffers, n}, leaves.options());
  if (n == 0) return {index, prob};
  const auto stream = at::cuda::getCurrentCUDAStream();
  const auto philox = cuda_philox_state(generator, leaves.device().index(), 4);
  std::optional<StatusWord> status;
  if (validate && !stream_is_capturing(stream)) status.emplace(leaves.options(), stream);
  const int64_t draws = s.buffers * n;
  const bool warp = choose_sample_cuda(draws) == SampleMethod::kWarp;
  auto kernel = warp ? sample_warp_kernel : sample_thread_kernel;
  kernel<<<grid_for(warp ? draws * kFan : draws, kThreads), kThreads, 0, stream>>>(
      s, leaves.const_data_ptr<double>(), nodes.const_data_ptr<double>(), n, stratified, philox,
      index.mutable_data_ptr<int64_t>(), prob.mutable_data_ptr<double>(), status ? status->bits() : nullptr);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (status) raise_replay_flags(status->read(), op);
  return {index, prob};
}

template <typename scalar_t>
__global__ void weights_kernel(Levels s, const double* nodes, const scalar_t* prob, int64_t n, double alpha, double eps,
                               double beta, scalar_t* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < s.buffers * n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = i / n;
    out[i] = static_cast<scalar_t>(
        importance_weight(prob[i], nodes[s.root(b)], nodes[2 * s.inner + s.root(b)], alpha, eps, beta));
  }
}

at::Tensor priority_weights_cuda(const at::Tensor& leaves, const at::Tensor& nodes, int64_t capacity,
                                 const at::Tensor& prob, double alpha, double eps, double beta) {
  constexpr const char* op = "PrioritySampler.weights";
  check_cuda_state(op, leaves);
  const c10::cuda::CUDAGuard guard(leaves.device());
  const Levels s = check_state(op, leaves, nodes, capacity);
  const at::Tensor rows = check_prob(op, s, leaves, prob);
  at::Tensor out = at::empty_like(rows);
  const int64_t count = rows.numel();
  if (count == 0) return out.view(prob.sizes());
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(rows.scalar_type(), "priority_weights", [&] {
    weights_kernel<<<grid_for(count, kThreads), kThreads, 0, stream>>>(
        s, nodes.const_data_ptr<double>(), rows.const_data_ptr<scalar_t>(), rows.size(1), alpha, eps, beta,
        out.mutable_data_ptr<scalar_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out.view(prob.sizes());
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) {
  m.impl("priority_update", &priority_update_cuda);
  m.impl("priority_rebuild", &priority_rebuild_cuda);
  m.impl("priority_sample", &priority_sample_cuda);
  m.impl("priority_weights", &priority_weights_cuda);
}

}  // namespace wrs::replay
