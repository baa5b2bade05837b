#pragma once
// Host-side pieces of the alias ops shared by the CPU and CUDA kernels: argument
// checks and shapes. Schemas live in csrc/ops.cpp.
#include "alias/alias.h"
#include "alias/sections.h"
#include "common/checks.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <vector>

namespace wrs::alias {

inline void check_weights(const at::Tensor& weights) {
  check_floating(weights, "alias_table", "weights");
  check_has_last_dim(weights, "alias_table", "weights");
  TORCH_CHECK(weights.size(-1) <= kMaxCategories, "alias_table: weights has ", weights.size(-1),
              " categories; the 8-byte table row holds at most 2^31 per row");
}

inline void check_table(const at::Tensor& table) {
  TORCH_CHECK(table.scalar_type() == at::kLong,
              "alias_sample: table must be an int64 tensor made by alias_table, got ",
              table.scalar_type());
  check_has_last_dim(table, "alias_sample", "table");
  TORCH_CHECK(table.size(-1) <= kMaxCategories, "alias_sample: table has ", table.size(-1),
              " buckets per row; alias_table makes at most 2^31");
}

inline void check_num_samples(int64_t num_samples) {
  TORCH_CHECK(num_samples >= 0, "alias_sample: num_samples must be non-negative, got ",
              num_samples);
}

inline at::ScalarType sample_dtype(std::optional<at::ScalarType> dtype) {
  const at::ScalarType t = dtype.value_or(at::kLong);
  TORCH_CHECK(t == at::kLong || t == at::kInt, "alias_sample: dtype must be torch.int64 or torch.int32, got ", t);
  return t;
}

// Which sampler serves a call. ordered=True (i.i.d. draws in order) is the baseline;
// ordered=False may group draws by table section, which pays once a table outgrows L1
// and is drawn from about once per 8 buckets or more.
inline SampleMethod sample_method(bool ordered, c10::string_view method, int64_t buckets,
                                  int64_t num_samples, int64_t rows) {
  TORCH_CHECK(method == "auto" || method == "baseline" || method == "cached" || method == "shared",
              "alias_sample: method must be 'auto', 'baseline', 'cached' or 'shared', got '", method, "'");
  if (method == "baseline" || (method == "auto" && ordered)) return SampleMethod::kBaseline;
  TORCH_CHECK(!ordered, "alias_sample: method='", method,
              "' draws samples grouped by table section, not in order; pass ordered=False");
  if (method == "auto") {
    const bool sectioned = buckets > kSharedSectionBuckets && num_samples >= buckets / 8;
    if (!sectioned) return SampleMethod::kBaseline;
  }
  TORCH_CHECK(rows < (int64_t{1} << 31), "alias_sample: sectioned sampling takes at most 2^31 rows, got ", rows);
  return method == "cached" ? SampleMethod::kCached : SampleMethod::kShared;
}

// _alias_sample_askers: a one-row table, counts per asker, their output offsets, and the
// section grid (shared method).
struct Askers {
  std::vector<int64_t> count, base;
  int64_t total = 0;
  at::ScalarType out_type;
  SectionGrid grid;
  int64_t rows() const { return static_cast<int64_t>(count.size()); }
};

inline Askers check_askers(const at::Tensor& table, at::IntArrayRef counts, std::optional<at::ScalarType> dtype) {
  check_table(table);
  TORCH_CHECK(table.dim() == 1, "_alias_sample_askers: table must be one row (1-D), got ", table.dim(), " dims");
  TORCH_CHECK(counts.size() < (size_t{1} << 31), "_alias_sample_askers: too many counts");
  Askers a;
  a.out_type = sample_dtype(dtype);
  for (const int64_t c : counts) {
    TORCH_CHECK(c >= 0, "_alias_sample_askers: counts must be non-negative, got ", c);
    a.count.push_back(c);
    a.base.push_back(a.total);
    a.total += c;
  }
  // A block draws every asker's share of its section: parts sized for the total.
  a.grid = section_grid(SampleMethod::kShared, table.size(0), a.total);
  return a;
}

inline std::vector<int64_t> sample_shape(const at::Tensor& table, int64_t num_samples) {
  auto shape = table.sizes().vec();
  shape.back() = num_samples;
  return shape;
}

}  // namespace wrs::alias
