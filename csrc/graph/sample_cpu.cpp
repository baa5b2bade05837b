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
    const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& table,
    const std::optional<at::Tensor>& weight, const at::Tensor& nodes, int64_t k, bool replace, bool validate,
    std::optional<at::Generator> generator) {
  constexpr const char* op = "csr_sample_neighbors";
  const SamplingArgs a(op, rowptr, col, table, weight, nodes, "nodes");
  check_fanout(op, k, replace, table.has_value(), weight.has_value());
  const int64_t count = a.nodes.numel();
  at::Tensor nbr, eid, counts;
  std::tie(nbr, eid, counts) = neighbor_outputs(count, k, a.rowptr.options());
  if (count == 0) return {nbr, eid, counts};
  const PhiloxSeed seed = cpu_philox_seed(generator);
  std::atomic<uint32_t> flags{0};
  dispatch_graph(a, [&](auto col_type, auto w_type) {
    using col_t = decltype(col_type);
    const auto* wp = a.weight_ptr<decltype(w_type)>();
    const int64_t* rp = a.rowptr.const_data_ptr<int64_t>();
    const col_t* cp = a.col.const_data_ptr<col_t>();
    const int64_t* tp = a.table_ptr();
    const int64_t* v = a.nodes.const_data_ptr<int64_t>();
    int64_t* nbr_p = nbr.mutable_data_ptr<int64_t>();
    int64_t* eid_p = eid.mutable_data_ptr<int64_t>();
    int64_t* count_p = counts.mutable_data_ptr<int64_t>();
    wrs::parallel_for(0, count, 256, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const SeedOut<col_t> out{cp, eid_p + i * k, nbr_p + i * k};
        CpuBlocks blocks{&seed, static_cast<uint64_t>(i), 0};
        int64_t j = 0;
        if (v[i] < 0 || v[i] >= a.num_nodes()) {
          flags.fetch_or(kNodeOutOfRange);
        } else {
          const Row row = row_at(rp, v[i], a.col.numel());
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
  if (validate) raise_graph_flags(flags.load(), op);  // else the documented result, as on CUDA
  return {nbr, eid, counts};
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CPU, m) { m.impl("csr_sample_neighbors", &csr_sample_neighbors_cpu); }

}  // namespace wrs::graph
