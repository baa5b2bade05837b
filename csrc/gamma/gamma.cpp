// The device-independent parts of the gamma family: checks, the reparameterised
// gradient (autograd, in C++ so TorchScript and torch.compile see it), and Dirichlet
// and Beta, which are composites of standard_gamma's log output.
#include "gamma/gamma_ops.h"

#include "common/checks.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <atomic>
#include <limits>
#include <type_traits>

namespace wrs::gamma {

namespace {

// Method "auto": Marsaglia-Tsang, the fastest exact generator for every alpha measured,
// float32 and float64 (docs/benchmarks.md, "Gamma generation"). On these GPUs the cost is
// the instructions per candidate, not divergence (the kernel does not wait on slow
// lanes), so its 2-5% rejection beats Cheng GA's cheaper but 13-32%-rejected candidates.
Method auto_method(at::ScalarType /*dtype*/) { return Method::kMarsagliaTsang; }

at::ScalarType acc_dtype(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// The smallest normal number and the epsilon of a float dtype: torch's clamps of Gamma,
// Beta and Dirichlet samples.
double smallest_normal(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return std::numeric_limits<double>::min();
    case at::kHalf: return 6.103515625e-05;
    default: return std::numeric_limits<float>::min();  // float and bfloat16
  }
}
double epsilon(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return std::numeric_limits<double>::epsilon();
    case at::kHalf: return 9.765625e-04;
    case at::kBFloat16: return 7.8125e-03;
    default: return std::numeric_limits<float>::epsilon();
  }
}

at::Tensor call_standard_gamma(const at::Tensor& alpha, c10::string_view method, bool log, bool validate,
                               std::optional<at::Generator> generator) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("wrs::standard_gamma", "")
                             .typed<at::Tensor(const at::Tensor&, c10::string_view, bool, bool,
                                               std::optional<at::Generator>)>();
  return op.call(alpha, method, log, validate, std::move(generator));
}

at::Tensor call_standard_gamma_grad(const at::Tensor& alpha, const at::Tensor& output, bool log) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("wrs::standard_gamma_grad", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, bool)>();
  return op.call(alpha, output, log);
}

}  // namespace

// Value checks with one device-to-host read: negative, NaN, and (for Dirichlet and
// Beta, whose gammas are normalised) inf, and rows whose entries are all zero.
void check_values(const at::Tensor& alpha, const char* op, const char* arg, bool normalised) {
  if (alpha.numel() == 0) return;
  check_host_read_allowed(alpha, op, arg);
  std::vector<at::Tensor> found = {(alpha < 0).any(), alpha.isnan().any()};
  if (normalised) {
    found.push_back(alpha.isinf().any());
    found.push_back((alpha == 0).all(-1).any());
  }
  const at::Tensor flags = at::stack(found).cpu();
  const bool* f = flags.const_data_ptr<bool>();
  TORCH_CHECK(!f[0], op, ": ", arg, " contains a negative entry");
  TORCH_CHECK(!f[1], op, ": ", arg, " contains NaN");
  if (normalised) {
    TORCH_CHECK(!f[2], op, ": ", arg, " contains inf");
    TORCH_CHECK(!f[3], op, ": ", arg, " has a row whose entries are all zero");
  }
}

Method check_standard_gamma(const at::Tensor& alpha, c10::string_view method, const char* op, const char* arg) {
  check_floating(alpha, op, arg);
  Method m;
  if (method == "auto") {
    m = auto_method(alpha.scalar_type());
  } else {
    TORCH_CHECK(parse_method(method, m), op, ": method must be 'auto', 'cheng_ga', 'marsaglia_tsang', "
                "'ahrens_dieter_gc', 'best_xg' or 'cheng_feast_gkm3', got '", method, "'");
  }
  return m;
}

void raise_alpha_flags(uint32_t flags, const char* op, const char* arg) {
  TORCH_CHECK(!(flags & kWeightNegative), op, ": ", arg, " contains a negative entry");
  TORCH_CHECK(!(flags & kWeightNaN), op, ": ", arg, " contains NaN");
}

namespace {

// dX/dalpha of X ~ Gamma(alpha) at fixed CDF (implicit reparameterisation):
// -(dF/dalpha) / (dF/dx). With log=true, d(log X)/dalpha for output = log X.
//
// Value output: torch's _standard_gamma_grad, at max(x, smallest normal) as torch's
// samples are clamped there (an underflowed sample gets the gradient of the clamped
// value that distributions.Gamma returns, not 0). Log output: below x = 0.8 the series
// P(alpha, x) = x^alpha / Gamma(alpha) * sum_i (-x)^i / (i! (alpha + i)), whose x^alpha
// cancels in d(log x)/dalpha = -e^x [(log x - digamma(alpha)) S1 - S2], so it holds
// where x itself underflows; 14 terms leave a relative error below 1e-13 there.
// Above 0.8, torch's dX/dalpha over x. In float64 throughout, as S1 and S2 cancel for
// tiny alpha.
at::Tensor standard_gamma_grad(const at::Tensor& alpha, const at::Tensor& output, bool log) {
  check_floating(alpha, "standard_gamma_grad", "alpha");
  check_floating(output, "standard_gamma_grad", "output");
  if (!log) {
    const at::ScalarType acc = acc_dtype(alpha);
    const at::Tensor a = alpha.to(acc), x = output.to(acc).clamp_min(smallest_normal(output.scalar_type()));
    const at::Tensor grad = at::_standard_gamma_grad(a, x);
    return at::where(a == 0, at::zeros({}, grad.options()), grad).to(alpha.scalar_type());
  }
  const at::Tensor a = alpha.to(at::kDouble), log_x = output.to(at::kDouble);
  const at::Tensor x = log_x.exp();
  at::Tensor term = at::ones_like(x);
  at::Tensor s1 = a.reciprocal(), s2 = s1 * s1;
  for (int i = 1; i <= 14; ++i) {
    term = term * (-x) / i;
    const at::Tensor inv = (a + i).reciprocal();
    s1 = s1 + term * inv;
    s2 = s2 + term * inv * inv;
  }
  const at::Tensor small = -x.exp() * ((log_x - at::digamma(a)) * s1 - s2);
  const at::Tensor x_large = x.clamp_min(0.8);
  const at::Tensor large = at::_standard_gamma_grad(a, x_large) / x_large;
  const at::Tensor grad = at::where(x < 0.8, small, large);
  return at::where(a == 0, at::zeros({}, grad.options()), grad).to(alpha.scalar_type());
}

class StandardGammaFunction : public torch::autograd::Function<StandardGammaFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& alpha,
                            c10::string_view method, bool log, bool validate,
                            std::optional<at::Generator> generator) {
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor out = call_standard_gamma(alpha, method, log, validate, std::move(generator));
    ctx->save_for_backward({alpha, out});
    ctx->saved_data["log"] = log;
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool log = ctx->saved_data["log"].toBool();
    return {grads[0] * call_standard_gamma_grad(saved[0], saved[1], log), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

// Without a gradient to carry (neither backward nor forward mode), the call goes straight
// to the device's kernel: the Function's bookkeeping is a sixth of a small call's host
// time (docs/methods.md).
at::Tensor standard_gamma_autograd(const at::Tensor& alpha, c10::string_view method, bool log, bool validate,
                                   std::optional<at::Generator> generator) {
  const bool needs_grad = at::GradMode::is_enabled() && alpha.requires_grad();
  if (!needs_grad && !alpha._fw_grad(/*level=*/0).defined()) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return call_standard_gamma(alpha, method, log, validate, std::move(generator));
  }
  return StandardGammaFunction::apply(alpha, method, log, validate, std::move(generator));
}

}  // namespace

namespace {

at::Tensor call_dirichlet_rows(const at::Tensor& concentration, bool validate, std::optional<at::Generator> generator) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("wrs::dirichlet_rows", "")
                             .typed<at::Tensor(const at::Tensor&, bool, std::optional<at::Generator>)>();
  return op.call(concentration, validate, std::move(generator));
}

// The reparameterised gradient of Dirichlet rows is the implicit gradient of each entry's
// marginal Beta(alpha_j, total - alpha_j) (Jankowiak and Obermeyer 2018), as torch's: per
// sample it has less spread than differentiating softmax(log G) through the gammas, and it
// is torch's own, sample for sample. It is taken at the sample clamped into [tiny, 1 - eps]
// of its dtype, the value distributions.Dirichlet and Beta return (an entry drawn as
// exactly 0 or 1 has a marginal density of 0 there), and it is 0 for
// entries whose marginal is a point (alpha_j = 0 or alpha_j = total).
class DirichletFunction : public torch::autograd::Function<DirichletFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& concentration, bool validate,
                            std::optional<at::Generator> generator) {
    at::Tensor x = call_dirichlet_rows(concentration, validate, std::move(generator));
    ctx->save_for_backward({concentration, x});
    return x;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::ScalarType acc = acc_dtype(saved[0]), dtype = saved[1].scalar_type();
    const at::Tensor alpha = saved[0].to(acc), g = grads[0].to(acc);
    const at::Tensor x = saved[1].to(acc).clamp(smallest_normal(dtype), 1 - epsilon(dtype));
    const at::Tensor total = alpha.sum(-1, /*keepdim=*/true).expand_as(alpha);
    const at::Tensor marginal = at::_dirichlet_grad(x, alpha, total);
    const at::Tensor point = (alpha == 0).logical_or_(alpha == total);
    const at::Tensor dx = at::where(point, at::zeros({}, marginal.options()), marginal);
    const at::Tensor grad = dx * (g - (x * g).sum(-1, /*keepdim=*/true));
    return {grad.to(saved[0].scalar_type()), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor dirichlet_implicit(const at::Tensor& concentration, bool validate, std::optional<at::Generator> generator) {
  return DirichletFunction::apply(concentration, validate, std::move(generator));
}

at::Tensor stack_pairs(const at::Tensor& a, const at::Tensor& b) {
  const std::vector<at::Tensor> ab = at::broadcast_tensors({a, b});
  const at::ScalarType out_dtype = at::promote_types(a.scalar_type(), b.scalar_type());
  return at::stack({ab[0], ab[1]}, -1).to(out_dtype == at::kDouble ? at::kDouble : at::kFloat);
}

at::Tensor beta_from_dirichlet_rows(const at::Tensor& a, const at::Tensor& b, bool validate,
                                    std::optional<at::Generator> generator, DirichletRowsFn rows) {
  const at::Tensor both = stack_pairs(a, b);
  at::Tensor out;
  try {
    out = rows(both, validate, std::move(generator));
  } catch (const c10::Error&) {
    if (validate && !stream_capturing(both)) check_values(both, "beta", "(a, b)", /*normalised=*/true);
    throw;
  }
  // Contiguous, as the CPU's beta_pairs (and the fake kernel) give it.
  return out.select(-1, 0).to(at::promote_types(a.scalar_type(), b.scalar_type())).contiguous();
}

BetaPairs beta_pairs_operands(const at::Tensor& a, const at::Tensor& b) {
  const Method method = check_standard_gamma(a, "auto", "beta", "a");
  check_floating(b, "beta", "b");
  const at::ScalarType out_dtype = at::promote_types(a.scalar_type(), b.scalar_type());
  const at::ScalarType acc = out_dtype == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor a_acc = a.to(acc), b_acc = b.to(acc);
  if (!a_acc.sizes().equals(b_acc.sizes())) {
    const std::vector<at::Tensor> ab = at::broadcast_tensors({a_acc, b_acc});
    a_acc = ab[0];
    b_acc = ab[1];
  }
  return {method, a_acc.contiguous(), b_acc.contiguous(), out_dtype};
}

void raise_invalid_pair(const BetaPairs& pairs) {
  check_values(at::stack({pairs.a, pairs.b}, -1), "beta", "(a, b)", /*normalised=*/true);
  TORCH_CHECK(false, "beta: (a, b) has an invalid pair");  // not reached: the check names the cause
}

namespace {

// dirichlet: dirichlet_rows, whose kernels normalise the log-gammas with a loop (CPU) or
// one kernel (CUDA) that also flags the invalid rows (gamma_cpu.cpp, gamma_cuda.cu); with a
// gradient to carry, through DirichletFunction, whose samples are the same.
at::Tensor dirichlet(const at::Tensor& concentration, bool validate, std::optional<at::Generator> generator) {
  if (at::GradMode::is_enabled() && concentration.requires_grad()) {
    check_floating(concentration, "dirichlet", "concentration");
    return dirichlet_implicit(concentration, validate, std::move(generator));
  }
  return call_dirichlet_rows(concentration, validate, std::move(generator));
}

// Beta(a, b) = G_a / (G_a + G_b), the first entry of the Dirichlet row (a, b); a and b
// broadcast. Without a gradient, beta_pairs: each pair drawn in log space and written in
// one loop (CPU) or kernel (CUDA) that flags the invalid pairs, with no stacked copy.
// With one, the Dirichlet rows of the stacked pairs and their implicit gradient, as
// torch's Beta. Both take standard_gamma's pairs of the stacked (a, b), so a seed gives
// the same sample either way.
at::Tensor beta(const at::Tensor& a, const at::Tensor& b, bool validate, std::optional<at::Generator> generator) {
  constexpr const char* kOp = "beta";
  check_floating(a, kOp, "a");
  check_floating(b, kOp, "b");
  if (!(at::GradMode::is_enabled() && (a.requires_grad() || b.requires_grad()))) {
    static const auto pairs_op = c10::Dispatcher::singleton()
                                     .findSchemaOrThrow("wrs::beta_pairs", "")
                                     .typed<at::Tensor(const at::Tensor&, const at::Tensor&, bool,
                                                       std::optional<at::Generator>)>();
    return pairs_op.call(a, b, validate, std::move(generator));
  }
  return beta_from_dirichlet_rows(a, b, validate, std::move(generator), &dirichlet_implicit);
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, Autograd, m) {
  m.impl("standard_gamma", &standard_gamma_autograd);
}

TORCH_LIBRARY_IMPL(wrs, CompositeImplicitAutograd, m) {
  m.impl("standard_gamma_grad", &standard_gamma_grad);
  m.impl("dirichlet", &dirichlet);
  m.impl("beta", &beta);
}

}  // namespace wrs::gamma
