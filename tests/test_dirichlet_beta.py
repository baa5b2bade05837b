"""Dirichlet and Beta: moments down to concentration 1e-3, normalisation, gradients,
bad input, and the torch.distributions subclasses."""
import math

import pytest
import scipy.stats as st
import torch

import torch_wrs
from torch_wrs import distributions as wd
from conftest import requires_cuda


def dirichlet_moments(alpha):
    a0 = alpha.sum(-1, keepdim=True)
    mean = alpha / a0
    var = alpha * (a0 - alpha) / (a0 * a0 * (a0 + 1))
    return mean, var


@pytest.mark.parametrize("conc", [1e-3, 0.1, 1.0, 5.0])
def test_dirichlet_moments(device, conc):
    n = 400_000
    g = torch.Generator(device=device).manual_seed(31)
    alpha = torch.tensor([conc, 2 * conc, 0.5 * conc, 3 * conc], dtype=torch.float64, device=device)
    x = torch_wrs.dirichlet(alpha.expand(n, 4), generator=g)
    assert torch.allclose(x.sum(-1), torch.ones(n, dtype=torch.float64, device=device))
    assert torch.isfinite(x).all() and (x >= 0).all()
    mean, var = dirichlet_moments(alpha)
    # Standard errors from the exact variance and the sample fourth moment.
    se_mean = (var / n).sqrt()
    assert ((x.mean(0) - mean).abs() < 5 * se_mean).all()
    fourth = ((x - mean) ** 4).mean(0)
    se_var = ((fourth - var**2) / n).sqrt()
    assert ((x.var(0) - var).abs() < 5 * se_var).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("conc", [1e-3, 0.1, 2.0])
def test_dirichlet_wide_rows(device, dtype, conc):
    # 96 categories (on CUDA a warp normalises each row). Every column's mean and variance, and (where values are representable) the KS
    # distance of one column to its exact Beta(alpha_i, alpha_0 - alpha_i) marginal.
    n, k = 100_000, 96
    alpha = conc * (0.5 + 3 * torch.arange(k, dtype=torch.float64) / k)
    g = torch.Generator(device=device).manual_seed(8)
    x = torch_wrs.dirichlet(alpha.to(device, dtype).expand(n, k), generator=g).double()
    assert x.dtype == torch.float64 and torch.isfinite(x).all() and (x >= 0).all()
    assert torch.allclose(x.sum(-1), torch.ones(n, dtype=torch.float64, device=device), atol=1e-5)
    mean, var = (m.to(device) for m in dirichlet_moments(alpha))
    assert ((x.mean(0) - mean).abs() < 5 * (var / n).sqrt()).all()
    fourth = ((x - mean) ** 4).mean(0)
    assert ((x.var(0) - var).abs() < 5 * ((fourth - var**2) / n).sqrt()).all()
    if conc >= 0.1:  # at 1e-3 most values lie below the dtype's smallest number: 0
        a0 = alpha.sum().item()
        column = x[:, 40].cpu().numpy()
        assert st.kstest(column, "beta", args=(alpha[40].item(), a0 - alpha[40].item())).pvalue > 1e-3


def test_dirichlet_tiny_concentration_is_exact_where_torch_is_not(device):
    # Concentration 1e-3: nearly every row is close to a vertex. P(component 0 wins) is
    # its share of the concentration in the limit; the mean is exact at any concentration.
    n = 1_000_000
    alpha = torch.tensor([1e-3, 3e-3], dtype=torch.float32, device=device)
    x = torch_wrs.dirichlet(alpha.expand(n, 2), generator=torch.Generator(device=device).manual_seed(2))
    assert not torch.isnan(x).any()
    mean, var = dirichlet_moments(alpha.double())
    assert abs(x[:, 0].double().mean().item() - mean[0].item()) < 5 * math.sqrt(var[0].item() / n)


@pytest.mark.parametrize("a,b", [(1e-3, 1e-3), (0.5, 0.5), (2.0, 7.0), (1e-3, 5.0)])
def test_beta_moments(device, a, b):
    n = 1_000_000
    g = torch.Generator(device=device).manual_seed(41)
    x = torch_wrs.beta(torch.full((n,), a, device=device), torch.tensor(b, device=device), generator=g).double()
    assert x.shape == (n,) and not torch.isnan(x).any()
    mean = a / (a + b)
    var = a * b / ((a + b) ** 2 * (a + b + 1))
    assert abs(x.mean().item() - mean) < 5 * math.sqrt(var / n)
    fourth = ((x - mean) ** 4).mean().item()
    assert abs(x.var().item() - var) < 5 * math.sqrt((fourth - var**2) / n)


def test_dirichlet_gradient_is_unbiased(device):
    # d E[x_0] / d alpha = d (alpha_0 / a0) / d alpha: (a0 - alpha_0) / a0^2, -alpha_0 / a0^2.
    n = 1_000_000
    torch.manual_seed(9)
    alpha = torch.tensor([0.3, 1.2, 2.0], dtype=torch.float64, device=device, requires_grad=True)
    x = torch_wrs.dirichlet(alpha.expand(n, 3))
    grads = []
    for i in range(n // 100_000):  # per-chunk means give a standard error
        (g,) = torch.autograd.grad(x[i * 100_000:(i + 1) * 100_000, 0].mean(), alpha, retain_graph=True)
        grads.append(g)
    grads = torch.stack(grads)
    a0 = alpha.sum().item()
    expected = torch.tensor([(a0 - 0.3) / a0**2, -0.3 / a0**2, -0.3 / a0**2], dtype=torch.float64, device=device)
    se = grads.std(0) / math.sqrt(len(grads))
    assert ((grads.mean(0) - expected).abs() < 5 * se).all()


def _implicit_beta_gradient(x, a, b, wrt):
    """dx/d(a or b) for x ~ Beta(a, b) reparameterised through its CDF F: -dF/dtheta / f,
    dF/dtheta by central differences of scipy's regularised incomplete beta."""
    import scipy.special as sp
    h = 1e-6
    if wrt == "a":
        dF = (sp.betainc(a + h, b, x) - sp.betainc(a - h, b, x)) / (2 * h)
    else:
        dF = (sp.betainc(a, b + h, x) - sp.betainc(a, b - h, x)) / (2 * h)
    return -dF / st.beta.pdf(x, a, b)


@pytest.mark.parametrize("a,b", [(0.5, 0.5), (2.0, 0.7), (5.0, 3.0)])
def test_beta_gradient_is_the_implicit_gradient_per_sample(device, a, b):
    """Per sample, d x / d a and d x / d b are those of the CDF inversion (Jankowiak and
    Obermeyer): the reparameterised gradient of least spread, as torch's Beta."""
    ca = torch.full((2000,), a, dtype=torch.float64, device=device, requires_grad=True)
    cb = torch.full((2000,), b, dtype=torch.float64, device=device, requires_grad=True)
    x = torch_wrs.beta(ca, cb, generator=torch.Generator(device).manual_seed(5))
    ga, gb = torch.autograd.grad(x.sum(), (ca, cb))
    xs = x.detach().cpu().numpy()
    keep = (xs > 1e-6) & (xs < 1 - 1e-6)  # away from where the differences lose digits
    for got, wrt in ((ga, "a"), (gb, "b")):
        want = _implicit_beta_gradient(xs, a, b, wrt)
        # torch._dirichlet_grad approximates the CDF derivatives to about 1e-3 relative (torch
        # tests it at 5e-3), and a wrong reparameterisation is off by far more.
        torch.testing.assert_close(got.cpu()[keep], torch.from_numpy(want)[keep], rtol=2e-3, atol=1e-6)


def test_dirichlet_gradient_is_torchs_per_sample(device):
    """For the same samples, the gradient is exactly torch's Dirichlet's (its
    _Dirichlet_backward), for any upstream gradient, including at clamped entries."""
    alpha = torch.tensor([[0.3, 1.2, 2.0], [0.02, 0.05, 4.0]], dtype=torch.float64, device=device)
    alpha = alpha.repeat(500, 1).requires_grad_()
    x = torch_wrs.dirichlet(alpha, generator=torch.Generator(device).manual_seed(6))
    upstream = torch.randn(x.shape, dtype=x.dtype, device=device, generator=torch.Generator(device).manual_seed(7))
    (got,) = torch.autograd.grad(x, alpha, upstream)
    from torch.distributions.dirichlet import _Dirichlet_backward
    finfo = torch.finfo(x.dtype)
    xc = x.detach().clamp(finfo.tiny, 1 - finfo.eps)
    want = _Dirichlet_backward(xc, alpha.detach(), upstream)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_bad_input(device):
    with pytest.raises(RuntimeError, match="dirichlet: concentration has a row whose entries are all zero"):
        torch_wrs.dirichlet(torch.zeros(2, 3, device=device))
    with pytest.raises(RuntimeError, match="dirichlet: concentration contains a negative entry"):
        torch_wrs.dirichlet(torch.tensor([1.0, -1.0], device=device))
    with pytest.raises(RuntimeError, match="dirichlet: concentration contains inf"):
        torch_wrs.dirichlet(torch.tensor([1.0, float("inf")], device=device))
    with pytest.raises(RuntimeError, match="dirichlet: concentration must have at least one dimension"):
        torch_wrs.dirichlet(torch.tensor(1.0, device=device))
    with pytest.raises(RuntimeError, match=r"beta: \(a, b\) contains NaN"):
        torch_wrs.beta(torch.tensor([float("nan")], device=device), torch.tensor([1.0], device=device))
    with pytest.raises(RuntimeError, match=r"beta: \(a, b\) has a row whose entries are all zero"):
        torch_wrs.beta(torch.tensor([0.0], device=device), torch.tensor([0.0], device=device))


@pytest.mark.parametrize("a,b,text", [(-1.0, 1.0, "contains a negative entry"), (1.0, float("inf"), "contains inf"),
                                      (float("nan"), 2.0, "contains NaN"), (0.0, 0.0, "has a row whose entries are all zero")])
def test_beta_invalid_pair_raises_in_beta_words(device, a, b, text):
    x = torch.rand(1000, device=device) + 0.5
    y = x.clone()
    x[617], y[617] = a, b
    with pytest.raises(RuntimeError, match=rf"beta: \(a, b\) {text}"):
        torch_wrs.beta(x, y)
    z = torch_wrs.beta(x, y, validate=False)  # no error; the other entries intact
    rest = torch.arange(1000, device=device) != 617
    assert ((z[rest] >= 0) & (z[rest] <= 1)).all()


def test_beta_validation_passes_zero_against_positive_and_catches_inf_first(device):
    """The CPU check reads the log-gammas: a zero a against b > 0 is valid (Beta = 0, one
    -inf log-gamma), where a = inf (+inf) and a = b = 0 (two -inf) are not."""
    ones = torch.ones(300, device=device)
    z = torch_wrs.beta(torch.zeros(300, device=device), ones)
    assert (z == 0).all()
    assert (torch_wrs.beta(ones, torch.zeros(300, device=device)) == 1).all()
    a = ones.clone()
    a[123] = float("inf")
    with pytest.raises(RuntimeError, match=r"beta: \(a, b\) contains inf"):
        torch_wrs.beta(a, ones)


def test_beta_is_the_first_entry_of_a_dirichlet_row(device):
    """Same seed, same draws: beta(a, b) is dirichlet([a, b])[..., 0] up to rounding
    (beta_pairs writes the sigmoid of the log-gammas' difference, dirichlet normalises
    the row), with or without a gradient."""
    a = torch.rand(3, 500, device=device, dtype=torch.float64) + 1e-3
    b = torch.rand(500, device=device, dtype=torch.float64) * 4
    gen = torch.Generator(device=device)
    x = torch_wrs.beta(a, b, generator=gen.manual_seed(3))
    row = torch_wrs.dirichlet(torch.stack(torch.broadcast_tensors(a, b), -1), generator=gen.manual_seed(3))
    torch.testing.assert_close(x, row[..., 0], rtol=_normalised_rtol(torch.float64, 2), atol=0)
    with_grad = torch_wrs.beta(a.clone().requires_grad_(), b, generator=gen.manual_seed(3))
    torch.testing.assert_close(with_grad.detach(), x, rtol=_normalised_rtol(torch.float64, 2), atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_beta_is_the_sigmoid_of_the_stacked_pairs_log_gammas(device, dtype):
    """beta_pairs draws pair i = (a_i, b_i) from the Philox subsequence of standard_gamma's
    pair i of the stacked [..., 2] tensor: a seed gives sigmoid(log G_a - log G_b) of
    exactly those log-gammas, in float (double for float64), then rounded to the dtype."""
    a = (torch.rand(3, 500, device=device, dtype=torch.float64) + 1e-3).to(dtype)
    b = (torch.rand(500, device=device, dtype=torch.float64) * 4 + 1e-3).to(dtype)
    gen = torch.Generator(device=device)
    x = torch_wrs.beta(a, b, generator=gen.manual_seed(3))
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    log_g = torch_wrs.standard_gamma(torch.stack(torch.broadcast_tensors(a, b), -1).to(acc), log=True,
                                     generator=gen.manual_seed(3))
    expected = torch.sigmoid(log_g[..., 0] - log_g[..., 1])
    assert x.dtype == dtype and x.shape == (3, 500)
    # A few ulps of the arithmetic (two ways to the sigmoid), then the dtype's rounding;
    # atol covers values that underflow into the subnormals (concentrations near 1e-3).
    acc_info, info = torch.finfo(acc), torch.finfo(dtype)
    torch.testing.assert_close(x.to(acc), expected, rtol=8 * acc_info.eps + info.eps, atol=4 * acc_info.tiny)


def test_distributions_are_drop_in(device):
    conc = torch.tensor([0.5, 2.0], device=device, requires_grad=True)
    rate = torch.tensor([1.0, 3.0], device=device)
    for dist, ref in (
        (wd.Gamma(conc, rate), torch.distributions.Gamma(conc, rate)),
        (wd.Dirichlet(conc), torch.distributions.Dirichlet(conc)),
        (wd.Beta(conc, rate), torch.distributions.Beta(conc, rate)),
    ):
        assert isinstance(dist, type(ref))
        s = dist.rsample((100_000,))
        assert s.shape == ref.sample((100_000,)).shape
        se = (ref.variance / 100_000).sqrt()
        assert ((s.mean(0) - ref.mean).abs() < 5 * se).all()
        assert torch.isfinite(dist.log_prob(s.detach())).all()
        (g,) = torch.autograd.grad(s.sum(), conc)
        assert torch.isfinite(g).all()
        assert dist.sample((3,)).requires_grad is False


def test_gamma_with_rate(device):
    n = 1_000_000
    x = torch_wrs.gamma(torch.full((n,), 3.0, device=device), torch.tensor(2.0, device=device),
                        generator=torch.Generator(device=device).manual_seed(6))
    assert abs(x.mean().item() - 1.5) < 5 * math.sqrt(0.75 / n)
    # Var = concentration / rate^2 = 0.75; mu4 of Gamma(3)/2 is (3*9 + 6*3) / 16.
    assert abs(x.var().item() - 0.75) < 5 * math.sqrt((45 / 16 - 0.75**2) / n)


# On CUDA: rows shared by a warp, a warp per row, a block per row, rows in chunks.
@pytest.mark.parametrize("k", [5, 300, 2000, 9000])
def test_dirichlet_invalid_anywhere_raises_with_its_cause(device, k):
    """Validation is the normalising pass's flag for rows that are not finite: each kind
    of invalid concentration, alone in a large batch, still raises with its own message."""
    rows = 500
    for value, text in ((-1.0, "contains a negative entry"), (float("nan"), "contains NaN"),
                        (float("inf"), "contains inf"), (None, "has a row whose entries are all zero")):
        c = torch.rand(rows, k, device=device) + 0.01
        if value is None:
            c[417] = 0
        else:
            c[417, k - 1] = value
        with pytest.raises(RuntimeError, match=f"dirichlet: concentration {text}"):
            torch_wrs.dirichlet(c)
        y = torch_wrs.dirichlet(c, validate=False)  # no error: a NaN row, the others intact
        assert torch.isnan(y[417]).any() and torch.isfinite(y[torch.arange(rows, device=device) != 417]).all()
    c = torch.rand(rows, k, device=device) + 0.01
    c[:, ::2] = 0  # zeros are valid while a row has a positive entry
    x = torch_wrs.dirichlet(c)
    assert (x[:, ::2] == 0).all() and torch.allclose(x.sum(-1), torch.ones(rows, device=device))


# Relative tolerance of two normalisations of the same log-gammas that sum in different
# orders (at most about k / 32 + 8 roundings each), then round to the dtype.
def _normalised_rtol(dtype, k):
    acc_eps = torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps
    return 2 * (k / 32 + 8) * acc_eps + 2 * torch.finfo(dtype).eps


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("k", [1, 2, 5, 32, 33, 1000, 1025, 8192, 8193, 20000])
def test_dirichlet_rows_are_the_softmax_of_the_log_gammas(device, dtype, k):
    """dirichlet (no gradient: dirichlet_rows) is softmax over standard_gamma's log output
    for the same seed, whichever threads normalise a row; input batched and strided."""
    conc = (torch.rand(2 * 30 * 2 * k, generator=torch.Generator().manual_seed(k)) * 3 + 1e-3).to(device, dtype)
    conc = conc.view(2, 30, 2 * k)[..., ::2]  # leading dims, a strided last dim
    x = torch_wrs.dirichlet(conc, generator=torch.Generator(device=device).manual_seed(5))
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    log_g = torch_wrs.standard_gamma(conc.to(acc), log=True, generator=torch.Generator(device=device).manual_seed(5))
    expected = torch.softmax(log_g, -1).to(dtype)
    assert x.shape == conc.shape and x.dtype == dtype
    torch.testing.assert_close(x, expected, rtol=_normalised_rtol(dtype, k), atol=torch.finfo(dtype).tiny)


def test_dirichlet_same_sample_with_and_without_a_gradient(device):
    # Both take the same standard_gamma call: a seed gives one sample whether or not a
    # gradient is carried (up to the normalisation's rounding).
    c = torch.rand(300, 96, device=device, dtype=torch.float64) + 0.05
    g = torch.Generator(device=device).manual_seed(8)
    plain = torch_wrs.dirichlet(c, generator=g)
    g.manual_seed(8)
    with_grad = torch_wrs.dirichlet(c.clone().requires_grad_(), generator=g)
    assert with_grad.requires_grad
    torch.testing.assert_close(with_grad.detach(), plain, rtol=_normalised_rtol(torch.float64, 96), atol=0)


@requires_cuda
@pytest.mark.parametrize("k", [3, 100, 2000, 9000])  # as in test_dirichlet_invalid_anywhere
def test_dirichlet_default_validate_captures_in_a_cuda_graph(k):
    c = torch.rand(1000, k, device="cuda") + 0.1
    torch_wrs.dirichlet(c)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = torch_wrs.dirichlet(c)
    graph.replay()
    first = out.clone()
    graph.replay()
    assert not torch.equal(first, out) and torch.allclose(out.sum(-1), torch.ones(1000, device="cuda"))


@requires_cuda
def test_beta_default_validate_captures_in_a_cuda_graph():
    a, b = torch.rand(1000, device="cuda") + 0.1, torch.rand(1000, device="cuda") + 0.1
    torch_wrs.beta(a, b)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = torch_wrs.beta(a, b)
    graph.replay()
    first = out.clone()
    graph.replay()
    # Concentrations near 0.1 put float draws at exactly 0 or 1 (P(X < 1e-7) is about 0.2).
    assert not torch.equal(first, out) and ((out >= 0) & (out <= 1)).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_distribution_samples_have_finite_log_prob(device, dtype):
    """The Beta and Dirichlet drop-ins clamp as torch does: log_prob of 1e6 of their own
    samples at concentration 0.01 is finite (the functional forms keep exact 0 and 1)."""
    torch.manual_seed(0)
    c = torch.tensor(0.01, dtype=dtype, device=device)
    b = torch_wrs.distributions.Beta(c, c)
    x = b.sample((1_000_000,))
    assert torch.isfinite(b.log_prob(x)).all()
    assert (x > 0).all() and (x < 1).all()
    d = torch_wrs.distributions.Dirichlet(torch.full((3,), 0.01, dtype=dtype, device=device))
    rows = d.sample((1_000_000,))
    assert torch.isfinite(d.log_prob(rows)).all()
    # the reparameterised gradient still flows through clamped samples
    conc = torch.full((3,), 0.5, dtype=dtype, device=device, requires_grad=True)
    torch_wrs.distributions.Dirichlet(conc).rsample((1000,))[:, 0].sum().backward()
    assert torch.isfinite(conc.grad).all() and (conc.grad != 0).any()
