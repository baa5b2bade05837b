// _multinomial_route: the method tables' answer for a shape, on any build, so that tests
// assert the route of each method's cases (and the CUDA table's on a machine without a GPU).
#include "multinomial/dispatch_cpu.h"
#include "multinomial/dispatch_cuda.h"

#include <c10/util/Exception.h>
#include <torch/library.h>

#include <string>

namespace wrs::multinomial {
namespace {

std::string multinomial_route(const std::string& device, int64_t rows, int64_t n, int64_t num_samples,
                              bool replacement, bool logits, bool float64, bool capturing, int64_t sms) {
  TORCH_CHECK(rows >= 1 && n >= 1 && num_samples >= 1, "_multinomial_route: rows, n and num_samples must be positive");
  const Shape s{rows, n, num_samples, replacement, logits, float64};
  if (device == "cpu") return method_name(choose_cpu(s));
  TORCH_CHECK(device == "cuda", "_multinomial_route: device must be \"cpu\" or \"cuda\", got \"", device, "\"");
  TORCH_CHECK(sms >= 1, "_multinomial_route: sms must be positive");
  return method_name(choose_cuda(s, capturing, sms));
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CompositeImplicitAutograd, m) {
  m.impl("_multinomial_route", &multinomial_route);
}

}  // namespace wrs::multinomial
