// standard_gamma on the CPU: at::parallel_for over pairs of elements, each pair drawing
// from its own Philox subsequence (csrc/gamma/gamma.h), so results do not depend on the
// thread count.
#include "gamma/gamma_ops.h"

#include "common/philox.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <atomic>
#include <torch/library.h>

namespace wrs::gamma {

namespace {

// Returns the alpha flags seen (alpha_flags), found in the same loop.
template <typename scalar_t, typename Gen>
uint32_t standard_gamma_kernel(const scalar_t* alpha, scalar_t* out, int64_t n, bool log_output,
                               const PhiloxStreams& streams) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t pairs = (n + 1) / 2;
  std::atomic<uint32_t> flags{0};
  at::parallel_for(0, pairs, 1024, [&](int64_t begin, int64_t end) {
    uint32_t seen = 0;
    for (int64_t j = begin; j < end; ++j) {
      const int64_t i = 2 * j;
      const bool has_second = i + 1 < n;
      seen |= alpha_flags(static_cast<double>(alpha[i])) |
              (has_second ? alpha_flags(static_cast<double>(alpha[i + 1])) : 0u);
      Pair<acc_t, Gen> pair;
      pair.start(static_cast<acc_t>(alpha[i]), has_second ? static_cast<acc_t>(alpha[i + 1]) : acc_t(0),
                 has_second);
      at::philox_engine bits = streams(static_cast<uint64_t>(j));
      CandidateWords<acc_t> words;
      for (int b = 0; b < 4; ++b) words.w[b] = bits();  // block 0: the boost uniforms
      if (pair.needs_boost) {
        for (int b = 4; b < CandidateWords<acc_t>::kCount; ++b) words.w[b] = 0;
        pair.boost_words(words);
      }
      do {
        for (auto& w : words.w) w = bits();
      } while (!pair.step(words, log_output));
      out[i] = static_cast<scalar_t>(pair.out[0]);
      if (has_second) out[i + 1] = static_cast<scalar_t>(pair.out[1]);
    }
    if (seen) flags.fetch_or(seen);
  });
  return flags.load();
}

at::Tensor standard_gamma_cpu(const at::Tensor& alpha, c10::string_view method, bool log, bool validate,
                              std::optional<at::Generator> generator) {
  const Method m = check_standard_gamma(alpha, method, "standard_gamma", "alpha");
  const at::Tensor a = alpha.contiguous();
  at::Tensor out = at::empty_like(a);
  if (a.numel() == 0) return out;
  const PhiloxStreams streams{cpu_philox_seed(generator)};
  uint32_t flags = 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.scalar_type(), "standard_gamma_cpu", [&] {
    dispatch_method<at::opmath_type<scalar_t>>(m, [&](auto gen) {
      flags = standard_gamma_kernel<scalar_t, decltype(gen)>(a.const_data_ptr<scalar_t>(),
                                                             out.mutable_data_ptr<scalar_t>(), a.numel(), log, streams);
    });
  });
  if (validate) raise_alpha_flags(flags, "standard_gamma", "alpha");
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CPU, m) {
  m.impl("standard_gamma", &standard_gamma_cpu);
}

}  // namespace wrs::gamma
