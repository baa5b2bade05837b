// _ordered_labels and _ordered_place: the checks both devices share.
#include "distributed/place.h"
#include "distributed/place_checks.h"

#include <ATen/ATen.h>

namespace wrs::place {

void check_labels_args(const at::Tensor& cdf, int64_t count) {
  TORCH_CHECK(cdf.dim() == 1 && cdf.scalar_type() == at::kDouble, "_ordered_labels: cdf must be 1-D float64, got ",
              cdf.sizes(), " ", cdf.scalar_type());
  TORCH_CHECK(cdf.numel() >= 1 && cdf.numel() <= kMaxParts, "_ordered_labels: cdf must have 1 to ", kMaxParts,
              " parts, got ", cdf.numel());
  TORCH_CHECK(count >= 0, "_ordered_labels: count must be non-negative, got ", count);
}

void check_place_args(const at::Tensor& grouped, const at::Tensor& labels, const at::Tensor& start) {
  TORCH_CHECK(grouped.dim() == 1 && labels.dim() == 1 && grouped.numel() == labels.numel(),
              "_ordered_place: grouped and labels must be 1-D of one length, got ", grouped.sizes(), " and ",
              labels.sizes());
  TORCH_CHECK(labels.scalar_type() == at::kByte, "_ordered_place: labels must be uint8, got ", labels.scalar_type());
  TORCH_CHECK(start.dim() == 2 && start.scalar_type() == at::kLong && start.size(1) >= 1 && start.size(1) <= kMaxParts &&
                  start.size(0) == (labels.numel() + kPlaceBlock - 1) / kPlaceBlock,
              "_ordered_place: start must be int64 [blocks, parts], a row per block of ", kPlaceBlock,
              " positions, got ", start.sizes(), " ", start.scalar_type());
  TORCH_CHECK(grouped.device() == labels.device() && grouped.device() == start.device(),
              "_ordered_place: grouped, labels and start must be on one device");
}

}  // namespace wrs::place
