"""The installed wheel's smoke test: run from outside the repository, so that the import
finds the installed package. Every family's op once, on the CPU, with a check that can fail."""
import os

import torch
import torch_wrs

assert "site-packages" in torch_wrs.__file__, f"imported {torch_wrs.__file__}, not the installed wheel"
g = torch.Generator().manual_seed(0)
w = torch.rand(4, 1000, generator=g) + 0.01
w[:, ::2] = 0
s = torch_wrs.multinomial(w, 8, True, generator=g)
assert s.shape == (4, 8) and bool((s % 2 == 1).all()), "multinomial drew a zero weight"
s = torch_wrs.multinomial(w, 8, False, generator=g)
assert all(len(set(r.tolist())) == 8 for r in s), "draws without replacement repeated"
t = torch_wrs.sample_logits(torch.randn(3, 50, generator=g), top_k=5, generator=g)
assert t.shape == (3, 1)
table = torch_wrs.alias_table(w[0])
assert torch_wrs.alias_sample(table, 100, generator=g).max() < 1000
x = torch_wrs.standard_gamma(torch.full((1000,), 2.0), generator=g)
assert bool((x > 0).all()) and abs(x.mean().item() - 2.0) < 0.3
d = torch_wrs.dirichlet(torch.ones(5, 3), generator=g)
assert torch.allclose(d.sum(-1), torch.ones(5))
forest = torch_wrs.radix_forest(w[0])
u = torch.rand(100, generator=g)
assert bool((w[0][forest.inverse_cdf(u)] > 0).all())
assert torch.ops.wrs._multinomial_route("cuda", 1, 128_256, 1, True, logits=True) == "race"
print(f"wheel smoke test passed: torch_wrs {torch_wrs.__version__} from {os.path.dirname(torch_wrs.__file__)}")
