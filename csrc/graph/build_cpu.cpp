// Per-node alias tables over CSR on the CPU: each node's row is built whole (float64 sum,
// exact quantization, then PSA's merge of its lights and heavies, alias/alias.h), rows
// spread over threads. Rows are independent, so the tables do not depend on the thread count.
#include "common/parallel.h"
#include "graph/graph_ops.h"

#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <atomic>
#include <vector>

namespace wrs::graph {
namespace {

uint32_t rowptr_flags(const int64_t* rowptr, int64_t nodes, int64_t edges) {
  if (rowptr[0] != 0 || rowptr[nodes] != edges) return kBadRowptr;
  uint32_t flags = 0;
  for (int64_t v = 0; v < nodes; ++v) {
    if (rowptr[v + 1] < rowptr[v]) return kBadRowptr;
    if (rowptr[v + 1] - rowptr[v] >= alias::kMaxCategories) flags |= kRowTooLong;
  }
  return flags;
}

// Scratch of one task, grown to the largest row it meets.
struct RowScratch {
  std::vector<alias::LightItem> light;
  std::vector<uint64_t> deficit_before;
  std::vector<uint32_t> heavy;
  std::vector<uint64_t> excess_through;
  void fit(int64_t n) {
    if (static_cast<int64_t>(light.size()) >= n) return;
    light.resize(n);
    deficit_before.resize(n);
    heavy.resize(n);
    excess_through.resize(n);
  }
};

// One row's table into `table` (its own buckets); returns the row's weight flags.
template <typename scalar_t>
uint32_t build_row(const scalar_t* w, int64_t n, int64_t* table, RowScratch& s) {
  double sum = 0;
  uint32_t flags = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(w[i]);
    flags |= weight_flags(x);
    sum += x;
  }
  if (!(sum <= 1.7976931348623157e308)) flags |= kRowSumOverflow;
  if (flags) return flags;
  if (sum == 0) {  // nothing to draw: every bucket says so
    for (int64_t i = 0; i < n; ++i) table[i] = kDeadBucket;
    return 0;
  }
  const RowScale rs = row_scale(sum, n);
  s.fit(n);
  alias::ClassPrefix sums{0, 0, 0, 0};
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t q = quantize(static_cast<double>(w[i]), rs, n);
    const alias::ClassPrefix cls = alias::class_of(q);
    if (cls.lights) {
      s.light[sums.lights] = alias::LightItem{static_cast<uint32_t>(i), static_cast<uint32_t>(q)};
      s.deficit_before[sums.lights] = sums.deficit;
    } else {
      s.heavy[sums.heavies] = static_cast<uint32_t>(i);
      s.excess_through[sums.heavies] = sums.excess + cls.excess;
    }
    sums = sums + cls;
  }
  const alias::MergeSlice row = alias::whole_row(s.light.data(), s.deficit_before.data(), s.heavy.data(),
                                                 s.excess_through.data(), sums.lights, sums.heavies, sums.deficit);
  alias::pack_merge_steps(row, 0, n, table);
  return 0;
}

at::Tensor csr_alias_table_cpu(const at::Tensor& rowptr_in, const at::Tensor& weight_in, bool validate) {
  (void)validate;  // the checks cost nothing extra on the CPU: always on
  constexpr const char* op = "csr_alias_table";
  check_rowptr(op, rowptr_in);
  check_build_weight(op, weight_in, rowptr_in);
  const at::Tensor rowptr = rowptr_in.contiguous();
  const at::Tensor weight = weight_in.contiguous();
  const int64_t nodes = rowptr.numel() - 1;
  const int64_t edges = weight.numel();
  const int64_t* rp = rowptr.const_data_ptr<int64_t>();
  raise_graph_flags(rowptr_flags(rp, nodes, edges), op);
  at::Tensor table = at::empty({edges}, rowptr.options());
  int64_t* tp = table.mutable_data_ptr<int64_t>();
  std::atomic<uint32_t> flags{0};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, weight.scalar_type(), "csr_alias_table_cpu", [&] {
    const scalar_t* w = weight.const_data_ptr<scalar_t>();
    // About 2^16 edges a task, however they fall into rows.
    const int64_t grain = std::max<int64_t>(1, nodes * 65536 / std::max<int64_t>(edges, 1));
    wrs::parallel_for(0, nodes, grain, [&](int64_t v0, int64_t v1) {
      RowScratch scratch;
      uint32_t mine = 0;
      for (int64_t v = v0; v < v1; ++v) {
        const int64_t n = rp[v + 1] - rp[v];
        if (n > 0) mine |= build_row(w + rp[v], n, tp + rp[v], scratch);
      }
      if (mine) flags.fetch_or(mine);
    });
  });
  raise_graph_flags(flags.load(), op);
  return table;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CPU, m) { m.impl("csr_alias_table", &csr_alias_table_cpu); }

}  // namespace wrs::graph
