// Neighbour sampling on CUDA (csr_sample_neighbors). With replacement, a thread draws two
// of a seed's k neighbours (one Philox block); the seed's rowptr entries and its row's
// sectors are shared through L1 by the threads of one seed. Without replacement, a thread
// runs a seed's trials in order (sample.h, the CPU's loop), two table loads in flight at a time.
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "graph/blocks.h"
#include "graph/graph_ops.h"
#include "graph/sample.h"
#include "graph/status_cuda.cuh"

#include <ATen/Dispatch.h>
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

// Thread (i, h) draws k-slots 2h and 2h + 1 of seed i from Philox block h of subsequence i.
template <typename col_t, typename w_t>
__global__ void __launch_bounds__(kThreads)
    replace_kernel(Sampling<col_t, w_t> s, at::PhiloxCudaState philox) {
  const int64_t pairs = s.k > 0 ? replace_blocks(s.k) : 1;  // k = 0: a thread still writes the count
  const int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (g >= s.seeds * pairs) return;
  const int64_t i = g / pairs, h = g - i * pairs;
  const int64_t v = s.node(i);
  int64_t got[2] = {-1, -1};
  bool live = v >= 0;
  if (v < 0 && h == 0) atomicOr(s.status, kNodeOutOfRange);
  if (live) {
    const Row row = row_at(s.rowptr, v, s.edges);
    live = row.degree > 0;
    if (live) {
      const PhiloxSeed seed = philox_seed(philox);
      const uint4 r = philox_block_at(seed.seed, seed.offset / 4 + static_cast<uint64_t>(h), static_cast<uint64_t>(i));
      const uint64_t n = static_cast<uint64_t>(row.degree);
      const alias::BucketDraw d0 = alias::draw_bucket(n, r.x, r.y), d1 = alias::draw_bucket(n, r.z, r.w);
      int64_t o0 = static_cast<int64_t>(d0.bucket), o1 = static_cast<int64_t>(d1.bucket);
      if (s.table != nullptr) {
        const int64_t t0 = s.table[row.start + o0], t1 = s.table[row.start + o1];
        o0 = resolve(d0, t0, n);
        o1 = resolve(d1, t1, n);
      }
      live = o0 >= 0;  // a dead row's every bucket says so
      got[0] = row.start + o0;
      got[1] = row.start + o1;
    }
  }
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const int64_t j = 2 * h + c;
    if (j >= s.k) break;
    s.eid[i * s.k + j] = live ? got[c] : -1;
    s.nbr[i * s.k + j] = live ? static_cast<int64_t>(s.col[got[c]]) : -1;
  }
  if (h == 0) s.count[i] = live ? s.k : 0;
}

// A thread per seed: successive sampling, sample.h's loop (the CPU's).
template <typename col_t, typename w_t>
__global__ void __launch_bounds__(kThreads)
    distinct_kernel(Sampling<col_t, w_t> s, at::PhiloxCudaState philox) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= s.seeds) return;
  const SeedOut<col_t> out{s.col, s.eid + i * s.k, s.nbr + i * s.k};
  CudaBlocks blocks{philox_seed(philox), static_cast<uint64_t>(i), 0};
  const int64_t v = s.node(i);
  int64_t j = 0;
  if (v < 0) {
    atomicOr(s.status, kNodeOutOfRange);
  } else {
    const Row row = row_at(s.rowptr, v, s.edges);
    j = draws_without_replacement(row, s.table == nullptr ? nullptr : s.table + row.start, s.weight, s.k, out, blocks);
  }
  s.count[i] = j;
  for (; j < s.k; ++j) out.eid[j] = out.nbr[j] = -1;
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
        const int64_t threads = count * std::max<int64_t>(replace_blocks(k), 1);
        replace_kernel<<<ceil_div(threads, kThreads), kThreads, 0, stream>>>(s, philox);
      } else {
        distinct_kernel<<<ceil_div(count, kThreads), kThreads, 0, stream>>>(s, philox);
      }
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  raise_graph_flags(status.read(), op);
  return {nbr, eid, counts};
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) { m.impl("csr_sample_neighbors", &csr_sample_neighbors_cuda); }

}  // namespace wrs::graph
