// The two ops' contracts and error texts, and the alias-table composite (laws.h says what
// every path samples).
#include "multinomial/multinomial.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <cmath>

namespace wrs::multinomial {

namespace {

Request request(const char* op, bool logits, double inv_temperature, const at::Tensor& input, int64_t num_samples,
                bool replacement) {
  const int64_t n = input.size(-1);
  Request r{op, logits, inv_temperature, input.contiguous(), 0, n, num_samples, replacement, input.sizes().vec()};
  r.rows = n == 0 ? 0 : input.numel() / n;
  r.out_shape.back() = num_samples;
  return r;
}

}  // namespace

// torch.multinomial's checks, in its order and with its texts (torch's own error inputs,
// tests/test_upstream_torch.py, hold us to them). No 2^24 limit on the categories.
Request multinomial_request(const at::Tensor& input, int64_t num_samples, bool replacement) {
  TORCH_CHECK(input.dim() == 1 || input.dim() == 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(at::isFloatingType(input.scalar_type()),
              "multinomial only supports floating-point dtypes for input, got: ", input.scalar_type());
  TORCH_CHECK(num_samples > 0, "cannot sample n_sample <= 0 samples");
  const int64_t categories = input.size(-1);
  TORCH_CHECK(replacement || num_samples <= categories,
              "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  TORCH_CHECK(categories > 0, "multinomial: input has no categories (last dimension is 0)");
  return request("multinomial", false, 1.0, input, num_samples, replacement);
}

Request logits_request(const at::Tensor& logits, int64_t num_samples, double temperature, bool replacement) {
  constexpr const char* op = "sample_logits";
  check_floating(logits, op, "logits");
  check_has_last_dim(logits, op, "logits");
  TORCH_CHECK(num_samples > 0, op, ": num_samples must be positive, got ", num_samples);
  TORCH_CHECK(temperature > 0 && std::isfinite(temperature), op,
              ": temperature must be positive and finite, got ", temperature);
  TORCH_CHECK(replacement || num_samples <= logits.size(-1), op, ": cannot draw num_samples (", num_samples,
              ") > logits.size(-1) (", logits.size(-1), ") samples without replacement");
  return request(op, true, 1.0 / temperature, logits, num_samples, replacement);
}

void raise_value_flags(const Request& r, uint32_t flags) {
  if (!r.logits) {
    // torch.multinomial's texts: its with-replacement kernel (k > 1) names the entry, its
    // other paths check the whole tensor first; a NaN fails torch's "entry >= 0" test.
    if (r.replacement && r.k > 1) {
      TORCH_CHECK(!(flags & (kWeightNegative | kWeightNaN)),
                  "invalid multinomial distribution (encountering probability entry < 0)");
      TORCH_CHECK(!(flags & kWeightInf),
                  "invalid multinomial distribution (encountering probability entry = infinity or NaN)");
    } else {
      TORCH_CHECK(!(flags & (kWeightNegative | kWeightNaN | kWeightInf)),
                  "probability tensor contains either `inf`, `nan` or element < 0");
    }
    TORCH_CHECK(!(flags & (kRowZeroSum | kRowSumOverflow)), "invalid multinomial distribution (sum of probabilities <= 0)");
    // torch draws zero-weight categories here instead; we raise (docs/guide.md lists it).
    TORCH_CHECK(!(flags & kTooFewNonzero), "invalid multinomial distribution (with replacement=False, "
                "not enough non-zero categories to sample ", r.k, ")");
    return;
  }
  TORCH_CHECK(!(flags & (kWeightNaN | kWeightInf)), r.op, ": logits contains NaN or +inf");
  TORCH_CHECK(!(flags & (kRowZeroSum | kRowSumOverflow)), r.op, ": logits has a row whose entries are all -inf");
  TORCH_CHECK(!(flags & kTooFewNonzero), r.op, ": cannot draw ", r.k,
              " samples without replacement from a row with fewer finite logits");
}

at::Tensor sample_tables(const at::Tensor& table, int64_t k, std::optional<at::Generator> generator) {
  static const auto sample_op = c10::Dispatcher::singleton().findSchemaOrThrow("wrs::alias_sample", "")
                                    .typed<at::Tensor(const at::Tensor&, c10::SymInt, bool, c10::string_view,
                                                      std::optional<at::ScalarType>, std::optional<at::Generator>)>();
  return sample_op.call(table, c10::SymInt(k), /*ordered=*/true, "auto", std::nullopt, std::move(generator));
}

at::Tensor sample_alias_tables(const Request& r, std::optional<at::Generator> generator) {
  static const auto table_op = c10::Dispatcher::singleton().findSchemaOrThrow("wrs::alias_table", "")
                                   .typed<at::Tensor(const at::Tensor&, bool)>();
  const at::Tensor x = r.x.view({r.rows, r.n});
  const at::Tensor w = r.logits ? at::softmax(x.to(at::kDouble) * r.inv_temperature, -1) : x;
  const at::Tensor table = table_op.call(w, /*validate=*/false);
  return sample_tables(table, r.k, std::move(generator)).view(r.out_shape);
}

// Integer outputs have no gradient: autograd is passed through rather than handled by
// the boxed fallback, which costs host time on every call.
TORCH_LIBRARY_IMPL(wrs, Autograd, m) {
  m.impl("multinomial", torch::CppFunction::makeFallthrough());
  m.impl("sample_logits", torch::CppFunction::makeFallthrough());
  m.impl("multinomial_counts", torch::CppFunction::makeFallthrough());
}

}  // namespace wrs::multinomial
