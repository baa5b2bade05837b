// standard_gamma on the CPU: at::parallel_for over elements, each drawing from its own
// Philox subsequence (csrc/gamma/gamma.h), so results do not depend on the thread count.
#include "gamma/gamma_ops.h"

#include "common/philox.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

namespace wrs::gamma {

namespace {

template <typename scalar_t, typename Gen>
void standard_gamma_kernel(const scalar_t* alpha, scalar_t* out, int64_t n, bool log_output,
                           const PhiloxStreams& streams) {
  using acc_t = at::opmath_type<scalar_t>;
  at::parallel_for(0, n, 2048, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      Element<acc_t, Gen> element;
      element.start(static_cast<acc_t>(alpha[i]));
      at::philox_engine bits = streams(static_cast<uint64_t>(i));
      CandidateWords<acc_t> words;
      acc_t result;
      do {
        for (auto& w : words.w) w = bits();
      } while (!element.attempt(words, log_output, result));
      out[i] = static_cast<scalar_t>(result);
    }
  });
}

at::Tensor standard_gamma_cpu(const at::Tensor& alpha, c10::string_view method, bool log, bool validate,
                              std::optional<at::Generator> generator) {
  const Method m = check_standard_gamma(alpha, method, validate, "standard_gamma", "alpha");
  const at::Tensor a = alpha.contiguous();
  at::Tensor out = at::empty_like(a);
  if (a.numel() == 0) return out;
  const PhiloxStreams streams{cpu_philox_seed(generator)};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.scalar_type(), "standard_gamma_cpu", [&] {
    dispatch_method<at::opmath_type<scalar_t>>(m, [&](auto gen) {
      standard_gamma_kernel<scalar_t, decltype(gen)>(a.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(),
                                                      a.numel(), log, streams);
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CPU, m) {
  m.impl("standard_gamma", &standard_gamma_cpu);
}

}  // namespace wrs::gamma
