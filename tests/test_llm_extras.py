"""sample_logits / filter_logits: typical-p, top-n-sigma and top-n log-probabilities, against
float64 references written from their definitions (Hugging Face's TypicalLogitsWarper; keep
within n standard deviations of the maximum), kept sets exactly and laws by G-tests."""
import pytest
import torch

import torch_wrs
from helpers import g_test_pvalue

P_MIN = 1e-4


def typical_reference(f, mass):
    """One row of logits f (float64, -inf allowed): Hugging Face's typical set, by sorting."""
    lp = torch.log_softmax(f, -1)
    p = lp.exp()
    h = -(p[p > 0] * lp[p > 0]).sum()
    shift = (-lp - h).abs()
    order = torch.argsort(shift, stable=True)
    cum = torch.cumsum(p[order], 0)
    last = min(int((cum < mass).sum()), f.numel() - 1)
    return shift <= shift[order[last]]


def sigma_reference(y, n):
    finite = y[torch.isfinite(y)]
    return y >= finite.max() - n * finite.std(correction=0)


def law(f):
    w = torch.exp(f - f.max())
    return w / w.sum()


def _row(seed, v=400):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(v, generator=g, dtype=torch.float64) * 2.0
    x[::9] = float("-inf")
    return x.float()


@pytest.mark.parametrize("mass", [0.2, 0.5, 0.9, 0.99])
def test_typical_kept_set_matches_the_definition(device, mass):
    rows = torch.stack([_row(s) for s in range(16)]).to(device)
    out = torch_wrs.filter_logits(rows, typical_p=mass).cpu()
    for r in range(16):
        keep = typical_reference(rows[r].cpu().double(), mass)
        assert torch.equal(torch.isfinite(out[r]), keep & torch.isfinite(rows[r].cpu()))
        torch.testing.assert_close(out[r][keep], rows[r].cpu()[keep])


@pytest.mark.parametrize("n", [0.0, 0.5, 1.0, 2.5])
def test_top_n_sigma_kept_set_after_temperature(device, n):
    rows = torch.stack([_row(s) for s in range(16)]).to(device)
    out = torch_wrs.filter_logits(rows, top_n_sigma=n, temperature=0.7).cpu()
    for r in range(16):
        y = rows[r].cpu() * torch.reciprocal(torch.tensor(0.7, dtype=torch.float32))
        keep = sigma_reference(y.double(), n)
        assert torch.equal(torch.isfinite(out[r]), keep)


def test_typical_after_top_k_and_sigma_before_it(device):
    """Order: top-n-sigma over the whole row, then top-k, then typical-p over the top-k set."""
    x = _row(5)
    out = torch_wrs.filter_logits(x.to(device), top_k=40, typical_p=0.6).cpu()
    topk = x >= x.sort(descending=True).values[39]
    keep = typical_reference(x.double().masked_fill(~topk, float("-inf")), 0.6) & topk
    assert torch.equal(torch.isfinite(out), keep)
    out = torch_wrs.filter_logits(x.to(device), top_k=5, top_n_sigma=0.5).cpu()
    keep = sigma_reference(x.double(), 0.5) & (x >= x.sort(descending=True).values[4])
    assert torch.equal(torch.isfinite(out), keep)


def _long_rows(v=50_000):
    """Vocabulary-sized rows of three sharpnesses, values on a 1/8 grid (long runs of ties), a
    seventh of them -inf. On CUDA, each row is split over a cluster of CTAs; an odd length
    takes the loads of single items and a last CTA with a shorter share."""
    g = torch.Generator().manual_seed(11)
    x = torch.randn(3, v, generator=g) * torch.tensor([[0.5], [2.0], [6.0]])
    x = (x * 8).round() / 8
    x[:, ::7] = float("-inf")
    return x


@pytest.mark.parametrize("v", [50_000, 50_001])
@pytest.mark.parametrize("mass", [0.05, 0.5, 0.9, 0.999])
def test_typical_op_on_long_rows_with_ties(device, mass, v):
    x = _long_rows(v)
    out = torch.ops.wrs.typical_logits(x.to(device), torch.full((3,), mass, dtype=torch.float64, device=device))
    for r in range(3):
        keep = typical_reference(x[r].double(), mass) & torch.isfinite(x[r])
        assert torch.equal(torch.isfinite(out[r].cpu()), keep)
        assert torch.equal(out[r].cpu()[keep], x[r][keep])


def _structured_rows(v=40_000):
    """Rows whose shifts crowd or spread unusually: uniform; one finite entry far below the
    rest; two values; values a float ulp apart; a few strong candidates over a flat tail."""
    g = torch.Generator().manual_seed(4)
    rows = torch.zeros(5, v)
    rows[1] = torch.randn(v, generator=g)
    rows[1, 17] = -1e30
    rows[2, : v // 3] = 2.0
    rows[3] = 1.0 + torch.arange(v, dtype=torch.float32) * torch.finfo(torch.float32).eps
    rows[4] = torch.randn(v, generator=g) * 0.1
    rows[4, torch.randperm(v, generator=g)[:20]] += 12.0
    return rows


@pytest.mark.parametrize("mass", [0.05, 0.5, 0.9])
def test_typical_op_on_structured_rows(device, mass):
    x = _structured_rows()
    out = torch.ops.wrs.typical_logits(x.to(device), torch.full((5,), mass, dtype=torch.float64, device=device))
    for r in range(5):
        assert torch.equal(torch.isfinite(out[r].cpu()), typical_reference(x[r].double(), mass)), r


@pytest.mark.parametrize("v", [50_000, 50_001])
@pytest.mark.parametrize("n", [0.0, 0.3, 1.0, 3.0])
def test_top_n_sigma_op_on_long_rows_with_ties(device, n, v):
    x = _long_rows(v) + 100.0  # a large mean: the deviations must keep their digits
    out = torch.ops.wrs.top_n_sigma_logits(x.to(device), torch.full((3,), n, dtype=torch.float64, device=device))
    for r in range(3):
        assert torch.equal(torch.isfinite(out[r].cpu()), sigma_reference(x[r].double(), n))


def test_top_n_sigma_op_alone_and_in_a_batch(device):
    """A row alone (on the CPU, its passes split over the threads in chunks) and the same row
    in a batch (a row a thread) give the same values, and the reference's kept set; a NaN
    entry or an out-of-range n makes the row alone NaN."""
    x = (_long_rows(50_001) + 100.0).to(device)
    n = torch.tensor([0.3, 1.0, 3.0], dtype=torch.float64, device=device)
    batch = torch.ops.wrs.top_n_sigma_logits(x, n)
    for r in range(3):
        alone = torch.ops.wrs.top_n_sigma_logits(x[r : r + 1], n[r : r + 1])
        assert torch.equal(alone[0], batch[r])
        assert torch.equal(torch.isfinite(alone[0].cpu()), sigma_reference(x[r].cpu().double(), float(n[r])))
    y = x[:1].clone()
    y[0, 20_000] = float("nan")
    assert torch.isnan(torch.ops.wrs.top_n_sigma_logits(y, n[:1])).all()
    assert torch.isnan(torch.ops.wrs.top_n_sigma_logits(x[:1], torch.tensor([-1.0], dtype=torch.float64,
                                                                             device=device))).all()


def test_truncation_ops_on_special_rows(device):
    x = torch.randn(5, 300, generator=torch.Generator().manual_seed(2)).to(device)
    x[0, 7] = float("nan")
    x[1, 3] = float("inf")
    x[2] = float("-inf")
    mass = torch.tensor([0.5, 0.5, 0.5, 1.0, 0.5], dtype=torch.float64, device=device)
    out = torch.ops.wrs.typical_logits(x, mass)
    assert torch.isnan(out[:3]).all()  # NaN, +inf or no finite entry: the filter's invalid row
    assert torch.equal(out[3], x[3]) and 0 < int(torch.isfinite(out[4]).sum()) < 300
    sig = torch.ops.wrs.top_n_sigma_logits(x, torch.full((5,), 0.5, dtype=torch.float64, device=device))
    assert torch.isnan(sig[:3]).all()
    assert int(torch.isfinite(sig[3]).sum()) > 0 and not torch.isnan(sig[3:]).any()
    bad = torch.tensor([0.0, -0.1, 1.5, float("nan"), 0.5], dtype=torch.float64, device=device)
    assert torch.isnan(torch.ops.wrs.typical_logits(x, bad)[:4]).all()
    bad = torch.tensor([-1.0, float("inf"), float("nan"), 0.0, 0.5], dtype=torch.float64, device=device)
    assert torch.isnan(torch.ops.wrs.top_n_sigma_logits(x, bad)[:3]).all()
    empty = torch.zeros(0, 10, device=device)
    assert torch.ops.wrs.typical_logits(empty, torch.zeros(0, dtype=torch.float64, device=device)).shape == (0, 10)


@pytest.mark.parametrize("op, args, text", [
    ("typical_logits", lambda d: (torch.randn(2, 5, device=d), torch.ones(2, device=d)), "mass must be float64"),
    ("typical_logits", lambda d: (torch.randn(2, 5, device=d).double(), torch.ones(2, dtype=torch.float64, device=d)),
     "values must be float32"),
    ("top_n_sigma_logits", lambda d: (torch.randn(2, 5, device=d), torch.ones(3, dtype=torch.float64, device=d)),
     r"n must be float64 \[2\]"),
])
def test_truncation_op_errors(device, op, args, text):
    with pytest.raises(RuntimeError, match=text):
        getattr(torch.ops.wrs, op)(*args(device))


def test_truncation_ops_opcheck(device):
    x = torch.randn(3, 40, device=device)
    c = torch.full((3,), 0.7, dtype=torch.float64, device=device)
    for op in (torch.ops.wrs.typical_logits.default, torch.ops.wrs.top_n_sigma_logits.default):
        torch.library.opcheck(op, (x, c))


@pytest.mark.parametrize("kw", [dict(typical_p=0.7), dict(top_n_sigma=1.0, temperature=0.8),
                                dict(typical_p=0.9, top_k=50, top_n_sigma=2.0)], ids=["typical", "sigma", "all"])
def test_law(device, kw):
    x = _row(7, 300)
    ref = torch_wrs.filter_logits(x, **kw).double()  # the kept set, checked above
    gen = torch.Generator(device).manual_seed(3)
    draws = 20_000_000 if device.type == "cuda" else 200_000
    rows = 1000 if device.type == "cuda" else 4
    counts = torch.zeros(300, dtype=torch.float64)
    batch = x.to(device).expand(rows, -1)
    for _ in range(draws // (rows * 50)):
        t = torch_wrs.sample_logits(batch, 50, generator=gen, **kw)
        counts += torch.bincount(t.reshape(-1).cpu(), minlength=300).double()
    assert g_test_pvalue(counts, law(ref)) > P_MIN


def test_top_logprobs_and_ranks(device):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(2, 3, 500, generator=g) * 1.5).to(device)
    for mode in (None, "raw", "processed"):
        out = torch_wrs.sample_logits(x, 4, temperature=0.8, top_k=100, top_p=0.9, return_logprobs=mode,
                                      top_logprobs=7, generator=torch.Generator(device).manual_seed(2))
        assert isinstance(out, torch_wrs.SampleOutput)
        assert out.tokens.shape == out.ranks.shape == out.logprobs.shape == (2, 3, 4)
        assert out.top_tokens.shape == out.top_logprobs.shape == (2, 3, 7)
        if mode == "processed":
            y = torch_wrs.filter_logits(x, temperature=0.8, top_k=100, top_p=0.9).float()
        else:
            y = x.float() * torch.reciprocal(torch.tensor(0.8)).to(device)
        lp = torch.log_softmax(y.double(), -1)  # the exact law, rounded once to float32 below
        torch.testing.assert_close(out.top_logprobs, lp.topk(7, -1).values.float())
        assert torch.equal(y.gather(-1, out.top_tokens), y.topk(7, -1).values)
        torch.testing.assert_close(out.logprobs, lp.gather(-1, out.tokens).float())
        ranks = (y.unsqueeze(-2) > y.gather(-1, out.tokens).unsqueeze(-1)).sum(-1) + 1
        assert torch.equal(out.ranks, ranks) and (out.ranks >= 1).all()
        same = torch_wrs.sample_logits(x, 4, temperature=0.8, top_k=100, top_p=0.9,
                                       generator=torch.Generator(device).manual_seed(2))
        assert torch.equal(same, out.tokens), "top_logprobs changes the draws"


def test_top_logprobs_of_a_greedy_row_and_with_typical(device):
    x = _row(3).to(device)
    out = torch_wrs.sample_logits(x, temperature=0.0, top_logprobs=3)
    assert int(out.tokens) == int(x.argmax()) and int(out.ranks) == 1
    out = torch_wrs.sample_logits(x, typical_p=0.5, top_logprobs=3, return_logprobs="processed")
    assert torch.isfinite(out.logprobs).all()
    assert torch.equal(out.top_tokens, torch_wrs.filter_logits(x, typical_p=0.5).topk(3).indices)


def test_per_row_controls_and_invalid_rows(device):
    x = torch.stack([_row(s, 200) for s in range(4)]).to(device)
    typ = torch.tensor([0.3, 1.0, 0.8, 1.5], device=device)  # the last is out of range
    out = torch_wrs.filter_logits(x, typical_p=typ)
    for r in range(3):
        keep = typical_reference(x[r].cpu().double(), float(typ[r])) & torch.isfinite(x[r].cpu())
        assert torch.equal(torch.isfinite(out[r]).cpu(), keep)
    assert torch.isnan(out[3]).all()
    tokens, lp = torch_wrs.sample_logits(x, typical_p=typ, return_logprobs="processed")
    assert int(tokens[3]) == 0 and torch.isnan(lp[3]).all() and torch.isfinite(lp[:3]).all()
    sig = torch.tensor([0.0, 1.0, float("nan"), -1.0], device=device)
    out = torch_wrs.filter_logits(x, top_n_sigma=sig)
    assert torch.isnan(out[2:]).all() and int(torch.isfinite(out[0]).sum()) == 1
    greedy = torch.tensor([0.0, 0.0, 1.0, 1.0], device=device)  # greedy rows with controls out of range, too
    for kw in (dict(typical_p=torch.tensor([0.5, 1.5, 0.5, 0.0], device=device)),
               dict(top_n_sigma=torch.tensor([1.0, -1.0, 1.0, float("nan")], device=device))):
        out = torch_wrs.filter_logits(x, temperature=greedy, **kw)
        assert torch.isnan(out[[1, 3]]).all() and not torch.isnan(out[[0, 2]]).any()
    nan_row = x.clone()
    nan_row[1, 5] = float("nan")
    assert torch.isnan(torch_wrs.filter_logits(nan_row, typical_p=0.5)[1]).all()


@pytest.mark.parametrize("kw", [dict(typical_p=0.7), dict(top_n_sigma=1.0), dict(typical_p=0.7, top_n_sigma=1.0)],
                         ids=["typical", "sigma", "both"])
def test_left_out_filter_changes_nothing(device, kw):
    """Without top-k, top-p or min-p the fused filter is left out; a top-k of V runs it and
    keeps every token, so both give the same law, invalid rows included."""
    x = torch.stack([_row(s, 300) for s in range(5)]).to(device)
    x[1, 4] = float("nan")
    x[2, 9] = float("inf")
    x[3] = float("-inf")
    alone = torch_wrs.filter_logits(x, temperature=0.8, **kw)
    filtered = torch_wrs.filter_logits(x, temperature=0.8, top_k=300, **kw)
    assert torch.isnan(alone[1:4]).all() and torch.isfinite(alone[[0, 4]]).any(-1).all()
    assert torch.equal(alone.isnan(), filtered.isnan()) and torch.equal(alone.nan_to_num(), filtered.nan_to_num())
    draws = [torch_wrs.sample_logits(x, 4, temperature=0.8, generator=torch.Generator(device).manual_seed(3),
                                     return_logprobs="processed", **extra, **kw) for extra in ({}, dict(top_k=300))]
    assert torch.equal(draws[0][0], draws[1][0]) and torch.equal(draws[0][1].isnan(), draws[1][1].isnan())


def test_reproducible_seeds_dtypes_strides_and_empty(device):
    x = torch.stack([_row(s, 256) for s in range(6)]).to(device)
    kw = dict(typical_p=0.8, top_n_sigma=2.0)
    a = torch_wrs.sample_logits(x, 8, generator=torch.Generator(device).manual_seed(5), **kw)
    b = torch_wrs.sample_logits(x, 8, generator=torch.Generator(device).manual_seed(5), **kw)
    assert torch.equal(a, b)
    seeds = torch.arange(6, device=device) * 7
    s = torch_wrs.sample_logits(x, 8, seeds=seeds, **kw)
    assert torch.equal(torch_wrs.sample_logits(x[2:3], 8, seeds=seeds[2:3], **kw), s[2:3])
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        out = torch_wrs.filter_logits(x.to(dtype), **kw)
        assert out.dtype == dtype
        assert torch.equal(torch.isfinite(out), torch.isfinite(torch_wrs.filter_logits(x.to(dtype).float(), **kw)))
    wide = torch.randn(256, 12, device=device).t()  # non-contiguous rows
    assert torch.equal(torch_wrs.filter_logits(wide, **kw), torch_wrs.filter_logits(wide.contiguous(), **kw))
    empty = torch.zeros(0, 50, device=device)
    assert torch_wrs.sample_logits(empty, typical_p=0.5, top_logprobs=2).top_tokens.shape == (0, 2)


def test_distinct_draws_with_extras(device):
    x = _row(9, 300).to(device)
    t = torch_wrs.sample_logits(x, 20, typical_p=0.95, replacement=False)
    keep = torch.isfinite(torch_wrs.filter_logits(x, typical_p=0.95))
    assert t.unique().numel() == 20 and keep[t].all()


@pytest.mark.parametrize("kw, text", [
    (dict(typical_p=0.0), "typical_p must be in"), (dict(typical_p=1.5), "typical_p must be in"),
    (dict(top_n_sigma=-1.0), "top_n_sigma must be"), (dict(top_n_sigma=float("inf")), "top_n_sigma must be"),
    (dict(top_logprobs=-1), "top_logprobs must be"), (dict(top_logprobs=11), "top_logprobs must be"),
    (dict(top_logprobs=True), "top_logprobs must be"), (dict(typical_p=torch.ones(3)), "typical_p must hold"),
    (dict(typical_p=0.5, return_logprobs="all"), "return_logprobs must be"),
])
def test_argument_errors(device, kw, text):
    with pytest.raises(RuntimeError, match=text):
        torch_wrs.sample_logits(torch.randn(2, 10, device=device), **kw)


def test_matches_transformers_typical_warper():
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    from transformers.generation.logits_process import TypicalLogitsWarper

    x = torch.stack([_row(s, 1000) for s in range(32)])
    for mass in (0.3, 0.9):
        theirs = TypicalLogitsWarper(mass)(None, x.clone())
        assert torch.equal(torch.isfinite(torch_wrs.filter_logits(x, typical_p=mass)), torch.isfinite(theirs))
    del transformers
