// The device-independent parts of the radix-forest ops: argument and value checks.
#include "radix_forest/radix_forest_ops.h"

#include <ATen/ATen.h>

namespace wrs::radix {

int cell_bits(int64_t n, std::optional<int64_t> cells) {
  if (!cells.has_value()) {
    int bits = 0;
    while (bits < kMaxCellBits && (int64_t(1) << bits) < n) ++bits;
    return bits;
  }
  const int64_t m = *cells;
  TORCH_CHECK(m >= 1 && m <= (int64_t(1) << kMaxCellBits) && (m & (m - 1)) == 0,
              "radix_forest: cells must be a power of two between 1 and 2^30 (the guide table is indexed by the "
              "top bits of u), got ", m);
  int bits = 0;
  while ((int64_t(1) << bits) < m) ++bits;
  return bits;
}

void check_weights(const at::Tensor& weights) {
  check_floating(weights, "radix_forest", "weights");
  check_has_last_dim(weights, "radix_forest", "weights");
  TORCH_CHECK(weights.size(-1) <= kMaxItems, "radix_forest: weights has ", weights.size(-1),
              " categories per row; node ids are int32, so at most 2^31 - 1");
}

std::vector<int64_t> guide_shape(const at::Tensor& weights, int bits) {
  auto shape = weights.sizes().vec();
  shape.back() = int64_t(1) << bits;
  return shape;
}

std::vector<int64_t> nodes_shape(const at::Tensor& weights) {
  auto shape = weights.sizes().vec();
  shape.push_back(2);
  return shape;
}

void check_forest(const at::Tensor& cdf, const at::Tensor& guide, const at::Tensor& nodes, const char* op) {
  TORCH_CHECK(cdf.scalar_type() == at::kLong && guide.scalar_type() == at::kInt && nodes.scalar_type() == at::kLong,
              op, ": (cdf, guide, nodes) must be the int64, int32, int64 tensors made by radix_forest, got ",
              cdf.scalar_type(), ", ", guide.scalar_type(), ", ", nodes.scalar_type());
  check_has_last_dim(cdf, op, "cdf");
  TORCH_CHECK(guide.dim() == cdf.dim() && nodes.dim() == cdf.dim() + 1, op,
              ": cdf [..., N], guide [..., M] and nodes [..., N, 2] must share their batch shape, got ", cdf.sizes(),
              ", ", guide.sizes(), ", ", nodes.sizes());
  const auto batch = cdf.sizes().slice(0, cdf.dim() - 1);
  TORCH_CHECK(guide.sizes().slice(0, cdf.dim() - 1) == batch && nodes.sizes().slice(0, cdf.dim()) == cdf.sizes() &&
                  nodes.size(-1) == 2,
              op, ": cdf [..., N], guide [..., M] and nodes [..., N, 2] must share their batch shape, got ",
              cdf.sizes(), ", ", guide.sizes(), ", ", nodes.sizes());
  const int64_t m = guide.size(-1);
  TORCH_CHECK(m >= 1 && (m & (m - 1)) == 0 && m <= (int64_t(1) << kMaxCellBits), op,
              ": guide must have a power-of-two number of cells, got ", m);
  TORCH_CHECK(cdf.size(-1) <= kMaxItems, op, ": cdf has more than 2^31 - 1 items per row");
  TORCH_CHECK(guide.device() == cdf.device() && nodes.device() == cdf.device(), op,
              ": cdf, guide and nodes must be on one device, got ", cdf.device(), ", ", guide.device(), ", ",
              nodes.device());
}

ForestShape forest_shape(const at::Tensor& cdf, const at::Tensor& guide) {
  const int64_t n = cdf.size(-1);
  int bits = 0;
  while ((int64_t(1) << bits) < guide.size(-1)) ++bits;
  return ForestShape{cdf.numel() / n, n, bits};
}

void check_lookup(const at::Tensor& cdf, const at::Tensor& u, const std::optional<at::Tensor>& row, bool validate) {
  constexpr const char* op = "inverse_cdf";
  check_floating(u, op, "u");
  TORCH_CHECK(u.device() == cdf.device(), op, ": u must be on the forest's device (", cdf.device(), "), got ",
              u.device());
  const int64_t rows = cdf.numel() / cdf.size(-1);
  if (row.has_value()) {
    TORCH_CHECK(row->scalar_type() == at::kLong || row->scalar_type() == at::kInt, op,
                ": row must be an int64 or int32 tensor, got ", row->scalar_type());
    TORCH_CHECK(row->sizes() == u.sizes(), op, ": row must have u's shape ", u.sizes(), ", got ", row->sizes());
    TORCH_CHECK(row->device() == cdf.device(), op, ": row must be on the forest's device (", cdf.device(),
                "), got ", row->device());
  } else if (cdf.dim() > 1) {
    TORCH_CHECK(u.dim() == cdf.dim() && u.sizes().slice(0, u.dim() - 1) == cdf.sizes().slice(0, cdf.dim() - 1), op,
                ": with a batch of forests ", cdf.sizes().slice(0, cdf.dim() - 1),
                ", u must have shape [*batch, S] (or pass row=), got ", u.sizes());
  }
  if (!validate || u.numel() == 0) return;
  check_host_read_allowed(u, op, "u");
  std::vector<at::Tensor> found = {(~((u >= 0) & (u <= 1))).any()};  // NaN fails both
  if (row.has_value()) found.push_back(((*row < 0) | (*row >= rows)).any());
  const at::Tensor flags = at::stack(found).cpu();
  const bool* f = flags.const_data_ptr<bool>();
  TORCH_CHECK(!f[0], op, ": u must lie in [0, 1] (NaN is not allowed)");
  TORCH_CHECK(found.size() < 2 || !f[1], op, ": row has an entry outside [0, ", rows, ")");
}

void check_num_samples(int64_t num_samples) {
  TORCH_CHECK(num_samples >= 0, "radix_forest_sample: num_samples must be non-negative, got ", num_samples);
}

std::vector<int64_t> sample_shape(const at::Tensor& cdf, int64_t num_samples) {
  auto shape = cdf.sizes().vec();
  shape.back() = num_samples;
  return shape;
}

}  // namespace wrs::radix
