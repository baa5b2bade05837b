#pragma once
// Host side of the multinomial family, shared by the CPU and CUDA entries: the two ops'
// contracts (torch.multinomial's for probabilities, sample_logits's for logits), their
// error texts, and the composites the method tables fall back on.
#include "multinomial/laws.h"
#include "multinomial/shape.h"

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

namespace wrs::multinomial {

// One call of either op, its input seen as [rows, n].
struct Request {
  const char* op;          // "multinomial" or "sample_logits"
  bool logits;             // inputs are logits: draw from softmax(x / temperature)
  double inv_temperature;  // 1 / temperature (logits only)
  at::Tensor x;            // contiguous
  int64_t rows;
  int64_t n;
  int64_t k;  // samples per row
  bool replacement;
  std::vector<int64_t> out_shape;
};

// What the method tables see of a request.
inline Shape shape_of(const Request& r) {
  return Shape{r.rows, r.n, r.k, r.replacement, r.logits, r.x.scalar_type() == at::kDouble};
}

// torch.multinomial's checks (shape, dtype, counts; no data read) -> the request.
Request multinomial_request(const at::Tensor& input, int64_t num_samples, bool replacement);
// sample_logits's: logits [..., V] of any float dtype, temperature > 0.
Request logits_request(const at::Tensor& logits, int64_t num_samples, double temperature, bool replacement);

// Raises the op's errors for value flags (WeightFlags | kTooFewNonzero): torch's texts
// for multinomial.
void raise_value_flags(const Request& r, uint32_t flags);

// Where no fused kernel serves: alias tables with replacement (softmax in float64 first
// for logits). Value checks are the caller's.
at::Tensor sample_alias_tables(const Request& r, std::optional<at::Generator> generator);
// k draws per row, in order, from alias tables made by alias_table (the alias_sample op).
at::Tensor sample_tables(const at::Tensor& table, int64_t k, std::optional<at::Generator> generator);

}  // namespace wrs::multinomial
