"""PyTorch's own tests of Categorical, OneHotCategorical, Gamma, Dirichlet and Beta
(test/distributions/test_distributions.py), ported: each runs twice, against
torch.distributions and against torch_wrs.distributions, and names the upstream test.

The helpers are ours, with the statistics of torch's: ``_check_sampler_sampler`` pools the
samples with scipy's and asks that they be well mixed in 10 bins at failure rate 1e-3.
"""
from itertools import product

import numpy as np
import pytest
import scipy.special
import scipy.stats
import torch
import torch.distributions as td

import torch_wrs.distributions as wd
from conftest import requires_cuda

IMPLS = {"torch": td, "torch_wrs": wd}


@pytest.fixture(params=sorted(IMPLS))
def dist(request):
    return IMPLS[request.param]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(1234)  # as torch's TestCase.setUp


def _check_sampler_sampler(d, ref, n=10000, multivariate=False, failure_rate=1e-3):
    """The samples of d and of scipy's ref are well mixed: label ours +1 and scipy's -1,
    sort the pooled samples (ties in random order), and each of 10 equal bins must have a
    label mean within the two-sided failure_rate bound of zero."""
    ours = d.sample((n,)).cpu().double().numpy().reshape(n, -1)
    rng = np.random.RandomState(0)
    theirs = np.asarray(ref.rvs(n, random_state=rng), dtype=np.float64).reshape(n, -1)
    if multivariate:  # project on a random axis
        axis = rng.normal(size=ours.shape[1])
        axis /= np.linalg.norm(axis)
        ours, theirs = ours @ axis, theirs @ axis
    values = np.concatenate([ours.ravel(), theirs.ravel()])
    labels = np.concatenate([np.ones(n), -np.ones(n)])
    order = np.lexsort((rng.random_sample(2 * n), values))
    bins = labels[order].reshape(10, -1).mean(axis=1)
    # Each bin mean has standard deviation about (2n / 10)**-0.5; Bonferroni over the bins.
    threshold = (2 * n // 10) ** -0.5 * 2 ** 0.5 * scipy.special.erfinv(1 - failure_rate / 10)
    assert (np.abs(bins) < threshold).all(), bins


def test_categorical_1d(dist):
    """test_categorical_1d."""
    p = torch.tensor([0.1, 0.2, 0.3], dtype=torch.double, requires_grad=True)
    assert dist.Categorical(p).sample().size() == ()
    assert not dist.Categorical(p).sample().requires_grad
    assert dist.Categorical(p).sample((2, 2)).size() == (2, 2)
    assert dist.Categorical(p).sample((1,)).size() == (1,)
    with pytest.raises(NotImplementedError):
        dist.Categorical(p).rsample()


def test_categorical_2d(dist):
    """test_categorical_2d: shapes, and the extreme probabilities [[1, 0], [0, 1]]."""
    p = torch.tensor([[0.1, 0.2, 0.3], [0.5, 0.3, 0.2]], requires_grad=True)
    s = torch.tensor([[1.0, 0.0], [0.0, 1.0]], requires_grad=True)
    assert dist.Categorical(p).sample().size() == (2,)
    assert dist.Categorical(p).sample(sample_shape=(3, 4)).size() == (3, 4, 2)
    assert dist.Categorical(p).sample((6,)).size() == (6, 2)
    assert dist.Categorical(s).sample().tolist() == [0, 1]
    assert dist.Categorical(s).sample(sample_shape=(2,)).tolist() == [[0, 1], [0, 1]]


def test_categorical_sample(dist):
    """test_categorical_sample: against scipy's law, through _check_sampler_discrete's
    frequencies (here a chi-square test at 1e-3)."""
    torch.manual_seed(0)
    for probs in ([0.1, 0.2, 0.3, 0.4], [0.5, 0.5], [0.97, 0.01, 0.01, 0.01]):
        counts = torch.bincount(dist.Categorical(torch.tensor(probs)).sample((10000,)), minlength=len(probs))
        assert scipy.stats.chisquare(counts.numpy(), np.array(probs) * 10000).pvalue > 1e-3


def test_one_hot_categorical_1d(dist):
    """test_one_hot_categorical_1d."""
    p = torch.tensor([0.1, 0.2, 0.3], requires_grad=True)
    assert dist.OneHotCategorical(p).sample().size() == (3,)
    assert not dist.OneHotCategorical(p).sample().requires_grad
    assert dist.OneHotCategorical(p).sample((2, 2)).size() == (2, 2, 3)
    assert dist.OneHotCategorical(p).sample((1,)).size() == (1, 3)
    with pytest.raises(NotImplementedError):
        dist.OneHotCategorical(p).rsample()


def test_one_hot_categorical_2d(dist):
    """test_one_hot_categorical_2d."""
    p = torch.tensor([[0.1, 0.2, 0.3], [0.5, 0.3, 0.2]], requires_grad=True)
    s = torch.tensor([[1.0, 0.0], [0.0, 1.0]], requires_grad=True)
    assert dist.OneHotCategorical(p).sample().size() == (2, 3)
    assert dist.OneHotCategorical(p).sample(sample_shape=(3, 4)).size() == (3, 4, 2, 3)
    assert dist.OneHotCategorical(p).sample((6,)).size() == (6, 2, 3)
    assert torch.equal(dist.OneHotCategorical(s).sample(), torch.eye(2))


def test_gamma_shape(dist):
    """test_gamma_shape."""
    alpha, beta = torch.randn(2, 3).exp(), torch.randn(2, 3).exp()
    alpha_1d, beta_1d = torch.randn(1).exp(), torch.randn(1).exp()
    assert dist.Gamma(alpha, beta).sample().size() == (2, 3)
    assert dist.Gamma(alpha, beta).sample((5,)).size() == (5, 2, 3)
    assert dist.Gamma(alpha_1d, beta_1d).sample((1,)).size() == (1, 1)
    assert dist.Gamma(alpha_1d, beta_1d).sample().size() == (1,)
    assert dist.Gamma(0.5, 0.5).sample().size() == ()
    assert dist.Gamma(0.5, 0.5).sample((1,)).size() == (1,)
    x = dist.Gamma(alpha, beta).sample()
    want = scipy.stats.gamma.logpdf(x.numpy(), alpha.numpy(), scale=1 / beta.numpy())
    np.testing.assert_allclose(dist.Gamma(alpha, beta).log_prob(x).numpy(), want, rtol=1e-3, atol=1e-3)


def test_gamma_log_prob_at_boundary(dist):
    """test_gamma_log_prob_at_boundary: samples that underflow to the smallest normal
    number keep a finite log_prob."""
    for c, r in ((0.5, 1.0), (1.0, 1.0), (2.0, 1.0)):
        x = dist.Gamma(torch.tensor(c), torch.tensor(r)).sample((1000,))
        assert torch.isfinite(dist.Gamma(torch.tensor(c), torch.tensor(r)).log_prob(x)).all()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=requires_cuda)])
def test_gamma_sample(dist, device):
    """test_gamma_sample and (on CUDA) test_gamma_gpu_sample."""
    torch.manual_seed(0)
    for alpha, beta in product([0.1, 1.0, 5.0], [0.1, 1.0, 10.0]):
        d = dist.Gamma(torch.tensor(alpha, dtype=torch.double, device=device),
                       torch.tensor(beta, dtype=torch.double, device=device))
        _check_sampler_sampler(d, scipy.stats.gamma(alpha, scale=1.0 / beta))


def test_dirichlet_shape(dist):
    """test_dirichlet_shape."""
    alpha = torch.randn(2, 3).exp()
    alpha_1d = torch.randn(4).exp()
    assert dist.Dirichlet(alpha).sample().size() == (2, 3)
    assert dist.Dirichlet(alpha).sample((5,)).size() == (5, 2, 3)
    assert dist.Dirichlet(alpha_1d).sample().size() == (4,)
    assert dist.Dirichlet(alpha_1d).sample((1,)).size() == (1, 4)


def test_dirichlet_sample(dist):
    """test_dirichlet_sample."""
    torch.manual_seed(0)
    alpha = torch.exp(torch.randn(3, dtype=torch.double))
    _check_sampler_sampler(dist.Dirichlet(alpha), scipy.stats.dirichlet(alpha.numpy()), multivariate=True)


def test_beta_shape(dist):
    """test_beta_shape."""
    con1, con0 = torch.randn(2, 3).exp(), torch.randn(2, 3).exp()
    assert dist.Beta(con1, con0).sample().size() == (2, 3)
    assert dist.Beta(con1, con0).sample((5,)).size() == (5, 2, 3)
    assert dist.Beta(0.1, 0.3).sample().size() == ()
    assert dist.Beta(0.1, 0.3).sample((5,)).size() == (5,)


def test_beta_sample(dist):
    """test_beta_sample (in float64, as upstream's set_default_dtype): scipy's law, and tiny
    concentrations give no NaN or 0."""
    torch.manual_seed(1)
    for con1, con0 in product([0.1, 1.0, 10.0], [0.1, 1.0, 10.0]):
        d = dist.Beta(torch.tensor(con1, dtype=torch.double), torch.tensor(con0, dtype=torch.double))
        _check_sampler_sampler(d, scipy.stats.beta(con1, con0))
    for dtype in (torch.float, torch.double):
        x = dist.Beta(torch.tensor([1e-6], dtype=dtype), torch.tensor([1e-6], dtype=dtype)).sample()[0]
        assert torch.isfinite(x) and x > 0


def test_beta_underflow(dist):
    """test_beta_underflow: at concentration 0.01 no sample is exactly 0 or 1, and the mass
    sits near 0 and near 1, half each (to 0.05), in float32 and float64."""
    torch.manual_seed(1)
    n = 50000
    for dtype in (torch.float, torch.double):
        conc = torch.tensor(1e-2, dtype=dtype)
        x = dist.Beta(conc, conc).sample([n])
        assert (x == 0).sum() == 0 and (x == 1).sum() == 0
        assert abs(float((x < 0.1).sum()) / n - 0.5) < 0.05
        assert abs(float((x > 0.9).sum()) / n - 0.5) < 0.05


@requires_cuda
def test_beta_underflow_gpu(dist):
    """test_beta_underflow_gpu: the same on CUDA in float64, to 0.12 as upstream (torch's
    CUDA sampler is imbalanced at 0.05)."""
    torch.manual_seed(1)
    n = 50000
    conc = torch.tensor(1e-2, dtype=torch.float64).cuda()
    x = dist.Beta(conc, conc).sample([n])
    assert (x == 0).sum() == 0 and (x == 1).sum() == 0
    assert abs(float((x < 0.1).sum()) / n - 0.5) < 0.12
    assert abs(float((x > 0.9).sum()) / n - 0.5) < 0.12


@pytest.mark.parametrize("dtype", [torch.float, torch.double])
def test_beta_underflow_gpu_balanced(dtype):
    """Beyond upstream: torch_wrs's CUDA Beta meets the CPU's 0.05, in float32 and float64."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    torch.manual_seed(1)
    n = 50000
    conc = torch.tensor(1e-2, dtype=dtype, device="cuda")
    x = wd.Beta(conc, conc).sample([n])
    assert (x == 0).sum() == 0 and (x == 1).sum() == 0
    assert abs(float((x < 0.1).sum()) / n - 0.5) < 0.05
    assert abs(float((x > 0.9).sum()) / n - 0.5) < 0.05


def _implicit_gradient(cdf, pdf, x, theta, eps, shift):
    """dx/dtheta along a constant CDF: -dF/dtheta / f, by central differences."""
    return -(cdf(x, *shift(theta + eps)) - cdf(x, *shift(theta - eps))) / (2 * eps) / pdf(x, *shift(theta))


def test_rsample_gamma(dist):
    """TestRsample.test_gamma: per sample, the gradient is dx/dalpha along a constant CDF,
    to 5e-4 relative."""
    for alpha in [1e-2, 1e-1, 1e0, 1e1, 1e2, 1e3, 1e4]:
        alphas = torch.tensor([alpha] * 100, requires_grad=True)
        x = dist.Gamma(alphas, alphas.new_ones(100)).rsample()
        x.sum().backward()
        x, ind = x.sort()
        x = x.detach().numpy()
        got = alphas.grad[ind].numpy()
        want = _implicit_gradient(scipy.stats.gamma.cdf, scipy.stats.gamma.pdf, x, alpha,
                                  0.01 * alpha / (1.0 + alpha ** 0.5), lambda a: (a,))
        assert np.max(np.abs(got - want) / (want + 1e-30)) < 0.0005, alpha


@pytest.mark.parametrize("wrt", ["concentration1", "concentration0"])
def test_rsample_beta(dist, wrt):
    """TestRsample.test_beta_wrt_alpha and test_beta_wrt_beta: per sample, to 5e-3
    relative."""
    grid = [1e-2, 1e-1, 1e0, 1e1, 1e2]
    for con1, con0 in product(grid, grid):
        c1 = torch.tensor([con1] * 20, requires_grad=wrt == "concentration1")
        c0 = torch.tensor([con0] * 20, requires_grad=wrt == "concentration0")
        x = dist.Beta(c1, c0).rsample()
        x.sum().backward()
        x, ind = x.sort()
        x = x.detach().numpy()
        theta = con1 if wrt == "concentration1" else con0
        got = (c1 if wrt == "concentration1" else c0).grad[ind].numpy()
        shift = (lambda t: (t, con0)) if wrt == "concentration1" else (lambda t: (con1, t))
        want = _implicit_gradient(scipy.stats.beta.cdf, scipy.stats.beta.pdf, x, theta,
                                  0.01 * theta / (1.0 + np.sqrt(theta)), shift)
        rel = np.abs(got - want) / (want + 1e-30)  # as upstream: signed, so one-sided for want < 0
        assert np.max(rel) < 0.005, (con1, con0)


def test_rsample_dirichlet_on_diagonal(dist):
    """TestRsample.test_dirichlet_on_diagonal: d x_0 / d alpha_0 of Dirichlet(a0, a1, a2) is
    that of its marginal Beta(a0, a1 + a2), to 1e-3 relative."""
    grid = [1e-1, 1e0, 1e1]
    for a0, a1, a2 in product(grid, grid, grid):
        alphas = torch.tensor([[a0, a1, a2]] * 20, requires_grad=True)
        x = dist.Dirichlet(alphas).rsample()[:, 0]
        x.sum().backward()
        x, ind = x.sort()
        x = x.detach().numpy()
        got = alphas.grad[ind].numpy()[:, 0]
        want = _implicit_gradient(scipy.stats.beta.cdf, scipy.stats.beta.pdf, x, a0,
                                  0.01 * a0 / (1.0 + np.sqrt(a0)), lambda t: (t, a1 + a2))
        assert np.max(np.abs(got - want) / (want + 1e-30)) < 0.001, (a0, a1, a2)


def test_rsample_dirichlet_multivariate(dist):
    """TestRsample.test_dirichlet_multivariate: around the critical alpha where the
    gradient of E[(z_3 - E z_3)^2] changes sign, its estimate from 1e5 samples is within
    0.002 of the closed form."""
    alpha_crit = 0.25 * (5.0 ** 0.5 - 1.0)
    for shift in [-0.1, -0.05, -0.01, 0.0, 0.01, 0.05, 0.10]:
        alpha = torch.tensor([alpha_crit + shift], requires_grad=True)
        z = dist.Dirichlet(torch.cat([alpha, alpha, alpha.new([1])]).expand(100000, 3)).rsample()
        loss = torch.pow(z[:, 2] - 1.0 / (2.0 * alpha + 1.0), 2.0).mean()
        (got,) = torch.autograd.grad(loss, [alpha])
        want = (1.0 - 2.0 * alpha - 4.0 * alpha ** 2) / ((1.0 + alpha) ** 2 * (1.0 + 2.0 * alpha) ** 3)
        assert (got - want).abs().item() <= 0.002, shift


def test_rsample_dirichlet_tangent_field(dist):
    """TestRsample.test_dirichlet_tangent_field: the reparameterised gradient v = dx/dalpha_0
    satisfies the continuity equation d log p / d alpha_0 + <d log p / dx, v> + div v = 0."""
    from torch.distributions.dirichlet import _Dirichlet_backward

    def tangent(x, alpha):
        return torch.stack([_Dirichlet_backward(x, alpha, torch.eye(3, 3, dtype=x.dtype)[i].expand_as(x))[:, 0]
                            for i in range(3)], dim=-1)

    grid = [0.5, 1.0, 2.0]
    for a1, a2, a3 in product(grid, grid, grid):  # in float64, as upstream (set_default_dtype)
        alpha = torch.tensor([a1, a2, a3], dtype=torch.double, requires_grad=True).expand(20, 3)
        x = dist.Dirichlet(alpha).rsample()
        dlogp_da = torch.autograd.grad([td.Dirichlet(alpha).log_prob(x.detach()).sum()], [alpha],
                                       retain_graph=True)[0][:, 0]
        dlogp_dx = torch.autograd.grad([td.Dirichlet(alpha.detach()).log_prob(x).sum()], [x], retain_graph=True)[0]
        v = torch.stack([torch.autograd.grad([x[:, i].sum()], [alpha], retain_graph=True)[0][:, 0]
                         for i in range(3)], dim=-1)
        torch.testing.assert_close(tangent(x, alpha), v)
        dx = torch.tensor([[2.0, -1.0, -1.0], [0.0, 1.0, -1.0]], dtype=torch.double)
        dx /= dx.norm(2, -1, True)
        eps = 1e-2 * x.min(-1, True)[0]
        dv0 = (tangent(x + eps * dx[0], alpha) - tangent(x - eps * dx[0], alpha)) / (2 * eps)
        dv1 = (tangent(x + eps * dx[1], alpha) - tangent(x - eps * dx[1], alpha)) / (2 * eps)
        error = dlogp_da + (dlogp_dx * v).sum(-1) + (dv0 * dx[0] + dv1 * dx[1]).sum(-1)
        assert error.abs().max() < 0.005, (a1, a2, a3)


@pytest.mark.parametrize("cls", ["Gamma", "Dirichlet", "Beta", "Categorical", "OneHotCategorical"])
def test_distribution_expand(dist, cls):
    """test_distribution_expand: the expanded distribution samples the expanded shape."""
    params = {"Gamma": (torch.rand(3) + 0.5, torch.rand(3) + 0.5), "Dirichlet": (torch.rand(3) + 0.5,),
              "Beta": (torch.rand(3) + 0.5, torch.rand(3) + 0.5), "Categorical": (torch.rand(3),),
              "OneHotCategorical": (torch.rand(3),)}[cls]
    d = getattr(dist, cls)(*params)
    e = d.expand((4,) + d.batch_shape)
    assert e.sample().shape == (4,) + d.batch_shape + d.event_shape
    assert e.sample((2,)).shape == (2, 4) + d.batch_shape + d.event_shape


@pytest.mark.parametrize("cls", ["Gamma", "Dirichlet", "Beta", "Categorical", "OneHotCategorical"])
def test_support_constraints(dist, cls):
    """test_support_constraints: every sample lies in the support."""
    torch.manual_seed(3)
    params = {"Gamma": (torch.randn(2, 3).exp(), torch.randn(2, 3).exp()),
              "Dirichlet": (torch.randn(2, 3).exp(),),
              "Beta": (torch.randn(2, 3).exp(), torch.randn(2, 3).exp()),
              "Categorical": (torch.tensor([[0.1, 0.2, 0.3], [0.5, 0.3, 0.2]]),),
              "OneHotCategorical": (torch.tensor([[0.1, 0.2, 0.3], [0.5, 0.3, 0.2]]),)}[cls]
    d = getattr(dist, cls)(*params)
    for _ in range(10):
        assert d.support.check(d.sample()).all()
