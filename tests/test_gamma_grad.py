"""The reparameterised gradient of standard_gamma against finite differences of the
CDF (implicit differentiation), and its unbiasedness: E[dX/dalpha] = dE[X]/dalpha."""
import math

import numpy as np
import pytest
import scipy.special as sp
import torch

import torch_wrs

QUANTILES = np.array([1e-3, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99, 0.999])


def reference_dlogx(alpha, log_x):
    """d(log x)/dalpha at fixed CDF: -(dF/dalpha) / (x f(x)), dF/dalpha by central
    differences of the regularised incomplete gamma, in log space (x may underflow)."""
    h = 1e-6 * alpha
    x = np.exp(log_x)
    tiny = log_x < -600
    # Below e^-600, F = x^alpha / Gamma(alpha + 1) (1 + O(x)): differentiate that exactly.
    with np.errstate(divide="ignore", invalid="ignore"):
        d_f = (sp.gammainc(alpha + h, x) - sp.gammainc(alpha - h, x)) / (2 * h)
        log_pdf = (alpha - 1) * log_x - x - sp.gammaln(alpha)
        out = -d_f / np.exp(log_pdf + log_x)
    out[tiny] = -(log_x[tiny] - sp.digamma(alpha + 1)) / alpha
    return out


def quantile_log_x(alpha):
    """log of the Gamma(alpha) quantiles, computed in log space where they underflow."""
    x = sp.gammaincinv(alpha, QUANTILES)
    with np.errstate(divide="ignore"):
        log_x = np.log(x)
    small = x < 1e-250
    log_x[small] = (np.log(QUANTILES[small]) + sp.gammaln(alpha + 1)) / alpha
    return log_x


@pytest.mark.parametrize("alpha", [1e-3, 0.01, 0.1, 0.5, 1.0, 2.0, 4.0, 10.0, 100.0, 1000.0])
def test_gradient_matches_finite_differences(device, alpha):
    # Over the bulk of the law (quantiles 1e-3 .. 0.999) the gradient is within 1e-3
    # relative (torch's approximation above x = 0.8 measures at most 7.5e-4 here).
    log_x = quantile_log_x(alpha)
    ref = reference_dlogx(alpha, log_x)
    a = torch.full((len(QUANTILES),), alpha, dtype=torch.float64, device=device)
    got_log = torch.ops.wrs.standard_gamma_grad(a, torch.tensor(log_x, device=device), True).cpu().numpy()
    np.testing.assert_allclose(got_log, ref, rtol=1e-3)
    x = np.exp(log_x)
    keep = x > 1e-290  # the value gradient dX/dalpha = X d(log X)/dalpha, where X is representable
    got = torch.ops.wrs.standard_gamma_grad(a[keep], torch.tensor(x[keep], device=device), False).cpu().numpy()
    np.testing.assert_allclose(got, ref[keep] * x[keep], rtol=1e-3)


@pytest.mark.parametrize("alpha", [0.05, 0.7, 3.0])
@pytest.mark.parametrize("log", [False, True])
def test_pathwise_gradient_is_unbiased(device, alpha, log):
    # d/dalpha E[X] = 1 and d/dalpha E[log X] = trigamma(alpha): the mean of the sample
    # gradients must match within 5 standard errors.
    n = 1_000_000
    torch.manual_seed(8)
    a = torch.full((n,), alpha, dtype=torch.float64, device=device, requires_grad=True)
    x = torch_wrs.standard_gamma(a, log=log)
    (grad,) = torch.autograd.grad(x.sum(), a)
    expected = sp.polygamma(1, alpha) if log else 1.0
    se = grad.std().item() / math.sqrt(n)
    assert abs(grad.mean().item() - expected) < 5 * se


def test_gradient_flows_in_float32_and_zero_alpha(device):
    a = torch.tensor([0.0, 0.5, 2.0], device=device, requires_grad=True)
    x = torch_wrs.standard_gamma(a)
    x.sum().backward()
    assert a.grad[0] == 0 and torch.isfinite(a.grad).all() and (a.grad[1:] > 0).all()
