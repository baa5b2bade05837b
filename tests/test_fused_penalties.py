"""sample_logits(process=...): the pass before sampling as a penalty plan that the sampler
applies in its own read of the row. The plan must encode process_logits' output exactly, and
the fused draw must be the draw of sample_logits(process_logits(...)) token for token, on
every kernel route."""
import pytest
import torch

import torch_wrs
from conftest import requires_cuda


def _kw(rows, v, device, g, rep=1.3):
    """A decode step's per-request state: a grammar bitmask, banned ids, min_tokens EOS, a
    bias on distinct ids, output and prompt histories with repeats, the three penalties."""
    words = (v + 31) // 32
    bits = torch.randint(-2**31, 2**31 - 1, (rows, words), generator=g, dtype=torch.int64).to(torch.int32)
    bias_ids = torch.stack([torch.randperm(v, generator=g)[:6] for _ in range(rows)])
    kw = dict(allowed_bitmask=bits, banned_ids=torch.tensor([1, 2, v - 1]), min_tokens=3,
              output_lengths=torch.arange(rows) % 5, eos_ids=torch.tensor([0, 5]),
              logit_bias=(bias_ids, torch.randn(rows, 6, generator=g) * 3),
              output_ids=torch.randint(-1, v, (rows, 40), generator=g),
              prompt_ids=torch.randint(-1, v, (rows, 20), generator=g), repetition_penalty=rep,
              frequency_penalty=torch.rand(rows, generator=g), presence_penalty=0.2)
    return {k: (x.to(device) if isinstance(x, torch.Tensor) else tuple(t.to(device) for t in x)
                if isinstance(x, tuple) else x) for k, x in kw.items()}


def _decode(plan, x):
    """The values a plan gives the sampler (penalties.h's layout), in float32: the bitmask,
    then the override values in id order at the override bits."""
    rows, v = x.shape
    words = (v + 31) // 32
    at = 3 * words + words % 2
    cap = (plan.shape[1] - at) // 4
    shifts = torch.arange(32, device=plan.device)
    over_words = plan[:, 1:2 * words:2]

    def bits(cols):
        return ((cols.long()[..., None] >> shifts) & 1).flatten(-2)[:, :v].bool()

    allowed, over = bits(plan[:, 0:2 * words:2]), bits(over_words)
    counts = bits(over_words).view(rows, -1)[:, :v].sum(-1)
    popc = ((over_words.long()[..., None] >> shifts) & 1).sum(-1)
    assert torch.equal(plan[:, 2 * words:3 * words].long(), popc.cumsum(-1) - popc)  # the prefixes
    y = torch.where(allowed, x.float(), float("-inf"))
    values = plan[:, at:at + cap].view(torch.float32)
    for r in range(rows):
        y[r, over[r].nonzero().flatten()] = values[r, :int(counts[r])]
    return y


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_plan_encodes_process_logits_exactly(device, dtype):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(6, 300, generator=g) * 3).to(device, dtype)
    kw = _kw(6, 300, device, g, rep=torch.tensor([1.3, 0.7, -1.0, 1.0, 2.0, 1.1], device=device))
    want = torch_wrs.process_logits(x, **kw)
    got = _decode(torch_wrs.penalties._plan(x, **kw), x)
    # Row 2 (repetition <= 0) is invalid: all NaN there, a NaN item in the plan (an invalid row).
    assert bool(want[2].isnan().all()) and bool(got[2].isnan().any())
    valid = [0, 1, 3, 4, 5]
    assert torch.equal(got[valid], want[valid])


def test_plan_with_long_histories_and_no_lists(device):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 70, generator=g).to(device)
    kw = dict(output_ids=torch.randint(-1, 70, (3, 600), generator=g).to(device),
              prompt_ids=torch.randint(-1, 70, (3, 300), generator=g).to(device), repetition_penalty=1.7,
              frequency_penalty=0.05)
    assert torch.equal(_decode(torch_wrs.penalties._plan(x, **kw), x), torch_wrs.process_logits(x, **kw))
    bits = torch.full((3, 3), 0x55555555, dtype=torch.int32, device=device)
    plan = torch_wrs.penalties._plan(x, allowed_bitmask=bits)
    assert plan.shape == (3, 3 * 3 + 1 + 4 * 2)  # words, prefixes (padded to even), the smallest table
    assert torch.equal(_decode(plan, x), torch_wrs.process_logits(x, allowed_bitmask=bits))


CONTROLS = [
    dict(),
    dict(temperature=0.7, top_k=50),
    dict(temperature=0.8, top_p=0.9),
    dict(temperature=0.7, top_k=50, top_p=0.9),
    dict(min_p=0.1),
    dict(temperature=0.0),
    dict(top_k=2000, top_p=0.95),
]


def _both(x, kw, controls, seed, **extra):
    """The fused draw and the draw from process_logits' output, from the same generator state."""
    gen = torch.Generator(x.device)
    fused = torch_wrs.sample_logits(x, **controls, generator=gen.manual_seed(seed), process=kw, **extra)
    plain = torch_wrs.sample_logits(torch_wrs.process_logits(x, **kw), **controls, generator=gen.manual_seed(seed),
                                    **extra)
    return fused, plain


@pytest.mark.parametrize("controls", CONTROLS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "none")
def test_fused_draws_are_process_then_sample(device, controls, monkeypatch):
    monkeypatch.setattr(torch_wrs.penalties, "_FUSE_MIN_ROWS", 1)  # fused on CUDA too
    g = torch.Generator().manual_seed(2)
    x = (torch.randn(16, 3000, generator=g) * 2).to(device)
    kw = _kw(16, 3000, device, g, rep=torch.tensor([1.2] * 15 + [0.0], device=device))
    (tok, lp), (tok0, lp0) = _both(x, kw, controls, 7, num_samples=4, return_logprobs="raw")
    assert torch.equal(tok, tok0)
    assert torch.equal(lp.isnan(), lp0.isnan()) and bool(lp[15].isnan().all()) and bool((tok[15] == 0).all())
    torch.testing.assert_close(lp.nan_to_num(), lp0.nan_to_num(), rtol=0, atol=0)
    allowed = torch_wrs.process_logits(x, **kw).gather(1, tok[:15]) > float("-inf")
    assert bool(allowed.all())  # only tokens the bitmask, bans and EOS mask let through


def test_fused_cases_cover_every_route():
    """The CUDA cases below reach every kernel of the route table (_llm_route, any build)."""
    routes = set()
    for v in (1000, 32000, 151936, 300000):
        for rows in (1, 200):
            for c in CONTROLS + [dict(top_p=0.9)]:
                routes.add(torch.ops.wrs._llm_route(
                    rows, v, 1, temperature=c.get("temperature", 1.0), top_k=c.get("top_k", 0),
                    top_p=c.get("top_p", 1.0), min_p=c.get("min_p", 0.0), sms=132).split()[0])
    assert routes == {"plain", "plain-thresholds", "sample", "top-p"}


def test_fusing_route():
    """The fused pass's method table: every CPU call; CUDA calls of _FUSE_MIN_ROWS rows or more."""
    assert torch_wrs.penalties._fuses(torch.empty(1, 10))
    if torch.cuda.is_available():
        n = torch_wrs.penalties._FUSE_MIN_ROWS
        assert not torch_wrs.penalties._fuses(torch.empty(n - 1, 10, device="cuda"))
        assert torch_wrs.penalties._fuses(torch.empty(2, n // 2, 10, device="cuda"))


@requires_cuda
@pytest.mark.parametrize("v", [1000, 32000, 151936, 300000])
@pytest.mark.parametrize("rows", [1, 200])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_fused_draws_on_every_route(v, rows, dtype, monkeypatch):
    monkeypatch.setattr(torch_wrs.penalties, "_FUSE_MIN_ROWS", 1)  # the fused kernels at one row too
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(rows, v, generator=g) * 2).to("cuda", dtype)
    kw = _kw(rows, v, "cuda", g)
    for controls in CONTROLS + [dict(top_p=0.9, seeds=torch.arange(rows, device="cuda"))]:
        for mode in (None, "raw", "processed"):
            a, b = _both(x, kw, controls, 11, return_logprobs=mode)
            a, b = (a, b) if mode else ((a,), (b,))
            for p, q in zip(a, b):
                assert torch.equal(p, q), (controls, mode)
    per_row = dict(temperature=torch.rand(rows, device="cuda") + 0.5, top_p=torch.full((rows,), 0.9, device="cuda"))
    a, b = _both(x, kw, per_row, 5, return_logprobs="raw")
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@requires_cuda
def test_cuda_fused_call_captures_in_a_graph():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(64, 32000, generator=g).cuda()
    kw = _kw(64, 32000, "cuda", g)
    kw["validate"] = False
    seeds = torch.arange(64, device="cuda")
    torch_wrs.sample_logits(x, top_k=50, top_p=0.9, seeds=seeds, process=kw)  # warm-up
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tokens = torch_wrs.sample_logits(x, top_k=50, top_p=0.9, seeds=seeds, process=kw)
    new = torch.randn(64, 32000, generator=g).cuda()
    x.copy_(new)
    graph.replay()
    want = torch_wrs.sample_logits(torch_wrs.process_logits(new, **kw), top_k=50, top_p=0.9, seeds=seeds)
    assert torch.equal(tokens, want)


def test_materialised_paths_and_errors(device):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 500, generator=g).to(device)
    kw = _kw(4, 500, device, g)
    counts = dict(output_counts=torch.randint(0, 3, (4, 500), generator=g).float().to(device), frequency_penalty=0.5)
    for extra in (dict(process=counts), dict(process=kw, top_logprobs=3), dict(process=kw, check=True),
                  dict(process=kw, num_samples=3, replacement=False)):
        process = extra.pop("process")
        gen = torch.Generator(device)
        a = torch_wrs.sample_logits(x, top_k=20, generator=gen.manual_seed(1), process=process, **extra)
        b = torch_wrs.sample_logits(torch_wrs.process_logits(x, **process), top_k=20, generator=gen.manual_seed(1),
                                    **extra)
        for p, q in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
            assert torch.equal(p, q)
    with pytest.raises(RuntimeError, match="process must be a dict"):
        torch_wrs.sample_logits(x, process=[1])
    with pytest.raises(RuntimeError, match="does not take: \\['top_p'\\]"):
        torch_wrs.sample_logits(x, process=dict(top_p=0.9))
    with pytest.raises(RuntimeError, match="does not take: \\['top_p'\\]"):
        torch_wrs.sample_logits(x, num_samples=2, replacement=False, process=dict(top_p=0.9))  # materialised
    with pytest.raises(RuntimeError, match="banned_ids holds ids out of"):
        torch_wrs.sample_logits(x, process=dict(banned_ids=torch.tensor([500], device=device)))
    plan = torch_wrs.penalties._plan(x, **kw)
    with pytest.raises(RuntimeError, match="overrides must be a penalty plan"):
        torch.ops.wrs.sample_llm(x, 1, overrides=plan[:, :-1])
    with pytest.raises(RuntimeError, match="overrides must be a penalty plan"):
        torch.ops.wrs.sample_llm(x[:3], 1, overrides=plan)
    with pytest.raises(RuntimeError, match="overrides apply to logits only"):
        torch.ops.wrs.sample_llm(x.softmax(-1), 1, logits=False, overrides=plan)


def test_batched_leading_dimensions_and_non_contiguous(device, monkeypatch):
    monkeypatch.setattr(torch_wrs.penalties, "_FUSE_MIN_ROWS", 1)
    g = torch.Generator().manual_seed(6)
    x = torch.randn(2, 3, 1000, generator=g).to(device)[..., ::2]  # a strided view
    kw = dict(output_ids=torch.randint(-1, 500, (6, 30), generator=g).to(device), repetition_penalty=1.5,
              banned_ids=torch.tensor([3], device=device))
    a, b = _both(x, kw, dict(top_k=10), 3, num_samples=2)
    assert a.shape == (2, 3, 2) and torch.equal(a, b)
    empty = torch.empty(0, 500, device=device)
    assert torch_wrs.sample_logits(empty, process=dict(repetition_penalty=1.2)).shape == (0, 1)


def test_opcheck(device):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 200, generator=g).to(device)
    ids = torch.randint(-1, 200, (3, 6), generator=g).to(device)
    kw = dict(allowed_bitmask=torch.full((3, 7), -1, dtype=torch.int32, device=device), masked_ids=ids,
              output_ids=ids, repetition_penalty=torch.full((3,), 1.2, device=device))
    torch.library.opcheck(torch.ops.wrs.penalty_plan.default, (x,), kw)
    plan = torch.ops.wrs.penalty_plan(x, **kw)
    torch.library.opcheck(torch.ops.wrs.sample_llm.default, (x, 1),
                          dict(top_k_value=5, seeds=torch.arange(3, device=device), overrides=plan),
                          test_utils=("test_schema", "test_faketensor"))


@requires_cuda
def test_cuda_plan_is_the_cpu_plan_bit_for_bit():
    """The ordered table's layout depends on the set of ids alone, whatever the order of the
    atomic inserts."""
    g = torch.Generator().manual_seed(8)
    x = (torch.randn(8, 5000, generator=g) * 2).to(torch.bfloat16)
    kw = _kw(8, 5000, "cpu", g, rep=torch.tensor([1.2] * 7 + [-1.0]))
    kw["output_ids"] = torch.randint(-1, 5000, (8, 3000), generator=g)  # collisions and long runs
    cpu = torch_wrs.penalties._plan(x, **kw)
    cuda_kw = {k: (v.cuda() if isinstance(v, torch.Tensor) else tuple(t.cuda() for t in v) if isinstance(v, tuple)
                   else v) for k, v in kw.items()}
    for _ in range(3):
        assert torch.equal(torch_wrs.penalties._plan(x.cuda(), **cuda_kw).cpu(), cpu)
