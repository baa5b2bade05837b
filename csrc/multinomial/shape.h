#pragma once
// What a method table sees of a call: its shape and kind, never its values.
#include <cstdint>

namespace wrs::multinomial {

struct Shape {
  int64_t rows;  // rows of the input seen as [rows, n]
  int64_t n;     // items per row
  int64_t k;     // draws per row
  bool replacement;
  bool logits;   // sample_logits (softmax(x / T)), else probabilities
  bool float64;  // the input is float64
};

}  // namespace wrs::multinomial
