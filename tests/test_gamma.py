"""standard_gamma: every generator against the exact law (KS), moments within their
standard errors, the log output for tiny alpha, special values and the RNG contract."""
import math

import numpy as np
import pytest
import scipy.special as sp
import scipy.stats as st
import torch

import torch_wrs
from conftest import requires_cuda

METHODS = ["cheng_ga", "marsaglia_tsang", "ahrens_dieter_gc", "best_xg", "cheng_feast_gkm3", "auto"]
ALPHAS = [1e-3, 0.01, 0.1, 0.5, 1.0, 1.0001, 2.0, 4.0, 10.0, 1000.0]
KS_P = 1e-4  # fixed seeds; a wrong law at these sample sizes gives p far below this


def samples_for(device):
    # 1e7 on the GPU resolves a CDF error of ~5e-4, 1e6 on the CPU ~1.5e-3.
    return 10_000_000 if device.type == "cuda" else 1_000_000


def log_gamma_cdf(t, alpha):
    """P(log X <= t) for X ~ Gamma(alpha): the regularised incomplete gamma at e^t, or
    below e^-700 its leading term x^alpha / Gamma(alpha + 1), exact to O(x) there."""
    t = np.asarray(t, dtype=np.float64)
    big = t > -700
    out = np.exp(np.minimum(alpha * t - sp.gammaln(alpha + 1), 0.0))
    out[big] = sp.gammainc(alpha, np.exp(t[big]))
    return out


def ks_pvalue(sample, cdf):
    return st.kstest(np.sort(sample), cdf, method="asymp").pvalue


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("method", METHODS)
def test_law_and_moments(device, method, alpha):
    n = samples_for(device)
    g = torch.Generator(device=device).manual_seed(1000 + METHODS.index(method) * 37 + ALPHAS.index(alpha))
    a = torch.full((n,), alpha, dtype=torch.float32, device=device)
    if alpha <= 0.1:
        # X underflows float32 for most draws here (P(X < 1e-38) = 0.92 at alpha = 1e-3):
        # test log X, the output that keeps them, against the exact law of log X.
        x = torch_wrs.standard_gamma(a, method, log=True, generator=g).double().cpu().numpy()
        assert np.isfinite(x).all()
        assert ks_pvalue(x, lambda t: log_gamma_cdf(t, alpha)) > KS_P
        return
    x = torch_wrs.standard_gamma(a, method, generator=g).double().cpu().numpy()
    assert (x > 0).all() and np.isfinite(x).all()
    assert ks_pvalue(x, st.gamma(alpha).cdf) > KS_P
    # Mean alpha, variance alpha; the variance of the sample variance is (mu4 - alpha^2)/n
    # with mu4 = 3 alpha^2 + 6 alpha.
    se_mean = math.sqrt(alpha / n)
    se_var = math.sqrt((2 * alpha**2 + 6 * alpha) / n)
    assert abs(x.mean() - alpha) < 5 * se_mean
    assert abs(x.var() - alpha) < 5 * se_var


@pytest.mark.parametrize("alpha", [0.01, 0.5, 1.0001, 4.0, 1000.0])
@pytest.mark.parametrize("method", METHODS)
def test_law_float64(device, method, alpha):
    n = samples_for(device) // 4
    g = torch.Generator(device=device).manual_seed(77 + METHODS.index(method))
    a = torch.full((n,), alpha, dtype=torch.float64, device=device)
    x = torch_wrs.standard_gamma(a, method, log=True, generator=g).cpu().numpy()
    assert ks_pvalue(x, lambda t: log_gamma_cdf(t, alpha)) > KS_P


def test_small_alpha_underflows_only_where_the_true_value_does(device):
    # float64, alpha = 0.01: P(X < smallest denormal 2^-1074) = e^(alpha log 2^-1074) / Gamma(1 + alpha).
    n = samples_for(device)
    alpha = 0.01
    g = torch.Generator(device=device).manual_seed(5)
    x = torch_wrs.standard_gamma(torch.full((n,), alpha, dtype=torch.float64, device=device), generator=g)
    p_zero = math.exp(alpha * -1074 * math.log(2) - math.lgamma(1 + alpha))
    zeros = (x == 0).sum().item()
    assert abs(zeros - n * p_zero) < 5 * math.sqrt(n * p_zero)
    # And the nonzero values follow the law: P(X <= 1e-300) = gammainc(alpha, 1e-300).
    below = (x <= 1e-300).double().mean().item()
    p = sp.gammainc(alpha, 1e-300)
    assert abs(below - p) < 5 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_boosted_output_is_exp_of_the_log_output(device, dtype):
    # Below alpha = 1, X = Y U^(1/alpha) is a product while U^(1/alpha) is a normal number
    # and exp(log Y + log U / alpha) below; the log output (whose law the KS tests check)
    # always takes the log route. With the same seed both see the same Y and U, so X must
    # be exp(log X) within the roundings: a few eps, plus |log X| eps through the exp, plus
    # the float32 GPU log's 2^-21 absolute error.
    alphas = torch.tensor([1e-3, 0.01, 0.05, 0.3, 0.5, 0.9, 0.999], dtype=dtype)
    a = alphas.repeat_interleave(20_000).to(device)
    for method in METHODS:
        g = torch.Generator(device=device).manual_seed(31)
        x = torch_wrs.standard_gamma(a, method, generator=g).double()
        g.manual_seed(31)
        log_x = torch_wrs.standard_gamma(a, method, log=True, generator=g).double()
        info = torch.finfo(dtype)
        normal = log_x > math.log(info.tiny) + 1
        assert normal.float().mean() > 0.2
        slack = 8 * info.eps * (1 + log_x.abs()) + (2**-20 if dtype == torch.float32 else 0)
        rel = (x - log_x.exp()).abs() / log_x.exp()
        assert (rel[normal] <= slack[normal]).all(), (method, rel[normal].max().item())
        # Where exp(log X) is below the smallest normal, X is it, rounded (0 included).
        tiny = log_x < math.log(info.tiny) - 1
        assert (x[tiny] <= info.tiny).all()


def test_mixed_alpha_shapes_dtypes(device):
    g = torch.Generator(device=device).manual_seed(3)
    alpha = torch.rand(64, 3, 500, generator=g, device=device) * 9.9 + 0.1
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        a = alpha.to(dtype)
        x = torch_wrs.standard_gamma(a, generator=g)
        assert x.dtype == dtype and x.shape == a.shape
        assert torch.isfinite(x).all() and (x >= 0).all()
    # The mean over many different alphas: E[sum X] = sum alpha, Var = sum alpha.
    x = torch_wrs.standard_gamma(alpha.double(), generator=g)
    assert abs((x - alpha.double()).sum().item()) < 5 * math.sqrt(alpha.double().sum().item())


def test_non_contiguous_and_empty(device):
    g = torch.Generator(device=device).manual_seed(4)
    base = torch.full((200, 300), 2.0, device=device)
    x = torch_wrs.standard_gamma(base.t()[:, ::3], generator=g)
    assert x.shape == (300, 67)
    assert abs(x.mean().item() - 2.0) < 5 * math.sqrt(2.0 / x.numel())
    assert torch_wrs.standard_gamma(torch.empty(0, 5, device=device)).shape == (0, 5)


def test_special_values(device):
    a = torch.tensor([0.0, float("inf"), 0.0, 3.0], device=device)
    x = torch_wrs.standard_gamma(a)
    assert x[0] == 0 and x[2] == 0 and math.isinf(x[1].item()) and x[3] > 0
    lx = torch_wrs.standard_gamma(a, log=True)
    assert lx[0] == -math.inf and lx[1] == math.inf
    # Unvalidated negative or NaN alpha gives NaN, never an endless rejection loop.
    bad = torch.tensor([-1.0, float("nan"), -1e-30, 2.0], device=device)
    y = torch_wrs.standard_gamma(bad, validate=False)
    assert torch.isnan(y[:3]).all() and y[3] > 0


def test_tiny_alpha_below_float_epsilon(device):
    # alpha + 1 rounds to 1 in float32: the boost still works for every method.
    for method in METHODS:
        lx = torch_wrs.standard_gamma(torch.full((1000,), 1e-9, device=device), method, log=True)
        assert torch.isfinite(lx).all() and (lx < 0).float().mean() > 0.99


def test_generator_reproducible_and_advancing(device):
    a = torch.rand(10_000, device=device) * 5
    torch.manual_seed(11)
    x1 = torch_wrs.standard_gamma(a)
    x2 = torch_wrs.standard_gamma(a)
    torch.manual_seed(11)
    assert torch.equal(torch_wrs.standard_gamma(a), x1)
    assert not torch.equal(x1, x2)
    g = torch.Generator(device=device).manual_seed(12)
    y1 = torch_wrs.standard_gamma(a, generator=g)
    g.manual_seed(12)
    assert torch.equal(torch_wrs.standard_gamma(a, generator=g), y1)


def test_element_depends_only_on_its_index(device):
    # Elements 2j and 2j+1 draw from Philox subsequence j: a prefix of the input gives a
    # prefix of the output. The grid, and on CUDA how the pairs are split between warps,
    # differ with the size; the values must not, and every element must be written.
    a = torch.rand(300_001, device=device) * 5 + 0.05
    g = torch.Generator(device=device)
    g.manual_seed(21)
    full = torch_wrs.standard_gamma(a, generator=g)
    assert torch.isfinite(full).all() and (full >= 0).all()
    for size in (1, 2, 65, 1000, 99_999, 250_001):
        prefix = a[:size].clone()
        torch.full((size,), float("nan"), device=device)  # freed: the output likely reuses it, NaN
        g.manual_seed(21)
        part = torch_wrs.standard_gamma(prefix, generator=g)
        assert torch.equal(full[:size], part), size


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("log", [False, True])
def test_pair_depends_only_on_its_alphas_when_alpha_repeats(device, dtype, log):
    """A pair whose alphas equal its predecessor's keeps that set-up (Pair::start): a pair's
    values must still depend only on its own alphas and index. Constant alphas (every set-up
    kept) against the same alphas with other pairs changed around them (set-ups redone), with
    boosted (0.4), direct (3) and constant (0, inf) alphas next to each other, and -0 as +0."""
    n = 40_000
    g = torch.Generator(device=device)
    for alpha in (0.4, 3.0):
        same = torch.full((n,), alpha, device=device, dtype=dtype)
        mixed = same.clone()
        changed = torch.zeros(n, dtype=torch.bool, device=device)
        for start, step, value in ((0, 29, 1.7), (2, 31, 0.0), (4, 37, float("inf")), (5, 41, 0.9), (6, 43, -0.0)):
            changed[start::step] = True
            mixed[start::step] = value
        pair_changed = changed.view(-1, 2).any(-1).repeat_interleave(2)
        x = torch_wrs.standard_gamma(same, log=log, validate=False, generator=g.manual_seed(8))
        y = torch_wrs.standard_gamma(mixed, log=log, validate=False, generator=g.manual_seed(8))
        assert 0.1 < pair_changed.float().mean() < 0.4  # most pairs unchanged, many after a change
        assert torch.equal(x[~pair_changed], y[~pair_changed])
        zero = (mixed == 0)
        assert (y[zero] == (float("-inf") if log else 0.0)).all()
        if not log:
            assert not torch.signbit(y[zero]).any()  # Gamma(-0) is +0, also after a +0 set-up


@requires_cuda
def test_cpu_and_cuda_agree_in_law():
    # The two run the same generator code from differently seeded streams.
    a = torch.full((200_000,), 0.7)
    x_cpu = torch_wrs.standard_gamma(a, generator=torch.Generator().manual_seed(1)).numpy()
    x_gpu = torch_wrs.standard_gamma(a.cuda(), generator=torch.Generator("cuda").manual_seed(1)).cpu().numpy()
    assert st.ks_2samp(x_cpu, x_gpu).pvalue > KS_P


@requires_cuda
def test_cuda_graph_replay_gives_fresh_samples():
    a = torch.full((100_000,), 2.5, device="cuda")
    torch_wrs.standard_gamma(a, validate=False)  # warm up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = torch_wrs.standard_gamma(a, validate=False)
    graph.replay()
    first = out.clone()
    graph.replay()
    assert not torch.equal(first, out)
    assert abs(out.mean().item() - 2.5) < 5 * math.sqrt(2.5 / a.numel())
    # validate=True (the default) captures too: the read back is skipped while capturing,
    # and invalid alphas come out NaN, as with validate=False.
    bad = torch.tensor([2.0, -1.0, float("nan"), 0.5], device="cuda")
    torch_wrs.standard_gamma(a)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = torch_wrs.standard_gamma(a)
        out_bad = torch_wrs.standard_gamma(bad)
    graph.replay()
    first = out.clone()
    graph.replay()
    assert not torch.equal(first, out)
    assert abs(out.mean().item() - 2.5) < 5 * math.sqrt(2.5 / a.numel())
    assert out_bad[0] > 0 and out_bad[3] > 0 and torch.isnan(out_bad[1:3]).all()


def test_bad_input(device):
    with pytest.raises(RuntimeError, match="standard_gamma: alpha contains a negative entry"):
        torch_wrs.standard_gamma(torch.tensor([1.0, -0.5], device=device))
    with pytest.raises(RuntimeError, match="standard_gamma: alpha contains NaN"):
        torch_wrs.standard_gamma(torch.tensor([1.0, float("nan")], device=device))
    with pytest.raises(RuntimeError, match="standard_gamma: alpha must be a floating-point tensor"):
        torch_wrs.standard_gamma(torch.tensor([1, 2], device=device))
    with pytest.raises(RuntimeError, match="standard_gamma: method must be 'auto'"):
        torch_wrs.standard_gamma(torch.ones(3, device=device), "ziggurat")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_validation_in_the_generating_pass_finds_every_position(device, dtype):
    """The kernels flag invalid alphas themselves: an invalid entry anywhere (first or second
    of a pair, the odd last element, deep in a large tensor) raises; both kinds present
    raise the negative-entry error, as the separate check did."""
    n = 300_001
    for position in (0, 1, n // 2, n - 1):
        for value, text in ((-0.25, "a negative entry"), (float("nan"), "NaN")):
            a = torch.full((n,), 1.5, device=device, dtype=dtype)
            a[position] = value
            with pytest.raises(RuntimeError, match=f"standard_gamma: alpha contains {text}"):
                torch_wrs.standard_gamma(a)
            assert torch.isnan(torch_wrs.standard_gamma(a, validate=False)[position])
    a = torch.full((1001,), 1.5, device=device, dtype=dtype)
    a[7], a[900] = float("nan"), -1.0
    with pytest.raises(RuntimeError, match="negative entry"):
        torch_wrs.standard_gamma(a, log=True)
