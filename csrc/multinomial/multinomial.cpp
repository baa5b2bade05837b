// torch.multinomial's contract on top of the alias ops, for any device (a composite:
// it launches only torch ops and torch.ops.wrs ops). With replacement it builds alias
// tables and samples them; without replacement it keeps the num_samples largest keys
// w / E, E ~ Exp(1) (Efraimidis-Spirakis), which orders the items exactly as sequential
// draws without replacement would.
//
// Unlike torch: no 2^24-category limit, and sums in float64. Values are checked with
// one device-to-host read, as torch's own checks do.
#include "multinomial/multinomial.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace wrs::multinomial {

void check_shape(const at::Tensor& input, int64_t num_samples, bool replacement) {
  TORCH_CHECK(input.dim() == 1 || input.dim() == 2, kOp, ": input (prob_dist) must be 1 or 2 dim, got ",
              input.dim());
  check_floating(input, kOp, "input");
  TORCH_CHECK(num_samples > 0, kOp, ": cannot sample num_samples <= 0 samples, got ", num_samples);
  const int64_t categories = input.size(-1);
  TORCH_CHECK(categories > 0, kOp, ": input has no categories (last dimension is 0)");
  TORCH_CHECK(replacement || num_samples <= categories, kOp, ": cannot sample num_samples (", num_samples,
              ") > input.size(-1) (", categories, ") samples without replacement");
}

void raise_value_flags(uint32_t flags, int64_t num_samples) {
  TORCH_CHECK(!(flags & (kWeightNegative | kWeightNaN | kWeightInf)), kOp,
              ": input (probability tensor) contains either inf, nan or element < 0");
  TORCH_CHECK(!(flags & (kRowZeroSum | kRowSumOverflow)), kOp,
              ": invalid multinomial distribution (sum of probabilities <= 0)");
  TORCH_CHECK(!(flags & kTooFewNonzero), kOp, ": invalid multinomial distribution (with replacement=False, "
              "not enough non-zero categories to sample ", num_samples, ")");
}

namespace {

void check_values(const at::Tensor& w, int64_t num_samples, bool replacement) {
  // One read back for every check: [negative, nan, inf, zero-sum row, too few nonzero].
  const at::Tensor nonzero = (w > 0).sum(-1);
  const at::Tensor found = at::stack({(w < 0).any(), w.isnan().any(), w.isinf().any(),
                                      (w.sum(-1) == 0).any(),
                                      replacement ? at::zeros({}, nonzero.options().dtype(at::kBool))
                                                  : (nonzero < num_samples).any()})
                               .cpu();
  const bool* f = found.const_data_ptr<bool>();
  raise_value_flags((f[0] || f[1] || f[2] ? kWeightNegative : 0u) | (f[3] ? kRowZeroSum : 0u) |
                    (f[4] ? kTooFewNonzero : 0u), num_samples);
}

}  // namespace

at::Tensor multinomial_composite(const at::Tensor& input, int64_t num_samples, bool replacement,
                                 std::optional<at::Generator> generator) {
  check_shape(input, num_samples, replacement);
  auto out_shape = input.sizes().vec();
  out_shape.back() = num_samples;
  if (input.numel() == 0) return at::empty(out_shape, input.options().dtype(at::kLong));
  check_values(input, num_samples, replacement);

  static const auto table_op = c10::Dispatcher::singleton().findSchemaOrThrow("wrs::alias_table", "")
                                   .typed<at::Tensor(const at::Tensor&, bool)>();
  static const auto sample_op = c10::Dispatcher::singleton().findSchemaOrThrow("wrs::alias_sample", "")
                                    .typed<at::Tensor(const at::Tensor&, c10::SymInt, bool, c10::string_view,
                                                      std::optional<at::ScalarType>, std::optional<at::Generator>)>();
  if (replacement) {
    const at::Tensor table = table_op.call(input, /*validate=*/false);
    return sample_op.call(table, c10::SymInt(num_samples), /*ordered=*/true, "auto", std::nullopt, generator);
  }
  const at::Tensor w = input.to(at::kDouble);
  const at::Tensor e = at::empty_like(w).exponential_(1.0, generator);
  // Zero weights get key -1, below every positive key (w / e is never negative).
  const at::Tensor keys = at::where(w > 0, w / e, at::full({}, -1.0, w.options()));
  return std::get<1>(keys.topk(num_samples, -1, /*largest=*/true, /*sorted=*/true));
}

TORCH_LIBRARY_IMPL(wrs, CompositeExplicitAutograd, m) {
  m.impl("multinomial", &multinomial_composite);
}

}  // namespace wrs::multinomial
