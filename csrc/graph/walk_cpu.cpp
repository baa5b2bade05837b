// Random walks on the CPU (csr_random_walk): walk.h's steps, one walk at a time per thread.
// Walk w draws from Philox subsequence w, so the walks do not depend on the thread count.
#include "common/parallel.h"
#include "graph/blocks.h"
#include "graph/graph_ops.h"
#include "graph/walk.h"

#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <atomic>

namespace wrs::graph {
namespace {

template <typename col_t, typename w_t>
void walks(const Graph<col_t>& g, const w_t* weight, int64_t nodes, const int64_t* start, int64_t count,
           int64_t length, double p, double q, bool sorted, const PhiloxSeed& seed, int64_t* out,
           std::atomic<uint32_t>& flags) {
  const bool second = p != 1.0 || q != 1.0;
  const Bias bias = node2vec_bias(p, q);
  const int64_t per_step = step_blocks(second);
  wrs::parallel_for(0, count, 64, [&](int64_t w0, int64_t w1) {
    for (int64_t w = w0; w < w1; ++w) {
      int64_t* o = out + w * (length + 1);
      int64_t v = start[w];
      if (v < 0 || v >= nodes) {
        for (int64_t s = 0; s <= length; ++s) o[s] = -1;
        flags.fetch_or(kNodeOutOfRange);
        continue;
      }
      o[0] = v;
      int64_t t = -1;
      for (int64_t s = 0; s < length; ++s) {
        CpuBlocks blocks{&seed, static_cast<uint64_t>(w), static_cast<uint64_t>(s * per_step)};
        const Row row = row_at(g.rowptr, v, g.edges);
        const int64_t x = second && t >= 0 ? node2vec_step(g, weight, row, v, t, bias, sorted, blocks)
                                           : first_order_step(g, row, v, blocks);
        o[s + 1] = x;
        t = v;
        v = x;
      }
    }
  });
}

at::Tensor csr_random_walk_cpu(const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& table,
                               const std::optional<at::Tensor>& weight, const at::Tensor& start, int64_t walk_length,
                               double p, double q, const std::optional<at::Tensor>& rows_sorted, bool validate,
                               std::optional<at::Generator> generator) {
  constexpr const char* op = "csr_random_walk";
  const SamplingArgs a(op, rowptr, col, table, weight, start, "start");
  check_walk_args(op, walk_length, p, q, table.has_value(), weight.has_value(), rows_sorted, rowptr);
  const int64_t count = a.nodes.numel();
  at::Tensor out = at::empty({count, walk_length + 1}, a.rowptr.options());
  if (count == 0) return out;
  const bool sorted = rows_sorted.has_value() && rows_sorted->item<bool>();
  const PhiloxSeed seed = cpu_philox_seed(generator);
  std::atomic<uint32_t> flags{0};
  dispatch_graph(a, [&](auto col_type, auto w_type) {
    using col_t = decltype(col_type);
    const Graph<col_t> g{a.rowptr.const_data_ptr<int64_t>(), a.col.const_data_ptr<col_t>(), a.table_ptr(),
                         a.col.numel()};
    walks(g, a.weight_ptr<decltype(w_type)>(), a.num_nodes(), a.nodes.const_data_ptr<int64_t>(), count, walk_length,
          p, q, sorted, seed, out.mutable_data_ptr<int64_t>(), flags);
  });
  if (validate) raise_graph_flags(flags.load(), op);  // else the documented result, as on CUDA
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CPU, m) { m.impl("csr_random_walk", &csr_random_walk_cpu); }

}  // namespace wrs::graph
