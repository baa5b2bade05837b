"""torch_wrs.flashinfer: FlashInfer 0.7's sampling API, function by function against its
documented behaviour (the laws by G-tests against float64 references written from the
documented rules, shapes, dtypes, indices, seeds, validity and errors), with FlashInfer's
argument names and order."""
import inspect

import pytest
import torch

import torch_wrs.flashinfer as fs
from helpers import g_test_pvalue

P_MIN = 1e-4

# FlashInfer 0.7.2's signatures (flashinfer/sampling.py), in order.
SIGNATURES = {
    "softmax": ["logits", "temperature", "enable_pdl"],
    "sampling_from_logits": ["logits", "indices", "deterministic", "generator", "check_nan", "seed", "offset"],
    "sampling_from_probs": ["probs", "indices", "deterministic", "generator", "check_nan", "seed", "offset",
                            "return_valid"],
    "top_p_sampling_from_probs": ["probs", "top_p", "indices", "deterministic", "generator", "check_nan", "seed",
                                  "offset", "return_valid"],
    "top_k_sampling_from_probs": ["probs", "top_k", "indices", "deterministic", "generator", "check_nan", "seed",
                                  "offset", "return_valid"],
    "min_p_sampling_from_probs": ["probs", "min_p", "indices", "deterministic", "generator", "check_nan", "seed",
                                  "offset", "return_valid"],
    "top_k_top_p_sampling_from_logits": ["logits", "top_k", "top_p", "indices", "filter_apply_order",
                                         "deterministic", "generator", "check_nan", "seed", "offset"],
    "top_k_top_p_sampling_from_probs": ["probs", "top_k", "top_p", "indices", "filter_apply_order", "deterministic",
                                        "generator", "check_nan", "seed", "offset", "return_valid"],
    "top_p_renorm_probs": ["probs", "top_p", "is_deterministic"],
    "top_k_renorm_probs": ["probs", "top_k", "is_deterministic"],
    "top_k_mask_logits": ["logits", "top_k"],
    "chain_speculative_sampling": ["draft_probs", "draft_token_ids", "target_probs",
                                   "maybe_output_accepted_token_num", "maybe_output_emitted_draft_token_num",
                                   "deterministic", "generator", "seed", "offset"],
}


def test_signatures_are_flashinfers():
    for name, params in SIGNATURES.items():
        assert list(inspect.signature(getattr(fs, name)).parameters) == params, name


def keep_reference(p, top_k=None, top_p=None, min_p=None):
    """The documented rules on one row (float64): top-k keeps i when fewer than k tokens are
    more likely; top-p when the mass of the more likely ones is below p; min-p when
    p_i >= min_p max p."""
    p = p.double()
    keep = torch.ones_like(p, dtype=torch.bool)
    for i in range(p.numel()):
        more = p > p[i]
        if top_k is not None and top_k > 0 and int(more.sum()) >= top_k:
            keep[i] = False
        if top_p is not None and float(p[more].sum()) >= top_p * float(p.sum()) and bool(more.any()):
            keep[i] = False
    if min_p is not None:
        keep &= p >= min_p * p.max()
    return keep


def _probs(seed, v=200):
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(v, generator=g, dtype=torch.float64) ** 4
    p[::17] = 0
    p[3] = p[4] = p[5]  # ties
    return (p / p.sum()).float()


def _counts(fn, x, device, draws, **kw):
    rows = 512 if device.type == "cuda" else 8
    batch = x.to(device).expand(rows, -1).contiguous()
    gen = torch.Generator(device).manual_seed(9)
    counts = torch.zeros(x.shape[-1], dtype=torch.float64)
    for _ in range(max(1, draws // rows)):
        t = fn(batch, generator=gen, **kw)
        assert t.dtype == torch.int32 and t.shape == (rows,)
        counts += torch.bincount(t.long().cpu(), minlength=x.shape[-1]).double()
    return counts


def _draws(device):
    return 10_000_000 if device.type == "cuda" else 80_000


def _law(p, keep):
    w = torch.where(keep, p.double(), 0.0)
    return w / w.sum()


@pytest.mark.parametrize("case", ["plain", "top_p", "top_k", "min_p", "top_k_first", "joint"])
def test_probs_laws(device, case):
    p = _probs(1)
    calls = {
        "plain": (fs.sampling_from_probs, {}, {}),
        "top_p": (fs.top_p_sampling_from_probs, dict(top_p=0.6), dict(top_p=0.6)),
        "top_k": (fs.top_k_sampling_from_probs, dict(top_k=20), dict(top_k=20)),
        "min_p": (fs.min_p_sampling_from_probs, dict(min_p=0.05), dict(min_p=0.05)),
        "top_k_first": (fs.top_k_top_p_sampling_from_probs, dict(top_k=30, top_p=0.5), None),
        "joint": (fs.top_k_top_p_sampling_from_probs, dict(top_k=30, top_p=0.5, filter_apply_order="joint"),
                  dict(top_k=30, top_p=0.5)),
    }
    fn, kw, rule = calls[case]
    if rule is None:  # top-p over the top-k set renormalised
        k = keep_reference(p, top_k=30)
        keep = keep_reference(torch.where(k, p, 0.0), top_p=0.5) & k
    else:
        keep = keep_reference(p, **rule)
    counts = _counts(fn, p, device, _draws(device), **kw)
    assert g_test_pvalue(counts, _law(p, keep)) > P_MIN


@pytest.mark.parametrize("order", ["top_k_first", "joint"])
def test_logits_laws(device, order):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(150, generator=g) * 2
    p = torch.softmax(x.double(), -1)
    if order == "joint":
        keep = keep_reference(p, top_k=25, top_p=0.7)
    else:
        k = keep_reference(p, top_k=25)
        keep = keep_reference(torch.where(k, p, 0.0), top_p=0.7) & k
    counts = _counts(fs.top_k_top_p_sampling_from_logits, x, device, _draws(device), top_k=25, top_p=0.7,
                     filter_apply_order=order)
    assert g_test_pvalue(counts, _law(p, keep)) > P_MIN
    counts = _counts(fs.sampling_from_logits, x, device, _draws(device))
    assert g_test_pvalue(counts, p) > P_MIN


def test_joint_differs_from_top_k_first():
    """The two orders keep different sets where top-p over the renormalised top-k set cuts
    deeper than on the original law."""
    p = _probs(3)
    joint = fs._keep(p[None], top_k=10, top_p=0.5)[0]
    assert torch.equal(joint, keep_reference(p, top_k=10, top_p=0.5))
    k = keep_reference(p, top_k=10)
    first = keep_reference(torch.where(k, p, 0.0), top_p=0.5) & k
    assert int(joint.sum()) > int(first.sum())


def test_indices_seeds_and_validity(device):
    probs = torch.zeros(3, 40, device=device)
    probs[0, :10] = 1
    probs[1, 10:20] = 1  # row 2 has no mass
    indices = torch.tensor([1, 0, 1, 1, 2], device=device)
    out, valid = fs.sampling_from_probs(probs, indices, return_valid=True)
    assert out.dtype == torch.int64 and out.shape == (5,)
    assert ((out[[0, 2, 3]] >= 10) & (out[[0, 2, 3]] < 20)).all() and out[1] < 10
    assert valid.tolist() == [True, True, True, True, False] and int(out[4]) == 0
    rows = torch.rand(4, 1000, device=device)
    a = fs.top_p_sampling_from_probs(rows, 0.9, seed=7, offset=3)
    assert torch.equal(a, fs.top_p_sampling_from_probs(rows, 0.9, seed=7, offset=3))
    seed_t = torch.tensor([7], device=device)
    off_t = torch.tensor([3], device=device)
    assert torch.equal(a, fs.top_p_sampling_from_probs(rows, 0.9, seed=seed_t, offset=off_t))
    many = torch.stack([fs.sampling_from_probs(rows, seed=7, offset=o) for o in range(20)])
    assert many.unique().numel() > 20, "offsets do not move the stream"
    same_rows = fs.sampling_from_probs(rows[:1].expand(64, -1), seed=1, offset=0)
    assert same_rows.unique().numel() > 8, "rows of one seed share a stream"
    with pytest.raises(ValueError, match="both be tensors or both be scalars"):
        fs.sampling_from_probs(rows, seed=seed_t, offset=3)
    with pytest.raises(ValueError, match="length must be 1 or 4"):
        fs.sampling_from_probs(rows, seed=torch.arange(3, device=device), offset=torch.arange(3, device=device))


def test_check_nan_and_order_errors(device):
    bad = torch.rand(2, 50, device=device)
    bad[1, 3] = float("nan")
    with pytest.raises(ValueError, match="Input probs contains NaN."):
        fs.top_k_sampling_from_probs(bad, 5, check_nan=True)
    with pytest.raises(ValueError, match="Input logits contains NaN."):
        fs.sampling_from_logits(bad, check_nan=True)
    with pytest.raises(ValueError, match="Invalid filter_apply_order: both"):
        fs.top_k_top_p_sampling_from_probs(bad.nan_to_num(), 5, 0.5, filter_apply_order="both")


def test_renorm_mask_and_softmax(device):
    p = torch.stack([_probs(s) for s in range(4)]).to(device)
    for fn, kw, rule in ((fs.top_p_renorm_probs, dict(top_p=0.7), dict(top_p=0.7)),
                         (fs.top_k_renorm_probs, dict(top_k=12), dict(top_k=12)),
                         (fs.top_k_renorm_prob, dict(top_k=torch.tensor([1, 5, 12, 0], device=device)), None)):
        out = fn(p, **kw)
        torch.testing.assert_close(out.sum(-1), torch.ones(4, device=device))
        for r in range(4):
            rr = rule if rule is not None else dict(top_k=int(kw["top_k"][r]))
            keep = keep_reference(p[r].cpu(), **rr)
            assert torch.equal((out[r] > 0).cpu(), keep & (p[r].cpu() > 0))
            torch.testing.assert_close(out[r].cpu(), _law(p[r].cpu(), keep).float())
    x = torch.randn(3, 100, device=device, dtype=torch.bfloat16)
    masked = fs.top_k_mask_logits(x, 7)
    assert masked.dtype == torch.bfloat16 and (torch.isfinite(masked).sum(-1) >= 7).all()
    assert torch.equal(masked[torch.isfinite(masked)], x[torch.isfinite(masked)])
    t = torch.tensor([0.5, 1.0, 2.0], device=device)
    torch.testing.assert_close(fs.softmax(x, t), torch.softmax(x.float() / t[:, None], -1))
    torch.testing.assert_close(fs.softmax(x, 0.7), torch.softmax(x.float() / 0.7, -1))
    with pytest.raises(ValueError, match="one value per logits row"):
        fs.softmax(x, torch.ones(2, device=device))


def test_chain_speculative_sampling_emits_the_target_law(device):
    g = torch.Generator().manual_seed(5)
    v, b, s = 12, 4096 if device.type == "cuda" else 512, 2
    q = torch.softmax(torch.randn(v, generator=g) * 1.5, -1)
    p = torch.softmax(torch.randn(v, generator=g) * 1.5, -1)
    draft = q.expand(b, s, v).contiguous().to(device)
    target = p.expand(b, s + 1, v).contiguous().to(device)
    gen = torch.Generator(device).manual_seed(1)
    first = torch.zeros(v, dtype=torch.float64)
    accepted_total = torch.zeros(b, dtype=torch.int32, device=device)
    rounds = 200 if device.type == "cuda" else 40
    for _ in range(rounds):
        tokens = torch.multinomial(draft.view(-1, v), 1, generator=gen).view(b, s)
        out, acc, emitted = fs.chain_speculative_sampling(draft, tokens, target, accepted_total, None, generator=gen)
        assert out.dtype == torch.int32 and out.shape == (b, s + 1)
        assert (acc >= 0).all() and (emitted <= s).all()
        pos = torch.arange(s + 1, device=device)
        assert ((out >= 0) == (pos <= emitted[:, None])).all()
        assert torch.equal(out[:, :s].where(pos[:s] < emitted[:, None], -1).long(),
                           tokens.where(pos[:s] < emitted[:, None], -1))
        first += torch.bincount(out[:, 0].long().cpu(), minlength=v).double()
    assert g_test_pvalue(first, p.double()) > P_MIN
    assert int(accepted_total.sum()) > 0, "the accepted counts are added in place"
    a = fs.chain_speculative_sampling(draft[:8], tokens[:8], target[:8], seed=3, offset=1)[0]
    assert torch.equal(a, fs.chain_speculative_sampling(draft[:8], tokens[:8], target[:8], seed=3, offset=1)[0])
    with pytest.raises(ValueError, match="shapes do not match"):
        fs.chain_speculative_sampling(draft, tokens[:, :1], target)


def test_indices_with_every_sampler_and_the_joint_order(device):
    """Output i draws from row indices[i] and takes indices' dtype, on every path."""
    probs = torch.zeros(2, 60, device=device)
    probs[0, :20] = torch.rand(20, device=device) + 0.1
    probs[1, 40:] = torch.rand(20, device=device) + 0.1
    indices = torch.tensor([1, 0, 0, 1, 1, 0], dtype=torch.int32, device=device)
    logits = torch.log(probs)
    calls = [
        lambda: fs.sampling_from_logits(logits, indices),
        lambda: fs.top_p_sampling_from_probs(probs, 0.8, indices),
        lambda: fs.top_k_sampling_from_probs(probs, torch.tensor([3, 5, 7, 9, 11, 13], device=device), indices),
        lambda: fs.min_p_sampling_from_probs(probs, 0.2, indices),
        lambda: fs.top_k_top_p_sampling_from_probs(probs, 5, 0.9, indices, filter_apply_order="joint"),
        lambda: fs.top_k_top_p_sampling_from_logits(logits, 5, 0.9, indices, filter_apply_order="joint"),
        lambda: fs.top_k_top_p_sampling_from_logits(logits, 5, 0.9, indices),
    ]
    for call in calls:
        out = call()
        assert out.dtype == torch.int32 and out.shape == (6,)
        row = indices.long()
        assert ((out < 20) == (row == 0)).all() and ((out >= 40) == (row == 1)).all()
    out, valid = fs.top_k_top_p_sampling_from_probs(probs, 5, 0.9, indices.long(), filter_apply_order="joint",
                                                    return_valid=True)
    assert out.dtype == torch.int64 and valid.all()
