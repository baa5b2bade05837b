#pragma once
// Host-side pieces of the radix-forest ops shared by the CPU and CUDA kernels: argument
// checks, shapes and the value checks. Schemas live in csrc/ops.cpp.
#include "radix_forest/radix_forest.h"
#include "common/checks.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <optional>
#include <vector>

namespace wrs::radix {

// log2 of the guide size: `cells` if given (a power of two), else the power of two at
// or above n (about one cell per item, as the paper proposes), at most 2^30.
int cell_bits(int64_t n, std::optional<int64_t> cells);

// Checks weights; returns the shapes of (cdf, guide, nodes).
void check_weights(const at::Tensor& weights);
std::vector<int64_t> guide_shape(const at::Tensor& weights, int bits);
std::vector<int64_t> nodes_shape(const at::Tensor& weights);

// A forest made by radix_forest: dtypes, matching shapes and devices. `op` names the caller.
void check_forest(const at::Tensor& cdf, const at::Tensor& guide, const at::Tensor& nodes, const char* op);

// The uniforms (and rows) of an inverse_cdf call: shapes, dtypes, and with validate, the
// values (u in [0, 1], rows in range), with one host read.
void check_lookup(const at::Tensor& cdf, const at::Tensor& u, const std::optional<at::Tensor>& row, bool validate);

// Forests per row of the batch, items per forest, log2 of the cells per forest.
struct ForestShape {
  int64_t rows, n;
  int cell_bits;
};
ForestShape forest_shape(const at::Tensor& cdf, const at::Tensor& guide);

void check_num_samples(int64_t num_samples);
// [*batch, num_samples]: the shape of radix_forest_sample's output.
std::vector<int64_t> sample_shape(const at::Tensor& cdf, int64_t num_samples);

}  // namespace wrs::radix
