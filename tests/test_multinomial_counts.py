"""multinomial_counts: exactly multinomial counts per row, without drawing the samples."""
import math
from itertools import product

import pytest
import torch

import torch_wrs
from helpers import g_test_pvalue


def test_rows_sum_to_total_and_zero_weights_get_nothing(device):
    w = torch.rand(1000, 37, device=device)
    w[:, ::5] = 0
    g = torch.Generator(device=device).manual_seed(0)
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        c = torch_wrs.multinomial_counts(w.to(dtype).t().contiguous().t(), 12345, generator=g)  # non-contiguous
        assert c.dtype == torch.int64 and c.shape == w.shape
        assert (c.sum(1) == 12345).all() and (c[:, ::5] == 0).all() and (c >= 0).all()
    assert torch_wrs.multinomial_counts(w[:0], 5).shape == (0, 37)
    assert (torch_wrs.multinomial_counts(w, 0) == 0).all()


def test_law_of_the_count_vector(device):
    """The counts of 6 draws over 3 categories against the exact multinomial pmf (28 outcomes)."""
    p = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    rows = 1 << 20 if device.type == "cuda" else 1 << 17
    g = torch.Generator(device=device).manual_seed(1)
    c = torch_wrs.multinomial_counts(p.to(device).expand(rows, 3), 6, generator=g).cpu()
    outcomes = [o for o in product(range(7), repeat=2) if sum(o) <= 6]
    lut = torch.full((49,), -1, dtype=torch.int64)  # (a, b) -> the outcome's index
    for i, (a, b) in enumerate(outcomes):
        lut[a * 7 + b] = i
    index = lut[c[:, 0] * 7 + c[:, 1]]
    pmf = torch.tensor([math.factorial(6) / (math.factorial(a) * math.factorial(b) * math.factorial(6 - a - b))
                        * 0.2**a * 0.3**b * 0.5**(6 - a - b) for a, b in outcomes])
    assert g_test_pvalue(torch.bincount(index, minlength=len(outcomes)), pmf) > 1e-4


def test_large_totals_have_multinomial_moments(device):
    """Totals up to 2^50 (the BTRS binomials): means and variances of each count."""
    p = torch.tensor([1e-9, 0.25, 0.25 - 1e-9, 0.5], dtype=torch.float64, device=device)
    total = 1 << 50
    rows = 200_000
    c = torch_wrs.multinomial_counts(p.expand(rows, 4), total, generator=torch.Generator(device=device).manual_seed(2))
    assert (c.sum(1) == total).all()
    x = c.double()
    mean, var = total * p, total * p * (1 - p)
    z = (x.mean(0) - mean) / (var / rows).sqrt()
    assert (z.abs() < 5).all(), z
    assert ((x.var(0) / var - 1).abs() < 0.02).all(), x.var(0) / var


def test_errors(device):
    w = torch.tensor([[1.0, 2.0], [0.0, 0.0]], device=device)
    with pytest.raises(RuntimeError, match="multinomial_counts: weights has a row that sums to zero"):
        torch_wrs.multinomial_counts(w, 3)
    with pytest.raises(RuntimeError, match="negative"):
        torch_wrs.multinomial_counts(torch.tensor([1.0, -1.0], device=device), 3)
    with pytest.raises(RuntimeError, match="NaN"):
        torch_wrs.multinomial_counts(torch.tensor([1.0, float("nan")], device=device), 3)
    with pytest.raises(RuntimeError, match="total_count must be non-negative"):
        torch_wrs.multinomial_counts(w[:1], -1)
    with pytest.raises(RuntimeError, match="floating-point"):
        torch_wrs.multinomial_counts(torch.ones(3, dtype=torch.int64, device=device), 3)


def test_reproducible_and_opcheck(device):
    w = torch.rand(64, 10, device=device)
    a = torch_wrs.multinomial_counts(w, 100, generator=torch.Generator(device=device).manual_seed(3))
    b = torch_wrs.multinomial_counts(w, 100, generator=torch.Generator(device=device).manual_seed(3))
    assert torch.equal(a, b)
    torch.library.opcheck(torch.ops.wrs.multinomial_counts.default, (w, 100), {},
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))
