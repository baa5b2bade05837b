"""The gamma ops as PyTorch machinery sees them: opcheck, torch.compile, TorchScript."""
import pytest
import torch

import torch_wrs


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
                     (torch.ops.wrs.beta.default, (a, a))):
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
