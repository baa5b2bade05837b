// standard_gamma on the CPU: wrs::parallel_for over pairs of elements, each pair drawing
// from its own Philox subsequence (csrc/gamma/gamma.h), so results do not depend on the
// thread count. dirichlet_rows normalises its log-gammas row by row; beta_pairs writes
// each pair's Beta variate in the same loop that draws it.
#include "common/parallel.h"
#include "gamma/gamma_ops.h"

#include "common/philox.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

namespace wrs::gamma {

namespace {

// Pairs per parallel task: 64 pairs are several times a task's start, and fewer pairs a
// task let small calls use both threads (docs/methods.md, "64 pairs per parallel task").
constexpr int64_t kPairsPerTask = 64;

// Runs pairs [0, pairs) of elements: pair j draws from Philox subsequence j. load(j, a0,
// a1) gives its alphas and whether it has a second element; finish(j, x0, x1) takes its
// results. Returns the alpha flags seen (alpha_flags), found in the same loop.
template <typename acc_t, typename Gen, typename Load, typename Finish>
uint32_t run_pairs(int64_t pairs, bool log_output, const PhiloxStreams& streams, const Load& load,
                   const Finish& finish) {
  std::atomic<uint32_t> flags{0};
  wrs::parallel_for(0, pairs, kPairsPerTask, [&](int64_t begin, int64_t end) {
    uint32_t seen = 0;
    Pair<acc_t, Gen> pair;  // one per task: its elements keep their set-up while alpha repeats
    for (int64_t j = begin; j < end; ++j) {
      acc_t a0, a1;
      const bool has_second = load(j, a0, a1);
      seen |= alpha_flags(a0) | (has_second ? alpha_flags(a1) : 0u);
      pair.start(a0, has_second ? a1 : acc_t(0), has_second);
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
      finish(j, pair.out[0], pair.out[1]);
    }
    if (seen) flags.fetch_or(seen);
  });
  return flags.load();
}

template <typename scalar_t, typename Gen>
uint32_t standard_gamma_kernel(const scalar_t* alpha, scalar_t* out, int64_t n, bool log_output,
                               const PhiloxStreams& streams) {
  using acc_t = at::opmath_type<scalar_t>;
  const auto load = [&](int64_t j, acc_t& a0, acc_t& a1) {
    a0 = static_cast<acc_t>(alpha[2 * j]);
    const bool has_second = 2 * j + 1 < n;
    if (has_second) a1 = static_cast<acc_t>(alpha[2 * j + 1]);
    return has_second;
  };
  const auto finish = [&](int64_t j, acc_t x0, acc_t x1) {
    out[2 * j] = static_cast<scalar_t>(x0);
    if (2 * j + 1 < n) out[2 * j + 1] = static_cast<scalar_t>(x1);
  };
  return run_pairs<acc_t, Gen>((n + 1) / 2, log_output, streams, load, finish);
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

// Normalises each row of log-gammas in place to exp(x - max) / sum (the sum in double),
// parallel over rows. A row whose max is not finite (a NaN, an inf, or all -inf: only
// invalid concentrations give these) becomes NaN; returns whether there was one.
// at::softmax costs about 0.25 us per row of 10 here (CI machine: 4.1 us at 16 x 10, of a
// 14 us torch._sample_dirichlet).
template <typename acc_t>
bool normalise_log_rows(acc_t* x, int64_t rows, int64_t k) {
  constexpr acc_t kInf = std::numeric_limits<acc_t>::infinity();
  std::atomic<bool> found{false};
  wrs::parallel_for(0, rows, std::max<int64_t>(1, (int64_t{1} << 14) / k), [&](int64_t begin, int64_t end) {
    bool seen = false;
    for (int64_t r = begin; r < end; ++r) {
      acc_t* row = x + r * k;
      acc_t max = -kInf;
      bool nan = false;
      for (int64_t i = 0; i < k; ++i) {
        nan |= row[i] != row[i];
        max = row[i] > max ? row[i] : max;
      }
      if (nan || !(max > -kInf && max < kInf)) {
        std::fill(row, row + k, std::numeric_limits<acc_t>::quiet_NaN());
        seen = true;
        continue;
      }
      double sum = 0;
      for (int64_t i = 0; i < k; ++i) {
        row[i] = std::exp(row[i] - max);
        sum += row[i];
      }
      for (int64_t i = 0; i < k; ++i) row[i] = static_cast<acc_t>(row[i] / sum);
    }
    if (seen) found = true;
  });
  return found.load();
}

// Dirichlet rows without a gradient: the same standard_gamma call as the composite (the
// same draws for a seed), normalised by normalise_log_rows, which also finds the invalid
// rows, so validation reads nothing more unless a row went wrong.
at::Tensor dirichlet_rows_cpu(const at::Tensor& concentration, bool validate, std::optional<at::Generator> generator) {
  constexpr const char* kOp = "dirichlet";
  check_floating(concentration, kOp, "concentration");
  check_has_last_dim(concentration, kOp, "concentration");
  const at::ScalarType dtype = concentration.scalar_type();
  const at::ScalarType acc = dtype == at::kDouble ? at::kDouble : at::kFloat;
  if (concentration.numel() == 0) return at::empty_like(concentration, at::MemoryFormat::Contiguous);
  at::Tensor x = standard_gamma_cpu(concentration.to(acc).contiguous(), "auto", /*log=*/true, /*validate=*/false,
                                    std::move(generator));
  const int64_t k = concentration.size(-1);
  bool invalid = false;
  AT_DISPATCH_FLOATING_TYPES(acc, "dirichlet_rows_cpu", [&] {
    invalid = normalise_log_rows(x.mutable_data_ptr<scalar_t>(), x.numel() / k, k);
  });
  if (validate && invalid) {
    check_values(concentration, kOp, "concentration", /*normalised=*/true);
    TORCH_CHECK(false, kOp, ": concentration gave a row that is not finite");  // not reached: the check names the cause
  }
  return x.to(dtype);
}

// Beta without a gradient: pair i is (a_i, b_i), standard_gamma's pair i of the stacked
// [..., 2] tensor (the same Philox subsequence, so the same log-gammas as dirichlet and
// the composite for a seed), written as sigmoid(log G_a - log G_b) in the same loop: no
// stacked copy, no log-gamma tensor, no second pass. The loop also flags inf and pairs
// of zeros, which with alpha_flags are every invalid pair.
at::Tensor beta_pairs_cpu(const at::Tensor& a, const at::Tensor& b, bool validate,
                          std::optional<at::Generator> generator) {
  const BetaPairs pairs = beta_pairs_operands(a, b);
  at::Tensor out = at::empty(pairs.a.sizes(), pairs.a.options());
  const int64_t n = out.numel();
  if (n == 0) return out.to(pairs.out_dtype);
  const PhiloxStreams streams{cpu_philox_seed(generator)};
  std::atomic<bool> inf_or_zeros{false};
  uint32_t flags = 0;
  AT_DISPATCH_FLOATING_TYPES(pairs.a.scalar_type(), "beta_pairs_cpu", [&] {
    const scalar_t* pa = pairs.a.const_data_ptr<scalar_t>();
    const scalar_t* pb = pairs.b.const_data_ptr<scalar_t>();
    scalar_t* po = out.mutable_data_ptr<scalar_t>();
    constexpr scalar_t kInf = std::numeric_limits<scalar_t>::infinity();
    const auto load = [&](int64_t i, scalar_t& x, scalar_t& y) {
      x = pa[i];
      y = pb[i];
      if (x == kInf || y == kInf || (x == 0 && y == 0)) inf_or_zeros.store(true, std::memory_order_relaxed);
      return true;
    };
    const auto finish = [&](int64_t i, scalar_t log_x, scalar_t log_y) { po[i] = 1 / (1 + std::exp(log_y - log_x)); };
    dispatch_method<scalar_t>(pairs.method, [&](auto gen) {
      flags = run_pairs<scalar_t, decltype(gen)>(n, /*log_output=*/true, streams, load, finish);
    });
  });
  if (validate && (flags != 0 || inf_or_zeros.load())) raise_invalid_pair(pairs);
  return out.to(pairs.out_dtype);
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CPU, m) {
  m.impl("standard_gamma", &standard_gamma_cpu);
  m.impl("dirichlet_rows", &dirichlet_rows_cpu);
  m.impl("beta_pairs", &beta_pairs_cpu);
}

}  // namespace wrs::gamma
