// Neighbour sampling on CUDA (csr_sample_neighbors), a thread per seed. With replacement the
// draws go kBatch at a time, their loads in flight together. Without replacement a thread
// runs a seed's trials in order (sample.h, the CPU's loop); the rare seed whose trials run
// out (its drawn edges hold nearly all its row's mass) is finished by a block.
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "graph/blocks.h"
#include "graph/graph_ops.h"
#include "graph/sample.h"
#include "graph/status_cuda.cuh"

#include <ATen/Dispatch.h>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace wrs::graph {
namespace {

constexpr int kThreads = 256;

template <typename col_t, typename w_t>
struct Sampling {
  const int64_t* rowptr;
  const col_t* col;
  const int64_t* table;  // null: uniform
  const w_t* weight;     // null: uniform
  const int64_t* nodes;
  int64_t num_nodes, edges, seeds, k;
  int64_t* nbr;
  int64_t* eid;
  int64_t* count;
  uint32_t* status;

  __device__ double mass(int64_t e) const { return weight == nullptr ? 1.0 : static_cast<double>(weight[e]); }
  // The seed's node, or -1 (flagged) when it is not one.
  __device__ int64_t node(int64_t i) const {
    const int64_t v = nodes[i];
    return v >= 0 && v < num_nodes ? v : -1;
  }
};

// A thread per seed, with replacement: draws j of Philox block j / 2 (sample.h's layout),
// kBatch at a time with all their table loads, then all their neighbour loads, in flight.
constexpr int kBatch = 8;

template <typename col_t, typename w_t>
__global__ void __launch_bounds__(kThreads)
    replace_kernel(Sampling<col_t, w_t> s, at::PhiloxCudaState philox) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= s.seeds) return;
  int64_t* eid = s.eid + i * s.k;
  int64_t* nbr = s.nbr + i * s.k;
  const int64_t v = s.node(i);
  if (v < 0) atomicOr(s.status, kNodeOutOfRange);
  const Row row = v >= 0 ? row_at(s.rowptr, v, s.edges) : Row{0, 0};
  const uint64_t n = static_cast<uint64_t>(row.degree);
  const int64_t* rt = s.table == nullptr ? nullptr : s.table + row.start;
  const CudaBlocks block{philox_seed(philox), static_cast<uint64_t>(i), 0};
  bool live = row.degree > 0;
  for (int64_t j0 = 0; live && j0 < s.k; j0 += kBatch) {
    alias::BucketDraw d[kBatch];
    int64_t off[kBatch];
#pragma unroll
    for (int c = 0; c < kBatch; c += 2) {
      const Words r = block((j0 + c) / 2);
      d[c] = alias::draw_bucket(n, r.x, r.y);
      d[c + 1] = alias::draw_bucket(n, r.z, r.w);
    }
#pragma unroll
    for (int c = 0; c < kBatch; ++c) {
      off[c] = static_cast<int64_t>(d[c].bucket);
      if (rt != nullptr && j0 + c < s.k) off[c] = resolve(d[c], rt[d[c].bucket], n);
    }
    if (off[0] < 0) {  // a dead row: every bucket says so
      live = false;
      break;
    }
    int64_t x[kBatch];
#pragma unroll
    for (int c = 0; c < kBatch; ++c) x[c] = j0 + c < s.k ? static_cast<int64_t>(s.col[row.start + off[c]]) : 0;
#pragma unroll
    for (int c = 0; c < kBatch; ++c) {
      if (j0 + c < s.k) {
        eid[j0 + c] = row.start + off[c];
        nbr[j0 + c] = x[c];
      }
    }
  }
  s.count[i] = live ? s.k : 0;
  if (!live) {
    for (int64_t j = 0; j < s.k; ++j) eid[j] = nbr[j] = -1;
  }
}

// A thread per seed, without replacement: sample.h's trials (the CPU's loop). A seed whose
// trial budget runs out goes on the worklist for finish_kernel.
template <typename col_t, typename w_t>
__global__ void __launch_bounds__(kThreads)
    distinct_kernel(Sampling<col_t, w_t> s, at::PhiloxCudaState philox, int64_t* work, int* work_count) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= s.seeds) return;
  const SeedOut<col_t> out{s.col, s.eid + i * s.k, s.nbr + i * s.k};
  CudaBlocks blocks{philox_seed(philox), static_cast<uint64_t>(i), 0};
  const int64_t v = s.node(i);
  int64_t j = 0;
  bool done = true;
  if (v < 0) {
    atomicOr(s.status, kNodeOutOfRange);
  } else {
    const Row row = row_at(s.rowptr, v, s.edges);
    j = trials_without_replacement(row, s.table == nullptr ? nullptr : s.table + row.start, s.weight, s.k, out,
                                   blocks, done);
  }
  s.count[i] = j;
  if (!done) {
    work[atomicAdd(work_count, 1)] = i;
    return;
  }
  for (; j < s.k; ++j) out.eid[j] = out.nbr[j] = -1;
}

// The seeds of the worklist, a block each: each remaining draw by inversion over the
// untaken rest of the row (sample.h's invert_rest in a block: thread t sums edges t, t + 256,
// ..., a block scan places u, and the thread it falls in finds the edge among its own).
template <typename col_t, typename w_t>
__global__ void __launch_bounds__(kThreads)
    finish_kernel(Sampling<col_t, w_t> s, at::PhiloxCudaState philox, const int64_t* work, const int* work_count) {
  using Scan = cub::BlockScan<double, kThreads>;
  using Max = cub::BlockReduce<int, kThreads>;
  __shared__ union {
    typename Scan::TempStorage scan;
    typename Max::TempStorage max;
  } tmp;
  __shared__ int winner;
  const int64_t budget = trial_budget(s.k);
  const PhiloxSeed seed = philox_seed(philox);
  for (int64_t w = blockIdx.x; w < *work_count; w += gridDim.x) {
    const int64_t i = work[w];
    const SeedOut<col_t> out{s.col, s.eid + i * s.k, s.nbr + i * s.k};
    const Row row = row_at(s.rowptr, s.nodes[i], s.edges);
    const CudaBlocks block{seed, static_cast<uint64_t>(i), 0};
    int64_t j = s.count[i];
    for (int64_t m = 0; j < s.k; ++m) {
      double own = 0;
      for (int64_t e = row.start + threadIdx.x; e < row.start + row.degree; e += kThreads) {
        own += out.taken(j, e) ? 0.0 : edge_mass(s.weight, e);
      }
      double before, total;
      Scan(tmp.scan).ExclusiveSum(own, before, total);
      if (!(total > 0)) break;  // every edge of positive mass is drawn
      const Words r = block(budget / 2 + m);
      const double u = open_uniform(r.x, r.y) * total;
      __syncthreads();
      // The last thread with mass whose range starts at or below u (exactly one, whatever
      // the scan's rounding).
      const int mine = before <= u && own > 0 ? static_cast<int>(threadIdx.x) : -1;
      const int last = Max(tmp.max).Reduce(mine, [](int a, int b) { return a > b ? a : b; });
      if (threadIdx.x == 0) winner = last;
      __syncthreads();
      if (static_cast<int>(threadIdx.x) == winner) {
        double acc = before;
        int64_t pick = -1;
        for (int64_t e = row.start + threadIdx.x; e < row.start + row.degree; e += kThreads) {
          const double x = out.taken(j, e) ? 0.0 : edge_mass(s.weight, e);
          if (x > 0) pick = e;
          acc += x;
          if (x > 0 && acc > u) break;
        }
        out.put(j, pick);
      }
      __syncthreads();
      ++j;
    }
    for (int64_t a = j + threadIdx.x; a < s.k; a += kThreads) out.eid[a] = out.nbr[a] = -1;
    if (threadIdx.x == 0) s.count[i] = j;
    __syncthreads();
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> csr_sample_neighbors_cuda(
    const at::Tensor& rowptr_in, const at::Tensor& col_in, const std::optional<at::Tensor>& table_in,
    const std::optional<at::Tensor>& weight_in, const at::Tensor& nodes_in, int64_t k, bool replace, bool validate,
    std::optional<at::Generator> generator) {
  constexpr const char* op = "csr_sample_neighbors";
  check_sampling(op, rowptr_in, col_in, table_in, weight_in, nodes_in, "nodes");
  check_fanout(op, k, replace, table_in.has_value(), weight_in.has_value());
  const c10::cuda::CUDAGuard guard(rowptr_in.device());
  const at::Tensor rowptr = rowptr_in.contiguous(), col = col_in.contiguous();
  const at::Tensor nodes = nodes_in.to(at::kLong).contiguous();
  const at::Tensor table = table_in.has_value() ? table_in->contiguous() : at::Tensor();
  const at::Tensor weight = weight_in.has_value() ? weight_in->contiguous() : at::Tensor();
  const int64_t count = nodes.numel();
  at::Tensor nbr = at::empty({count, k}, rowptr.options());
  at::Tensor eid = at::empty({count, k}, rowptr.options());
  at::Tensor counts = at::empty({count}, rowptr.options());
  if (count == 0) return {nbr, eid, counts};
  const auto stream = at::cuda::getCurrentCUDAStream();
  CallStatus status(validate, rowptr.options(), stream);
  const int64_t words = 4 * (replace ? replace_blocks(k) : distinct_blocks(k));
  const auto philox = cuda_philox_state(generator, rowptr.device().index(), static_cast<uint64_t>(words));
  AT_DISPATCH_INDEX_TYPES(col.scalar_type(), "csr_sample_neighbors_cuda", [&] {
    using col_t = index_t;
    const at::ScalarType wt = weight.defined() ? weight.scalar_type() : at::kFloat;
    AT_DISPATCH_FLOATING_TYPES(wt, "csr_sample_neighbors_cuda", [&] {
      const Sampling<col_t, scalar_t> s{rowptr.const_data_ptr<int64_t>(),
                                        col.const_data_ptr<col_t>(),
                                        table.defined() ? table.const_data_ptr<int64_t>() : nullptr,
                                        weight.defined() ? weight.const_data_ptr<scalar_t>() : nullptr,
                                        nodes.const_data_ptr<int64_t>(),
                                        rowptr.numel() - 1,
                                        col.numel(),
                                        count,
                                        k,
                                        nbr.mutable_data_ptr<int64_t>(),
                                        eid.mutable_data_ptr<int64_t>(),
                                        counts.mutable_data_ptr<int64_t>(),
                                        status.bits()};
      if (replace) {
        replace_kernel<<<ceil_div(count, kThreads), kThreads, 0, stream>>>(s, philox);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      } else {
        // The worklist of seeds past their trial budget, and its length (zeroed on the stream).
        at::Tensor work = at::empty({count + 2}, rowptr.options());
        int* work_count = reinterpret_cast<int*>(work.mutable_data_ptr<int64_t>() + count);
        C10_CUDA_CHECK(cudaMemsetAsync(work_count, 0, sizeof(int), stream));
        distinct_kernel<<<ceil_div(count, kThreads), kThreads, 0, stream>>>(s, philox, work.mutable_data_ptr<int64_t>(),
                                                                         work_count);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        finish_kernel<<<grid_for(count * kThreads, kThreads), kThreads, 0, stream>>>(
            s, philox, work.const_data_ptr<int64_t>(), work_count);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      }
    });
  });
  raise_graph_flags(status.read(), op);
  return {nbr, eid, counts};
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) { m.impl("csr_sample_neighbors", &csr_sample_neighbors_cuda); }

}  // namespace wrs::graph
