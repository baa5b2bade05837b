// Neighbour sampling on the CPU (csr_sample_neighbors), seed by seed. Seed i draws from
// Philox subsequence i (graph.h's layouts), so the draws do not depend on the thread count,
// and they are the GPU's draws wherever both read the same table.
#include "common/parallel.h"
#include "graph/blocks.h"
#include "graph/graph_ops.h"
#include "graph/sample.h"

#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <atomic>

namespace wrs::graph {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> csr_sample_neighbors_cpu(
    const at::Tensor& rowptr_in, const at::Tensor& col_in, const std::optional<at::Tensor>& table_in,
    const std::optional<at::Tensor>& weight_in, const at::Tensor& nodes_in, int64_t k, bool replace, bool validate,
    std::optional<at::Generator> generator) {
  constexpr const char* op = "csr_sample_neighbors";
  check_sampling(op, rowptr_in, col_in, table_in, weight_in, nodes_in, "nodes");
  check_fanout(op, k, replace, table_in.has_value(), weight_in.has_value());
  const at::Tensor rowptr = rowptr_in.contiguous(), col = col_in.contiguous();
  const at::Tensor nodes = nodes_in.to(at::kLong).contiguous();
  const at::Tensor table = table_in.has_value() ? table_in->contiguous() : at::Tensor();
  const at::Tensor weight = weight_in.has_value() ? weight_in->contiguous() : at::Tensor();
  const int64_t count = nodes.numel();
  at::Tensor nbr = at::empty({count, k}, rowptr.options());
  at::Tensor eid = at::empty({count, k}, rowptr.options());
  at::Tensor counts = at::empty({count}, rowptr.options());
  if (count == 0) return {nbr, eid, counts};
  const PhiloxSeed seed = cpu_philox_seed(generator);
  std::atomic<uint32_t> flags{0};
  AT_DISPATCH_INDEX_TYPES(col.scalar_type(), "csr_sample_neighbors_cpu", [&] {
    using col_t = index_t;
    const at::ScalarType wt = weight.defined() ? weight.scalar_type() : at::kFloat;
    AT_DISPATCH_FLOATING_TYPES(wt, "csr_sample_neighbors_cpu", [&] {
      const int64_t* rp = rowptr.const_data_ptr<int64_t>();
      const col_t* cp = col.const_data_ptr<col_t>();
      const int64_t* tp = table.defined() ? table.const_data_ptr<int64_t>() : nullptr;
      const scalar_t* wp = weight.defined() ? weight.const_data_ptr<scalar_t>() : nullptr;
      const int64_t num_nodes = rowptr.numel() - 1, edges = col.numel();
      int64_t* nbr_p = nbr.mutable_data_ptr<int64_t>();
      int64_t* eid_p = eid.mutable_data_ptr<int64_t>();
      int64_t* count_p = counts.mutable_data_ptr<int64_t>();
      const int64_t* v = nodes.const_data_ptr<int64_t>();
      wrs::parallel_for(0, count, 256, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          const SeedOut<col_t> out{cp, eid_p + i * k, nbr_p + i * k};
          CpuBlocks blocks{&seed, static_cast<uint64_t>(i), 0};
          int64_t j = 0;
          if (v[i] < 0 || v[i] >= num_nodes) {
            flags.fetch_or(kNodeOutOfRange);
          } else {
            const Row row = row_at(rp, v[i], edges);
            const int64_t* rt = tp == nullptr ? nullptr : tp + row.start;
            bool done = true;
            j = replace ? draws_with_replacement(row, rt, k, out, blocks)
                        : trials_without_replacement(row, rt, wp, k, out, blocks, done);
            if (!done) j = invert_rest(row, wp, k, j, out, blocks);
          }
          count_p[i] = j;
          for (; j < k; ++j) out.eid[j] = out.nbr[j] = -1;
        }
      });
    });
  });
  if (validate) raise_graph_flags(flags.load(), op);  // else the documented result, as on CUDA
  return {nbr, eid, counts};
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CPU, m) { m.impl("csr_sample_neighbors", &csr_sample_neighbors_cpu); }

}  // namespace wrs::graph
