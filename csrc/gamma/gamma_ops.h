#pragma once
// Host-side pieces of the gamma ops shared by the CPU and CUDA kernels: argument checks
// and the method choice. Schemas live in csrc/ops.cpp.
#include "common/checks.h"
#include "gamma/gamma.h"

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace wrs::gamma {

// Checks alpha's dtype and `method`; returns the generator it names ("auto" is the
// fastest exact one measured, docs/benchmarks.md). alpha's values are checked by the
// generating kernels themselves, in the same pass (alpha_flags, raise_alpha_flags).
Method check_standard_gamma(const at::Tensor& alpha, c10::string_view method, const char* op, const char* arg);

// What validate=True rejects in an alpha, as WeightFlags bits (common/checks.h): the
// kernels OR these into one status word, only for the elements they see invalid.
template <typename acc_t>  // float or double: no conversion in a float kernel's loop
C10_HOST_DEVICE inline uint32_t alpha_flags(acc_t a) {
  return a != a ? kWeightNaN : a < 0 ? kWeightNegative : 0u;
}

// Raises standard_gamma's errors for the flags found (negative first, as before).
void raise_alpha_flags(uint32_t flags, const char* op, const char* arg);

// The detailed value checks, with one read back: negative, NaN, and (normalised: for
// Dirichlet and Beta) inf and rows whose entries are all zero. Dirichlet runs them only
// after its status word says some row went wrong, for the message.
void check_values(const at::Tensor& alpha, const char* op, const char* arg, bool normalised);

// Dirichlet rows from dirichlet_rows, with the implicit reparameterised gradient of each
// entry's marginal Beta: the differentiable path of dirichlet and beta.
at::Tensor dirichlet_implicit(const at::Tensor& concentration, bool validate, std::optional<at::Generator> generator);

// (a, b) broadcast and stacked into rows [..., 2] of float (double where either is):
// the Dirichlet rows whose first entries are Beta(a, b), and standard_gamma's pairs.
at::Tensor stack_pairs(const at::Tensor& a, const at::Tensor& b);

// beta_pairs' operands, for its CPU loop and CUDA kernel alike: (a, b) checked,
// broadcast and contiguous in float (double where either is), the generator "auto" names,
// and the dtype of the result.
struct BetaPairs {
  Method method;
  at::Tensor a, b;
  at::ScalarType out_dtype;
};
BetaPairs beta_pairs_operands(const at::Tensor& a, const at::Tensor& b);

// Raises beta's error for the invalid pair that a beta_pairs kernel flagged.
[[noreturn]] void raise_invalid_pair(const BetaPairs& pairs);

// Beta(a, b) as the first entries of Dirichlet rows drawn by `rows` (dirichlet_rows, or
// dirichlet_implicit): an invalid pair raises there in dirichlet's words and
// is checked again here, for beta's.
using DirichletRowsFn = at::Tensor (*)(const at::Tensor&, bool, std::optional<at::Generator>);
at::Tensor beta_from_dirichlet_rows(const at::Tensor& a, const at::Tensor& b, bool validate,
                                    std::optional<at::Generator> generator, DirichletRowsFn rows);

}  // namespace wrs::gamma
