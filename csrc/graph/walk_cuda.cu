// Random walks on CUDA (csr_random_walk): a thread per walk, walk.h's steps. A step is a
// chain of dependent loads (rowptr, then the bucket and its neighbour together), so the
// kernel keeps as many walks in flight as the SMs hold and lets the loads overlap.
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "graph/blocks.h"
#include "graph/graph_ops.h"
#include "graph/status_cuda.cuh"
#include "graph/walk.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace wrs::graph {
namespace {

constexpr int kThreads = 128;
constexpr int kChunk = 8;  // steps staged in shared memory between coalesced stores

// A block's walks write their positions kChunk at a time through shared memory: a warp's
// store then covers four walks' 64 contiguous bytes each, not 32 scattered 8-byte words.
template <typename col_t, typename w_t, bool kSecond>
__global__ void __launch_bounds__(kThreads)
    walk_kernel(Graph<col_t> g, const w_t* weight, int64_t nodes, const int64_t* start, int64_t count,
                int64_t length, Bias bias, const bool* rows_sorted, at::PhiloxCudaState philox, int64_t* out,
                uint32_t* status) {
  __shared__ int64_t staged[kThreads][kChunk + 1];  // +1: a thread's row starts in another bank
  const int64_t w0 = blockIdx.x * static_cast<int64_t>(kThreads);
  const int64_t w = w0 + threadIdx.x;
  int64_t v = w < count ? start[w] : 0;
  const bool valid = w < count && v >= 0 && v < nodes;
  if (w < count && !valid) atomicOr(status, kNodeOutOfRange);
  const bool sorted = kSecond && rows_sorted != nullptr && *rows_sorted;
  CudaBlocks blocks{philox_seed(philox), static_cast<uint64_t>(w), 0};
  int64_t t = -1;
  const int64_t walks = count - w0 < kThreads ? count - w0 : kThreads;
  for (int64_t s0 = 0; s0 <= length; s0 += kChunk) {
    const int64_t positions = length + 1 - s0 < kChunk ? length + 1 - s0 : kChunk;
    for (int64_t j = 0; j < positions; ++j) {
      const int64_t s = s0 + j;  // position s; step s - 1 leads to it
      if (valid && s > 0) {
        blocks.first = static_cast<uint64_t>((s - 1) * step_blocks(kSecond));
        const Row row = row_at(g.rowptr, v, g.edges);
        const int64_t x = kSecond && t >= 0 ? node2vec_step(g, weight, row, v, t, bias, sorted, blocks)
                                            : first_order_step(g, row, v, blocks);
        t = v;
        v = x;
      }
      staged[threadIdx.x][j] = valid ? v : -1;
    }
    __syncthreads();
    for (int64_t k = threadIdx.x; k < walks * positions; k += kThreads) {
      const int64_t walk = k / positions, j = k - walk * positions;
      out[(w0 + walk) * (length + 1) + s0 + j] = staged[walk][j];
    }
    __syncthreads();
  }
}

at::Tensor csr_random_walk_cuda(const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& table,
                                const std::optional<at::Tensor>& weight, const at::Tensor& start, int64_t walk_length,
                                double p, double q, const std::optional<at::Tensor>& rows_sorted, bool validate,
                                std::optional<at::Generator> generator) {
  constexpr const char* op = "csr_random_walk";
  const c10::cuda::CUDAGuard guard(rowptr.device());
  const SamplingArgs a(op, rowptr, col, table, weight, start, "start");
  check_walk_args(op, walk_length, p, q, table.has_value(), weight.has_value(), rows_sorted, rowptr);
  const int64_t count = a.nodes.numel();
  at::Tensor out = at::empty({count, walk_length + 1}, a.rowptr.options());
  if (count == 0) return out;
  const at::Tensor sorted = rows_sorted.has_value() ? rows_sorted->contiguous() : at::Tensor();
  const bool second = p != 1.0 || q != 1.0;
  const auto stream = at::cuda::getCurrentCUDAStream();
  CallStatus status(validate, a.rowptr.options(), stream);
  const uint64_t words = 4 * static_cast<uint64_t>(walk_length) * static_cast<uint64_t>(step_blocks(second));
  const auto philox = cuda_philox_state(generator, a.rowptr.device().index(), words);
  dispatch_graph(a, [&](auto col_type, auto w_type) {
    using col_t = decltype(col_type);
    using w_t = decltype(w_type);
    const Graph<col_t> g{a.rowptr.const_data_ptr<int64_t>(), a.col.const_data_ptr<col_t>(), a.table_ptr(),
                         a.col.numel()};
    const bool* sp = sorted.defined() ? sorted.const_data_ptr<bool>() : nullptr;
    auto launch = [&](auto kernel) {
      kernel<<<ceil_div(count, kThreads), kThreads, 0, stream>>>(g, a.weight_ptr<w_t>(), a.num_nodes(),
                                                                 a.nodes.const_data_ptr<int64_t>(), count, walk_length,
                                                                 node2vec_bias(p, q), sp, philox,
                                                                 out.mutable_data_ptr<int64_t>(), status.bits());
    };
    if (second) launch(walk_kernel<col_t, w_t, true>); else launch(walk_kernel<col_t, w_t, false>);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  raise_graph_flags(status.read(), op);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) { m.impl("csr_random_walk", &csr_random_walk_cuda); }

}  // namespace wrs::graph
