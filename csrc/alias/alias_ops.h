#pragma once
// Host-side pieces of the alias ops shared by the CPU and CUDA kernels: argument
// checks and shapes. Schemas live in csrc/ops.cpp.
#include "alias/alias.h"
#include "alias/sections.h"
#include "common/checks.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

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

// _alias_sample_segments: independent multisets drawn from one run of buckets of one
// table, counts[a] draws in segment a (sections.h: each segment has its own binomial
// tree over the run's sections, tree row a). At most kMaxSegments segments, so their
// starts travel by value to the kernels.
constexpr int kMaxSegments = 256;
struct SegmentStarts {
  int64_t at[kMaxSegments + 1];  // segment a is [at[a], at[a + 1]) of the output
};

struct SegmentPlan {
  SegmentStarts starts;
  int segments;
  int64_t begin, end;  // the buckets drawn from
  int64_t total;       // draws in all
};

inline SegmentPlan segment_plan(const at::Tensor& table, at::IntArrayRef counts, int64_t begin, int64_t end) {
  constexpr const char* op = "_alias_sample_segments";
  TORCH_CHECK(table.scalar_type() == at::kLong && table.dim() == 1, op,
              ": table must be a 1-D int64 table made by alias_table, got ", table.sizes(), " ", table.scalar_type());
  TORCH_CHECK(table.numel() <= kMaxCategories, op, ": table has ", table.numel(), " buckets; alias_table makes at most 2^31");
  TORCH_CHECK(!counts.empty() && counts.size() <= static_cast<size_t>(kMaxSegments), op, ": counts must hold 1 to ",
              kMaxSegments, " segments, got ", counts.size());
  const int64_t n = table.numel();
  end = end < 0 ? n : end;
  TORCH_CHECK(begin >= 0 && begin <= end && end <= n, op, ": begin and end must satisfy 0 <= begin <= end <= ", n,
              ", got ", begin, " and ", end);
  SegmentPlan plan{};
  plan.segments = static_cast<int>(counts.size());
  plan.begin = begin;
  plan.end = end;
  for (int a = 0; a < plan.segments; ++a) {
    TORCH_CHECK(counts[a] >= 0, op, ": counts must be non-negative, got ", counts[a], " for segment ", a);
    plan.starts.at[a + 1] = plan.starts.at[a] + counts[a];
  }
  plan.total = plan.starts.at[plan.segments];
  TORCH_CHECK(plan.total == 0 || end > begin, op, ": counts ask for ", plan.total, " draws from no buckets");
  return plan;
}

inline std::vector<int64_t> sample_shape(const at::Tensor& table, int64_t num_samples) {
  auto shape = table.sizes().vec();
  shape.back() = num_samples;
  return shape;
}

}  // namespace wrs::alias
