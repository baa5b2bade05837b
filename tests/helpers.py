"""Oracles shared by the tests: a sequential Vose alias table, exact reconstruction
of a packed table, and the G-test on sample counts."""
import math

import numpy as np
import scipy.stats
import torch

BUCKET = 1 << 32


def table_mass(table):
    """Integer mass (in units of 2**-32 of a bucket) each item gets from a packed table."""
    threshold = table & 0xFFFFFFFF
    alias = table >> 32
    buckets = torch.arange(table.shape[-1], device=table.device).expand_as(table)
    mass = torch.zeros_like(table)
    mass.scatter_add_(-1, buckets, threshold)
    mass.scatter_add_(-1, alias, BUCKET - threshold)
    return mass


def assert_encodes(table, weights):
    """The table encodes w / sum(w) exactly up to its fixed-point resolution.

    Bound (units of 2**-32 of a bucket, i.e. probability 2**-32 / N): every bucket holds
    exactly 2**32 units; zero weights get 0; every light item (below one bucket) is within
    half a unit (+1e-12 relative for float64 rounding of the reference); heavy items
    together absorb the rounding remainder, at most half a unit per nonzero item.
    """
    n = weights.shape[-1]
    table = table.cpu().reshape(-1, n)
    w = weights.detach().cpu().double().reshape(-1, n)
    mass = table_mass(table)
    assert (mass.sum(-1) == n * BUCKET).all(), "buckets do not each hold exactly one bucket of mass"
    ref = w / w.sum(-1, keepdim=True) * (n * float(BUCKET))
    err = mass.double() - ref
    assert (mass[w == 0] == 0).all(), "a zero weight got mass"
    light = ref < BUCKET - 1
    bound = 0.5 + 1e-12 * ref + 1e-9
    assert (err.abs()[light] <= bound[light]).all(), f"light item off by {err.abs()[light].max().item()} units"
    nonzero = (w > 0).sum(-1).double()
    heavy_err = (err.abs() * (~light)).sum(-1)
    assert (heavy_err <= 0.5 * nonzero + 1e-12 * n * BUCKET + 1).all(), f"heavy items off by {heavy_err.max().item()}"


def vose_table(weights):
    """Sequential Vose construction (float64), packed in torch_wrs's table format."""
    w = np.asarray(weights, dtype=np.float64)
    n = len(w)
    q = w * n / w.sum()
    prob = np.ones(n)
    alias = np.arange(n)
    small = [i for i in range(n) if q[i] < 1]
    large = [i for i in range(n) if q[i] >= 1]
    while small and large:
        s, l = small.pop(), large.pop()
        prob[s], alias[s] = q[s], l
        q[l] = q[l] + q[s] - 1
        (small if q[l] < 1 else large).append(l)
    threshold = np.minimum(np.rint(prob * BUCKET), BUCKET - 1).astype(np.int64)
    full = prob >= 1
    threshold[full] = BUCKET - 1
    alias[full] = np.arange(n)[full]
    return torch.from_numpy(threshold | (alias.astype(np.int64) << 32))


def g_test_pvalue(counts, probs):
    """p-value of the G-test, with Williams' correction, that `counts` were drawn from
    `probs`. Categories expected under 5 times are pooled. Without the correction G runs
    high by about sum(1 / (6 * expected)), which over a million categories expected ~10
    times each is several standard deviations. Raises if a zero-probability category was hit."""
    counts = counts.detach().cpu().double().reshape(-1)
    probs = probs.detach().cpu().double().reshape(-1)
    probs = probs / probs.sum()
    assert counts[probs == 0].sum() == 0, "a zero-probability category was sampled"
    total = counts.sum()
    big = probs * total >= 5
    small = ~big & (probs > 0)
    obs = torch.cat([counts[big], counts[small].sum().reshape(1)])
    p = torch.cat([probs[big], probs[small].sum().reshape(1)])
    keep = p > 0
    obs, p = obs[keep], p[keep]
    k = len(obs)
    if k < 2:
        return 1.0
    exp = p * total
    pos = obs > 0
    g = 2.0 * float((obs[pos] * torch.log(obs[pos] / exp[pos])).sum())
    williams = 1.0 + (float((1.0 / p).sum()) - 1.0) / (6.0 * float(total) * (k - 1))
    return float(scipy.stats.chi2.sf(g / williams, k - 1))


def weight_cases(generator=None):
    """The adversarial weight shapes of the design, as float64 CPU tensors."""
    g = torch.Generator().manual_seed(1234) if generator is None else generator
    cases = {}
    cases["uniform_random"] = torch.rand(1000, generator=g, dtype=torch.float64)
    z = torch.rand(997, generator=g, dtype=torch.float64)
    z[torch.rand(997, generator=g) < 0.6] = 0
    cases["zeros_mixed_in"] = z
    one = torch.zeros(513, dtype=torch.float64)
    one[200] = 3.5
    cases["one_nonzero"] = one
    cases["all_equal"] = torch.full((1024,), 0.7, dtype=torch.float64)
    cases["single_item"] = torch.tensor([2.0], dtype=torch.float64)
    cases["dynamic_range_1e-30_1e30"] = 10 ** (torch.rand(4099, generator=g, dtype=torch.float64) * 60 - 30)
    cases["denormals"] = torch.rand(300, generator=g, dtype=torch.float64) * 4.9e-322
    i = torch.arange(1, 100_001, dtype=torch.float64)
    cases["power_law_sorted"] = 1 / i
    cases["power_law_shuffled"] = (1 / i)[torch.randperm(len(i), generator=g)]
    cases["power_law_steep_sorted"] = i.pow(-2.5)
    cases["one_huge_item"] = torch.cat([torch.tensor([1e12], dtype=torch.float64), torch.rand(5000, generator=g, dtype=torch.float64)])
    cases["not_power_of_two"] = torch.rand(100_003, generator=g, dtype=torch.float64) + 0.01
    half = torch.arange(1, 150_004, dtype=torch.float64).pow(-1.5)
    cases["sorted_then_shuffled_many_chunks"] = torch.cat([half, half[torch.randperm(len(half), generator=g)]])
    cases["near_uniform"] = 1 + 1e-9 * torch.rand(4096, generator=g, dtype=torch.float64)
    return cases


def every_key_draws(sample, x, k, seed, logits=False):
    """The first k draws without replacement of the method that writes every item's race
    key and ranks them all with torch.topk: asked for more than 64 draws and more than
    n / 8 (where a sampled threshold or chunk maxima would serve), or, from rows with
    fewer nonzero weights, for all of them (a sampled threshold then finds too few
    candidates and every float64 key is ranked). Every method draws item quad q of row r
    from Philox subsequence r * quads + q, so with the same seed the first k draws agree."""
    nonzero = int(((x > -math.inf) if logits else (x > 0)).sum(-1).min())
    k_all = max(k, 65, min(x.shape[-1] // 8 + 1, nonzero))
    return sample(x, k_all, generator=torch.Generator("cuda").manual_seed(seed))[..., :k]


class RecordingMode(torch.overrides.TorchFunctionMode):
    """A __torch_function__ mode that records each function it sees, then calls it."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls.append(func)
        return func(*args, **(kwargs or {}))


def multinomial_value_error(bad, k, replacement):
    """The regex of torch.multinomial's text for a weight ``bad`` (negative, NaN or inf):
    its with-replacement kernel (k > 1) names the entry (a NaN fails its ``>= 0`` test),
    its other paths check the whole tensor."""
    if replacement and k > 1:
        if bad == float("inf"):
            return r"^invalid multinomial distribution \(encountering probability entry = infinity or NaN\)$"
        return r"^invalid multinomial distribution \(encountering probability entry < 0\)$"
    return r"^probability tensor contains either `inf`, `nan` or element < 0$"


def assert_route(x, k, replacement, method, logits=False):
    """Asserts that a call on x takes `method` (csrc/multinomial/dispatch_*.cpp), so that a
    test named for a method keeps testing it when a threshold moves."""
    from torch_wrs.multinomial import _route

    got = _route(x, k, replacement, logits=logits)
    assert got == method, f"{tuple(x.shape)} k={k} replacement={replacement} logits={logits}: {got}, not {method}"


def csr_from_degrees(degrees, generator, weights="lognormal", num_nodes=None):
    """A CSR graph (int64 rowptr, col, float64 weight) with the given row degrees and random
    columns in [0, num_nodes), rows sorted. weights: 'lognormal' (sigma 2), 'uniform', or
    'dominant' (lognormal, then one edge of each row 1e6 times the row's sum)."""
    degrees = torch.as_tensor(degrees, dtype=torch.int64)
    n = num_nodes or max(len(degrees), 1)
    rowptr = torch.zeros(len(degrees) + 1, dtype=torch.int64)
    rowptr[1:] = torch.cumsum(degrees, 0)
    e = int(rowptr[-1])
    col = torch.randint(0, n, (e,), generator=generator)
    row = torch.repeat_interleave(torch.arange(len(degrees)), degrees)
    col = col[torch.argsort(row * n + col)]
    if weights == "uniform":
        w = torch.rand(e, generator=generator, dtype=torch.float64) + 0.01
    else:
        w = torch.exp(2.0 * torch.randn(e, generator=generator, dtype=torch.float64))
    if weights == "dominant" and e:
        first = rowptr[:-1][degrees > 0]
        w[first] = 1e6 * torch.zeros(len(degrees), dtype=torch.float64).index_add_(0, row, w)[degrees > 0]
    return rowptr, col, w


def csr_mass(rowptr, table):
    """Integer mass (units of 2**-32 of a bucket) each edge gets from its row's packed table,
    and a bool per edge for rows marked dead (weights summing to zero)."""
    rowptr, table = rowptr.cpu(), table.cpu()
    degree = rowptr[1:] - rowptr[:-1]
    e = table.numel()
    start = torch.repeat_interleave(rowptr[:-1], degree, output_size=e)
    dead = table == -(1 << 32)
    threshold = (table & 0xFFFFFFFF) * ~dead
    alias = (table >> 32) * ~dead
    assert ((alias >= 0) & (alias < torch.repeat_interleave(degree, degree, output_size=e))).all(), "alias out of row"
    mass = threshold.clone()
    mass.index_add_(0, start + alias, (BUCKET - threshold) * ~dead)
    return mass, dead


def assert_csr_encodes(rowptr, table, weight):
    """Each row's table encodes w / sum(w) of its edges exactly up to its fixed-point
    resolution (the bound of assert_encodes, row by row); rows summing to zero are dead."""
    rowptr, w = rowptr.cpu(), weight.detach().cpu().double()
    mass, dead = csr_mass(rowptr, table)
    degree = rowptr[1:] - rowptr[:-1]
    rows = torch.repeat_interleave(torch.arange(len(degree)), degree, output_size=w.numel())
    row_sum = torch.zeros(len(degree), dtype=torch.float64).index_add_(0, rows, w)
    zero_rows = row_sum[rows] == 0
    assert torch.equal(dead, zero_rows), "dead rows are not exactly the rows whose weights sum to zero"
    row_mass = torch.zeros(len(degree), dtype=torch.int64).index_add_(0, rows, mass)
    live = (row_sum > 0) & (degree > 0)
    assert (row_mass[live] == degree[live] * BUCKET).all(), "a row's buckets do not each hold one bucket of mass"
    ref = w / row_sum[rows] * (degree[rows].double() * BUCKET)
    ref[zero_rows] = 0
    err = mass.double() - ref
    assert (mass[(w == 0) & ~zero_rows] == 0).all(), "a zero weight got mass"
    light = ref < BUCKET - 1
    bound = 0.5 + 1e-12 * ref + 1e-9
    assert (err.abs()[light & ~zero_rows] <= bound[light & ~zero_rows]).all(), \
        f"light edge off by {err.abs()[light & ~zero_rows].max().item()} units"
    nonzero = torch.zeros(len(degree)).index_add_(0, rows, (w > 0).float()).double()
    heavy_err = torch.zeros(len(degree), dtype=torch.float64).index_add_(0, rows, err.abs() * (~light))
    limit = 0.5 * nonzero + 1e-12 * degree.double() * BUCKET + 1
    assert (heavy_err <= limit).all(), f"heavy edges off by {(heavy_err - limit).max().item()} beyond the bound"
