"""LLM sampling (sample_logits / sample_probs with controls, filter_logits; speculative_accept
is in test_speculative.py): the law of csrc/llm/llm.h against a float64 reference that sorts,
per control, together, per row and at ties (G-tests with fixed seeds; 1e8 draws on the GPU),
seeds, log-probabilities, invalid rows, and the machinery (opcheck, compile, CUDA graphs)."""
import math

import pytest
import torch

import torch_wrs
from conftest import requires_cuda
from helpers import g_test_pvalue

P_MIN = 1e-4
CONTROLS = [
    dict(),
    dict(top_k=7),
    dict(top_p=0.8),
    dict(min_p=0.08),
    dict(top_k=30, top_p=0.9),
    dict(temperature=0.6, top_k=25, top_p=0.85, min_p=0.02),
]


def reference(x, temperature=1.0, top_k=None, top_p=None, min_p=None, logits=True):
    """The law of llm.h for one row, by sorting: float32 values, integer masses, float64 law."""
    x = x.detach().cpu()
    if logits:
        y = x.float() * torch.tensor(1.0 / temperature, dtype=torch.float32) if temperature != 1.0 else x.float()
        mu = torch.exp((y - y.max()).double())
    else:
        y = x.float()
        mu = (y / y.max()).double()
    v = y.numel()
    bits = 40 if v <= (1 << 22) else 62 - (v - 1).bit_length()
    q = torch.floor(mu * 2.0**bits + 0.5).long()
    keep = y > (float("-inf") if logits else 0.0)
    if top_k and top_k < v:
        keep &= y >= y.sort(descending=True).values[top_k - 1]
    if top_p is not None and top_p < 1:
        m = int(q[keep].sum())
        target = max(1, math.ceil(float(torch.tensor(top_p, dtype=torch.float32)) * float(m)))
        order = torch.argsort(y.masked_fill(~keep, float("-inf")), descending=True, stable=True)
        cum = q[order].masked_fill(~keep[order], 0).cumsum(0)
        crossing = order[int((cum < target).sum())]
        keep &= y >= y[crossing]
    if min_p:
        if logits:
            keep &= (y - y.max()) >= torch.log(torch.tensor(min_p, dtype=torch.float32))
        else:
            keep &= y >= torch.tensor(min_p, dtype=torch.float32) * y.max()
    w = torch.where(keep, mu, torch.zeros((), dtype=torch.float64))
    return w / w.sum()


def _draw_counts(sample, x, draws, device, **kw):
    rows, k = x.shape[0], max(1, draws // x.shape[0])
    gen = torch.Generator(device).manual_seed(11)
    counts = torch.zeros(x.shape[-1], dtype=torch.float64)
    done = 0
    while done < draws:
        t = sample(x, min(k, 4096), generator=gen, **kw)
        assert ((t >= 0) & (t < x.shape[-1])).all()
        counts += torch.bincount(t.reshape(-1).cpu(), minlength=x.shape[-1]).double()
        done += t.numel()
    return counts


def _draws(device):
    return 100_000_000 if device.type == "cuda" else 200_000


@pytest.mark.parametrize("controls", CONTROLS, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()) or "plain")
def test_law_logits(device, controls):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(300, generator=g) * 1.5
    x[::11] = float("-inf")
    rows = 1000 if device.type == "cuda" else 4
    counts = _draw_counts(torch_wrs.sample_logits, x.to(device).expand(rows, -1), _draws(device), device, **controls)
    assert g_test_pvalue(counts, reference(x, **controls)) > P_MIN


@pytest.mark.parametrize("controls", CONTROLS[:5], ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()) or "plain")
def test_law_probs(device, controls):
    g = torch.Generator().manual_seed(4)
    p = torch.rand(250, generator=g) ** 3
    p[::13] = 0
    rows = 1000 if device.type == "cuda" else 4
    counts = _draw_counts(torch_wrs.sample_probs, p.to(device).expand(rows, -1), _draws(device) // 2, device,
                          **controls)
    assert g_test_pvalue(counts, reference(p, logits=False, **controls)) > P_MIN


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_ties_at_the_kth_value(device, dtype):
    """Values tied with the k-th are all kept; top-p's crossing value keeps its ties."""
    x = torch.tensor([3.0, 2.0, 2.0, 2.0, 1.0, 1.0, 0.5, 0.0, -1.0, 2.0]).to(dtype)
    for kw in (dict(top_k=2), dict(top_k=5), dict(top_p=0.5), dict(top_k=6, top_p=0.7)):
        ref = reference(x, **kw)
        counts = _draw_counts(torch_wrs.sample_logits, x.to(device).expand(64, -1), 200_000, device, **kw)
        assert g_test_pvalue(counts, ref) > P_MIN
        assert (counts[ref == 0] == 0).all()


def test_long_rows_and_heavy_bins(device):
    """Rows long enough to be split over a cluster, with the k-th value in a bin too full to
    stash (values packed into a narrow range), and with exact ties at scale."""
    g = torch.Generator().manual_seed(9)
    v = 131_072 if device.type == "cuda" else 12_000
    cases = [
        (torch.randn(v, generator=g) * 3, dict(top_k=50, top_p=0.9)),
        (torch.randn(v, generator=g) * 1e-3, dict(top_k=v * 3 // 10)),       # one level-1 bin holds most items
        (torch.randn(v, generator=g) * 1e-3, dict(top_p=0.3)),
        (torch.randint(0, 5, (v,), generator=g).float(), dict(top_k=v // 100)),  # exact ties
    ]
    for x, kw in cases:
        ref = reference(x, **kw)
        filtered = torch_wrs.filter_logits(x.to(device), **kw).cpu()
        assert torch.equal(torch.isfinite(filtered), ref > 0), kw
        draws = 400_000 if device.type == "cuda" else 20_000
        counts = _draw_counts(torch_wrs.sample_logits, x.to(device).expand(4, -1), draws, device, **kw)
        assert (counts[ref == 0] == 0).all()
        if ref.max() > 1e-3:  # coarse law check where the kept set is small enough to test
            assert g_test_pvalue(counts, ref) > P_MIN


def test_kept_set_where_segment_maxima_bound_the_threshold(device):
    """Resident rows bound the top-k (or top-p) threshold from below by their 128-item
    segments' maxima before any histogram: the kept set must be the sorted law's whatever the
    layout (the top values in one segment, a sorted row, more than k segments tied at their
    maxima, k above the number of segments, a peaked row where the bound engages for top-p)."""
    g = torch.Generator().manual_seed(31)
    v = 32_000
    peaked = torch.randn(v, generator=g) * 2
    peaked[torch.randperm(v, generator=g)[:40]] += 12
    clustered = torch.randn(v, generator=g)
    clustered[256:384] += 9  # the largest values in one segment
    rising = torch.sort(torch.randn(v, generator=g)).values  # each segment's maximum beats the last
    tied = torch.randn(v, generator=g)
    tied[::128] = 5.0  # every segment's maximum equal
    cases = [(peaked, dict(top_k=50)), (peaked, dict(top_p=0.9)), (peaked, dict(top_k=50, top_p=0.9)),
             (clustered, dict(top_k=100)), (clustered, dict(top_p=0.95)), (rising, dict(top_k=60, top_p=0.5)),
             (rising, dict(top_p=0.2)), (tied, dict(top_k=30)), (tied, dict(top_k=300, top_p=0.99)),
             (peaked, dict(top_k=400))]
    for x, kw in cases:
        ref = reference(x, **kw)
        filtered = torch_wrs.filter_logits(x.to(device).expand(3, -1), **kw).cpu()
        assert torch.equal(torch.isfinite(filtered), (ref > 0).expand(3, -1)), kw


def test_per_row_mixture(device):
    """Mixed requests in one batch: each row follows its own controls."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(200, generator=g) * 2
    rows = [dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0), dict(temperature=0.5, top_k=10, top_p=1.0, min_p=0.0),
            dict(temperature=1.3, top_k=0, top_p=0.7, min_p=0.0), dict(temperature=0.9, top_k=40, top_p=0.9, min_p=0.05)]
    b = len(rows)
    kw = {name: torch.tensor([r[name] for r in rows], device=device) for name in rows[0]}
    per_row = 2_000_000 if device.type == "cuda" else 50_000
    t = torch_wrs.sample_logits(x.to(device).expand(b, -1), per_row, generator=torch.Generator(device).manual_seed(2),
                                **kw).cpu()
    for i, r in enumerate(rows):
        ref = reference(x, temperature=r["temperature"], top_k=r["top_k"], top_p=r["top_p"], min_p=r["min_p"])
        assert g_test_pvalue(torch.bincount(t[i], minlength=200), ref) > P_MIN


def test_seeds_reproduce_in_any_batch(device):
    g = torch.Generator().manual_seed(6)
    x = torch.randn(8, 5000, generator=g).to(device)
    seeds = torch.arange(100, 108, device=device)
    a = torch_wrs.sample_logits(x, 4, top_k=100, top_p=0.9, seeds=seeds)
    perm = torch.tensor([5, 2, 7, 0], device=device)
    b = torch_wrs.sample_logits(x[perm], 4, top_k=100, top_p=0.9, seeds=seeds[perm])
    assert torch.equal(a[perm], b)
    c = torch_wrs.sample_logits(x[3:4], 4, top_k=100, top_p=0.9, seeds=seeds[3:4])
    assert torch.equal(a[3:4], c)
    # different seeds differ; the generator is not consulted
    d = torch_wrs.sample_logits(x, 4, seeds=seeds + 1)
    assert not torch.equal(torch_wrs.sample_logits(x, 4, seeds=seeds), d)


def test_generator_reproduces(device):
    x = torch.randn(16, 3000, device=device)
    gen = torch.Generator(device)
    a = torch_wrs.sample_logits(x, 3, top_p=0.9, generator=gen.manual_seed(1))
    b = torch_wrs.sample_logits(x, 3, top_p=0.9, generator=gen.manual_seed(1))
    c = torch_wrs.sample_logits(x, 3, top_p=0.9, generator=gen)
    assert torch.equal(a, b) and not torch.equal(a, c)
    torch.manual_seed(3)
    d = torch_wrs.sample_logits(x, 3)
    torch.manual_seed(3)
    assert torch.equal(d, torch_wrs.sample_logits(x, 3))


@pytest.mark.parametrize("kw", [dict(), dict(top_k=20, top_p=0.8), dict(temperature=0.7, min_p=0.1)])
def test_logprobs(device, kw):
    x = torch.randn(6, 400, device=device, dtype=torch.float64) * 2
    t, lp = torch_wrs.sample_logits(x, 5, return_logprobs="processed", **kw)
    t2, raw = torch_wrs.sample_logits(x, 5, return_logprobs="raw", **kw)
    for i in range(6):
        ref = reference(x[i], **kw)
        assert torch.allclose(lp[i].double().cpu(), ref[t[i].cpu()].log(), atol=2e-5)
        scaled = (x[i].float() / kw.get("temperature", 1.0)).double().cpu()
        assert torch.allclose(raw[i].double().cpu(), torch.log_softmax(scaled, -1)[t2[i].cpu()], atol=2e-5)


def test_greedy(device):
    x = torch.randn(5, 1000, device=device)
    x[2, 17] = x[2].max() + 1
    x[2, 400] = x[2, 17]  # a tie: the first index wins
    t, lp = torch_wrs.sample_logits(x, 2, temperature=0.0, return_logprobs="raw")
    assert torch.equal(t[:, 0], x.argmax(-1)) and t[2, 0] == 17
    assert torch.allclose(lp[:, 0], torch.log_softmax(x, -1).gather(-1, t[:, :1])[:, 0], atol=1e-5)
    temps = torch.tensor([0.0, 1.0, 0.0, 0.5, 0.0], device=device)
    t = torch_wrs.sample_logits(x, 1, temperature=temps)
    assert torch.equal(t[temps == 0, 0], x.argmax(-1)[temps == 0])
    f = torch_wrs.filter_logits(x, temperature=temps)
    assert (torch.isfinite(f).sum(-1)[temps == 0] == 1).all()


def test_min_p_keeps_an_item_at_its_threshold(device):
    """A logit exactly at max + log(min_p) is kept and the next float down is not, on every
    kernel: log(min_p) is rounded once, from double, on the CPU and on the GPU alike."""
    edge = torch.tensor(math.log(0.05), dtype=torch.float32)
    x = torch.full((4, 4096), -100.0)
    x[:, 0] = 0.0
    x[:, 1] = edge
    x[:, 2] = torch.nextafter(edge, torch.tensor(-math.inf))
    x = x.to(device)
    kept = torch.isfinite(torch_wrs.filter_logits(x, min_p=0.05))
    assert kept[:, :2].all() and not kept[:, 2:].any()
    mass = math.log1p(math.exp(edge.item()))
    for min_p in (0.05, torch.full((4,), 0.05, device=device)):
        t, lp = torch_wrs.sample_logits(x, 64, min_p=min_p, return_logprobs="processed")
        assert (t < 2).all()
        assert torch.allclose(lp, x.gather(-1, t) - mass, atol=1e-6)


def test_invalid_rows(device):
    """Never an out-of-range index, never a device assert: token 0 and a NaN log-probability."""
    inf, nan = float("inf"), float("nan")
    x = torch.randn(6, 50, device=device)
    x[1, 3] = nan
    x[2, 7] = inf
    x[3] = -inf
    t, lp = torch_wrs.sample_logits(x, 3, top_k=5, top_p=torch.tensor([0.9, 0.9, 0.9, 0.9, nan, 0.9], device=device),
                                    return_logprobs="processed")
    bad = torch.tensor([False, True, True, True, True, False])
    assert (t.cpu()[bad] == 0).all() and lp.cpu()[bad].isnan().all() and not lp.cpu()[~bad].isnan().any()
    p = torch.rand(3, 40, device=device)
    p[0] = 0
    p[1, 2] = -0.5
    t, lp = torch_wrs.sample_probs(p, return_logprobs="raw")
    assert t[0, 0] == 0 and t[1, 0] == 0 and lp[:2].isnan().all() and not lp[2].isnan()
    assert torch_wrs.filter_logits(x, top_k=3)[1].isnan().all()
    with pytest.raises(RuntimeError, match="logits contains NaN or \\+inf"):
        torch_wrs.sample_logits(x, check=True)
    with pytest.raises(RuntimeError, match="all -inf"):
        torch_wrs.sample_logits(x[3:4], check=True)
    with pytest.raises(RuntimeError, match="element < 0"):
        torch_wrs.sample_probs(p, check=True)


def test_argument_errors(device):
    x = torch.randn(3, 10, device=device)
    for kw, text in [(dict(top_p=1.5), "top_p must be in"), (dict(min_p=-0.1), "min_p must be in"),
                     (dict(temperature=-1.0), "temperature must be non-negative"), (dict(top_k=-2), "top_k must be"),
                     (dict(top_k=torch.ones(2, dtype=torch.long, device=device)), "one per row"),
                     (dict(top_p=torch.ones(3, dtype=torch.long, device=device)), "floating-point"),
                     (dict(return_logprobs="log"), "return_logprobs")]:
        with pytest.raises(RuntimeError, match=text):
            torch_wrs.sample_logits(x, **kw)
    with pytest.raises(RuntimeError, match="num_samples must be positive"):
        torch_wrs.sample_logits(x, 0)
    with pytest.raises(RuntimeError, match="floating-point"):
        torch_wrs.sample_logits(torch.ones(3, 4, dtype=torch.long, device=device))


def test_shapes_dtypes_strides(device):
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        x = torch.randn(2, 3, 257, device=device).to(dtype)
        t, lp = torch_wrs.sample_logits(x, 4, top_k=9, return_logprobs="raw")
        assert t.shape == (2, 3, 4) and lp.shape == (2, 3, 4) and t.dtype == torch.int64
        assert torch_wrs.filter_logits(x, top_p=0.5).dtype == dtype
    nc = torch.randn(300, 6, device=device).T
    gen = torch.Generator(device)
    assert torch.equal(torch_wrs.sample_logits(nc, 2, top_p=0.7, generator=gen.manual_seed(1)),
                       torch_wrs.sample_logits(nc.contiguous(), 2, top_p=0.7, generator=gen.manual_seed(1)))
    assert torch_wrs.sample_logits(torch.randn(0, 7, device=device), 2).shape == (0, 2)


def test_without_replacement(device):
    x = torch.randn(4, 100, device=device)
    t, lp = torch_wrs.sample_logits(x, 6, top_k=20, replacement=False, return_logprobs="processed")
    assert (t.sort(-1).values.diff(dim=-1) != 0).all()
    keep = torch.isfinite(torch_wrs.filter_logits(x, top_k=20))
    assert keep.gather(-1, t).all()


def test_filter_logits_gradient(device):
    x = torch.randn(3, 50, device=device, requires_grad=True)
    out = torch_wrs.filter_logits(x, temperature=0.5, top_k=5)
    out.masked_fill(torch.isinf(out), 0).sum().backward()
    assert torch.equal(x.grad != 0, torch.isfinite(out.detach()))
    assert torch.allclose(x.grad[x.grad != 0], torch.full((), 2.0, device=device))


def test_opcheck_and_compile(device):
    x = torch.randn(4, 600, device=device)
    args = (x, 2)
    kwargs = dict(top_k_value=20, top_p=torch.full((4,), 0.9, device=device), logprobs=1,
                  seeds=torch.arange(4, device=device))
    torch.library.opcheck(torch.ops.wrs.sample_llm.default, args, kwargs, test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.wrs.filter_logits.default, (x,), dict(top_k_value=5))

    @torch.compile(fullgraph=True)
    def step(x, seeds):
        return torch_wrs.sample_logits(x, top_k=20, top_p=0.9, seeds=seeds, return_logprobs="raw")

    seeds = torch.arange(4, device=device)
    t, lp = step(x, seeds)
    assert torch.equal(t, torch_wrs.sample_logits(x, top_k=20, top_p=0.9, seeds=seeds))


def test_torchscript(device):
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.ops.wrs.sample_llm(x, 1, top_k_value=5, logprobs=2)

    m = torch.jit.script(M())
    t, lp = m(torch.randn(3, 100, device=device))
    assert t.shape == (3, 1) and lp.shape == (3, 1)


@requires_cuda
def test_cuda_graph_capture_and_replay():
    x = torch.randn(8, 32000, device="cuda")
    temps = torch.full((8,), 0.8, device="cuda")
    torch_wrs.sample_logits(x, top_k=50, top_p=0.9, temperature=temps)  # warm-up
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        t = torch_wrs.sample_logits(x, top_k=50, top_p=0.9, temperature=temps)
    seen = []
    for _ in range(4):
        graph.replay()
        seen.append(t.clone())
    assert any(not torch.equal(seen[0], s) for s in seen[1:])
    keep = torch.isfinite(torch_wrs.filter_logits(x, top_k=50, top_p=0.9, temperature=temps))
    assert all(keep.gather(-1, s).all() for s in seen)


@requires_cuda
def test_seeded_cuda_draws_match_cpu():
    """With per-row seeds the CUDA and CPU kernels take the same uniform point of the same
    kept weights in row order: the draws agree but where float rounding differs."""
    g = torch.Generator().manual_seed(12)
    x = torch.randn(64, 32000, generator=g) * 2
    seeds = torch.arange(64) * 7919
    for kw in (dict(), dict(top_k=50, top_p=0.9), dict(temperature=0.7, min_p=0.05)):
        a = torch_wrs.sample_logits(x, 3, seeds=seeds, **kw)
        b = torch_wrs.sample_logits(x.cuda(), 3, seeds=seeds.cuda(), **kw).cpu()
        assert (a == b).double().mean() > 0.99, kw


def test_example_runs_on_cpu():
    """examples/llm_sampling.py end to end at a small size (the decode loop a user copies)."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, os.path.join(root, "examples", "llm_sampling.py"), "--device", "cpu",
                          "--hidden", "64", "--vocab", "3000", "--steps", "2", "--batch", "2", "--speculative", "2"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": root})
    assert out.returncode == 0, out.stderr
    assert "torch_wrs" in out.stdout and "speculative, B = 2, S = 2" in out.stdout


@requires_cuda
@pytest.mark.parametrize("logits", [True, False])
def test_plain_cuda_kernel_matches_the_cpu_kernel(logits):
    """Calls with controls the streaming kernel serves (plain_cuda.cu: min-p, top-k up to 1,024,
    top-p over top-k), as numbers and as per-row tensors of the same values. With seeds the
    CPU kernel inverts the same uniform point over the same kept weights in row order: the
    draws agree but where float rounding differs, and so do the log-probabilities. Invalid
    rows too. Few rows split over a cluster, whose CTAs select over all their lists. Row 1
    is tied in thirds: its top-k lists overflow and the select reads the row. Rows 2 and 3
    have 600 and 20 items with weight (radix levels and ranks), at times fewer than k: top-p
    then applies to all of them."""
    g = torch.Generator().manual_seed(21)
    for rows, v in ((64, 32_000), (4, 32_000), (256, 128_256), (4, 200_003)):
        x = torch.randn(rows, v, generator=g) * 2
        x[1] = torch.randint(0, 3, (v,), generator=g).float()
        x[2, 600:] = float("-inf")
        x[3, 20:] = float("-inf")
        x = x if logits else torch.softmax(x, -1) * torch.rand(rows, 1, generator=g)
        x[0, 5] = float("nan")
        x = x.cuda()
        seeds = torch.arange(rows, device="cuda") * 7919
        sample = torch_wrs.sample_logits if logits else torch_wrs.sample_probs
        cases = [(dict(), "raw"), (dict(min_p=0.05), "raw"), (dict(min_p=0.05), "processed"),
                 (dict(top_k=50), "processed"), (dict(top_k=50, top_p=0.9), "raw"),
                 (dict(top_k=1000, top_p=0.5, min_p=0.01), "processed")]
        if logits:
            cases.append((dict(top_k=7, temperature=0.7), "raw"))
        for kw, mode in cases:
            per_row = dict(kw, top_k=torch.full((rows,), kw.get("top_k", 0), dtype=torch.long, device="cuda"))
            a, la = sample(x, 3, seeds=seeds, return_logprobs=mode, **kw)
            for other in (sample(x.cpu(), 3, seeds=seeds.cpu(), return_logprobs=mode, **kw),
                          sample(x, 3, seeds=seeds, return_logprobs=mode, **per_row)):
                b, lb = other[0].cuda(), other[1].cuda()
                assert (a[0] == 0).all() and torch.isnan(la[0]).all(), "an invalid row gives token 0 and NaN"
                assert (a == b).double().mean() > 0.99, (rows, v, kw)
                same = a == b
                assert torch.allclose(la[same], lb[same], atol=1e-4, rtol=1e-5, equal_nan=True), (rows, v, kw, mode)
            assert int(a.min()) >= 0 and int(a.max()) < v
            if logits and "top_k" in kw:  # every draw in the kept set
                keep = torch.isfinite(torch_wrs.filter_logits(x, **kw))
                assert keep[1:].gather(1, a[1:]).all(), (rows, v, kw)


@requires_cuda
def test_plain_top_k_floor_on_extreme_ranges():
    """The thresholds kernel's floor bins the segment maxima over their range: rows whose
    maxima span many orders of magnitude (a peaked probability row), a logit range near
    float's (one bin, so the lists overflow and the row is read whole), a half-masked row at
    temperature 0.3. Over rows split across clusters of 4 and 8 CTAs, every draw is in the
    reference's kept set and its processed log-probability is the reference law's."""
    g = torch.Generator().manual_seed(47)
    for v in (32_000, 128_256):
        peaked = torch.randn(v, generator=g)
        peaked[torch.randperm(v, generator=g)[:8]] += 30
        wide = torch.randn(v, generator=g) * 2
        wide[::997] = -1e38
        wide[5] = 1e38
        wide[6:60] = 1e38 - 1e33 * torch.arange(54, dtype=torch.float32)
        masked = torch.randn(v, generator=g) * 2
        masked[torch.randperm(v, generator=g)[: v // 2]] = float("-inf")
        rows = [(torch.softmax(peaked.double(), 0).float(), False, {}), (wide, True, {}),
                (masked, True, dict(temperature=0.3))]
        for x, logits, base in rows:
            sample = torch_wrs.sample_logits if logits else torch_wrs.sample_probs
            for kw in (dict(top_k=50), dict(top_k=50, top_p=0.9), dict(top_k=1000)):
                kw = dict(base, **kw)
                ref = reference(x, logits=logits, **kw)
                tokens, lp = sample(x.cuda()[None], 256, return_logprobs="processed",
                                    generator=torch.Generator("cuda").manual_seed(3), **kw)
                tokens, lp = tokens.cpu()[0], lp.cpu()[0]
                assert (ref[tokens] > 0).all(), (v, logits, kw)
                torch.testing.assert_close(lp.double(), ref[tokens].log(), atol=1e-4, rtol=0), (v, logits, kw)


@requires_cuda
def test_per_row_controls_cuda_match_cpu():
    """Per-row control tensors: rows the streaming kernel serves (top-k up to 1,024 with or
    without top-p and min-p; neither top-k nor top-p) and rows it defers to the sample kernel
    (greedy, top-p alone, top-k above 1,024) in one call. With seeds the CUDA draws match the
    CPU kernel's but where float rounding differs."""
    g = torch.Generator().manual_seed(41)
    rows, v = 48, 32_000
    x = torch.randn(rows, v, generator=g) * 2
    kw = dict(temperature=torch.tensor([1.0, 0.7, 0.0] * 16), top_k=torch.tensor([50, 0, 0, 2000, 7, 0] * 8),
              top_p=torch.tensor([0.9, 1.0, 0.8, 0.95] * 12), min_p=torch.tensor([0.0, 0.02] * 24),
              seeds=torch.arange(rows) * 31, return_logprobs="raw")
    a, la = torch_wrs.sample_logits(x, 3, **kw)
    b, lb = torch_wrs.sample_logits(x.cuda(), 3, **{n: t.cuda() if isinstance(t, torch.Tensor) else t
                                                    for n, t in kw.items()})
    b, lb = b.cpu(), lb.cpu()
    assert (a == b).double().mean() > 0.99
    same = a == b
    assert torch.allclose(la[same], lb[same], atol=1e-4, rtol=1e-5)
    greedy = kw["temperature"] == 0
    assert torch.equal(b[greedy], x[greedy].argmax(-1, keepdim=True).expand(-1, 3))


@requires_cuda
@pytest.mark.parametrize("kw", [dict(top_p=0.8), dict(top_p=0.6, min_p=0.05), dict(top_p=0.95, temperature=0.7)],
                         ids=["p", "p-min_p", "p-temperature"])
def test_top_p_alone_by_rejection_law(kw):
    """Top-p alone with one sample a row takes the plain kernel's rejection (plain_cuda.cu):
    1e8 draws against the sorted law."""
    g = torch.Generator().manual_seed(51)
    x = torch.randn(300, generator=g) * 1.5
    x[::11] = float("-inf")
    xs = x.cuda().expand(100_000, -1).contiguous()
    gen = torch.Generator("cuda").manual_seed(52)
    counts = torch.zeros(300, dtype=torch.long, device="cuda")
    for _ in range(1000):
        counts += torch.bincount(torch_wrs.sample_logits(xs, generator=gen, **kw).view(-1), minlength=300)
    assert g_test_pvalue(counts.cpu().double(), reference(x, **kw)) > P_MIN


@pytest.mark.parametrize("logits", [False, True])
@pytest.mark.parametrize("rows", [64, 512])
def test_top_p_decided_at_the_boundary(device, logits, rows):
    """Masses 4 : 3 : 2 : 1 at top-p 0.7: the mass above the third item is the target within
    float rounding, so the CUDA rejection cannot decide it from its float64 bound on M and sums
    the row's integer masses. Only the first two are kept, 4 : 3 (the law of reference())."""
    v = 32_000
    pos = torch.tensor([31_000, 17, 9_000, 20_003])
    probs = torch.zeros(v)
    probs[pos] = torch.tensor([0.4, 0.3, 0.2, 0.1])
    x = probs.log() if logits else probs
    ref = reference(x, top_p=0.7, logits=logits)
    assert (ref > 0).sum() == 2
    xs = x.to(device).expand(rows, -1).contiguous()
    sample = torch_wrs.sample_logits if logits else torch_wrs.sample_probs
    gen = torch.Generator(device).manual_seed(57)
    counts = torch.zeros(v, dtype=torch.long, device=device)
    for _ in range(max(1, (2_000_000 if device.type == "cuda" else 4_000) // rows)):
        counts += torch.bincount(sample(xs, generator=gen, top_p=0.7).view(-1), minlength=v)
    counts = counts.cpu()
    assert counts[ref == 0].sum() == 0
    assert g_test_pvalue(counts[pos[:2]].double(), ref[pos[:2]]) > P_MIN


@requires_cuda
def test_top_p_alone_by_rejection_on_split_rows():
    """Rows of 131,072 items split over a cluster: every draw in the kept set of the sample
    kernel's filter, raw log-probabilities those of log_softmax, and seeds reproduce in any
    batch."""
    g = torch.Generator().manual_seed(53)
    x = (torch.randn(4, 131_072, generator=g) * 3).cuda()
    keep = torch.isfinite(torch_wrs.filter_logits(x, top_p=0.9))
    gen = torch.Generator("cuda").manual_seed(54)
    for _ in range(200):
        t, lp = torch_wrs.sample_logits(x, top_p=0.9, generator=gen, return_logprobs="raw")
        assert keep.gather(1, t).all()
        assert torch.allclose(lp, torch.log_softmax(x, -1).gather(1, t), atol=1e-4)
    seeds = torch.tensor([5, 6, 7, 8], device="cuda")
    a = torch_wrs.sample_logits(x, top_p=0.9, seeds=seeds)
    perm = torch.tensor([2, 0, 3, 1], device="cuda")
    assert torch.equal(a[perm], torch_wrs.sample_logits(x[perm], top_p=0.9, seeds=seeds[perm]))


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_top_p_kernel_rows(dtype):
    """The top-p kernel (top_p_cuda.cu, a CTA a row) on rows of 300 to 262,144 items, of odd
    lengths (unaligned rows) and with -inf items, from logits and probabilities, 512 and 1,024
    threads: every draw in the kept set of the sample kernel's filter, raw log-probabilities
    those of log_softmax, seeds reproduce in any batch, and invalid rows give token 0."""
    g = torch.Generator().manual_seed(55)
    gen = torch.Generator("cuda").manual_seed(56)
    for rows, v in ((3, 300), (200, 300), (2, 50_001), (150, 50_001), (64, 131_072), (140, 262_144)):
        x = (torch.randn(rows, v, generator=g) * 3).to(dtype).float()
        x[0, ::7] = float("-inf")
        x[-1, 5] = float("nan")
        x = x.cuda()
        keep = torch.isfinite(torch_wrs.filter_logits(x[:-1], top_p=0.9))
        for logits in (True, False):
            xs = (x if logits else torch.softmax(x, -1)).to(dtype)
            sample = torch_wrs.sample_logits if logits else torch_wrs.sample_probs
            if not logits:  # the probabilities' own set and law (rounded to dtype)
                keep = torch.isfinite(torch_wrs.filter_logits(xs[:-1].float().log(), top_p=0.9))
            for _ in range(20):
                t, lp = sample(xs, top_p=0.9, generator=gen, return_logprobs="raw")
                assert t[-1, 0] == 0 and torch.isnan(lp[-1]).all(), "an invalid row gives token 0 and NaN"
                assert keep.gather(1, t[:-1]).all(), (rows, v, logits)
                y = xs[:-1].float()
                law = torch.log_softmax(y, -1) if logits else (y / y.sum(-1, keepdim=True)).log()
                want = law.gather(1, t[:-1])
                assert torch.allclose(lp[:-1], want, atol=1e-4), (rows, v, logits)
            seeds = torch.arange(rows, device="cuda") * 13
            perm = torch.randperm(rows, generator=g).cuda()
            a = sample(xs, top_p=0.9, seeds=seeds)
            assert torch.equal(a[perm], sample(xs[perm], top_p=0.9, seeds=seeds[perm]))


@requires_cuda
def test_top_p_kernel_law_with_a_cta_of_1024():
    """The top-p kernel's 1,024-thread variant (fewer rows than half the SMs): 1.28e6 draws
    against the sorted law, from logits with temperature (the 512-thread variant takes 1e8 in
    test_top_p_alone_by_rejection_law)."""
    g = torch.Generator().manual_seed(58)
    x = torch.randn(300, generator=g) * 1.5
    x[::11] = float("-inf")
    xs = x.cuda().expand(64, -1).contiguous()
    xs = xs.repeat(1, 100)  # 30,000 items: 100 copies of the 300, so the law on item % 300 is the same
    assert torch.ops.wrs._llm_route(64, 30_000, top_p=0.8) == "top-p threads=1024"
    gen = torch.Generator("cuda").manual_seed(59)
    counts = torch.zeros(30_000, dtype=torch.long, device="cuda")
    for _ in range(20_000):
        counts += torch.bincount(torch_wrs.sample_logits(xs, generator=gen, top_p=0.8, temperature=0.7).view(-1),
                                 minlength=30_000)
    folded = counts.view(100, 300).sum(0).cpu().double()
    assert g_test_pvalue(folded, reference(x, top_p=0.8, temperature=0.7)) > P_MIN


@requires_cuda
def test_plain_cuda_kernel_law_on_rows_past_the_resident_size():
    """A million-item row split over a cluster of 8 (few rows, so the plain kernel serves
    it): 1e7 draws on 1,000 coarse bins against the float64 softmax."""
    g = torch.Generator().manual_seed(22)
    v = 1_000_000
    x = torch.randn(v, generator=g, dtype=torch.float64) * 2
    ref = torch.softmax(x, 0).view(1000, -1).sum(1)
    counts = torch.zeros(1000, dtype=torch.float64)
    gen = torch.Generator("cuda").manual_seed(23)
    xs = x.float().cuda().expand(8, -1)
    for _ in range(100):
        t = torch_wrs.sample_logits(xs, 12_500, generator=gen)
        counts += torch.bincount((t // 1000).reshape(-1).cpu(), minlength=1000).double()
    assert g_test_pvalue(counts, ref) > P_MIN


@pytest.mark.parametrize("call, expected", [
    (dict(rows=1, v=32_000), "plain cluster=4"),  # few rows: a row split over CTAs of 8,000 items
    (dict(rows=1, v=128_256), "plain cluster=8"),
    (dict(rows=256, v=32_000), "plain cluster=1"),  # as many rows as SMs: a CTA a row
    (dict(rows=64, v=128_256), "plain cluster=2"),  # rows x CTAs up to the SMs
    (dict(rows=64, v=128_256, sms=264), "plain cluster=4"),
    (dict(rows=1, v=200_003, min_p=0.1), "plain cluster=8"),
    (dict(rows=1, v=3_000_000), "sample cluster=8"),  # past a cluster's plain share (8 x 262,144)
    (dict(rows=1, v=32_000, top_k=50), "plain-thresholds cluster=4"),
    (dict(rows=1, v=32_000, top_k=1024, top_p=0.9), "plain-thresholds cluster=4"),
    (dict(rows=1, v=32_000, top_k=1025), "sample cluster=4 resident"),
    (dict(rows=1, v=1000, top_k=5000), "plain cluster=1"),  # k >= V keeps every item
    (dict(rows=1, v=32_000, top_p=0.9), "top-p threads=1024"),  # top-p alone: a CTA a row
    (dict(rows=1, v=32_000, top_p=0.9, logprobs=2), "top-p threads=1024"),
    (dict(rows=256, v=32_000, top_p=0.9), "top-p threads=512"),  # two CTAs an SM
    (dict(rows=64, v=128_256, top_p=0.9), "top-p threads=1024"),  # a cluster of 2 would read it
    (dict(rows=16, v=128_256, top_p=0.9), "plain-thresholds cluster=8"),  # few long rows: split over CTAs
    (dict(rows=256, v=300_000, top_p=0.9), "sample cluster=1"),  # past a CTA's share, either kernel's
    (dict(rows=1, v=32_000, top_p=0.9, min_p=0.1), "plain-thresholds cluster=4"),
    (dict(rows=4, v=32_000, per_row="top_p"), "plain-thresholds cluster=4 defers"),
    (dict(rows=1, v=32_000, top_p=0.9, num_samples=2), "sample cluster=4 resident"),
    (dict(rows=1, v=32_000, top_p=0.9, logprobs=1), "sample cluster=4 resident"),
    (dict(rows=1, v=32_000, temperature=0.0), "sample cluster=4 resident"),  # greedy
    (dict(rows=8, v=1_000_000, temperature=0.0), "sample cluster=8"),  # not resident: 125,000 items a CTA
    (dict(rows=4, v=32_000, per_row="temperature"), "plain cluster=4 defers"),
    (dict(rows=4, v=32_000, per_row="top_k,top_p"), "plain-thresholds cluster=4 defers"),
    (dict(rows=4, v=32_000, top_k=5000, per_row="top_p"), "plain-thresholds cluster=4 defers"),
])
def test_cuda_route_table(call, expected):
    """The CUDA method table (csrc/llm/route.h), answered on any build: which kernel serves a
    call and over how many CTAs a row."""
    assert torch.ops.wrs._llm_route(**call) == expected


def test_cuda_route_arguments():
    with pytest.raises(RuntimeError, match="per_row names"):
        torch.ops.wrs._llm_route(1, 100, per_row="top_q")
    with pytest.raises(RuntimeError, match="must be positive"):
        torch.ops.wrs._llm_route(0, 100)


def test_benchmark_merge_joins_dtype_reports(tmp_path):
    """`python -m torch_wrs.benchmark llm --merge`: one table of both calls' rows, the float32
    call's other tables, and a summary whose ratios come from the times of every row."""
    from torch_wrs import benchmark_llm

    head = ["LLM sampling on X", "", "| control | dtype | rows x vocab | ours | ours + log-probs | FlashInfer | "
            "torch (sort) | floor | x FlashInfer | x torch |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    f32 = head + ["| none | float32 | 1 x 32,000 | 0.0100 | 0.0110 | 0.0080 | 0.1000 | 0.0000 | 0.80x | 10.00x |",
                  "| none | float32 | 4 x 32,000 | 0.0100 | 0.0100 | 0.0300 | 0.3000 | 0.0000 | 3.00x | 30.00x |",
                  "", "From logits: ms per call", "", "| a |", "|---|", "| 1 |", "",
                  "Against FlashInfer (float32), old summary", "- none: stale"]
    bf16 = head + ["| none | bfloat16 | 1 x 32,000 | 0.0200 | 0.0200 |  | 0.4000 | 0.0000 |  | 20.00x |"]
    (tmp_path / "a.md").write_text("\n".join(f32) + "\n")
    (tmp_path / "b.md").write_text("\n".join(bf16) + "\n")
    benchmark_llm.merge([str(tmp_path / "b.md"), str(tmp_path / "a.md")], str(tmp_path / "c.md"))
    text = (tmp_path / "c.md").read_text()
    assert text.count("| none | ") == 3 and "From logits: ms per call" in text and "stale" not in text
    assert ("- none: median 1.90x, min 0.80x; slower in 1 of 2: 1x32000; "
            "vs torch sort path: median 20.0x, min 10.0x") in text
    assert "- log-probs cost: median 1.000x, max 1.100x of the plain call" in text


def test_benchmark_summary_of_a_part_without_plain_sampling():
    """A `--controls` call that leaves out "none" still gets its summary (the ratio over plain
    sampling is left out where no plain cell was timed)."""
    from torch_wrs import benchmark_llm

    r = dict(control="top-p 0.9", dtype="float32", b=1, v=32_000, ours=0.01, ours_lp=0.01, fi=0.02, torch=0.1)
    lines = benchmark_llm._summary([r])
    assert any(line.startswith("- top-p 0.9: median 2.00x") for line in lines)
    assert not any("over our plain sampling" in line for line in lines)


def test_benchmark_merge_replaces_cells_of_a_controls_call(tmp_path):
    """`--controls` reports merged after a full one: their cells replace the same cells, the
    full report keeps its head and other tables, and the summary counts the new times."""
    from torch_wrs import benchmark_llm

    head = ["# Title", "", "LLM sampling on X", "", "| control | dtype | rows x vocab | ours | ours + log-probs | "
            "FlashInfer | torch (sort) | floor | x FlashInfer | x torch |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    full = head + ["| none | float32 | 1 x 32,000 | 0.0100 | 0.0100 | 0.0200 | 0.1000 | 0.0000 | 2.00x | 10.00x |",
                   "| top-p 0.9 | float32 | 1 x 32,000 | 0.0400 | 0.0400 | 0.0200 | 0.1000 | 0.0000 | 0.50x | 2.50x |",
                   "", "From logits: ms per call", "", "| a |", "|---|", "| 1 |", "", "Per control: old"]
    part = head[2:] + ["| top-p 0.9 | float32 | 1 x 32,000 | 0.0100 | 0.0100 | 0.0200 | 0.1000 | 0.0000 | 2.00x | "
                       "10.00x |", ""]
    (tmp_path / "full.md").write_text("\n".join(full) + "\n")
    (tmp_path / "part.md").write_text("\n".join(part) + "\n")
    benchmark_llm.merge([str(tmp_path / "full.md"), str(tmp_path / "part.md")], str(tmp_path / "c.md"))
    text = (tmp_path / "c.md").read_text()
    assert text.startswith("# Title") and "From logits: ms per call" in text and "Per control: old" not in text
    assert text.count("| top-p 0.9 | float32 | 1 x 32,000 | 0.0100 |") == 1 and "| 0.0400 |" not in text
    assert text.index("| none | float32") < text.index("| top-p 0.9 | float32")
    assert "- top-p 0.9: median 2.00x, min 2.00x; slower in 0 of 1: none" in text
