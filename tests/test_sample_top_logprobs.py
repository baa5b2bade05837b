"""torch.ops.wrs.sample_llm_top_logprobs (sample_logits(..., top_logprobs=n) with raw log-probs):
the draws are sample_logits' own, and the log-probs, top n and ranks follow top_logprobs' rule
(test_top_logprobs.reference) over logits / T. On CUDA the thresholds kernel ranks the top n
from its top-k lists (route.h's fuses_top_n); rows it cannot serve so go to top_logprobs'
kernels, and both kinds of row are checked here."""
import pytest
import torch

import torch_wrs
from conftest import requires_cuda
from test_top_logprobs import reference

op = torch.ops.wrs.sample_llm_top_logprobs


def _logits(rows, v, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, v, generator=g) * 2
    x[:, : v // 50] += torch.rand(rows, v // 50, generator=g) * 8
    return x[:, torch.randperm(v, generator=g)].to(dtype)


def _scale(t, rows):
    t = torch.as_tensor(t, dtype=torch.float32).expand(rows)
    return torch.where(t == 0, 1.0, torch.reciprocal(t))


def _check(x, n, samples=1, seed=3, **kw):
    """The op against sample_logits' draws and the float64 reference; returns its outputs."""
    dev = x.device
    got = op(x, samples, n, generator=torch.Generator(dev).manual_seed(seed), **kw)
    tokens, lp, top_tokens, top_lp, ranks = got
    t = kw.get("temperature", kw.get("temperature_value", 1.0))
    controls = {k.removesuffix("_value"): v for k, v in kw.items()}
    same = torch_wrs.sample_logits(x, samples, generator=torch.Generator(dev).manual_seed(seed), **controls)
    assert torch.equal(tokens, same), "top_logprobs changes the draws"
    want = reference(x.cpu(), tokens.cpu(), n, _scale(t.cpu() if torch.is_tensor(t) else t, x.shape[0]))
    torch.testing.assert_close(lp.cpu(), want[0], equal_nan=True)
    valid = ~torch.isnan(want[0][:, 0])
    assert torch.equal(top_tokens.cpu()[valid], want[1][valid])
    torch.testing.assert_close(top_lp.cpu()[valid], want[2][valid])
    assert torch.equal(ranks.cpu()[valid], want[3][valid])
    return got


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("rows,v", [(1, 32_000), (3, 128_256), (300, 5000)])
def test_matches_sample_logits_and_the_reference(device, dtype, rows, v):
    x = _logits(rows, v, rows + v, dtype).to(device)
    _check(x, 20, temperature_value=0.7, top_k_value=50, top_p_value=0.9)
    _check(x, 64, 4, temperature_value=1.3, top_k_value=64)  # n = k, several draws a row
    _check(x, 5, temperature_value=0.9, top_k_value=1000, min_p_value=0.05)


def test_rows_the_lists_do_not_serve(device):
    """Per-row controls whose rows leave the thresholds kernel's lists (no top-k, a top-k under
    n, greedy), rows whose lists are too long (ties) or too short (fewer finite items than n),
    and invalid rows, beside rows it serves."""
    x = _logits(8, 20_000, 5).to(device)
    x[1] = 0.25  # every item tied
    x[2, 12:] = float("-inf")  # 12 finite items under 20 asked for
    x[3, ::2] = float("-inf")  # half masked
    x[4, 9] = float("nan")
    top_k = torch.tensor([50, 40, 50, 50, 50, 0, 5, 50], device=device)
    temperature = torch.tensor([0.8, 1.0, 1.0, 0.6, 1.0, 1.0, 1.0, 0.0], device=device)
    tokens, lp, top_tokens, top_lp, ranks = _check(x, 20, 2, top_k=top_k, temperature=temperature,
                                                   top_p_value=0.95)
    assert torch.equal(top_tokens[1].cpu(), torch.arange(20))
    assert torch.isneginf(top_lp[2, 12:]).all() and torch.isfinite(top_lp[2, :12]).all()
    assert torch.isnan(lp[4]).all() and (ranks[4] == 0).all() and torch.equal(top_tokens[4].cpu(), torch.arange(20))
    assert (ranks[7] == 1).all() and torch.equal(tokens[7], x[7].argmax().expand(2))


def test_many_rows_left_to_the_chunk_kernels(device):
    """Rows the lists do not serve (no top-k) between rows they serve, several a GPU
    multiprocessor: top_logprobs' chunk and merge kernels serve the flagged rows alone."""
    x = _logits(48, 60_000, 11).to(device)
    top_k = torch.tensor([0, 50] * 24, device=device)
    _check(x, 20, 3, top_k=top_k, temperature_value=0.8)


def test_route_table():
    route = torch.ops.wrs._llm_route
    kw = dict(temperature=0.7, top_p=0.9)
    assert route(256, 128_256, top_k=50, top_logprobs=20, **kw) == "plain-thresholds cluster=1 top-n=fused"
    assert route(1, 128_256, top_k=50, top_logprobs=20, **kw) == "plain-thresholds cluster=8 top-n=fused"
    assert route(1, 128_256, top_k=10, top_logprobs=20, **kw).endswith("top-n=after")  # k < n
    assert route(4, 128_256, top_k=100, top_logprobs=65, **kw).endswith("top-n=after")  # n past the lists' rank
    assert route(4, 128_256, top_logprobs=20, **kw).endswith("top-n=after")  # top-p alone: no lists
    assert route(4, 128_256, top_k=2000, top_logprobs=20, **kw) == "sample cluster=8 resident top-n=after"
    assert route(4, 128_256, top_k=50, per_row="top_k", top_logprobs=20) == "plain-thresholds cluster=8 defers top-n=fused"
    assert route(4, 128_256, temperature=0.0, top_k=50, top_logprobs=20).endswith("top-n=after")  # greedy
    assert route(4, 1000, top_k=50, top_logprobs=0) == "plain-thresholds cluster=1"
    with pytest.raises(RuntimeError, match="top_logprobs must be non-negative"):
        route(4, 1000, top_logprobs=-1)


def test_shapes_seeds_and_errors(device):
    x = _logits(6, 3000, 1).to(device).reshape(2, 3, 3000)
    seeds = torch.arange(6, device=device)
    out = op(x, 3, 7, top_k_value=50, seeds=seeds)
    assert [tuple(t.shape) for t in out] == [(2, 3, 3)] * 2 + [(2, 3, 7)] * 2 + [(2, 3, 3)]
    again = op(x.reshape(6, 3000)[4:5], 3, 7, top_k_value=50, seeds=seeds[4:5])
    assert all(torch.equal(a.reshape(6, -1)[4:5], b) for a, b in zip(out, again))
    empty = op(x[:0], 1, 4, top_k_value=50)
    assert [tuple(t.shape) for t in empty] == [(0, 3, 1)] * 2 + [(0, 3, 4)] * 2 + [(0, 3, 1)]
    with pytest.raises(RuntimeError, match="top_logprobs must be in"):
        op(x, 1, 3001, top_k_value=50)


def test_opcheck(device):
    x = _logits(4, 700, 2).to(device)
    torch.library.opcheck(op, (x, 2, 5), dict(top_k_value=50, temperature_value=0.7, seeds=torch.arange(4, device=device)))


@requires_cuda
def test_captures_in_a_graph():
    x = _logits(64, 32_000, 7).cuda()
    seeds = torch.arange(64, device="cuda")
    eager = op(x, 1, 20, temperature_value=0.7, top_k_value=50, top_p_value=0.9, seeds=seeds)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = op(x, 1, 20, temperature_value=0.7, top_k_value=50, top_p_value=0.9, seeds=seeds)
    graph.replay()
    assert all(torch.equal(a, b) for a, b in zip(eager, out))
