"""Bad input: a RuntimeError naming the argument and the problem, before any kernel."""
import pytest
import torch

import torch_wrs


@pytest.mark.parametrize("value,message", [
    (-1.0, "weights contains a negative entry"),
    (float("nan"), "weights contains NaN"),
    (float("inf"), "weights contains inf"),
])
def test_bad_weight_values(device, value, message):
    w = torch.rand(3, 100, device=device)
    w[1, 17] = value
    with pytest.raises(RuntimeError, match=message):
        torch_wrs.alias_table(w)


def test_zero_sum_row(device):
    w = torch.rand(3, 10, device=device)
    w[2] = 0
    with pytest.raises(RuntimeError, match="weights has a row that sums to zero"):
        torch_wrs.alias_table(w)


def test_float64_sum_overflow(device):
    w = torch.full((4,), 1e308, dtype=torch.float64, device=device)
    with pytest.raises(RuntimeError, match="overflows float64"):
        torch_wrs.alias_table(w)


def test_no_categories(device):
    with pytest.raises(RuntimeError, match="weights must have at least one category"):
        torch_wrs.alias_table(torch.rand(3, 0, device=device))
    with pytest.raises(RuntimeError, match="weights must have at least one dimension"):
        torch_wrs.alias_table(torch.tensor(1.0, device=device))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.complex64])
def test_non_float_weights(device, dtype):
    with pytest.raises(RuntimeError, match="weights must be a floating-point tensor"):
        torch_wrs.alias_table(torch.ones(5, device=device).to(dtype))


def test_too_many_categories(device):
    w = torch.ones(1, device=device).expand((1 << 31) + 1)  # no memory behind it
    with pytest.raises(RuntimeError, match="at most 2\\^31"):
        torch_wrs.alias_table(w)


def test_negative_num_samples(device):
    t = torch_wrs.alias_table(torch.rand(5, device=device))
    with pytest.raises(RuntimeError, match="num_samples must be non-negative"):
        torch_wrs.alias_sample(t, -1)


@pytest.mark.parametrize("bad,message", [
    (lambda d: torch.zeros(5, dtype=torch.int32, device=d), "table must be an int64 tensor"),
    (lambda d: torch.rand(5, device=d), "table must be an int64 tensor"),
    (lambda d: torch.tensor(3, device=d), "table must have at least one dimension"),
    (lambda d: torch.zeros(2, 0, dtype=torch.int64, device=d), "table must have at least one category"),
    (lambda d: torch.zeros(1, dtype=torch.int64, device=d).expand((1 << 31) + 1), "alias_table makes at most 2\\^31"),
])
def test_not_a_table(device, bad, message):
    with pytest.raises(RuntimeError, match=message):
        torch_wrs.alias_sample(bad(device), 3)


@pytest.mark.parametrize("dtype", [torch.int16, torch.float32, torch.uint8])
def test_bad_sample_dtype(device, dtype):
    t = torch_wrs.alias_table(torch.rand(5, device=device))
    with pytest.raises(RuntimeError, match="dtype must be torch.int64 or torch.int32"):
        torch_wrs.alias_sample(t, 3, dtype=dtype)


def test_generator_on_wrong_device(device):
    if device.type == "cpu":
        pytest.skip("needs a second device type")
    t = torch_wrs.alias_table(torch.rand(5, device=device))
    with pytest.raises(RuntimeError, match="generator"):
        torch_wrs.alias_sample(t, 3, generator=torch.Generator())


def test_errors_leave_the_cuda_context_usable(device):
    w = torch.rand(10, device=device)
    w[3] = float("nan")
    with pytest.raises(RuntimeError):
        torch_wrs.alias_table(w)
    w[3] = 1.0
    assert torch_wrs.alias_sample(torch_wrs.alias_table(w), 10).max() < 10
