#pragma once
// The argument checks of _ordered_labels, _ordered_place and _ordered_fill (place.cpp).
#include <ATen/core/Tensor.h>

namespace wrs::place {

void check_labels_args(const at::Tensor& cdf, int64_t count);
void check_place_args(const at::Tensor& grouped, const at::Tensor& labels, const at::Tensor& start);
void check_fill_args(const at::Tensor& received, const at::Tensor& labels, const at::Tensor& start,
                     const at::Tensor& offsets, const at::Tensor& table, int64_t own);

}  // namespace wrs::place
