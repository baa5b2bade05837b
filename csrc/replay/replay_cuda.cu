// Prioritized replay on CUDA: batched updates in phases (tree.h), with no host read unless
// validating; draws a thread each, descending the tree with the CPU's arithmetic.
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "common/status_word.h"
#include "common/uniform.h"
#include "replay/replay_ops.h"

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

// Entry e's part of a phase: 0 claims its leaf (the largest e wins), 1 writes it, 1 + l
// recomputes level l's nodes above the claimed leaves (the first entry to claim a node's
// mark does it) and resets the marks below. A bad entry claims nothing; resets and extra
// recomputes are harmless, so the later phases only need the index in range.
template <typename P>
__device__ void update_entry(const Update& a, const Priority<P>& prio, int phase, int64_t e) {
  const Levels& s = a.s;
  const int64_t b = e / a.k, j = e - b * a.k, i = a.index[e];
  const bool in_range = i >= 0 && i < s.capacity;
  int32_t* level_marks = a.marks + s.buffers * s.width[0];
  if (phase <= 1) {
    const double p = prio(b, j);
    if (!in_range || bad_priority(p)) return;
    const int64_t leaf = s.leaf(b, i);
    if (phase == 0) {
      atomicMax(a.marks + leaf, static_cast<int32_t>(e));
    } else if (a.marks[leaf] == static_cast<int32_t>(e)) {
      a.leaves[leaf] = p;
      a.leaves[s.buffers * s.width[0] + leaf] = transform(p, a.alpha, a.eps);
    }
    return;
  }
  const int l = phase - 1;
  if (in_range) {
    if (l == 1) a.marks[s.leaf(b, i)] = -1;
    else level_marks[s.node(l - 1, b, i >> (kFanBits * (l - 1)))] = -1;
  }
  if (l < s.top) {
    const int64_t v = i >> (kFanBits * l);
    if (in_range && atomicCAS(level_marks + s.node(l, b, v), -1, static_cast<int32_t>(e)) == -1) {
      recompute(s, a.leaves, a.nodes, l, b, v);
    }
  } else if (j == 0) {
    recompute(s, a.leaves, a.nodes, l, b, 0);
  }
}

template <typename P>
__global__ void update_one_block_kernel(Update a, Priority<P> prio) {
  for (int phase = 0; phase <= a.s.top + 1; ++phase) {
    for (int64_t e = threadIdx.x; e < a.entries; e += blockDim.x) update_entry(a, prio, phase, e);
    __syncthreads();  // the block's writes are seen by all of it from here
  }
}

template <typename P>
__global__ void update_phase_kernel(Update a, Priority<P> prio, int phase) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < a.entries;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    update_entry(a, prio, phase, e);
  }
}

// Every node of level l; at level 1 also the reset of the leaves the batch claimed.
__global__ void rebuild_level_kernel(Update a, int l) {
  const Levels& s = a.s;
  const int64_t nodes = s.buffers * s.count[l];
  const int64_t n = l == 1 && a.entries > nodes ? a.entries : nodes;
  for (int64_t x = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; x < n;
       x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (l == 1 && x < a.entries) {
      const int64_t i = a.index[x];
      if (i >= 0 && i < s.capacity) a.marks[s.leaf(x / a.k, i)] = -1;
    }
    if (x < nodes) recompute(s, a.leaves, a.nodes, l, x / s.count[l], x % s.count[l]);
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
    update_phase_kernel<<<grid, kThreads, 0, stream>>>(a, prio, 0);
    update_phase_kernel<<<grid, kThreads, 0, stream>>>(a, prio, 1);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    for (int l = 1; l <= s.top; ++l) {
      if (method == UpdateMethod::kRebuild) {
        const int64_t n = std::max(l == 1 ? entries : 0, s.buffers * s.count[l]);
        rebuild_level_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(a, l);
      } else {
        update_phase_kernel<<<grid, kThreads, 0, stream>>>(a, prio, l + 1);
      }
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  });
}

void priority_rebuild_cuda(const at::Tensor& leaves, const at::Tensor& nodes, int64_t capacity, double alpha,
                           double eps) {
  constexpr const char* op = "PrioritySampler.rebuild_";
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
    rebuild_level_kernel<<<grid_for(s.buffers * s.count[l], kThreads), kThreads, 0, stream>>>(a, l);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

// A thread a draw: the children of each node on the way down are loaded together (two
// 16-byte loads at a time) before the CPU's scan picks one.
__global__ void sample_kernel(Levels s, const double* leaves, const double* nodes, int64_t n, bool stratified,
                              at::PhiloxCudaState philox, int64_t* index, double* prob, uint32_t* status) {
  const PhiloxSeed seed = philox_seed(philox);
  const double* t = leaves + s.buffers * s.width[0];
  for (int64_t d = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; d < s.buffers * n;
       d += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = d / n;
    const double total = nodes[s.root(b)];
    int64_t leaf = -1;
    if (total > 0 && total <= 1.7976931348623157e308) {
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
    if (leaf < 0) {
      if (status != nullptr) atomicOr(status, total > 0 ? kTotalOverflow : kEmpty);
      index[d] = 0;
      prob[d] = __longlong_as_double(0x7ff8000000000000LL);
    } else {
      index[d] = leaf;
      prob[d] = t[s.leaf(b, leaf)] / total;
    }
  }
}

std::tuple<at::Tensor, at::Tensor> priority_sample_cuda(const at::Tensor& leaves, const at::Tensor& nodes,
                                                        int64_t capacity, int64_t n, bool stratified, bool validate,
                                                        std::optional<at::Generator> generator) {
  constexpr const char* op = "PrioritySampler.sample";
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
  sample_kernel<<<grid_for(s.buffers * n, kThreads), kThreads, 0, stream>>>(
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
