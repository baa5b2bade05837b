#pragma once
// Host-side pieces of the graph ops shared by the CPU and CUDA kernels: argument checks
// and the flags a call raises. Schemas live in csrc/ops.cpp.
#include "common/checks.h"
#include "graph/graph.h"

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <optional>

namespace wrs::graph {

// rowptr [N + 1] int64, and col [E] int64 or int32 on its device.
inline void check_rowptr(const char* op, const at::Tensor& rowptr) {
  TORCH_CHECK(rowptr.dim() == 1 && rowptr.numel() >= 1, op, ": rowptr must be a 1-D tensor of N + 1 offsets, got shape ",
              rowptr.sizes());
  TORCH_CHECK(rowptr.scalar_type() == at::kLong, op, ": rowptr must be int64, got ", rowptr.scalar_type());
}

inline void check_csr(const char* op, const at::Tensor& rowptr, const at::Tensor& col) {
  check_rowptr(op, rowptr);
  TORCH_CHECK(col.dim() == 1, op, ": col must be a 1-D tensor, got shape ", col.sizes());
  TORCH_CHECK(col.scalar_type() == at::kLong || col.scalar_type() == at::kInt, op,
              ": col must be int64 or int32, got ", col.scalar_type());
  TORCH_CHECK(col.device() == rowptr.device(), op, ": col is on ", col.device(), " but rowptr is on ",
              rowptr.device());
}

inline void check_edge_tensor(const char* op, const char* arg, const at::Tensor& t, int64_t edges,
                              const at::Tensor& rowptr) {
  TORCH_CHECK(t.dim() == 1 && t.numel() == edges, op, ": ", arg, " must be a 1-D tensor with one entry per edge (",
              edges, "), got shape ", t.sizes());
  TORCH_CHECK(t.device() == rowptr.device(), op, ": ", arg, " is on ", t.device(), " but rowptr is on ",
              rowptr.device());
}

// The optional table (int64, from csr_alias_table) and weights (float32 / float64) of a
// sampling call; neither means every edge weighs the same.
inline void check_table_weight(const char* op, const std::optional<at::Tensor>& table,
                               const std::optional<at::Tensor>& weight, const at::Tensor& rowptr, int64_t edges) {
  if (table.has_value()) {
    check_edge_tensor(op, "table", *table, edges, rowptr);
    TORCH_CHECK(table->scalar_type() == at::kLong, op, ": table must be the int64 tensor csr_alias_table makes, got ",
                table->scalar_type());
  }
  if (weight.has_value()) {
    check_edge_tensor(op, "weight", *weight, edges, rowptr);
    TORCH_CHECK(weight->scalar_type() == at::kFloat || weight->scalar_type() == at::kDouble, op,
                ": weight must be float32 or float64 here, got ", weight->scalar_type());
    TORCH_CHECK(table.has_value(), op, ": weight needs the table built from it (csr_alias_table)");
  }
}

inline void check_nodes(const char* op, const char* arg, const at::Tensor& nodes, const at::Tensor& rowptr) {
  TORCH_CHECK(nodes.dim() == 1, op, ": ", arg, " must be a 1-D tensor of node ids, got shape ", nodes.sizes());
  TORCH_CHECK(nodes.scalar_type() == at::kLong || nodes.scalar_type() == at::kInt, op, ": ", arg,
              " must be int64 or int32, got ", nodes.scalar_type());
  TORCH_CHECK(nodes.device() == rowptr.device(), op, ": ", arg, " is on ", nodes.device(), " but rowptr is on ",
              rowptr.device());
}

// The build's checks of the weight tensor (any float dtype, one entry per edge).
inline void check_build_weight(const char* op, const at::Tensor& weight, const at::Tensor& rowptr) {
  TORCH_CHECK(weight.dim() == 1, op, ": weight must be a 1-D tensor with one entry per edge, got shape ",
              weight.sizes());
  check_floating(weight, op, "weight");
  TORCH_CHECK(weight.device() == rowptr.device(), op, ": weight is on ", weight.device(), " but rowptr is on ",
              rowptr.device());
}

inline void raise_graph_flags(uint32_t flags, const char* op) {
  TORCH_CHECK(!(flags & kBadRowptr), op,
              ": rowptr must start at 0, never decrease, and end at the number of edges");
  TORCH_CHECK(!(flags & kRowTooLong), op, ": a node has 2^31 or more edges; a row's alias table holds fewer");
  TORCH_CHECK(!(flags & kNodeOutOfRange), op, ": a node id is outside [0, N), N = rowptr.numel() - 1");
  TORCH_CHECK(!(flags & kWeightNaN), op, ": weight contains NaN");
  TORCH_CHECK(!(flags & kWeightInf), op, ": weight contains inf");
  TORCH_CHECK(!(flags & kWeightNegative), op, ": weight contains a negative entry");
  TORCH_CHECK(!(flags & kRowSumOverflow), op,
              ": weight has a node whose edge weights sum past float64's range; scale the weights down");
}

}  // namespace wrs::graph

namespace wrs::graph {

// The arguments every sampling op (neighbours, walks) checks the same way.
inline void check_sampling(const char* op, const at::Tensor& rowptr, const at::Tensor& col,
                           const std::optional<at::Tensor>& table, const std::optional<at::Tensor>& weight,
                           const at::Tensor& nodes, const char* nodes_arg) {
  check_csr(op, rowptr, col);
  check_table_weight(op, table, weight, rowptr, col.numel());
  check_nodes(op, nodes_arg, nodes, rowptr);
}

inline void check_walk_args(const char* op, int64_t walk_length, double p, double q, bool weighted_table,
                            bool has_weight, const std::optional<at::Tensor>& rows_sorted, const at::Tensor& rowptr) {
  TORCH_CHECK(!rows_sorted.has_value() || (rows_sorted->numel() == 1 && rows_sorted->scalar_type() == at::kBool &&
                                           rows_sorted->device() == rowptr.device()),
              op, ": rows_sorted must be a one-element bool tensor on rowptr's device");
  TORCH_CHECK(walk_length >= 0, op, ": walk_length must be non-negative, got ", walk_length);
  TORCH_CHECK(p > 0 && q > 0 && p < 1e300 && q < 1e300, op, ": p and q must be positive and finite, got p = ", p,
              ", q = ", q);
  TORCH_CHECK(!(p != 1.0 || q != 1.0) || !weighted_table || has_weight, op,
              ": node2vec steps (p or q other than 1) over a weighted table need its weight too");
}

inline void check_fanout(const char* op, int64_t k, bool replace, bool weighted_table, bool has_weight) {
  TORCH_CHECK(k >= 0, op, ": k must be non-negative, got ", k);
  TORCH_CHECK(replace || !weighted_table || has_weight, op,
              ": sampling without replacement over a weighted table needs its weight too");
}

// The tensors of a sampling call (neighbours or walks), checked and made contiguous, the
// node ids as int64; table and weight undefined where not given.
struct SamplingArgs {
  at::Tensor rowptr, col, table, weight, nodes;
  SamplingArgs(const char* op, const at::Tensor& rowptr_in, const at::Tensor& col_in,
               const std::optional<at::Tensor>& table_in, const std::optional<at::Tensor>& weight_in,
               const at::Tensor& nodes_in, const char* nodes_arg) {
    check_sampling(op, rowptr_in, col_in, table_in, weight_in, nodes_in, nodes_arg);
    rowptr = rowptr_in.contiguous();
    col = col_in.contiguous();
    nodes = nodes_in.to(at::kLong).contiguous();
    if (table_in.has_value()) table = table_in->contiguous();
    if (weight_in.has_value()) weight = weight_in->contiguous();
  }
  int64_t num_nodes() const { return rowptr.numel() - 1; }
  const int64_t* table_ptr() const { return table.defined() ? table.const_data_ptr<int64_t>() : nullptr; }
  template <typename w_t>
  const w_t* weight_ptr() const { return weight.defined() ? weight.const_data_ptr<w_t>() : nullptr; }
};

// csr_sample_neighbors' outputs for `count` seeds: neighbours and edge ids [count, k], counts.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> neighbor_outputs(int64_t count, int64_t k,
                                                                     const at::TensorOptions& opts) {
  return {at::empty({count, k}, opts), at::empty({count, k}, opts), at::empty({count}, opts)};
}

// f(col_t{}, w_t{}) for col's index type and weight's float type (float where none is given).
template <typename F>
void dispatch_graph(const SamplingArgs& a, F&& f) {
  AT_DISPATCH_INDEX_TYPES(a.col.scalar_type(), "graph sampling", [&] {
    using col_t = index_t;
    AT_DISPATCH_FLOATING_TYPES(a.weight.defined() ? a.weight.scalar_type() : at::kFloat, "graph sampling",
                               [&] { f(col_t{}, scalar_t{}); });
  });
}

}  // namespace wrs::graph
