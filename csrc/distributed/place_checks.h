#pragma once
// The argument checks of _ordered_labels and _ordered_place (place.cpp).
#include <ATen/core/Tensor.h>

namespace wrs::place {

void check_labels_args(const at::Tensor& cdf, int64_t count);
void check_place_args(const at::Tensor& grouped, const at::Tensor& labels, const at::Tensor& start);

}  // namespace wrs::place
