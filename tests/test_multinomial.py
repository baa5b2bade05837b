"""torch_wrs.multinomial against torch.multinomial's contract: shapes, errors, and the
law of the samples (G-tests with fixed seeds; 1e8 draws on the GPU)."""
import itertools
import math

import pytest
import scipy.stats
import torch

import torch_wrs
from conftest import requires_cuda
from torch_wrs.multinomial import _categorical_logits
from helpers import RecordingMode, assert_route, every_key_draws, g_test_pvalue, multinomial_value_error

P_MIN = 1e-4


@pytest.mark.parametrize("shape,n,replacement", [((7,), 3, False), ((7,), 20, True), ((5, 9), 4, False), ((5, 9), 11, True)])
def test_shapes(device, shape, n, replacement):
    w = torch.rand(shape, device=device) + 0.1
    s = torch_wrs.multinomial(w, n, replacement)
    assert s.shape == (*shape[:-1], n) and s.dtype == torch.int64 and s.device == w.device
    assert s.min() >= 0 and s.max() < shape[-1]


@pytest.mark.parametrize("make,n,replacement,message", [
    (lambda d: torch.rand(3, 4, device=d), 0, True, r"^cannot sample n_sample <= 0 samples$"),
    (lambda d: torch.rand(3, 4, device=d), 5, False,
     r"^cannot sample n_sample > prob_dist.size\(-1\) samples without replacement$"),
    (lambda d: torch.tensor([1.0, -1.0], device=d), 1, True, multinomial_value_error(-1.0, 1, True)),
    (lambda d: torch.tensor([1.0, -1.0], device=d), 2, True, multinomial_value_error(-1.0, 2, True)),
    (lambda d: torch.tensor([1.0, float("nan")], device=d), 2, True, multinomial_value_error(float("nan"), 2, True)),
    (lambda d: torch.tensor([1.0, float("inf")], device=d), 2, True, multinomial_value_error(float("inf"), 2, True)),
    (lambda d: torch.tensor([1.0, float("inf")], device=d), 1, False, multinomial_value_error(float("inf"), 1, False)),
    (lambda d: torch.tensor([[1.0, 1.0], [0.0, 0.0]], device=d), 1, True,
     r"^invalid multinomial distribution \(sum of probabilities <= 0\)$"),
    (lambda d: torch.tensor([[1.0, 0.0, 0.0], [1.0, 2.0, 0.0]], device=d), 2, False, "not enough non-zero categories"),
    (lambda d: torch.ones(2, 2, 2, device=d), 1, True, r"^prob_dist must be 1 or 2 dim$"),
    (lambda d: torch.ones(3, dtype=torch.int64, device=d), 1, True,
     r"^multinomial only supports floating-point dtypes for input, got: Long$"),
])
def test_errors(device, make, n, replacement, message):
    with pytest.raises(RuntimeError, match=message):
        torch_wrs.multinomial(make(device), n, replacement)


@pytest.mark.parametrize("n", [5, 3000, 100_000])
@pytest.mark.parametrize("k", [1, 100, 5000])
def test_value_errors_with_replacement_every_method(device, n, k):
    """Every method with replacement (short rows, in slices beyond 64 samples; the inverse
    CDF, over chunks or stored; alias tables, whose build flags the values) raises torch's
    errors, and a valid call after them draws in range."""
    w = torch.rand(3, n, device=device) + 0.1
    _assert_value_errors_with_replacement(w, k, (1, n // 2), 2)
    s = torch_wrs.multinomial(w, k, True)
    assert s.shape == (3, k) and s.min() >= 0 and s.max() < n


def _assert_value_errors_with_replacement(w, k, bad_at, zero_row):
    """A negative, NaN or inf weight at bad_at, and row zero_row all zeros, each raise
    torch's text."""
    for bad in (-1.0, float("nan"), float("inf")):
        x = w.clone()
        x[bad_at] = bad
        with pytest.raises(RuntimeError, match=multinomial_value_error(bad, k, True)):
            torch_wrs.multinomial(x, k, True)
    x = w.clone()
    x[zero_row] = 0
    with pytest.raises(RuntimeError, match="sum of probabilities <= 0"):
        torch_wrs.multinomial(x, k, True)


def test_empty_batch(device):
    assert torch_wrs.multinomial(torch.rand(0, 5, device=device), 3).shape == (0, 3)


def test_with_replacement_law_cpu():
    g = torch.Generator().manual_seed(1)
    w = torch.rand(4, 300, generator=g) ** 2
    w[1, ::3] = 0
    s = torch_wrs.multinomial(w, 250_000, True, generator=torch.Generator().manual_seed(2))
    for r in range(4):
        assert g_test_pvalue(torch.bincount(s[r], minlength=300), w[r]) > P_MIN


def _pair_law(w):
    p = w / w.sum()
    cells = [(i, j) for i, j in itertools.product(range(len(w)), repeat=2) if i != j]
    probs = torch.tensor([float(p[i] * p[j] / (1 - p[i])) for i, j in cells], dtype=torch.float64)
    return cells, probs


def _pair_counts(s, n):
    codes = (s[:, 0] * n + s[:, 1]).cpu()
    return torch.bincount(codes, minlength=n * n)


@pytest.mark.parametrize("rows", [400_000])
def test_without_replacement_law_of_ordered_pairs(device, rows):
    """Draw 2 of 4 without replacement in each of many identical rows: the ordered pair
    (i, j) must have probability p_i p_j / (1 - p_i)."""
    w = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    s = torch_wrs.multinomial(w.to(device).expand(rows, 4), 2, False, generator=torch.Generator(device).manual_seed(3))
    assert (s[:, 0] != s[:, 1]).all()
    cells, probs = _pair_law(w)
    counts = _pair_counts(s, 4)
    observed = torch.tensor([int(counts[i * 4 + j]) for i, j in cells])
    assert g_test_pvalue(observed, probs) > P_MIN


def test_without_replacement_takes_all_nonzero(device):
    w = torch.tensor([[0.0, 3.0, 0.0, 1.0, 2.0]] * 50, device=device)
    s = torch_wrs.multinomial(w, 3, False)
    assert (s.sort(-1).values == torch.tensor([1, 3, 4], device=device)).all()


def test_matches_torch_multinomial_in_law(device):
    """Homogeneity test between our draws and torch.multinomial's on the same weights."""
    g = torch.Generator().manual_seed(5)
    w = (torch.rand(50, generator=g) ** 3).to(device)
    ours = torch.bincount(torch_wrs.multinomial(w, 500_000, True, generator=torch.Generator(device).manual_seed(6)), minlength=50)
    theirs = torch.bincount(torch.multinomial(w, 500_000, True, generator=torch.Generator(device).manual_seed(7)), minlength=50)
    keep = (ours + theirs) > 0
    table = torch.stack([ours[keep], theirs[keep]]).cpu().numpy()
    assert scipy.stats.chi2_contingency(table).pvalue > P_MIN


def test_generator_reproduces(device):
    w = torch.rand(6, 40, device=device)
    for replacement in (True, False):
        a = torch_wrs.multinomial(w, 5, replacement, generator=torch.Generator(device).manual_seed(8))
        b = torch_wrs.multinomial(w, 5, replacement, generator=torch.Generator(device).manual_seed(8))
        assert torch.equal(a, b)


def test_more_than_2_pow_24_categories(device):
    w = torch.zeros((1 << 24) + 5, device=device)
    w[-3:] = torch.tensor([1.0, 0.0, 3.0], device=device)
    s = torch_wrs.multinomial(w, 10_000, True, generator=torch.Generator(device).manual_seed(9))
    assert set(s.unique().tolist()) == {(1 << 24) + 2, (1 << 24) + 4}


def test_opcheck_and_compile(device):
    w = torch.rand(3, 20, device=device)
    for replacement in (True, False):
        torch.library.opcheck(torch.ops.wrs.multinomial.default, (w, 4, replacement), {"generator": None},
                              test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))
    compiled = torch.compile(lambda x: torch.ops.wrs.multinomial(x, 4, False) + 0, fullgraph=True)
    s = compiled(w)
    assert s.shape == (3, 4) and all(len(set(r)) == 4 for r in s.tolist())


@requires_cuda
def test_gpu_law_1e8_with_and_without_replacement():
    g = torch.Generator().manual_seed(10)
    w = torch.rand(10, 1000, generator=g, dtype=torch.float64) ** 2
    s = torch_wrs.multinomial(w.cuda(), 10_000_000, True, generator=torch.Generator("cuda").manual_seed(11))
    for r in range(10):
        assert g_test_pvalue(torch.bincount(s[r], minlength=1000), w[r]) > P_MIN
    pairs = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    s2 = torch_wrs.multinomial(pairs.cuda().expand(50_000_000, 4), 2, False, generator=torch.Generator("cuda").manual_seed(12))
    cells, probs = _pair_law(pairs)
    counts = _pair_counts(s2, 4)
    assert g_test_pvalue(torch.tensor([int(counts[i * 4 + j]) for i, j in cells]), probs) > P_MIN


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_every_float_dtype(device, dtype):
    w = torch.tensor([[0.0, 1.0, 0.0, 3.0, 2.0]] * 64, device=device, dtype=dtype)
    for replacement in (True, False):
        s = torch_wrs.multinomial(w, 3, replacement)
        assert s.shape == (64, 3) and not (s == 0).any() and not (s == 2).any()


@requires_cuda
def test_gpu_one_pass_law_1e8():
    """Short rows with few samples each take the one-pass kernel: 1e8 draws from one law
    spread over 2e6 rows of 50 samples, and four laws interleaved across rows."""
    g = torch.Generator().manual_seed(20)
    w = torch.rand(100, generator=g, dtype=torch.float64) ** 2
    w[::7] = 0
    s = torch_wrs.multinomial(w.float().cuda().expand(2_000_000, 100), 50, True,
                              generator=torch.Generator("cuda").manual_seed(21))
    assert g_test_pvalue(torch.bincount(s.reshape(-1), minlength=100), w.float().double()) > P_MIN
    laws = torch.rand(4, 300, generator=g) ** 3
    rows = laws[torch.arange(400_000) % 4]
    s = torch_wrs.multinomial(rows.cuda(), 64, True, generator=torch.Generator("cuda").manual_seed(22))
    for law in range(4):
        counts = torch.bincount(s[law::4].reshape(-1), minlength=300)
        assert g_test_pvalue(counts, laws[law]) > P_MIN


@requires_cuda
@pytest.mark.parametrize("shape,k,replacement", [((8, 10), 2, True), ((4, 128_256), 1, True), ((2, 50_000), 8, False),
                                                 ((3000, 300), 50, False), ((16, 5000), 100, True),
                                                 ((4, 1000), 300, True), ((5, 400), 80, False),
                                                 ((5000, 20), 4, False), ((2, 50_000), 40, False),
                                                 ((2, 50_000), 100, False), ((2, 1 << 25), 100, False),
                                                 ((2, 100_000), 5000, True), ((2200, 3000), 150, True),
                                                 ((200, 5000), 40, False), ((16, 300_000), 1, True),
                                                 ((4, 300_000), 8, True)])
def test_gpu_graph_capture_and_replay(shape, k, replacement):
    """Every CUDA method captures (no host read while capturing) and replays with fresh draws."""
    w = torch.rand(shape, device="cuda") ** 2
    w[..., ::3] = 0
    torch_wrs.multinomial(w, k, replacement)  # warm-up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        s = torch_wrs.multinomial(w, k, replacement)
    draws = []
    for _ in range(3):
        graph.replay()
        draws.append(s.clone())
    assert not torch.equal(draws[0], draws[1]) or not torch.equal(draws[1], draws[2])
    for d in draws:
        assert d.min() >= 0 and d.max() < shape[-1]
        assert not (d % 3 == 0).any(), "a zero weight was drawn"


@requires_cuda
@pytest.mark.parametrize("n", [600, 3000, 12_000, 40_000, 1_000_000])
def test_gpu_invalid_input_under_capture_stays_in_range(n):
    """Under capture nothing raises; invalid rows still give in-range indices."""
    w = torch.rand(6, n, device="cuda")
    w[1] = 0
    w[2, 5] = float("nan")
    w[3, 7] = -1
    w[4, :] = float("inf")
    for k, replacement in ((1, True), (4, True), (100, True), (2000, True), (3, False), (40, False), (70, False),
                           (150, False)):
        s = _drawn_under_capture(w, k, replacement)
        assert s.min() >= 0 and s.max() < n


def _drawn_under_capture(w, k, replacement):
    """multinomial(w, k, replacement) captured in a CUDA graph and replayed once: its draws."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        s = torch_wrs.multinomial(w, k, replacement)
    graph.replay()
    torch.cuda.synchronize()
    return s


def test_direct_binding_is_the_operator(device):
    """Eager calls take torch_wrs._C's direct binding: the same operator, so the same
    draws as torch.ops for the same seed, and the same errors. A __torch_function__ mode
    still sees each call, made through torch.ops."""
    w = torch.rand(5, 300, device=device) + 0.1
    for k, replacement in ((1, True), (7, True), (7, False)):
        a = torch_wrs.multinomial(w, k, replacement, generator=torch.Generator(device).manual_seed(4))
        b = torch.ops.wrs.multinomial(w, k, replacement, generator=torch.Generator(device).manual_seed(4))
        assert torch.equal(a, b)
    a = torch_wrs.sample_logits(w.log(), 3, temperature=0.7, generator=torch.Generator(device).manual_seed(4))
    b, _ = torch.ops.wrs.sample_llm(w.log(), 3, temperature_value=0.7, generator=torch.Generator(device).manual_seed(4))
    assert torch.equal(a, b)
    with pytest.raises(RuntimeError, match="^cannot sample n_sample <= 0 samples$"):
        torch_wrs.multinomial(w, 0, True)

    with RecordingMode() as seen:
        torch_wrs.multinomial(w, 2, True)
        torch_wrs.sample_logits(w, 2)
    assert seen.calls == [torch.ops.wrs.multinomial.default, torch.ops.wrs.sample_llm.default]


def test_compile_of_the_python_function(device):
    """torch.compile traces torch_wrs.multinomial through torch.ops (no graph break)."""
    compiled = torch.compile(lambda x: torch_wrs.multinomial(x, 3, True) + torch_wrs.sample_logits(x, 3), fullgraph=True)
    s = compiled(torch.rand(4, 50, device=device) + 0.1)
    assert s.shape == (4, 3) and s.min() >= 0 and s.max() <= 98


def test_out_and_non_contiguous(device):
    w = (torch.rand(40, 7, device=device) + 0.1).T  # [7, 40], non-contiguous
    out = torch.empty(0, dtype=torch.int64, device=device)
    g = torch.Generator(device).manual_seed(3)
    r = torch_wrs.multinomial(w, 5, True, generator=g, out=out)
    assert r is out and out.shape == (7, 5)
    g.manual_seed(3)
    assert torch.equal(out, torch_wrs.multinomial(w.contiguous(), 5, True, generator=g))


def test_manual_seed_reproduces(device):
    w = torch.rand(3, 70_000, device=device)
    for k, replacement in ((1, True), (8, True), (8, False)):
        torch.manual_seed(5)
        a = torch_wrs.multinomial(w, k, replacement)
        torch.manual_seed(5)
        assert torch.equal(a, torch_wrs.multinomial(w, k, replacement))


def test_alias_sample_keeps_foreign_tables_in_range(device):
    """A table alias_table did not make (aliases past N) still gives indices in [0, N)."""
    n = 50
    g = torch.Generator().manual_seed(4)
    table = torch.randint(-(1 << 62), 1 << 62, (3, n), generator=g, dtype=torch.int64).to(device)
    s = torch_wrs.alias_sample(table, 100_000)
    assert s.min() >= 0 and s.max() < n


@pytest.mark.parametrize("shape,k,dtype", [((3, 70_000), 20_000, torch.float32), ((40, 2_000), 200, torch.float32),
                                           ((1, 300_000), 50_000, torch.float32), ((3, 70_000), 20_000, torch.bfloat16)])
def test_cpu_inverse_cdf_paths_law(shape, k, dtype):
    """CPU with replacement: chunk tasks (few long rows) and row tasks, 1.2e6 draws pooled;
    bfloat16 read as it is (not converted)."""
    g = torch.Generator().manual_seed(60)
    w = torch.rand(shape[-1], generator=g, dtype=torch.float64) ** 4
    w[::4] = 0
    x = w.to(dtype).expand(shape).contiguous()
    gen = torch.Generator().manual_seed(61)
    counts = sum(torch.bincount(torch_wrs.multinomial(x, k, True, generator=gen).reshape(-1), minlength=shape[-1])
                 for _ in range(1_200_000 // (shape[0] * k)))
    assert g_test_pvalue(counts, w.to(dtype).double()) > P_MIN


@pytest.mark.parametrize("shape,k,dtype,logits", [((8, 70_000), 4, torch.float32, False),
                                                  ((1, 40_000), 8, torch.bfloat16, False),
                                                  ((20, 20_000), 4, torch.float32, False),
                                                  ((20, 20_000), 3, torch.float32, True)])
def test_cpu_draws_against_bounds_law(shape, k, dtype, logits):
    """CPU, a few draws from long rows against the bounds of stretches of 2,048 items
    (few rows cut into chunk tasks, or a task per row): 4e5 draws pooled, with whole
    stretches of zero weights (bounds of a few units, whose points are rejected)."""
    g = torch.Generator().manual_seed(64)
    w = torch.rand(shape[-1], generator=g, dtype=torch.float64) ** 4
    w[::4] = 0
    w[2048:8192] = 0
    w[-9000:] = 0
    x = (torch.where(w > 0, w.log(), -math.inf) if logits else w).to(dtype).expand(shape).contiguous()
    law = torch.where(w > 0, x[0].double().exp(), 0.0) if logits else x[0].double()
    gen = torch.Generator().manual_seed(65)
    draw = (lambda: _categorical_logits(x, k, generator=gen)) if logits else \
        (lambda: torch_wrs.multinomial(x, k, True, generator=gen))
    counts = sum(torch.bincount(draw().reshape(-1), minlength=shape[-1]) for _ in range(-(-400_000 // (shape[0] * k))))
    assert g_test_pvalue(counts, law) > P_MIN


def _many_draws_weights(layout, rows, n, k):
    """Rows for the many-draws-without-replacement tests (a sampled threshold on the GPU, a
    sampled floor on the CPU): uniform; a heavy run of 2 k items the sample mostly misses;
    k + 10 nonzero weights, item 0 zero; keys falling along the row; all equal; or logits
    with -inf every 7th."""
    g = torch.Generator().manual_seed(n + k)
    if layout == "random":
        return torch.rand(rows, n, generator=g)
    if layout == "run":
        w = torch.rand(rows, n, generator=g) * 1e-6
        w[:, n // 3:n // 3 + 2 * k] += 1 + torch.rand(rows, 2 * k, generator=g)
        return w
    if layout == "few_nonzero":
        w = torch.zeros(rows, n)
        w[:, 1 + torch.randperm(n - 1, generator=g)[:k + 10]] = torch.rand(rows, k + 10, generator=g) + 0.1
        return w
    if layout == "geometric":
        return ((1 - 8.0 / n) ** torch.arange(n, dtype=torch.float64).expand(rows, n)).float()
    if layout == "flat":
        return torch.ones(rows, n)
    w = torch.randn(rows, n, generator=g) * 3
    w[:, 5::7] = float("-inf")
    return w


@pytest.mark.parametrize("layout", ["random", "run", "few_nonzero", "flat", "logits"])
@pytest.mark.parametrize("rows,n,k", [(1, 40_000, 128), (3, 50_000, 1024), (5, 20_000, 600)])
def test_cpu_sampled_floor_draws_the_keys(layout, rows, n, k):
    """Many draws without replacement from rows of at least 16,384 and 8 k items: a
    floor under the k-th race key, sampled from the row's keys, rules out most items before
    their log. Few rows (chunks, merged) and more rows (one task a row); a heavy run the
    sample mostly misses, k + 10 nonzero weights, equal weights, logits with -inf. The
    draws are exactly the first k of those asked for n / 8 + 1 draws (or every nonzero
    weight), which take no floor. (A row left with fewer than k keys above its floor is
    ranked again from none; with the floor's margin that happens about once in 30,000
    rows, too rarely to reach here.)"""
    w = _many_draws_weights(layout, rows, n, k)
    if layout == "logits":
        def sample(k_draws):
            return _categorical_logits(w, k_draws, temperature=0.6, replacement=False,
                                       generator=torch.Generator().manual_seed(9))
        nonzero = int((w > -math.inf).sum(-1).min())
    else:
        def sample(k_draws):
            return torch_wrs.multinomial(w, k_draws, False, generator=torch.Generator().manual_seed(9))
        nonzero = int((w > 0).sum(-1).min())
    ours = sample(k)
    assert torch.equal(ours, sample(max(k, min(n // 8 + 1, nonzero)))[:, :k])
    assert (ours.sort(-1).values.diff(dim=-1) != 0).all()
    assert (w.gather(-1, ours) > (-math.inf if layout == "logits" else 0)).all()


def test_cpu_float16_draws_are_the_float32_copys():
    """CPU float16 is converted to float32 (exactly) into a buffer the thread keeps between
    calls: the draws equal those of the float32 copy, for every method, whatever size the
    kept buffer had before (a larger call, then smaller, then larger again) and past the
    size it keeps (2^24 items)."""
    g = torch.Generator().manual_seed(62)
    cases = [((8, 70_000), 8, True), ((1, 1_000), 8, True), ((4, 100), 64, True), ((1, 5), 3, False),
             ((64, 1_000), 8, False), ((2, 40_000), 3, False), ((3, 9), 100, True), ((1, 300_000), 1, False),
             ((2, 40), 70_000, True), ((1, (1 << 24) + 3), 4, True)]
    for shape, k, replacement in cases:
        x = (torch.rand(shape, generator=g) ** 2).half()
        x[..., ::7] = 0
        if shape[-1] < 1000:  # also a transposed view
            x = x.t().contiguous().t()
        ours = torch_wrs.multinomial(x, k, replacement, generator=torch.Generator().manual_seed(63))
        copy = torch_wrs.multinomial(x.float(), k, replacement, generator=torch.Generator().manual_seed(63))
        assert torch.equal(ours, copy), (shape, k, replacement)
        assert (x.float().gather(-1, ours) > 0).all()


@requires_cuda
@pytest.mark.parametrize("rows,n,k,calls", [(2000, 4096, 128, 400), (1, 128_256, 128, 2000), (20_000, 3000, 100, 50),
                                             (8, 32_000, 1024, 2500)])
def test_gpu_inverse_cdf_law_1e8(rows, n, k, calls):
    """The inverse CDF over chunks (few rows, split over blocks; up to 1,024 draws a row)
    and over whole rows (a block per row): 1e8 draws (2.6e5 for the single decode row and
    2e7 for 8 rows of 1,024 draws, whose launches dominate) pooled over identical rows."""
    assert_route(torch.empty(rows, n, device="cuda"), k, True, "inverse_cdf")
    g = torch.Generator().manual_seed(70 + n)
    w = torch.rand(n, generator=g, dtype=torch.float64) ** 4
    w[::5] = 0
    x = w.float().cuda().expand(rows, n).contiguous()
    gen = torch.Generator("cuda").manual_seed(71)
    counts = torch.zeros(n, dtype=torch.int64, device="cuda")
    for _ in range(calls):
        counts += torch.bincount(torch_wrs.multinomial(x, k, True, generator=gen).reshape(-1), minlength=n)
    assert g_test_pvalue(counts, w.float().double()) > P_MIN


@requires_cuda
@pytest.mark.parametrize("n", [(1 << 22) + 5, 5_000_000, 1 << 24])
def test_gpu_one_draw_over_chunks_never_a_zero_weight(n):
    """One draw a row from rows cut into chunks: a block per draw draws points against the
    chunks' bounds until one lands within its chunk's units. Over 200 seeds, with stretches
    of zero weights that leave whole chunks without units (whose bounds still take a few
    points, to be rejected), the draw is never a zero weight, and it is reproducible. A
    zero row and a NaN still raise torch's errors."""
    g = torch.Generator().manual_seed(n)
    w = torch.rand(n, generator=g) ** 3
    w[::5] = 0
    w[5000:400_000] = 0
    w[-300_000:] = 0
    x = w.cuda().unsqueeze(0)
    seen = set()
    for seed in range(200):
        one = torch_wrs.multinomial(x, 1, True, generator=torch.Generator("cuda").manual_seed(seed))
        assert one.shape == (1, 1) and x[0, one[0, 0]] > 0, seed
        seen.add(one.item())
    assert len(seen) > 150
    again = torch_wrs.multinomial(x, 1, True, generator=torch.Generator("cuda").manual_seed(199))
    assert again.item() == one.item()
    # Draw 0 of several comes from the same Philox subsequence as the one draw.
    eight = torch_wrs.multinomial(x, 8, True, generator=torch.Generator("cuda").manual_seed(199))
    assert eight[0, 0] == one[0, 0] and (x[0, eight[0]] > 0).all()
    rows = torch.cat([x, torch.zeros_like(x)])
    with pytest.raises(RuntimeError, match="sum of probabilities <= 0"):
        torch_wrs.multinomial(rows, 1, True)
    rows[1] = x[0]
    rows[1, n // 2] = float("nan")
    with pytest.raises(RuntimeError, match=multinomial_value_error(float("nan"), 1, True)):
        torch_wrs.multinomial(rows, 1, True)


@requires_cuda
@pytest.mark.parametrize("rows,k", [(2000, 1), (256, 8), (64, 32)])
def test_gpu_one_draw_over_chunks_law_1e8(rows, k):
    """Up to 32 draws a row, rows of 2,100 cut into two or three chunks, a block per draw:
    1e8 draws pooled over identical rows against the weights."""
    n = 2100
    g = torch.Generator().manual_seed(72)
    w = torch.rand(n, generator=g, dtype=torch.float64) ** 4
    w[::5] = 0
    w[1500:1600] = 0
    w[2060:] = 0  # the second chunk (items 2,048 on) keeps 12 items
    x = w.float().cuda().expand(rows, n).contiguous()
    gen = torch.Generator("cuda").manual_seed(73)
    counts = torch.zeros(n, dtype=torch.int64, device="cuda")
    for _ in range(-(-10**8 // (rows * k))):
        counts += torch.bincount(torch_wrs.multinomial(x, k, True, generator=gen).reshape(-1), minlength=n)
    assert counts.sum() >= 1e8
    assert g_test_pvalue(counts, w.float().double()) > P_MIN


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gpu_one_draw_over_tiles_law_1e8(dtype):
    """Few draws from rows of up to 1,024 tiles whose GPU-filling chunks would hold several
    tiles: a warp bounds each tile (summarize_tiles_kernel), a block per draw. 16-bit
    probabilities in 64 rows of 40,000 (39 tiles and a tail of 64 items; 20 chunks of two
    tiles before), whole tiles of zeros and a zero tail: 1e8 draws against the weights as
    given, zero weights never drawn."""
    rows, n, k = 64, 40_000, 8
    g = torch.Generator().manual_seed(74)
    w = (torch.rand(n, generator=g, dtype=torch.float64) ** 4).to(dtype)
    w[::7] = 0
    w[3072:6144] = 0
    w[-64:] = 0
    x = w.cuda().expand(rows, n).contiguous()
    gen = torch.Generator("cuda").manual_seed(75)
    counts = torch.zeros(n, dtype=torch.int64, device="cuda")
    for _ in range(-(-10**8 // (rows * k))):
        counts += torch.bincount(torch_wrs.multinomial(x, k, True, generator=gen).reshape(-1), minlength=n)
    assert counts.sum() >= 1e8
    assert counts[::7].sum() == 0 and counts[3072:6144].sum() == 0 and counts[-64:].sum() == 0
    assert g_test_pvalue(counts, w.double()) > P_MIN


@requires_cuda
@pytest.mark.parametrize("rows,n,k,calls,logits", [(16, 1_000_003, 50_000, 125, False), (4096, 4000, 200, 123, False),
                                                    (2200, 5000, 300, 152, True), (1, 32_000, 1 << 20, 96, False),
                                                    (128, 20_000, 1 << 15, 24, False), (64, 5000, 1 << 14, 96, True)])
def test_gpu_many_draws_law_1e8(rows, n, k, calls, logits):
    """Many draws with replacement: from a stored integer CDF where they are few against
    the items (chunks of long rows scanned from their chunk totals, or a block per row;
    the first three cases) or few in all (one row of 32,000, with a guide table), else
    alias tables. 1e8 draws pooled over identical rows, against the weights, zero weights
    never drawn; from logits, softmax(x)."""
    g = torch.Generator().manual_seed(90 + n)
    w = torch.rand(n, generator=g, dtype=torch.float64) ** 4
    w[::5] = 0
    if logits:
        x = torch.where(w > 0, w.log(), -math.inf).float()
        law = torch.where(w > 0, x.double().exp(), 0.0)
    else:
        x, law = w.float(), w.float().double()
    x = x.cuda().expand(rows, n).contiguous()
    gen = torch.Generator("cuda").manual_seed(91)
    counts = torch.zeros(n, dtype=torch.int64, device="cuda")
    for _ in range(calls):
        s = _categorical_logits(x, k, generator=gen) if logits else torch_wrs.multinomial(x, k, True, generator=gen)
        counts += torch.bincount(s.reshape(-1), minlength=n)
    assert counts.sum() >= 1e8
    assert g_test_pvalue(counts, law) > P_MIN


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_stored_cdf_guide_table_same_draws(dtype):
    """One row's draw s comes from Philox subsequence s whatever k, so k = n - 1 (a plain
    binary search over the row) and k = n (a guide table's bucket first) must give the
    same items. The weights span 40 binades, with zeros and a few items that cover many
    buckets each, so buckets hold from no item boundary to hundreds."""
    n = 1 << 14
    g = torch.Generator().manual_seed(17)
    w = torch.rand(n, generator=g, dtype=torch.float64) * torch.pow(2.0, -40 * torch.rand(n, generator=g, dtype=torch.float64))
    w[::9] = 0
    w[[5, 4000, 9001]] = w.sum()
    x = w.to(dtype).cuda()
    plain = torch_wrs.multinomial(x, n - 1, True, generator=torch.Generator("cuda").manual_seed(3))
    guided = torch_wrs.multinomial(x, n, True, generator=torch.Generator("cuda").manual_seed(3))
    assert torch.equal(plain, guided[: n - 1])
    assert guided.min() >= 0 and guided.max() < n and not (x[guided] == 0).any()
    hits = torch.bincount(guided, minlength=n)
    assert (hits[[5, 4000, 9001]] > n / 5).all(), "the three heavy items hold most of the mass"


@requires_cuda
def test_gpu_stored_cdf_whole_rows_errors_and_range():
    """The stored CDF with a block per row (enough rows to fill the GPU): torch's errors
    for bad values and zero rows, in-range draws that never take a zero weight."""
    assert_route(torch.empty(2200, 3000, device="cuda"), 150, True, "cdf_search")
    w = torch.rand(2200, 3000, device="cuda") + 0.1
    w[:, ::7] = 0
    s = torch_wrs.multinomial(w, 150, True)
    assert s.shape == (2200, 150) and s.min() >= 0 and s.max() < 3000 and not (s % 7 == 0).any()
    for bad in (-1.0, float("nan"), float("inf")):
        x = w.clone()
        x[1500, 11] = bad
        with pytest.raises(RuntimeError, match=multinomial_value_error(bad, 150, True)):
            torch_wrs.multinomial(x, 150, True)
    x = w.clone()
    x[2100] = 0
    with pytest.raises(RuntimeError, match="sum of probabilities <= 0"):
        torch_wrs.multinomial(x, 150, True)


@requires_cuda
@pytest.mark.parametrize("rows,n,k,calls", [(100, 40_000, 50, 200), (1000, 40_000, 8, 100)])
def test_gpu_topk_chunks_first_two_draws(rows, n, k, calls):
    """Without replacement, few long rows (chunks merged by a second kernel; k = 50 needs
    two slots per lane): first draw law p, second p_j sum_{i != j} p_i / (1 - p_i)."""
    assert_route(torch.empty(rows, n, device="cuda"), k, False, "two_pass_topk" if k > 32 else "warp_topk")
    g = torch.Generator().manual_seed(80 + n)
    w = torch.rand(n, generator=g, dtype=torch.float64) ** 8
    w[::3] = 0
    x = w.float().cuda().expand(rows, n).contiguous()
    gen = torch.Generator("cuda").manual_seed(81)
    first = torch.zeros(n, dtype=torch.int64, device="cuda")
    second = torch.zeros(n, dtype=torch.int64, device="cuda")
    for _ in range(calls):
        s = torch_wrs.multinomial(x, k, False, generator=gen)
        assert (s.sort(-1).values.diff(dim=-1) != 0).all(), "an index repeats within a row"
        first += torch.bincount(s[:, 0], minlength=n)
        second += torch.bincount(s[:, 1], minlength=n)
    pf = w.float().double()
    pf = pf / pf.sum()
    assert g_test_pvalue(first, pf) > P_MIN
    assert g_test_pvalue(second, _second_draw_law(pf)) > P_MIN


def _without_replacement(x, k, generator):
    return torch_wrs.multinomial(x, k, False, generator=generator)


def _logits_without_replacement(x, k, generator):
    return _categorical_logits(x, k, temperature=0.6, replacement=False, generator=generator)


def _assert_draws_the_keys(x, k, law, seed):
    """Draws without replacement from x (probabilities, or logits at temperature 0.6) are
    exactly the first k of the keys that every-key-and-torch.topk ranks, no index twice."""
    sample = _without_replacement if law == "probs" else _logits_without_replacement
    reference = every_key_draws(sample, x, k, seed, logits=law != "probs")
    ours = sample(x, k, generator=torch.Generator("cuda").manual_seed(seed))
    assert torch.equal(ours, reference[:, :k])
    assert (ours.sort(-1).values.diff(dim=-1) != 0).all()


def _categorical_without_replacement(x, k, generator):
    return _categorical_logits(x, k, temperature=0.6, replacement=False, generator=generator)


def _logits_with_minus_inf(rows, n, generator, dtype):
    """Logits on the GPU, every 11th from the 4th -inf (never drawn)."""
    logits = (torch.randn(rows, n, generator=generator) * 4).to(dtype).cuda()
    logits[:, 3::11] = float("-inf")
    return logits


@requires_cuda
@pytest.mark.parametrize("rows,n", [(4, 90), (300, 900), (8, 100_000), (1, 1 << 20), (2, 3_000_000)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_warp_topk_equals_the_keys_and_torch_topk(rows, n, dtype):
    """Up to 64 draws without replacement, warps keep the top race keys (skipping keys
    that a shared floor or a float bound rules out): exactly the first k of the keys that
    every-key-and-torch.topk ranks."""
    g = torch.Generator().manual_seed(n)
    w = (torch.rand(rows, n, generator=g, dtype=torch.float64) ** 4).to(dtype)
    w[:, 1::7] = 0
    x = w.cuda()
    reference = every_key_draws(_without_replacement, x, 64, 5)
    for k in (8, 32, 33, 64):
        ours = torch_wrs.multinomial(x, k, False, generator=torch.Generator("cuda").manual_seed(5))
        assert torch.equal(ours, reference[:, :k]), k


@requires_cuda
@pytest.mark.parametrize("rows,n,dtype", [(3, 5000, torch.float32), (70, 1500, torch.float64), (64, 32_000, torch.bfloat16),
                                          (1, 1 << 20, torch.float16), (2, 100_003, torch.float32), (5, 4099, torch.bfloat16),
                                          (8, 300_000, torch.bfloat16)])
def test_gpu_one_draw_race_equals_the_keys_and_torch_topk(rows, n, dtype):
    """One draw from rows beyond the warp rows takes the race kernel (a block per chunk,
    the row finished by its last chunk; rows of n % 4 != 0 leave later rows unaligned for
    its vector loads): with or without replacement, the draw is exactly the first of the
    keys that every-key-and-torch.topk ranks, from probabilities (up to 2^19 items; past
    that few rows take the one draw over chunks) and from logits (up to 2^22)."""
    g = torch.Generator().manual_seed(n + rows)
    w = (torch.rand(rows, n, generator=g, dtype=torch.float64) ** 4).to(dtype)
    w[:, 1::7] = 0
    x = w.cuda()
    reference = every_key_draws(_without_replacement, x, 1, 5)
    for replacement in (True, False) if rows * n <= 1 << 19 else ():
        one = torch_wrs.multinomial(x, 1, replacement, generator=torch.Generator("cuda").manual_seed(5))
        assert torch.equal(one, reference), replacement
    logits = _logits_with_minus_inf(rows, n, g, dtype)
    reference = every_key_draws(_logits_without_replacement, logits, 1, 7, logits=True)
    # the race kernel from logits: distributions.Categorical's path (torch_wrs.sample_logits
    # draws by inverse CDF, docs/llm.md)
    one = _categorical_logits(logits, 1, temperature=0.6, generator=torch.Generator("cuda").manual_seed(7))
    assert torch.equal(one, reference)


@requires_cuda
def test_gpu_one_draw_race_law_1e8():
    """The race kernel's law: 1e8 draws over 3,800 rows of 1,100 float32 weights a call
    (rows x n within what the race serves), zeros and a skew included."""
    assert_route(torch.empty(3800, 1100, device="cuda"), 1, True, "race")
    g = torch.Generator().manual_seed(17)
    w = torch.rand(1100, generator=g, dtype=torch.float64) ** 2
    w[::11] = 0
    x = w.float().cuda().expand(3800, 1100).contiguous()
    gen = torch.Generator("cuda").manual_seed(18)
    counts = torch.zeros(1100, dtype=torch.int64, device="cuda")
    for _ in range(132):  # 132 x 200 x 3,800 = 1.0e8
        draws = torch.cat([torch_wrs.multinomial(x, 1, True, generator=gen) for _ in range(200)])
        counts += torch.bincount(draws.reshape(-1), minlength=1100)
    assert counts.sum() >= 1e8
    assert counts[::11].sum() == 0
    assert g_test_pvalue(counts, w.float().double()) > P_MIN


@requires_cuda
@pytest.mark.parametrize("rows,n,dtype", [(65_536, 200, torch.bfloat16), (70_001, 1000, torch.float32),
                                          (65_536, 4096, torch.float16), (65_536, 4099, torch.float32)])
def test_gpu_thread_rows_from_many_rows_equal_the_keys_and_torch_topk(rows, n, dtype):
    """From 65,536 rows or more of up to 4,096 items, up to 8 draws without replacement, and
    one draw from logits of more than 128 items, take a thread per row: exactly the first
    k of the keys that every-key-and-torch.topk ranks (n = 4,099 goes to the warp top-k:
    the same draws)."""
    assert_route(torch.empty(rows, n, device="cuda"), 1, True, "thread_topk" if n <= 4096 else "warp_topk", logits=True)
    g = torch.Generator().manual_seed(n + rows)
    w = (torch.rand(rows, n, generator=g, dtype=torch.float64) ** 4).to(dtype)
    w[:, 1::7] = 0
    x = w.cuda()
    reference = every_key_draws(_without_replacement, x, 8, 5)
    for k in (2, 5, 8):
        ours = torch_wrs.multinomial(x, k, False, generator=torch.Generator("cuda").manual_seed(5))
        assert torch.equal(ours, reference[:, :k]), k
    del x, w, reference
    logits = _logits_with_minus_inf(rows, n, g, dtype)
    # The race kernels from logits: distributions.Categorical's path, whose keys round 16-bit
    # logits as the multinomial family does (torch_wrs.sample_logits is the LLM sampler,
    # docs/llm.md).
    reference = every_key_draws(_categorical_without_replacement, logits, 8, 7, logits=True)
    one = _categorical_logits(logits, 1, temperature=0.6, generator=torch.Generator("cuda").manual_seed(7))
    assert torch.equal(one, reference[:, :1])
    eight = _categorical_without_replacement(logits, 8, torch.Generator("cuda").manual_seed(7))
    assert torch.equal(eight, reference)


@requires_cuda
@pytest.mark.parametrize("rows,n,seed", [(65_536, 300, 23), (16_384, 1024, 25)])
def test_gpu_without_replacement_from_many_rows_first_two_draws_1e8(rows, n, seed):
    """A thread per row from 65,536 rows of 300 items, and the floor top-k (a block per
    row) from 16,384 rows of 1,024, two draws without replacement: over 1e8 rows the first
    draw has law p and the second p_j sum_{i != j} p_i / (1 - p_i)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(n, generator=g, dtype=torch.float64) ** 3
    w[::7] = 0
    x = w.float().cuda().expand(rows, n).contiguous()
    gen = torch.Generator("cuda").manual_seed(seed + 1)
    first = torch.zeros(n, dtype=torch.int64, device="cuda")
    second = torch.zeros(n, dtype=torch.int64, device="cuda")
    for _ in range(-(-100_000_000 // rows)):
        s = torch_wrs.multinomial(x, 2, False, generator=gen)
        first += torch.bincount(s[:, 0], minlength=n)
        second += torch.bincount(s[:, 1], minlength=n)
    assert first.sum() >= 1e8
    assert (s[:, 0] != s[:, 1]).all()
    assert first[::7].sum() == 0 and second[::7].sum() == 0
    p = w.float().double()
    p = p / p.sum()
    assert g_test_pvalue(first, p) > P_MIN
    assert g_test_pvalue(second, _second_draw_law(p)) > P_MIN


@requires_cuda
@pytest.mark.parametrize("layout", ["run", "block", "sparse", "geometric", "flat"])
@pytest.mark.parametrize("k", [8, 20, 33, 50, 64])
@pytest.mark.parametrize("law", ["probs", "logits"])
def test_gpu_two_pass_topk_equals_the_keys_and_torch_topk(layout, k, law):
    """Few long rows, 8 <= k <= 64 without replacement (logits: 16 <= k; fewer draws of
    logits take one pass, tested the same way), take two passes: each chunk's largest
    key, then only the k chunks with the largest, whose keys above the k-th chunk maximum
    go to a run per row. Layouts where one chunk holds several of the top k (a run of heavy
    items), where a few chunks hold more keys above that floor than the run takes (a block
    of 6,000 heavy items: the picked chunks' top-k lists serve), where most chunks are all
    zero (fewer nonzero chunks than k, 60 nonzero items elsewhere: the floor is a zero
    weight's key), where the keys fall along the row, or where all weights are equal, draw
    exactly the first k of the keys that every-key-and-torch.topk ranks; from
    probabilities in float32 and from their logs in bfloat16."""
    rows, n = 3, 300_000
    g = torch.Generator().manual_seed(k)
    if layout == "run":
        w = torch.rand(rows, n, generator=g) * 1e-6
        w[:, 150_000:150_080] += 1 + torch.rand(rows, 80, generator=g)
    elif layout == "block":
        w = torch.rand(rows, n, generator=g) * 1e-6
        w[:, 40_000:46_000] += 1 + torch.rand(rows, 6000, generator=g)
    elif layout == "sparse":
        w = torch.zeros(rows, n)
        at = torch.randint(n - 1, (rows, 60), generator=g)
        w.scatter_(1, at, torch.rand(rows, 60, generator=g) + 0.5)
        w[:, 100_000:120_000:4] = torch.rand(rows, 5000, generator=g) + 0.5  # about 40 chunks of ~590
    elif layout == "geometric":
        w = 0.999 ** torch.arange(n, dtype=torch.float64).expand(rows, n)
    else:
        w = torch.ones(rows, n)
    x = w.float().cuda() if law == "probs" else w.log().to(torch.bfloat16).cuda()
    _assert_draws_the_keys(x, k, law, 9)


@requires_cuda
@pytest.mark.parametrize(
    "rows, n, k, law",
    [(64, 300_000, 2, "probs"), (300, 40_000, 2, "probs"), (300, 70_000, 8, "probs"),
     (300, 40_000, 33, "logits"), (1_100, 40_000, 64, "probs"), (1_100, 40_000, 40, "logits")],
)
def test_gpu_two_pass_topk_classes_draw_the_keys(rows, n, k, law):
    """Each line of two_pass_serves' table that the test above does not reach (few draws
    from large calls, more than 256 and more than 1,024 rows) draws exactly the first k of
    the keys that every-key-and-torch.topk ranks, no index twice."""
    assert_route(torch.empty(rows, n, device="cuda"), k, False, "two_pass_topk", logits=law != "probs")
    g = torch.Generator().manual_seed(rows + k)
    w = torch.rand(rows, n, generator=g) ** 4
    w[:, ::13] = 0
    x = w.cuda() if law == "probs" else w.log().to(torch.bfloat16).cuda()
    _assert_draws_the_keys(x, k, law, 11)


def _floor_rows(layout, rows, n, g):
    """Rows for the floor top-k: spread keys, or keys that defeat its floor."""
    if layout == "sorted":  # the heavy items in the first threads' quads: more candidates than a block ranks
        return (torch.rand(rows, n, generator=g).sort(-1, descending=True).values + 1e-3) ** 8
    if layout == "sparse":  # 1 in 20 nonzero: whole warps of bounds at 0, so the first floor is -inf
        return (torch.rand(rows, n, generator=g) + 1e-3) * (torch.rand(rows, n, generator=g) < 0.05)
    if layout == "heavy":  # 40 items far above the rest
        w = torch.rand(rows, n, generator=g) + 1e-3
        w[:, 100:140] = 1e4
        return w
    w = torch.rand(rows, n, generator=g) ** 4
    w[:, ::13] = 0
    return w


@requires_cuda
@pytest.mark.parametrize(
    "rows, n, k, layout, dtype",
    [(200, 1000, 64, "spread", torch.float32), (300, 5000, 2, "spread", torch.bfloat16),
     (40, 16_384, 17, "spread", torch.float16), (8, 8192, 33, "spread", torch.float64),
     (130, 32_768, 64, "spread", torch.bfloat16), (129, 20_001, 9, "spread", torch.float32),
     (200, 4097, 64, "sorted", torch.float32), (200, 8191, 33, "sparse", torch.bfloat16),
     (128, 2000, 64, "heavy", torch.float16), (64, 3001, 50, "sorted", torch.float64)],
)
@pytest.mark.parametrize("law", ["probs", "logits"])
def test_gpu_floor_topk_draws_the_keys(rows, n, k, layout, dtype, law):
    """Rows of 1,000 to 32,768 items, 2 <= k <= 64 without replacement (floor_topk_serves),
    take a block per row: a floor from float bounds on every key, then the float64 keys of
    the items that could reach it. With keys spread over the row, in sorted rows and rows
    mostly zero (more candidates than a block ranks: the floor is raised and the items
    read again), and with a few heavy items, it draws exactly the first k of the keys that
    every-key-and-torch.topk ranks, no index twice; from probabilities and their logs,
    odd row lengths (rows not aligned to a quad) included."""
    assert_route(torch.empty(rows, n, device="cuda"), k, False, "floor_topk", logits=law != "probs")
    g = torch.Generator().manual_seed(rows * n + k)
    w = _floor_rows(layout, rows, n, g).double()
    x = w.to(dtype).cuda() if law == "probs" else w.log().to(dtype).cuda()
    _assert_draws_the_keys(x, k, law, 13)


@requires_cuda
@pytest.mark.parametrize("k", [200, 2950, 3000])
def test_gpu_many_draws_without_replacement_float_key_ties_fall_back(k):
    """k > 64 (rows under 64 k): torch.topk ranks the keys rounded to float, and k + 64
    candidates (or torch.sort the whole row, for k + 64 > n) have their ties reordered by
    float64 key. Keys below float's range all round to 0 and tie; then the float64 keys of
    every item decide, so the draws are those of the same weights scaled into range, with
    the same seed."""
    g = torch.Generator().manual_seed(3)
    w = torch.rand(4, 3000, generator=g, dtype=torch.float64) + 0.01
    tiny = torch_wrs.multinomial((w * 1e-300).cuda(), k, False, generator=torch.Generator("cuda").manual_seed(4))
    scaled = torch_wrs.multinomial(w.cuda(), k, False, generator=torch.Generator("cuda").manual_seed(4))
    assert torch.equal(tiny, scaled)
    assert (tiny.sort(-1).values.diff(dim=-1) != 0).all()


@requires_cuda
@pytest.mark.parametrize("rows,n,k,zeros", [(16, 700_000, 12_000, True), (64, 5000, 4000, True),
                                            (4, 3000, 3000, False), (8, 1 << 20, 1 << 15, True)])
@pytest.mark.parametrize("logits", [False, True])
def test_gpu_float_keys_rank_as_the_float64_keys(rows, n, k, zeros, logits):
    """k > 64 over rows of under 64 k items: for inputs exact in float and up to 2^14
    candidates, torch.topk (or torch.sort, for the whole row) ranks float keys computed in
    float (no float64 log per item), each within a stated error of its float64 key; runs
    of candidates that are not surely ordered are sorted by float64 key. Beyond (k = 2^15),
    the float64 keys rounded, whose ties are sorted. The draws equal those from the same
    values in float64, whose float keys are the float64 keys rounded. At k = 12,000 the
    keys around the k-th lie about 1e-4 apart relatively, so some runs are within the
    error of approximate keys."""
    assert_route(torch.empty(rows, n, device="cuda"), k, False, "keys_topk", logits=logits)
    g = torch.Generator().manual_seed(n + k)
    x = torch.randn(rows, n, generator=g) * 3 if logits else torch.rand(rows, n, generator=g)
    if zeros:
        x[:, ::5] = float("-inf") if logits else 0

    def sample(t):
        gen = torch.Generator("cuda").manual_seed(k)
        if logits:
            return _categorical_logits(t, k, temperature=0.7, replacement=False, generator=gen)
        return torch_wrs.multinomial(t, k, False, generator=gen)

    ours = sample(x.cuda())
    assert torch.equal(ours, sample(x.double().cuda()))
    assert (ours.sort(-1).values.diff(dim=-1) != 0).all()
    if zeros:
        assert not (ours % 5 == 0).any(), "a zero weight was drawn"


@requires_cuda
@pytest.mark.parametrize("layout", ["run", "clustered", "geometric", "flat"])
@pytest.mark.parametrize("k", [65, 100, 1024])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_chunk_maxima_equal_the_keys_and_torch_topk(layout, k, dtype):
    """k > 64 over rows of at least 64 k and 2^20 items, 2^26 items in all, while a CUDA
    graph is captured: each chunk's largest key, then only the keys of the k chunks with
    the largest. Layouts where one chunk holds many of the top k (a run of heavy items),
    where fewer chunks than k hold a nonzero weight (600 aligned runs of 32), where the
    keys fall along the row, or where all weights are equal; rows whose last chunk and
    quad are partial. The draws are exactly the first k of the keys that every float64
    key and torch.topk rank (captured too; each replay from the same seed)."""
    rows, n = 3, (1 << 20) + 3
    g = torch.Generator().manual_seed(k)
    if layout == "run":
        w = torch.rand(rows, n, generator=g) * 1e-6
        w[:, 150_001:151_025] += 1 + torch.rand(rows, 1024, generator=g)
    elif layout == "clustered":
        w = torch.zeros(rows, n)
        starts = torch.randperm(n // 32 - 1, generator=g)[:600] * 32
        at = (starts[:, None] + torch.arange(32)).reshape(-1)
        w[:, at] = torch.rand(rows, at.numel(), generator=g) + 0.5
    elif layout == "geometric":
        w = 0.9999 ** torch.arange(n, dtype=torch.float64).expand(rows, n)
    else:
        w = torch.ones(rows, n)
    x = w.to(dtype).cuda().repeat(22, 1)  # 66 rows (each its own draws), 2^26 items or more

    def captured(x, k, generator=None):  # the default generator, seeded 11 for the replay
        _without_replacement(x, k, None)  # warm-up outside capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            s = _without_replacement(x, k, None)
        torch.cuda.manual_seed(11)
        graph.replay()
        return s

    reference = every_key_draws(captured, x, k, 11)
    ours = captured(x, k)
    assert torch.equal(ours, reference)


@requires_cuda
@pytest.mark.parametrize("layout", ["random", "run", "few_nonzero", "geometric", "flat", "logits"])
@pytest.mark.parametrize("rows,n,k", [(5, 20_000, 100), (3, 100_003, 1024), (2, (1 << 20) + 3, 65_536)])
def test_gpu_threshold_candidates_equal_the_keys_and_torch_topk(layout, rows, n, k):
    """More than 64 draws, the candidates at most an eighth of the row: torch.topk ranks only
    the keys above a threshold sampled from the row's. Layouts where the sample sees few of
    the top keys (a run of heavy items), where the row has fewer nonzero weights than
    candidates (k + 10: the row is flagged and every float64 key ranked; a row not flagged
    would draw item 0, a zero weight, from the unfilled places), where the
    keys fall along the row, all weights equal, and logits with -inf. The draws are exactly
    the first k of the keys that every-key-and-torch.topk ranks."""
    assert_route(torch.empty(rows, n, device="cuda"), k, False, "keys_topk")
    w = _many_draws_weights(layout, rows, n, k)
    x = w.float().cuda()
    sample = _logits_without_replacement if layout == "logits" else _without_replacement
    reference = every_key_draws(sample, x, k, 17, logits=layout == "logits")
    ours = sample(x, k, generator=torch.Generator("cuda").manual_seed(17))
    assert torch.equal(ours, reference)
    assert (w[0].cuda()[ours] > -math.inf if layout == "logits" else w[0].cuda()[ours] > 0).all()
    assert (ours.sort(-1).values.diff(dim=-1) != 0).all()


@requires_cuda
def test_gpu_many_samples_without_replacement_errors_and_law():
    """k > 64 without replacement: race keys and torch.topk; the errors still come."""
    w = torch.rand(3, 500, device="cuda")
    s = torch_wrs.multinomial(w, 100, False)
    assert (s.sort(-1).values.diff(dim=-1) != 0).all()
    w[1, 50:] = 0
    with pytest.raises(RuntimeError, match="not enough non-zero categories"):
        torch_wrs.multinomial(w, 100, False)
    w[1] = 0
    with pytest.raises(RuntimeError, match="sum of probabilities <= 0"):
        torch_wrs.multinomial(w, 100, False)


@requires_cuda
@pytest.mark.parametrize("n,dtype", [(20, torch.float32), (50, torch.float64), (100, torch.float32),
                                     (200, torch.bfloat16), (300, torch.float64), (500, torch.float32),
                                     (1000, torch.float32), (1000, torch.float64), (2000, torch.float16)])
@pytest.mark.parametrize("k", [1, 4, 40])
def test_gpu_one_pass_law_per_row_length(n, dtype, k):
    """Each row length class of the one-pass kernels (8, 16 or 32 lanes per row holding 4
    to 32 items each; a block per row for long rows or many samples), with the units held
    (k = 40, and rows of up to 32 items) and drawn against the lanes' bounds (k <= 8 from
    longer rows in calls of 2^21 items or more: k = 1 and 4 here): 1e7 draws pooled over
    identical rows, a row count that leaves a warp's last row group part-empty."""
    g = torch.Generator().manual_seed(30 + n)
    w = (torch.rand(n, generator=g, dtype=torch.float64) ** 3).to(dtype)
    w[::5] = 0
    rows = 10_000_000 // k // 10 + 3
    gen = torch.Generator("cuda").manual_seed(31)
    x = w.cuda().expand(rows, n).contiguous()
    counts = sum(torch.bincount(torch_wrs.multinomial(x, k, True, generator=gen).reshape(-1), minlength=n)
                 for _ in range(10))
    assert g_test_pvalue(counts, w.double()) > P_MIN


@requires_cuda
@pytest.mark.parametrize("n,k,dtype,rows", [(1000, 1, torch.float32, 65_539), (100, 8, torch.bfloat16, 65_539),
                                            (45, 3, torch.float16, 65_539), (300, 2, torch.float64, 65_539)])
def test_gpu_warp_rows_lane_bounds_law_1e8(n, k, dtype, rows):
    """Up to 8 draws a row from rows of more than 32 items, in calls of 2^21 items or more:
    each lane's float64 sum bounds its items' units, a point drawn over the bounds picks a
    lane, and it is kept only within that lane's exact units, quantized by the row's lanes
    (warp_rows_cuda.cu). 1e8 draws pooled over identical rows with zeros (never drawn) and
    a skew: 1,000 items (32 lanes of 32), 100 (8 lanes of 16: each lane quantizes two of
    the drawn lane's items), 45 (8 lanes, some holding 6 items, some 5) and float64
    (prefetched rows)."""
    g = torch.Generator().manual_seed(50 + n + k)
    w = (torch.rand(n, generator=g, dtype=torch.float64) ** 3).to(dtype)
    w[::6] = 0
    x = w.cuda().expand(rows, n).contiguous()
    gen = torch.Generator("cuda").manual_seed(51)
    counts = torch.zeros(n, dtype=torch.int64, device="cuda")
    for _ in range(100_000_000 // (rows * k) + 1):
        counts += torch.bincount(torch_wrs.multinomial(x, k, True, generator=gen).reshape(-1), minlength=n)
    assert counts.sum() >= 1e8
    assert counts[::6].sum() == 0
    assert g_test_pvalue(counts, w.double()) > P_MIN


def _lane_bounds_rows(n, dtype):
    """Rows (of more than 32 items) a call with k <= 8 draws against the warp rows' lane
    bounds (2^21 items or more), every fourth weight zero."""
    rows = (1 << 21) // n + 5
    w = (torch.rand(rows, n, generator=torch.Generator().manual_seed(n), dtype=torch.float64) + 0.05).to(dtype)
    w[:, ::4] = 0
    return w.cuda()


@requires_cuda
@pytest.mark.parametrize("n,dtype", [(600, torch.float32), (100, torch.bfloat16), (300, torch.float64)])
def test_gpu_warp_rows_lane_bounds_errors(n, dtype):
    """The lane bounds raise torch's errors for a negative, NaN or inf weight and a zero
    row; valid rows draw in range and never a zero weight."""
    w = _lane_bounds_rows(n, dtype)
    for k in (1, 8):
        _assert_value_errors_with_replacement(w, k, (w.shape[0] // 2, 5), 7)
        s = torch_wrs.multinomial(w, k, True)
        assert s.shape == (w.shape[0], k) and s.min() >= 0 and s.max() < n
        assert not (s % 4 == 0).any(), "a zero weight was drawn"


@requires_cuda
@pytest.mark.parametrize("n,dtype", [(600, torch.float32), (100, torch.bfloat16)])
def test_gpu_warp_rows_lane_bounds_invalid_rows_under_capture(n, dtype):
    """Under capture the lane bounds raise nothing: rows of invalid values (every attempt
    fails) keep item 0, and the valid rows of the same call still never draw a zero
    weight."""
    w = _lane_bounds_rows(n, dtype)
    bad_rows = [3, 4, 5, 6]
    w[3, 5] = float("nan")
    w[4, 9] = -1
    w[5, :] = float("inf")
    w[6] = 0
    for k in (1, 8):
        s = _drawn_under_capture(w, k, True)
        assert s.min() >= 0 and s.max() < n
        valid = torch.ones(w.shape[0], dtype=torch.bool, device="cuda")
        valid[bad_rows] = False
        assert not (s[valid] % 4 == 0).any(), "a zero weight was drawn"


@requires_cuda
@pytest.mark.parametrize("n,dtype", [(2, torch.float32), (5, torch.bfloat16), (8, torch.float64), (9, torch.float16)])
def test_gpu_one_draw_from_tiny_rows_law(n, dtype):
    """One draw from rows of up to 8 items takes the race, a thread per row (9 items the
    warp rows): 1e7 draws pooled over identical rows, from probabilities and from logits."""
    g = torch.Generator().manual_seed(70 + n)
    w = (torch.rand(n, generator=g, dtype=torch.float64) + 0.05).to(dtype)
    w[n // 2] = 0
    rows = 1_000_003
    gen = torch.Generator("cuda").manual_seed(71)
    x = w.cuda().expand(rows, n).contiguous()
    counts = sum(torch.bincount(torch_wrs.multinomial(x, 1, True, generator=gen).reshape(-1), minlength=n)
                 for _ in range(10))
    assert counts[n // 2] == 0
    assert g_test_pvalue(counts, w.double()) > P_MIN
    logits = w.double().log().to(dtype).cuda().expand(rows, n).contiguous()
    counts = sum(torch.bincount(_categorical_logits(logits, generator=gen).reshape(-1), minlength=n)
                 for _ in range(10))
    assert counts[n // 2] == 0
    assert g_test_pvalue(counts, torch.softmax(logits[0].double(), -1).cpu()) > P_MIN


@requires_cuda
@pytest.mark.parametrize("n", [4, 18, 32])
def test_gpu_short_rows_in_slices_law(n):
    """Short rows with more than 64 samples: a row's samples cut into slices over warps
    (1,000 a row: slices of 63 and a shorter last one). 1e7 draws pooled over 3 identical
    rows, and each sample position's first draws against the same law."""
    assert_route(torch.empty(3, n, device="cuda"), 1000, True, "warp_rows")
    g = torch.Generator().manual_seed(90 + n)
    w = torch.rand(n, generator=g, dtype=torch.float64) ** 3
    w[::3] = 0
    x = w.float().cuda().expand(3, n).contiguous()
    gen = torch.Generator("cuda").manual_seed(91)
    draws = torch.cat([torch_wrs.multinomial(x, 1000, True, generator=gen) for _ in range(3334)])
    assert g_test_pvalue(torch.bincount(draws.reshape(-1), minlength=n), w.float().double()) > P_MIN
    for position in (0, 62, 63, 999):  # a slice's first and last, the next slice's first, the row's last
        assert g_test_pvalue(torch.bincount(draws[:, position], minlength=n), w.float().double()) > P_MIN


def _second_draw_law(p):
    """P(second draw without replacement = j) = p_j * sum_{i != j} p_i / (1 - p_i)."""
    ratio = p / (1 - p)
    return p * (ratio.sum() - ratio)


@requires_cuda
@pytest.mark.parametrize("n,k", [(18, 8), (30, 2), (1000, 8), (6000, 32), (40_000, 5), (10_000, 100), (900, 300)])
def test_gpu_without_replacement_first_two_draws(n, k):
    """The fused top-k kernels (a thread per row: of up to 32 items, and of 1,000 from 1e6
    rows; a block per row of 6,000, the floor top-k; 8 warps per row of 40,000) and
    torch.topk of float keys computed in float (k = 100 and 300):
    over 1e6 identical rows the
    first draw has law p and the second p_j sum_{i != j} p_i / (1 - p_i); no row repeats
    an index. Weights are skewed so that the top categories carry the test's power."""
    g = torch.Generator().manual_seed(40 + n)
    w = torch.rand(n, generator=g, dtype=torch.float64) ** 8
    w[::3] = 0
    rows = 1_000_000 if n <= 6000 else 200_000
    x = w.float().cuda().expand(rows, n).contiguous()
    s = torch_wrs.multinomial(x, k, False, generator=torch.Generator("cuda").manual_seed(41))
    assert s.shape == (rows, k)
    assert (s.sort(-1).values.diff(dim=-1) != 0).all(), "an index repeats within a row"
    pf = w.float().double()
    pf = pf / pf.sum()
    assert g_test_pvalue(torch.bincount(s[:, 0], minlength=n), pf) > P_MIN
    assert g_test_pvalue(torch.bincount(s[:, 1], minlength=n), _second_draw_law(pf)) > P_MIN


@requires_cuda
@pytest.mark.parametrize("rows,n,k", [(4096, 5000, 8), (3, 200_000, 8), (100_000, 20, 8), (3, 200_000, 40),
                                      (3, 1 << 25, 100), (3, 5000, 100)])
def test_gpu_without_replacement_errors_per_row(rows, n, k):
    w = torch.rand(rows, n, device="cuda")
    r = rows // 2
    w[r, 7:] = 0  # 7 nonzero: too few for k draws
    with pytest.raises(RuntimeError, match="not enough non-zero categories"):
        torch_wrs.multinomial(w, k, False)
    w[r] = 0
    with pytest.raises(RuntimeError, match="sum of probabilities <= 0"):
        torch_wrs.multinomial(w, k, False)
    w[r, 9] = float("inf")
    with pytest.raises(RuntimeError, match=multinomial_value_error(float("inf"), k, False)):
        torch_wrs.multinomial(w, k, False)
