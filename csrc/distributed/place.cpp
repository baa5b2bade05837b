// _ordered_labels, _ordered_place and _ordered_fill: the checks both devices share.
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

void check_fill_args(const at::Tensor& received, const at::Tensor& labels, const at::Tensor& start,
                     const at::Tensor& offsets, const at::Tensor& table, int64_t own) {
  TORCH_CHECK(labels.dim() == 1 && labels.scalar_type() == at::kByte, "_ordered_fill: labels must be 1-D uint8, got ",
              labels.sizes(), " ", labels.scalar_type());
  TORCH_CHECK(received.dim() == 1 && (received.scalar_type() == at::kInt || received.scalar_type() == at::kLong),
              "_ordered_fill: received must be 1-D int32 or int64, got ", received.sizes(), " ", received.scalar_type());
  TORCH_CHECK(start.dim() == 2 && start.scalar_type() == at::kLong && start.size(1) >= 1 && start.size(1) <= kMaxParts &&
                  start.size(0) == (labels.numel() + kPlaceBlock - 1) / kPlaceBlock,
              "_ordered_fill: start must be int64 [blocks, parts], a row per block of ", kPlaceBlock,
              " positions, got ", start.sizes(), " ", start.scalar_type());
  const int64_t parts = start.size(1);
  TORCH_CHECK(offsets.dim() == 1 && offsets.scalar_type() == at::kLong && offsets.numel() == parts,
              "_ordered_fill: offsets must be int64 [parts], got ", offsets.sizes(), " ", offsets.scalar_type());
  TORCH_CHECK(own >= -1 && own < parts, "_ordered_fill: own must be a part or -1, got ", own);
  TORCH_CHECK(own < 0 || (table.dim() == 1 && table.scalar_type() == at::kLong && table.numel() >= 1 &&
                          table.numel() <= (int64_t{1} << 31)),
              "_ordered_fill: table must be a non-empty 1-D int64 alias table, got ", table.sizes(), " ",
              table.scalar_type());
  for (const at::Tensor* t : {&received, &start, &offsets, &table}) {
    TORCH_CHECK(t->device() == labels.device(), "_ordered_fill: every tensor must be on one device");
  }
}

}  // namespace wrs::place
