"""The ops as PyTorch machinery sees them: opcheck, torch.compile, TorchScript."""
import os

import pytest
import torch

import torch_wrs

ARTIFACTS = os.path.join(os.path.dirname(__file__), "cpp", "artifacts")


def test_opcheck_alias_table(device):
    w = torch.rand(3, 100, device=device)
    torch.library.opcheck(torch.ops.wrs.alias_table.default, (w,), {"validate": True})
    torch.library.opcheck(torch.ops.wrs.alias_table.default, (w.double()[:, ::2],), {"validate": False})


def test_opcheck_alias_sample(device):
    table = torch_wrs.alias_table(torch.rand(3, 100, device=device))
    # Seeded sampling is reproducible only through a generator passed explicitly.
    for kwargs in ({"generator": None}, {"dtype": torch.int32}, {"ordered": False, "method": "shared"}):
        torch.library.opcheck(torch.ops.wrs.alias_sample.default, (table, 17), kwargs,
                               test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))


def test_compile_fullgraph_build_and_sample(device):
    def draw(weights):
        table = torch.ops.wrs.alias_table(weights, validate=False)
        return torch.ops.wrs.alias_sample(table, 1000) + 0

    compiled = torch.compile(draw, fullgraph=True)
    w = torch.rand(4, 50, device=device)
    w[:, ::2] = 0
    s = compiled(w)
    assert s.shape == (4, 1000)
    assert (s % 2 == 1).all(), "zero-weight (even) items were drawn"


class AliasSampler(torch.nn.Module):
    """What a C++ LibTorch user would load: build a table and sample it."""

    def forward(self, weights: torch.Tensor, num_samples: int) -> torch.Tensor:
        table = torch.ops.wrs.alias_table(weights)
        return torch.ops.wrs.alias_sample(table, num_samples)


def test_torchscript_roundtrip_and_export_for_cpp(tmp_path):
    module = torch.jit.script(AliasSampler())
    weights = torch.tensor([0.0, 1.0, 2.0, 0.0, 5.0, 0.5])
    torch.manual_seed(1234)
    expected = module(weights, 100_000)
    path = tmp_path / "alias_module.pt"
    module.save(str(path))
    loaded = torch.jit.load(str(path))
    torch.manual_seed(1234)
    assert torch.equal(loaded(weights, 100_000), expected)

    # The C++ test (tests/cpp, run by ctest) loads this file, seeds 1234 and must get
    # `expected` back exactly: same ops, same Philox stream.
    sampler = AliasSampler()
    sampler.register_buffer("weights", weights)
    sampler.register_buffer("expected", expected)
    export = torch.jit.script(sampler)
    os.makedirs(ARTIFACTS, exist_ok=True)
    torch.jit.save(export, os.path.join(ARTIFACTS, "alias_module.pt"))
