"""torch.export and AOTInductor: a model that calls torch.ops.wrs.* exports, compiles ahead
of time with aoti_compile_and_package, loads and samples, with fresh draws on each call
and the eager draws under the same seed. The CPU package is left in tests/cpp/artifacts
for the C++ test (tests/cpp/test_aoti.cpp, run by ctest), which loads it without Python."""
import os

import pytest
import torch

import torch_wrs  # noqa: F401  (registers torch.ops.wrs)

ARTIFACTS = os.path.join(os.path.dirname(__file__), "cpp", "artifacts")


class Sampler(torch.nn.Module):
    """A draw from each family a decode or simulation step would call."""

    def forward(self, weights, alpha, logits):
        idx = torch.ops.wrs.multinomial(weights, 4, True)
        gamma = torch.ops.wrs.standard_gamma(alpha)
        theta = torch.ops.wrs.dirichlet(alpha.view(2, -1))
        token, logprob = torch.ops.wrs.sample_llm(logits, 1, temperature_value=0.7, top_k_value=5, logprobs=1)
        return idx, gamma, theta, token, logprob


def _inputs(device):
    g = torch.Generator().manual_seed(0)
    weights = torch.rand(3, 50, generator=g)
    weights[:, ::5] = 0
    return (weights.to(device), (torch.rand(10, generator=g) + 0.5).to(device),
            torch.randn(2, 100, generator=g).to(device))


def _check_law_free_properties(outs, weights, logits):
    idx, gamma, theta, token, logprob = outs
    assert idx.shape == (3, 4) and idx.dtype == torch.int64
    assert (torch.gather(weights, 1, idx) > 0).all()  # zero weights never drawn
    assert gamma.shape == (10,) and (gamma > 0).all()
    torch.testing.assert_close(theta.sum(-1), torch.ones(2, dtype=theta.dtype, device=theta.device))
    assert token.shape == (2, 1)
    top5 = logits.topk(5, -1).indices
    assert (top5 == token).any(-1).all()  # top-k 5 holds
    assert torch.isfinite(logprob).all() and (logprob <= 0).all()


# On torch 2.11 (the GPU machine's) aoti_load_package segfaults even for a model of torch
# ops alone (torch.multinomial, CPU or CUDA); 2.13 loads and runs it.
OLD_TORCH = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 13)


@pytest.mark.skipif(OLD_TORCH, reason="aoti_load_package crashes on torch < 2.13, with or without our ops")
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))])
def test_export_aoti_compile_load_and_sample(device, tmp_path):
    model = Sampler()
    args = _inputs(device)
    exported = torch.export.export(model, args)
    ops = {str(n.target) for n in exported.graph.nodes if n.op == "call_function"}
    assert {"wrs.multinomial.default", "wrs.standard_gamma.default", "wrs.sample_llm.default"} <= ops

    path = torch._inductor.aoti_compile_and_package(exported, package_path=str(tmp_path / "sampler.pt2"))
    loaded = torch._inductor.aoti_load_package(path)
    first, second = loaded(*args), loaded(*args)
    _check_law_free_properties(first, args[0], args[2])
    assert not torch.equal(first[1], second[1]), "each call draws afresh"

    torch.manual_seed(1234)
    compiled = loaded(*args)
    torch.manual_seed(1234)
    eager = model(*args)
    for c, e in zip(compiled, eager):
        torch.testing.assert_close(c, e, rtol=0, atol=0, equal_nan=True)

    if device == "cpu":  # for the C++ test: the package, the inputs and the seed-1234 draws
        os.makedirs(ARTIFACTS, exist_ok=True)
        with open(path, "rb") as src, open(os.path.join(ARTIFACTS, "sampler_cpu.pt2"), "wb") as dst:
            dst.write(src.read())
        names = ("weights", "alpha", "logits", "idx", "gamma", "theta", "token", "logprob")
        torch.save(dict(zip(names, (*args, *eager))), os.path.join(ARTIFACTS, "sampler_cpu_expected.pt"))
