// Neighbour sampling on the CPU (csr_sample_neighbors), seed by seed. Seed i draws from
// Philox subsequence i (graph.h's layouts), so the draws do not depend on the thread count,
// and they are the GPU's draws wherever both read the same table.
#include "common/parallel.h"
#include "common/philox.h"
#include "graph/graph_ops.h"

#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <atomic>

namespace wrs::graph {
namespace {

template <typename col_t, typename w_t>
struct Seeds {
  const int64_t* rowptr;
  const col_t* col;
  const int64_t* table;  // null: uniform
  const w_t* weight;     // null: uniform
  int64_t nodes, edges, k;
  PhiloxSeed seed;
  int64_t* nbr;
  int64_t* eid;
  int64_t* count;

  double mass(int64_t e) const { return weight == nullptr ? 1.0 : static_cast<double>(weight[e]); }

  void put(int64_t i, int64_t j, int64_t e) const {
    eid[i * k + j] = e;
    nbr[i * k + j] = static_cast<int64_t>(col[e]);
  }

  // k i.i.d. draws from the row; none from a dead row.
  int64_t with_replacement(int64_t i, const Row& row) const {
    if (row.degree == 0) return 0;
    const int64_t* rt = table == nullptr ? nullptr : table + row.start;
    for (int64_t j = 0; j < k; j += 2) {
      at::philox_engine engine(seed.seed, static_cast<uint64_t>(i), seed.offset / 4 + static_cast<uint64_t>(j / 2));
      uint32_t w[4];
      for (auto& x : w) x = engine();
      for (int h = 0; h < 2 && j + h < k; ++h) {
        const int64_t off = draw_offset(rt, static_cast<uint64_t>(row.degree), w[2 * h], w[2 * h + 1]);
        if (off < 0) return 0;
        put(i, j + h, row.start + off);
      }
    }
    return k;
  }

  bool taken(int64_t i, int64_t j, int64_t e) const {
    for (int64_t a = 0; a < j; ++a) {
      if (eid[i * k + a] == e) return true;
    }
    return false;
  }

  // Successive sampling: the first k distinct items of i.i.d. trials, in order; then, past
  // the trial budget, exact draws by inversion over the rest of the row.
  int64_t distinct(int64_t i, const Row& row) const {
    int64_t j = 0;
    if (row.degree <= k) {  // every edge of positive weight, in CSR order
      for (int64_t e = row.start; e < row.start + row.degree; ++e) {
        if (mass(e) > 0) put(i, j++, e);
      }
      return j;
    }
    const int64_t* rt = table == nullptr ? nullptr : table + row.start;
    const int64_t budget = trial_budget(k);
    uint32_t w[4];
    for (int64_t t = 0; t < budget && j < k; ++t) {
      if (t % 2 == 0) {
        at::philox_engine engine(seed.seed, static_cast<uint64_t>(i), seed.offset / 4 + static_cast<uint64_t>(t / 2));
        for (auto& x : w) x = engine();
      }
      const int64_t off = draw_offset(rt, static_cast<uint64_t>(row.degree), w[2 * (t % 2)], w[2 * (t % 2) + 1]);
      if (off < 0) return 0;
      if (!taken(i, j, row.start + off)) put(i, j++, row.start + off);
    }
    for (int64_t m = 0; j < k; ++m) {
      double total = 0;
      for (int64_t e = row.start; e < row.start + row.degree; ++e) total += taken(i, j, e) ? 0.0 : mass(e);
      if (!(total > 0)) break;
      at::philox_engine engine(seed.seed, static_cast<uint64_t>(i),
                               seed.offset / 4 + static_cast<uint64_t>(budget / 2 + m));
      const uint32_t hi = engine(), lo = engine();
      const double u = open_uniform(hi, lo) * total;
      double acc = 0;
      int64_t pick = -1;
      for (int64_t e = row.start; e < row.start + row.degree; ++e) {
        const double x = taken(i, j, e) ? 0.0 : mass(e);
        if (x > 0) pick = e;
        acc += x;
        if (x > 0 && acc > u) break;
      }
      put(i, j++, pick);
    }
    return j;
  }
};

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
      const Seeds<col_t, scalar_t> s{rowptr.const_data_ptr<int64_t>(),
                                     col.const_data_ptr<col_t>(),
                                     table.defined() ? table.const_data_ptr<int64_t>() : nullptr,
                                     weight.defined() ? weight.const_data_ptr<scalar_t>() : nullptr,
                                     rowptr.numel() - 1,
                                     col.numel(),
                                     k,
                                     seed,
                                     nbr.mutable_data_ptr<int64_t>(),
                                     eid.mutable_data_ptr<int64_t>(),
                                     counts.mutable_data_ptr<int64_t>()};
      const int64_t* v = nodes.const_data_ptr<int64_t>();
      wrs::parallel_for(0, count, 256, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          int64_t j = 0;
          if (v[i] < 0 || v[i] >= s.nodes) {
            flags.fetch_or(kNodeOutOfRange);
          } else {
            const Row row = row_at(s.rowptr, v[i], s.edges);
            j = replace ? s.with_replacement(i, row) : s.distinct(i, row);
          }
          s.count[i] = j;
          for (; j < k; ++j) s.nbr[i * k + j] = s.eid[i * k + j] = -1;
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
