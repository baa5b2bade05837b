"""The categorical sampler from logits (torch.ops.wrs.sample_logits: softmax(logits / T)
without writing the softmax; torch_wrs.sample_logits is the LLM sampler, tests/test_llm.py)
and the Categorical / OneHotCategorical drop-ins: the law (G-tests with fixed seeds, 1e8 draws on the GPU),
errors, and the machinery (opcheck, compile, TorchScript, CUDA graphs)."""
import os

import pytest
import torch

import torch_wrs
from conftest import requires_cuda
from helpers import every_key_draws, g_test_pvalue
from torch_wrs.multinomial import _categorical_logits
from test_multinomial import _logits_without_replacement, _second_draw_law

P_MIN = 1e-4


def _softmax(logits, temperature=1.0):
    return torch.softmax(logits.double() / temperature, -1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("n,k,rows", [(18, 4, 5000), (1000, 1, 20_000), (3000, 8, 1000), (70_000, 128, 8)])
def test_law_with_replacement(device, dtype, n, k, rows):
    """Each with-replacement method (warp rows, inverse CDF by row and by chunk): 4e5 draws."""
    g = torch.Generator().manual_seed(n + k)
    logits = (torch.randn(n, generator=g) * 3).to(dtype)
    logits[::7] = float("-inf")
    x = logits.to(device).expand(rows, n).contiguous()
    gen = torch.Generator(device).manual_seed(1)
    counts = sum(torch.bincount(_categorical_logits(x, k, temperature=0.7, generator=gen).reshape(-1), minlength=n)
                 for _ in range(400_000 // (rows * k)))
    assert g_test_pvalue(counts, _softmax(logits.double(), 0.7)) > P_MIN


def test_without_replacement_first_two_draws(device):
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(40, generator=g) * 2
    logits[::5] = float("-inf")
    s = _categorical_logits(logits.to(device).expand(200_000, 40), 6, replacement=False,
                                generator=torch.Generator(device).manual_seed(6))
    assert (s.sort(-1).values.diff(dim=-1) != 0).all()
    p = _softmax(logits)
    assert g_test_pvalue(torch.bincount(s[:, 0], minlength=40), p) > P_MIN
    assert g_test_pvalue(torch.bincount(s[:, 1], minlength=40), _second_draw_law(p)) > P_MIN


def test_shapes_and_empty(device):
    x = torch.randn(2, 3, 50, device=device)
    assert _categorical_logits(x).shape == (2, 3, 1)
    assert _categorical_logits(x, 5, replacement=False).shape == (2, 3, 5)
    assert _categorical_logits(torch.randn(0, 7, device=device), 2).shape == (0, 2)
    nc = torch.randn(50, 6, device=device).T
    g = torch.Generator(device)
    a = _categorical_logits(nc, 3, generator=g.manual_seed(1))
    assert torch.equal(a, _categorical_logits(nc.contiguous(), 3, generator=g.manual_seed(1)))


@pytest.mark.parametrize("make,kwargs,message", [
    # invalid rows raise with check=True (without it: token 0 and a NaN log-probability, test_llm.py)
    (lambda d: torch.tensor([0.0, float("nan")], device=d), {"check": True}, "logits contains NaN or \\+inf"),
    (lambda d: torch.tensor([0.0, float("inf")], device=d), {"check": True}, "logits contains NaN or \\+inf"),
    (lambda d: torch.full((2, 3), float("-inf"), device=d), {"check": True}, "all -inf"),
    (lambda d: torch.tensor([0.0, float("-inf"), 1.0], device=d), {"num_samples": 3, "replacement": False},
     "fewer finite logits"),
    (lambda d: torch.zeros(3, device=d), {"num_samples": 4, "replacement": False}, "num_samples \\(4\\) > logits"),
    (lambda d: torch.zeros(3, device=d), {"temperature": -1.0}, "temperature must be non-negative"),
    (lambda d: torch.zeros(3, device=d), {"num_samples": 0}, "num_samples must be positive"),
    (lambda d: torch.zeros(3, dtype=torch.int64, device=d), {}, "must be a floating-point tensor"),
    (lambda d: torch.zeros(2, 0, device=d), {}, "at least one category"),
])
def test_errors(device, make, kwargs, message):
    """torch_wrs.sample_logits (the LLM sampler) raises for bad arguments, and for invalid
    rows with check=True."""
    with pytest.raises(RuntimeError, match=message):
        torch_wrs.sample_logits(make(device), **kwargs)


def test_opcheck_compile(device):
    x = torch.randn(3, 20, device=device)
    for kwargs in ({"generator": None}, {"replacement": False, "temperature": 0.5}):
        torch.library.opcheck(torch.ops.wrs.sample_logits.default, (x, 4), kwargs,
                              test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))
    compiled = torch.compile(lambda t: torch.ops.wrs.sample_logits(t, 4, replacement=False) + 0, fullgraph=True)
    s = compiled(x)
    assert s.shape == (3, 4) and all(len(set(r)) == 4 for r in s.tolist())


class Decoder(torch.nn.Module):
    def forward(self, logits: torch.Tensor, temperature: float) -> torch.Tensor:
        return torch.ops.wrs.sample_logits(logits, 1, temperature=temperature)


def test_torchscript_roundtrip(tmp_path, device):
    module = torch.jit.script(Decoder())
    path = os.path.join(tmp_path, "decoder.pt")
    module.save(path)
    loaded = torch.jit.load(path)
    x = torch.randn(4, 100, device=device)
    torch.manual_seed(3)
    a = loaded(x, 0.8)
    torch.manual_seed(3)
    assert torch.equal(a, module(x, 0.8)) and a.shape == (4, 1)


@requires_cuda
def test_gpu_law_1e8():
    """1e8 draws from 1,000 logits (one-pass warp rows would not serve k = 100: the
    inverse CDF does), and the LLM decode shape (few rows of 128,256, k = 1)."""
    g = torch.Generator().manual_seed(9)
    logits = torch.randn(1000, generator=g) * 4
    logits[::9] = float("-inf")
    x = logits.cuda().expand(100_000, 1000).contiguous()
    gen = torch.Generator("cuda").manual_seed(10)
    counts = torch.zeros(1000, dtype=torch.int64, device="cuda")
    for _ in range(10):
        counts += torch.bincount(_categorical_logits(x, 100, generator=gen).reshape(-1), minlength=1000)
    assert g_test_pvalue(counts, _softmax(logits)) > P_MIN
    v = torch.randn(128_256, generator=g) * 3
    x = v.to(torch.bfloat16).cuda().expand(64, 128_256).contiguous()
    counts = torch.zeros(128_256, dtype=torch.int64, device="cuda")
    for _ in range(2000):
        counts += torch.bincount(_categorical_logits(x, generator=gen).reshape(-1), minlength=128_256)
    assert g_test_pvalue(counts, _softmax(v.to(torch.bfloat16).double())) > P_MIN


@requires_cuda
@pytest.mark.parametrize("n,k,dtype", [(1000, 1, torch.bfloat16), (700, 4, torch.float32), (1000, 2, torch.float16),
                                       (500, 2, torch.float64), (100, 1, torch.float64)])
def test_gpu_warp_rows_few_draws_law_1e7(n, k, dtype):
    """Up to four draws a row from logits, where the warp rows draw against the lanes'
    bounds and quantize only the drawn lane's items (an exp each) instead of holding every
    item's units: 1e7 draws pooled over identical rows (fewer than 65,536, where a thread
    per row would take one draw), -inf never drawn."""
    g = torch.Generator().manual_seed(40 + n + k)
    logits = (torch.randn(n, generator=g) * 3).to(dtype)
    logits[::11] = float("-inf")
    rows = 50_003
    x = logits.cuda().expand(rows, n).contiguous()
    gen = torch.Generator("cuda").manual_seed(41)
    counts = sum(torch.bincount(_categorical_logits(x, k, temperature=0.9, generator=gen).reshape(-1),
                                minlength=n) for _ in range(10_000_000 // (rows * k) + 1))
    assert counts[::11].sum() == 0
    assert g_test_pvalue(counts, _softmax(logits.double(), 0.9)) > P_MIN


@requires_cuda
@pytest.mark.parametrize("rows,calls,batch", [(250_000, 400, 1), (3800, 132, 200)])
def test_gpu_one_draw_race_law_1e8(rows, calls, batch):
    """One draw per row from many logits takes a race: the warp top-k with k = 1 (250,000
    rows of 1,100), or the race kernel (3,800 rows of 1,100). 1e8 draws of bfloat16
    logits, temperature 0.7."""
    g = torch.Generator().manual_seed(12)
    logits = (torch.randn(1100, generator=g) * 3).to(torch.bfloat16)
    logits[::11] = float("-inf")
    x = logits.cuda().expand(rows, 1100).contiguous()
    gen = torch.Generator("cuda").manual_seed(13)
    counts = torch.zeros(1100, dtype=torch.int64, device="cuda")
    for _ in range(calls):
        draws = torch.cat([_categorical_logits(x, temperature=0.7, generator=gen) for _ in range(batch)])
        counts += torch.bincount(draws.reshape(-1), minlength=1100)
    assert counts.sum() >= 1e8
    assert counts[::11].sum() == 0
    assert g_test_pvalue(counts, _softmax(logits.double(), 0.7)) > P_MIN


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gpu_one_draw_over_chunks_law_1e8(dtype):
    """One draw a row from logits in rows cut into chunks (1,000 rows of 20,000: three
    chunks a row): each chunk's upper bound from one read in float, then a block per row
    drawing points until one lands within the exact units of its chunk. A whole chunk of
    -inf (a top-k filtered row), a stretch at the float minimum (a mask without -inf) and
    logits near 30 / T: 1e8 draws against softmax(x / T), masked items never drawn."""
    rows, n = 1000, 20_000
    g = torch.Generator().manual_seed(14)
    logits = (torch.randn(n, generator=g, dtype=torch.float64) * 1.5 + 30).to(dtype)
    logits[::11] = float("-inf")
    logits[7168:14_336] = float("-inf")
    logits[16_000:] = torch.finfo(dtype).min
    x = logits.cuda().expand(rows, n).contiguous()
    gen = torch.Generator("cuda").manual_seed(15)
    counts = torch.zeros(n, dtype=torch.int64, device="cuda")
    for _ in range(100_000):
        counts += torch.bincount(_categorical_logits(x, temperature=0.7, generator=gen).reshape(-1), minlength=n)
    assert counts.sum() == 1e8
    assert counts[::11].sum() == 0 and counts[7168:14_336].sum() == 0 and counts[16_000:].sum() == 0
    assert g_test_pvalue(counts, _softmax(logits.double(), 0.7)) > P_MIN


@requires_cuda
def test_gpu_one_draw_over_chunks_huge_logits():
    """Logits far from 0 (|x / T| beyond 2^35, where the bound counts only the items at the
    chunk's largest value): three tied largest logits share the draws evenly, their float
    neighbours below weigh 0 in float64, and a NaN or +inf in any chunk raises."""
    rows, n = 64, 100_000
    top = torch.tensor(1e12, dtype=torch.float32)
    below = torch.nextafter(top, torch.tensor(0.0))
    x = torch.full((n,), torch.finfo(torch.float32).min)
    x[1000:50_000] = below
    x[[7, 40_000, 99_999]] = top
    x = x.cuda().expand(rows, n).contiguous()
    gen = torch.Generator("cuda").manual_seed(16)
    counts = torch.zeros(n, dtype=torch.int64, device="cuda")
    for _ in range(500):
        counts += torch.bincount(_categorical_logits(x, temperature=0.5, generator=gen).reshape(-1), minlength=n)
    assert counts.sum() == 32_000 and counts[[7, 40_000, 99_999]].sum() == 32_000
    p = torch.zeros(n, dtype=torch.float64)
    p[[7, 40_000, 99_999]] = 1 / 3
    assert g_test_pvalue(counts, p) > P_MIN
    for bad in (float("nan"), float("inf")):
        y = x.clone()
        y[5, 60_000] = bad
        with pytest.raises(RuntimeError, match="logits contains NaN or \\+inf"):
            _categorical_logits(y)


@requires_cuda
def test_gpu_thread_rows_one_draw_law_1e8():
    """One draw per row from 65,536 rows of 1,000 logits takes a thread per row: 1e8 draws
    follow softmax(x / T); -inf logits are never drawn."""
    g = torch.Generator().manual_seed(29)
    logits = torch.randn(1000, generator=g, dtype=torch.float64) * 2
    logits[::9] = float("-inf")
    x = logits.to(torch.bfloat16).cuda().expand(65_536, 1000).contiguous()
    gen = torch.Generator("cuda").manual_seed(30)
    counts = torch.zeros(1000, dtype=torch.int64, device="cuda")
    for _ in range(1526):  # 1,526 x 65,536 = 1.0e8
        counts += torch.bincount(_categorical_logits(x, 1, temperature=0.8, generator=gen).reshape(-1),
                                 minlength=1000)
    assert counts.sum() >= 1e8
    assert counts[::9].sum() == 0
    assert g_test_pvalue(counts, _softmax(logits.to(torch.bfloat16).double(), 0.8)) > P_MIN


@requires_cuda
@pytest.mark.parametrize("rows,n,dtype", [(300, 1000, torch.float32), (8, 300_000, torch.bfloat16),
                                          (1, 1 << 21, torch.float32)])
def test_gpu_race_from_logits_equals_the_keys_and_torch_topk(rows, n, dtype):
    """The warp top-k from logits (whose float bound skips most float64 logs), and float
    keys computed in float for k = 100, keep exactly the first k of the keys that
    every-key-and-torch.topk ranks, and one draw with replacement from many logits (the
    race kernel) is the first of them."""
    g = torch.Generator().manual_seed(n + 1)
    x = (torch.randn(rows, n, generator=g) * 4).to(dtype).cuda()
    x[:, 3::11] = float("-inf")
    reference = every_key_draws(_logits_without_replacement, x, 100, 7, logits=True)
    for k in (2, 8, 33, 64, 100):
        ours = _categorical_logits(x, k, temperature=0.6, replacement=False,
                                       generator=torch.Generator("cuda").manual_seed(7))
        assert torch.equal(ours, reference[:, :k]), k
    if rows * n >= 1 << 21:
        one = _categorical_logits(x, 1, temperature=0.6, generator=torch.Generator("cuda").manual_seed(7))
        assert torch.equal(one, reference[:, :1])


@requires_cuda
@pytest.mark.parametrize("rows,n,k,replacement", [(1, 128_256, 1, True), (64, 32_000, 2, True), (8, 50_000, 5, False),
                                                 (64, 40_000, 1, True), (64, 128_256, 1, True)])
def test_gpu_graph_capture_and_replay(rows, n, k, replacement):
    x = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16)
    x[:, ::2] = float("-inf")
    _categorical_logits(x, k, replacement=replacement)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        s = _categorical_logits(x, k, temperature=0.9, replacement=replacement)
    seen = []
    for _ in range(4):
        graph.replay()
        seen.append(s.clone())
    assert any(not torch.equal(seen[0], t) for t in seen[1:])
    for t in seen:
        assert (t % 2 == 1).all(), "a -inf logit was drawn"


def test_categorical_drop_in(device):
    g = torch.Generator().manual_seed(11)
    logits = torch.randn(3, 30, generator=g).to(device)
    for d in (torch_wrs.distributions.Categorical(logits=logits), torch_wrs.distributions.Categorical(probs=logits.softmax(-1))):
        assert isinstance(d, torch.distributions.Categorical)
        s = d.sample((20_000, 2))
        assert s.shape == (20_000, 2, 3) and s.dtype == torch.int64
        for b in range(3):
            assert g_test_pvalue(torch.bincount(s[..., b].reshape(-1), minlength=30), _softmax(logits[b].cpu())) > P_MIN
        assert torch.allclose(d.log_prob(s[0]), torch.distributions.Categorical(logits=logits).log_prob(s[0]), atol=1e-5)
        assert d.sample().shape == (3,) and d.sample((0,)).shape == (0, 3)
        assert isinstance(d.expand((4, 3)), torch_wrs.distributions.Categorical)
    oh = torch_wrs.distributions.OneHotCategorical(logits=logits)
    x = oh.sample((5,))
    assert x.shape == (5, 3, 30) and (x.sum(-1) == 1).all() and x.dtype == logits.dtype


@requires_cuda
def test_gpu_many_draws_at_a_tiny_temperature_rank_as_float64():
    """k > 64 without replacement at T = 1e-39 (1 / T beyond float's range; zero logits
    among the rest): float keys are then the float64 keys rounded, never float arithmetic
    with 1 / T, and the draws equal those from the same logits in float64."""
    g = torch.Generator().manual_seed(12)
    x = torch.randn(4, 3000, generator=g)
    x[:, ::7] = 0
    draws = [_categorical_logits(t.cuda(), 100, temperature=1e-39, replacement=False,
                                     generator=torch.Generator("cuda").manual_seed(13)) for t in (x, x.double())]
    assert torch.equal(draws[0], draws[1])
    assert (draws[0].sort(-1).values.diff(dim=-1) != 0).all()
