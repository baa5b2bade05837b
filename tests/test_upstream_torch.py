"""PyTorch's own tests of torch.multinomial, ported: each runs twice, against torch and
against torch_wrs.multinomial, and names the upstream file and test it comes from.

Intended differences (docs/guide.md, "Differences from torch"), each named by a test:
- no 2**24 limit on the number of categories;
- without replacement, a row with fewer nonzero weights than draws raises, where torch
  silently draws zero-weight categories;
- on CUDA, bad values raise a RuntimeError with torch's CPU text, where torch's kernel
  fires a device-side assert that poisons the process.
"""
import math

import pytest
import torch

import torch_wrs
from conftest import requires_cuda

inf, nan = math.inf, math.nan

IMPLS = {"torch": torch.multinomial, "torch_wrs": torch_wrs.multinomial}


@pytest.fixture(params=sorted(IMPLS))
def multinomial(request):
    return IMPLS[request.param]


def _error_inputs(device, cpu_values):
    """The error inputs of torch's OpInfo for multinomial (torch/testing/_internal/
    common_methods_invocations.py, error_inputs_multinomial), as (input, args, kwargs,
    regex); the 2**24-category input is left to test_no_category_limit."""
    d = torch.float64  # torch's highest_precision_float
    yield torch.empty(1, 2, 3, dtype=d, device=device), (2,), {}, "prob_dist must be 1 or 2 dim"
    yield (torch.empty(1, 2, dtype=torch.long, device=device), (2,), {},
           "multinomial only supports floating-point dtypes for input")
    yield (torch.empty(1, 2, dtype=d, device=device), (2,), {"out": torch.empty(1, 2, dtype=d, device=device)},
           "multinomial expects Long tensor out")
    yield torch.empty(2, dtype=d, device=device), (0,), {}, "cannot sample n_sample <= 0 samples"
    yield torch.empty(2, dtype=d, device=device), (-1,), {}, "cannot sample n_sample <= 0 samples"
    yield torch.empty(2, dtype=d, device=device), (3, False), {}, "cannot sample n_sample > prob_dist"
    if not cpu_values:
        return
    for replacement in (False, True):
        kwargs = {"num_samples": 2, "replacement": replacement}
        for values in ((1.0, -1.0, 1.0), (1.0, inf, 1.0), (1.0, -inf, 1.0), (1.0, 1.0, nan)):
            regex = ("invalid multinomial distribution" if replacement
                     else "probability tensor contains either `inf`, `nan` or element < 0")
            yield torch.tensor(values, device=device), (), kwargs, regex
        yield torch.zeros(3, device=device), (), kwargs, "invalid multinomial distribution"
        x = torch.zeros(3, 3, device=device)
        yield x, (), kwargs, "invalid multinomial distribution"
        x = x.clone()
        x[1, :] = 1
        yield x, (), kwargs, "invalid multinomial distribution"


def test_error_inputs(multinomial, device):
    """common_methods_invocations.py, error_inputs_multinomial (through
    test/test_ops.py, TestCommon.test_errors). torch defines the value inputs on the CPU
    only (on CUDA its kernel asserts); torch_wrs raises torch's CPU texts on both."""
    torch_on_cuda = multinomial is torch.multinomial and device.type == "cuda"
    count = 0
    for x, args, kwargs, regex in _error_inputs(device, cpu_values=not torch_on_cuda):
        with pytest.raises(RuntimeError, match=regex):
            multinomial(x, *args, **kwargs)
        count += 1
    assert count == (7 if torch_on_cuda else 21) - 1  # all but the 2**24 input


def test_no_category_limit(multinomial):
    """The 2**24-category error input: torch raises, torch_wrs samples (an intended
    difference)."""
    x = torch.ones(16777217, dtype=torch.float64)
    x[-1] = 1e9  # the last category beyond 2**24 takes almost all the mass
    if multinomial is torch.multinomial:
        with pytest.raises(RuntimeError, match="number of categories cannot exceed"):
            multinomial(x, 3)
    else:
        s = multinomial(x, 3)
        assert s.shape == (3,) and s[0] == 16777216 and len(set(s.tolist())) == 3


def _prob_dist(shape, contiguous, dtype, device):
    """test/test_torch.py, test_multinomial's make_prob_dist: uniform weights, 1-D or 2-D,
    optionally a strided view of a larger tensor."""
    def uniform(size):
        return torch.zeros(size, device=device).uniform_().to(dtype)
    if contiguous:
        return uniform(shape)
    if len(shape) == 1:
        return uniform(shape + [5])[:, 2]
    big = uniform([2, shape[1], 7, 1, shape[0], 1, 10]).transpose(1, 4)
    view = big[1, :, 5, 0, :, 0, 4]
    assert not view.is_contiguous()
    return view


@pytest.mark.parametrize("dtype", [torch.float, torch.double, torch.half, torch.bfloat16])
def test_multinomial(multinomial, device, dtype):
    """test/test_torch.py, TestTorchDeviceType.test_multinomial (and test_multinomial_cpu):
    zero-probability categories are never drawn, without replacement no category twice,
    shapes, contiguous or not, and the n_sample = 1 shape of issue 46702."""
    torch.manual_seed(0)
    for contiguous in (True, False):
        for n_col in (4, 5):  # with replacement
            p = _prob_dist([3, n_col], contiguous, dtype, device)
            zero = torch.randint(-2, n_col, (3,)).tolist()
            for i, j in enumerate(zero):
                if j >= 0:
                    p[i, j] = 0
            s = multinomial(p, n_col * 3, True)
            assert s.shape == (3, n_col * 3)
            for i, j in enumerate(zero):
                assert j < 0 or not (s[i] == j).any(), "sampled an index with zero probability"
        for n_col in range(2, 11, 2):  # without replacement
            p = _prob_dist([3, n_col], contiguous, dtype, device)
            zero = torch.randint(-1, n_col, (3,)).tolist()
            for i, j in enumerate(zero):
                if j >= 0:
                    p[i, j] = 0
            k = max(1, n_col - 2)
            s = multinomial(p, k, False)
            assert s.shape == (3, k)
            for i, j in enumerate(zero):
                row = s[i].tolist()
                assert j < 0 or j not in row, "sampled an index with zero probability"
                assert len(set(row)) == k, "sampled an index twice"
        p = _prob_dist([4], contiguous, dtype, device).fill_(1)
        p[1] = 0
        s = multinomial(p, 20, True)
        assert s.dim() == 1 and s.shape[0] == 20 and not (s == 1).any()
    s = multinomial(_prob_dist([2, 3], True, dtype, device), 1, True)
    assert s.shape == (2, 1)


@pytest.mark.parametrize("dtype", [torch.float, torch.double, torch.half])
def test_multinomial_deterministic(multinomial, device, dtype):
    """test/test_torch.py, test_multinomial_deterministic (CUDA there; both devices here):
    the same generator seed gives the same draws."""
    gen = torch.Generator(device=device)
    p = torch.rand(2000 if device.type == "cpu" else 10000, 1000, device=device, dtype=dtype)
    for _ in range(3):
        gen.manual_seed(0)
        a = multinomial(p, 1, True, generator=gen)
        gen.manual_seed(0)
        b = multinomial(p, 1, True, generator=gen)
        assert torch.equal(a, b) and a.shape == (p.shape[0], 1)


def test_multinomial_rng_state_advance(multinomial, device):
    """test/test_torch.py, test_multinomial_rng_state_advance: consecutive calls advance
    the generator (at most 2 repeats in 200 draws from 100,000 with replacement, 1
    without)."""
    freqs = torch.ones(100000, device=device)
    torch.manual_seed(1)
    s = torch.cat([multinomial(freqs, 100, replacement=True), multinomial(freqs, 100, replacement=True)])
    assert 200 - s.unique().numel() <= 2
    s = torch.cat([multinomial(freqs, 100, replacement=False), multinomial(freqs, 100, replacement=False)])
    assert 200 - s.unique().numel() <= 1


@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize("k", [1, 2])
def test_multinomial_empty(multinomial, device, replacement, k):
    """test/test_torch.py, test_multinomial_empty_w_replacement / _wo_replacement."""
    out = multinomial(torch.ones(0, 3, device=device), num_samples=k, replacement=replacement)
    assert out.shape == (0, k) and out.dtype == torch.int64


@pytest.mark.parametrize("values", [(1.0, -1.0, 1.0), (1.0, inf, 1.0), (1.0, -inf, 1.0), (1.0, 1.0, nan)])
def test_multinomial_invalid_probs(multinomial, values):
    """test/test_torch.py, test_multinomial_invalid_probs (CPU, n_sample = 2, without
    replacement)."""
    with pytest.raises(RuntimeError, match="probability tensor contains either `inf`, `nan` or element < 0"):
        multinomial(torch.tensor(values), 2)


@requires_cuda
@pytest.mark.parametrize("values", [(1.0, -1.0, 1.0), (1.0, inf, 1.0), (1.0, -inf, 1.0), (1.0, 1.0, nan)])
def test_multinomial_invalid_probs_cuda_raises_instead_of_asserting(values):
    """test/test_cuda.py, test_multinomial_invalid_probs_cuda: torch's kernel fires a
    device-side assert (the test spawns a process to survive it). torch_wrs raises torch's
    CPU text and the process goes on (an intended difference)."""
    probs = torch.tensor(values, device="cuda")
    with pytest.raises(RuntimeError, match="invalid multinomial distribution"):
        torch_wrs.multinomial(probs, 2, replacement=True)
    assert torch_wrs.multinomial(torch.ones(3, device="cuda"), 2, replacement=True).shape == (2,)


@requires_cuda
def test_multinomial_device_constrain(multinomial):
    """test/test_torch.py, test_multinomial_device_constrain."""
    x = torch.empty(3, device="cpu")
    y = torch.empty(3, device="cuda")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        multinomial(x, 2, out=y)


def test_multinomial_ext(multinomial, device):
    """test/test_cuda.py, test_multinomial_ext (CUDA there; both devices here): zero
    weights among tiny ones are never drawn."""
    freqs = torch.tensor([0.0] * 10 + [1e-4, 3e-3, 1e-5, 4e-4, 0.0, 2e-4, 0.0, 1e-4, 0.0] * 3, device=device)
    torch.manual_seed(11042)
    assert freqs[multinomial(freqs, 1000, True)].min() != 0
    p = torch.zeros(3421, 2, device=device)
    p[:, 1] = 1
    torch.manual_seed(5214)
    assert multinomial(p, 1).min().item() != 0
    torch.manual_seed(33)  # the corner case of torch's issue 13867
    probs = torch.randn(1000000, device=device).clamp(min=0) * 3e-5
    assert probs[multinomial(probs, 1000000, replacement=True)].min().item() > 0


def test_multinomial_sequential_draw(multinomial):
    """test/distributions/test_distributions.py, test_multinomial_sequential_draw (torch's
    issue 132395): 300,000 permutations of 26 equal weights repeat fewer than 10 times."""
    torch.manual_seed(0xDE0B6B3A764007E8)
    prob = torch.ones(26)
    seen, dups = set(), 0
    for _ in range(300_000):
        p = tuple(multinomial(prob, 26, replacement=False).tolist())
        dups += p in seen
        seen.add(p)
    assert dups < 10


def test_too_few_nonzero_without_replacement():
    """An intended difference: torch draws a zero-weight category when a row has fewer
    nonzero weights than draws; torch_wrs raises."""
    p = torch.tensor([1.0, 0.0, 0.0])
    assert sorted(torch.multinomial(p, 2).tolist())[0] == 0
    with pytest.raises(RuntimeError, match="not enough non-zero categories"):
        torch_wrs.multinomial(p, 2)
