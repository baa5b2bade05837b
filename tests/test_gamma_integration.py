"""The gamma ops as PyTorch machinery sees them: opcheck, torch.compile, TorchScript."""
import pytest
import torch

import torch_wrs
from helpers import RecordingMode


def test_opcheck_standard_gamma(device):
    a = torch.rand(3, 50, device=device) * 4
    for args, kwargs in (((a,), {}), ((a.double()[:, ::2], "cheng_ga"), {"log": True}),
                         ((a.requires_grad_(),), {"validate": False})):
        torch.library.opcheck(torch.ops.wrs.standard_gamma.default, args, kwargs,
                              test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))


def test_opcheck_composites(device):
    a = torch.rand(4, 6, device=device) + 0.1
    wide = torch.rand(5, 80, device=device, dtype=torch.float64) + 0.1  # fused on CUDA
    # The gradient is itself not differentiable (as torch's _standard_gamma_grad).
    for op, args in ((torch.ops.wrs.standard_gamma_grad.default, (a, a, True)),
                     (torch.ops.wrs.dirichlet.default, (a,)), (torch.ops.wrs.dirichlet.default, (wide,)),
                     (torch.ops.wrs.dirichlet_rows.default, (a,)), (torch.ops.wrs.dirichlet_rows.default, (wide,)),
                     (torch.ops.wrs.beta.default, (a, a)), (torch.ops.wrs.beta_pairs.default, (a, a[0].double())),
                     (torch.ops.wrs.beta_pairs.default, (a[:1], a))):
        torch.library.opcheck(op, args, test_utils=("test_schema", "test_faketensor"))


@pytest.mark.parametrize("log", [False, True])
def test_compile_fullgraph_with_gradient(device, log):
    def f(alpha):
        x = torch.ops.wrs.standard_gamma(alpha, log=log, validate=False)
        return x.sum()

    compiled = torch.compile(f, fullgraph=True)
    alpha = torch.full((100_000,), 2.0, device=device, requires_grad=True)
    loss = compiled(alpha)
    loss.backward()
    # E[dX/dalpha] = 1 (E[d log X/dalpha] = trigamma(2) = 0.645).
    expected = 0.6449340668 if log else 1.0
    assert abs(alpha.grad.mean().item() - expected) < 0.02


@pytest.mark.parametrize("k", [5, 100])  # on CUDA: the composite, the fused kernel
def test_compile_dirichlet(device, k):
    compiled = torch.compile(lambda c: torch_wrs.dirichlet(c, validate=False), fullgraph=True)
    x = compiled(torch.full((1000, k), 0.01, device=device))
    assert x.shape == (1000, k) and torch.allclose(x.sum(-1), torch.ones(1000, device=device))


class GammaModule(torch.nn.Module):
    def forward(self, alpha: torch.Tensor) -> torch.Tensor:
        return torch.ops.wrs.dirichlet(alpha) + torch.ops.wrs.standard_gamma(alpha, "cheng_ga", log=True)


def test_torchscript_roundtrip(tmp_path, device):
    module = torch.jit.script(GammaModule())
    path = tmp_path / "gamma.pt"
    module.save(str(path))
    loaded = torch.jit.load(str(path))
    alpha = torch.rand(8, 4, device=device) + 0.5
    torch.manual_seed(3)
    first = loaded(alpha)
    torch.manual_seed(3)
    assert torch.equal(module(alpha), first)


def test_direct_bindings_are_the_operators(device):
    """Eager calls take torch_wrs._C's direct bindings: the same operators, so the same
    draws as torch.ops for the same seed and the same errors; a __torch_function__ mode
    still sees each call, made through torch.ops."""
    a = torch.rand(6, 40, device=device) * 3 + 0.01
    b = torch.rand(6, 40, device=device) * 3 + 0.01
    seeded = lambda: torch.Generator(device).manual_seed(8)  # noqa: E731
    ops = torch.ops.wrs
    for ours, op in ((torch_wrs.standard_gamma(a, "cheng_ga", log=True, generator=seeded()),
                      ops.standard_gamma(a, "cheng_ga", log=True, generator=seeded())),
                     (torch_wrs.dirichlet(a, generator=seeded()), ops.dirichlet(a, generator=seeded())),
                     (torch_wrs.beta(a, b, generator=seeded()), ops.beta(a, b, generator=seeded()))):
        assert torch.equal(ours, op)
    # gamma broadcasts concentration and rate as before: [6, 40] with [40], and a float rate
    x = torch_wrs.gamma(a, b[0], generator=seeded())
    assert torch.equal(x, ops.standard_gamma(a, generator=seeded()) / b[0])
    y = torch_wrs.gamma(a[0], b, generator=seeded())
    assert torch.equal(y, ops.standard_gamma(a[0].expand(6, 40), generator=seeded()) / b)
    assert torch.equal(torch_wrs.gamma(a, 2.0, generator=seeded()), ops.standard_gamma(a, generator=seeded()) / 2)
    with pytest.raises(RuntimeError, match="^standard_gamma: alpha contains a negative entry"):
        torch_wrs.standard_gamma(-a)
    with pytest.raises(RuntimeError, match="^standard_gamma: method must be"):
        torch_wrs.standard_gamma(a, "best")

    with RecordingMode() as seen:
        torch_wrs.standard_gamma(a)
        torch_wrs.dirichlet(a)
        torch_wrs.beta(a, b)
    assert [ops.standard_gamma.default, ops.dirichlet.default, ops.beta.default] == [
        f for f in seen.calls if f in (ops.standard_gamma.default, ops.dirichlet.default, ops.beta.default)]


def test_no_gradient_skips_the_function_but_keeps_the_gradient_contract(device):
    """Without a gradient to carry, standard_gamma goes straight to its kernel: the same
    draws, no grad_fn (also for a leaf that requires grad, under no_grad); with one, the
    Function's grad_fn; forward-mode AD still reaches the Function (which has no jvp)."""
    a = torch.rand(500, device=device) * 3 + 0.1
    seeded = lambda: torch.Generator(device).manual_seed(9)  # noqa: E731
    plain = torch_wrs.standard_gamma(a, generator=seeded())
    assert plain.grad_fn is None and not plain.requires_grad
    leaf = a.clone().requires_grad_()
    x = torch_wrs.standard_gamma(leaf, generator=seeded())
    assert x.grad_fn is not None and torch.equal(x.detach(), plain)
    with torch.no_grad():
        y = torch_wrs.standard_gamma(leaf, generator=seeded())
    assert y.grad_fn is None and torch.equal(y, plain)
    import torch.autograd.forward_ad as fwAD

    with fwAD.dual_level():  # no jvp: raises, as torch._standard_gamma does, never drops the tangent
        with pytest.raises(RuntimeError, match="jvp is not implemented"):
            torch_wrs.standard_gamma(fwAD.make_dual(a, torch.ones_like(a)))


def test_compile_of_the_python_functions(device):
    """torch.compile traces torch_wrs.standard_gamma, dirichlet and beta through torch.ops
    (no graph break at the direct bindings)."""
    def f(a, b):
        return torch_wrs.standard_gamma(a) + torch_wrs.dirichlet(a) + torch_wrs.beta(a, b, validate=False)

    compiled = torch.compile(f, fullgraph=True)
    a = torch.rand(4, 50, device=device) + 0.1
    x = compiled(a, a.flip(-1))
    assert x.shape == (4, 50) and torch.isfinite(x).all() and (x > 0).all()
