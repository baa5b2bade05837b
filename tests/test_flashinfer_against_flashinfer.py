"""torch_wrs.flashinfer on the GPU against FlashInfer's own kernels (0.7.2's header-only
sampling.cuh through benchmarks/flashinfer_binding.cu): the drop-in's draws and FlashInfer's,
on the same rows, follow one law (two-sample G-tests), and top_p_renorm_probs keeps the same
items with the same values. Skipped without a GPU or without FlashInfer's headers (see
torch_wrs/benchmark_llm.py for where they are looked for)."""
import os

import pytest
import scipy.stats
import torch

import torch_wrs.flashinfer as fs
from torch_wrs import benchmark_llm

P_MIN = 1e-4
ROWS = 4096
ROUNDS = 2048  # 2^23 draws a side: a 1e-3 difference in any item's probability shows


def _binding():
    if not torch.cuda.is_available():
        pytest.skip("FlashInfer's kernels need a GPU")
    inc = os.environ.get("FLASHINFER_INCLUDE", os.path.join(benchmark_llm._REPO, ".flashinfer", "flashinfer",
                                                             "data", "include"))
    if not os.path.exists(os.path.join(inc, "flashinfer", "sampling.cuh")):
        pytest.skip(f"FlashInfer's headers are not at {inc}")
    return benchmark_llm.flashinfer()


@pytest.fixture(scope="module")
def fi():
    return _binding()


def _row(seed, v=200):
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(v, generator=g, dtype=torch.float64) ** 4
    p[::17] = 0
    return (p / p.sum()).float().cuda()


def _histogram(draw, v):
    counts = torch.zeros(v, dtype=torch.float64, device="cuda")
    for r in range(ROUNDS):
        counts += torch.bincount(draw(r).long(), minlength=v).double()
    return counts.cpu()


def _same_law(a, b):
    """Two-sample G-test on the items either side drew."""
    seen = (a + b) > 0
    table = torch.stack([a[seen], b[seen]]).numpy()
    return scipy.stats.chi2_contingency(table, lambda_="log-likelihood")[1]


CASES = {
    "plain": (lambda fi, p, s: fi.from_probs(p, s, 0), fs.sampling_from_probs, {}),
    "top_k": (lambda fi, p, s: fi.top_k(p, 20, s, 0), fs.top_k_sampling_from_probs, dict(top_k=20)),
    "top_p": (lambda fi, p, s: fi.top_p(p, 0.6, s, 0), fs.top_p_sampling_from_probs, dict(top_p=0.6)),
    "min_p": (lambda fi, p, s: fi.min_p(p, 0.05, s, 0), fs.min_p_sampling_from_probs, dict(min_p=0.05)),
    "joint": (lambda fi, p, s: fi.top_k_top_p(p, 30, 0.5, None, None, s, 0), fs.top_k_top_p_sampling_from_probs,
              dict(top_k=30, top_p=0.5, filter_apply_order="joint")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_draws_follow_flashinfers_law(fi, case):
    theirs, ours, kw = CASES[case]
    p = _row(1)
    rows = p.expand(ROWS, -1).contiguous()
    gen = torch.Generator("cuda").manual_seed(3)
    a = _histogram(lambda r: theirs(fi, rows, r + 1), p.numel())
    b = _histogram(lambda r: ours(rows, generator=gen, **kw), p.numel())
    zero = (p == 0).cpu()
    assert a[zero].sum() == 0 and b[zero].sum() == 0
    assert _same_law(a, b) > P_MIN, case


def test_draws_differ_where_the_orders_differ(fi):
    """The test can fail: Hugging Face's order (top_k_first) against FlashInfer's joint kernel."""
    p = _row(3)
    rows = p.expand(ROWS, -1).contiguous()
    gen = torch.Generator("cuda").manual_seed(4)
    a = _histogram(lambda r: fi.top_k_top_p(rows, 10, 0.5, None, None, r + 1, 0), p.numel())
    b = _histogram(lambda r: fs.top_k_top_p_sampling_from_probs(rows, 10, 0.5, generator=gen), p.numel())
    assert _same_law(a, b) < 1e-12


def test_top_p_renorm_matches_flashinfer(fi):
    g = torch.Generator().manual_seed(5)
    p = torch.softmax(torch.randn(64, 1000, generator=g) * 2, -1).cuda()
    theirs = fi.top_p_renorm(p, 0.7)
    ours = fs.top_p_renorm_probs(p, 0.7)
    assert torch.equal(theirs > 0, ours > 0)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)


def test_chain_speculative_follows_flashinfers_law(fi):
    g = torch.Generator().manual_seed(6)
    b, s, v = ROWS, 2, 64
    draft = torch.softmax(torch.randn(s, v, generator=g), -1).cuda()
    target = torch.softmax(torch.randn(s + 1, v, generator=g), -1).cuda()
    draft_b, target_b = draft.expand(b, -1, -1).contiguous(), target.expand(b, -1, -1).contiguous()
    ids = torch.multinomial(draft, 1, generator=torch.Generator("cuda").manual_seed(7)).view(1, s)
    ids = ids.expand(b, -1).int().contiguous()
    gen = torch.Generator("cuda").manual_seed(8)
    # The first emitted token, and how many drafts were emitted, each as one histogram.
    first_a = torch.zeros(v, dtype=torch.float64)
    first_b = torch.zeros(v, dtype=torch.float64)
    emitted_a = torch.zeros(s + 1, dtype=torch.float64)
    emitted_b = torch.zeros(s + 1, dtype=torch.float64)
    for r in range(ROUNDS // 8):
        out, _, emitted = fi.chain_speculative(draft_b, ids, target_b, r + 1, 0)
        first_a += torch.bincount(out[:, 0].long().cpu(), minlength=v).double()
        emitted_a += torch.bincount(emitted.long().cpu(), minlength=s + 1).double()
        out, _, emitted = fs.chain_speculative_sampling(draft_b, ids, target_b, generator=gen)
        first_b += torch.bincount(out[:, 0].long().cpu(), minlength=v).double()
        emitted_b += torch.bincount(emitted.long().cpu(), minlength=s + 1).double()
    assert _same_law(first_a, first_b) > P_MIN
    assert _same_law(emitted_a, emitted_b) > P_MIN
