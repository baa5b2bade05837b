"""Random walks over CSR (csr_random_walk): first-order transition laws, node2vec's
second-order law from triplet counts (t, v) -> x against w(v, x) * a(t, x), the stationary
law of long walks on an undirected weighted graph, dead ends, reproducibility."""
import math

import pytest
import scipy.stats
import torch

import torch_wrs
from helpers import g_test_pvalue

P_MIN = 1e-4
CSRAliasTable = torch_wrs.graph.CSRAliasTable


def _gen(device, seed):
    return torch.Generator(device).manual_seed(seed)


def _undirected(n, extra, generator, sort=True):
    """A connected undirected weighted graph: a ring plus random chords, symmetric lognormal
    weights (some zero), as CSR (rows sorted unless sort=False)."""
    ring = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])
    chords = torch.randint(0, n, (2, extra), generator=generator)
    chords = chords[:, chords[0] != chords[1]]
    und = torch.cat([ring, chords], 1)
    w = torch.exp(1.5 * torch.randn(und.shape[1], generator=generator, dtype=torch.float64))
    w[torch.rand(w.numel(), generator=generator) < 0.05] = 0
    w[:n] += 0.1  # the ring keeps every node reachable
    src, dst = torch.cat([und[0], und[1]]), torch.cat([und[1], und[0]])
    ww = torch.cat([w, w])
    key = src * n + (dst if sort else torch.randperm(dst.numel(), generator=generator))
    order = torch.argsort(key)
    src, dst, ww = src[order], dst[order], ww[order]
    rowptr = torch.zeros(n + 1, dtype=torch.int64)
    rowptr[1:] = torch.cumsum(torch.bincount(src, minlength=n), 0)
    return rowptr, dst, ww


def _dense(rowptr, col, w, n):
    """W[v, x]: the summed weight of v's edges to x (parallel edges add up)."""
    rows = torch.repeat_interleave(torch.arange(n), rowptr[1:] - rowptr[:-1])
    out = torch.zeros(n, n, dtype=torch.float64)
    out.index_put_((rows, col), w.double(), accumulate=True)
    return out


def _grouped_g_test(counts, expected_probs, min_expected=5.0):
    """One p-value for many independent multinomial groups: the rows of `counts`, each
    against its row of `expected_probs`; G statistics and degrees of freedom add up. Cells
    expected under min_expected are pooled within their row."""
    g_total, dof = 0.0, 0
    for c, p in zip(counts.double(), expected_probs.double()):
        total = c.sum()
        if total == 0:
            continue
        p = p / p.sum()
        assert c[p == 0].sum() == 0, "a zero-probability transition was taken"
        big = p * total >= min_expected
        obs = torch.cat([c[big], c[~big & (p > 0)].sum().view(1)])
        exp = torch.cat([p[big], p[~big & (p > 0)].sum().view(1)]) * total
        keep = exp > 0
        obs, exp = obs[keep], exp[keep]
        if obs.numel() < 2:
            continue
        pos = obs > 0
        g_total += 2.0 * float((obs[pos] * torch.log(obs[pos] / exp[pos])).sum())
        dof += obs.numel() - 1
    return float(scipy.stats.chi2.sf(g_total, dof)) if dof else 1.0


def test_first_order_transitions(device):
    g = torch.Generator().manual_seed(40)
    n = 12
    rowptr, col, w = _undirected(n, 30, g)
    t = CSRAliasTable(rowptr.to(device), col.to(device), w.to(device))
    walks = 200_000 if device.type == "cuda" else 40_000
    start = torch.randint(0, n, (walks,), generator=g).to(device)
    path = t.random_walk(start, 8, generator=_gen(device, 41)).cpu()
    assert torch.equal(path[:, 0], start.cpu())
    v, x = path[:, :-1].reshape(-1), path[:, 1:].reshape(-1)
    counts = torch.zeros(n, n, dtype=torch.int64).index_put_((v, x), torch.ones_like(v), accumulate=True)
    assert _grouped_g_test(counts, _dense(rowptr, col, w, n)) > P_MIN


def _node2vec_expectation(W, p, q):
    """E[t, v, x] proportional to W[v, x] * a(t, x) over x, for each (t, v)."""
    n = W.shape[0]
    adj = W > 0
    a = torch.where(adj, 1.0, 1.0 / q).double()  # a[t, x]: 1 if x is a neighbour of t, else 1/q
    a[torch.arange(n), torch.arange(n)] = 1.0 / p  # x == t
    return W.unsqueeze(0) * a.unsqueeze(1)  # [t, v, x]


@pytest.mark.parametrize("p,q", [(1.0, 0.5), (4.0, 1.0), (0.25, 4.0), (2.0, 0.5), (1e3, 1e3)])
def test_node2vec_triplets(device, p, q):
    g = torch.Generator().manual_seed(42)
    n = 10
    rowptr, col, w = _undirected(n, 14, g)
    # "Neighbour of t" means an edge t -> x; a zero-weight edge still counts.
    W = _dense(rowptr, col, w, n)
    adj = torch.zeros(n, n, dtype=torch.bool)
    adj[torch.repeat_interleave(torch.arange(n), rowptr[1:] - rowptr[:-1]), col] = True
    t_ = CSRAliasTable(rowptr.to(device), col.to(device), w.to(device))
    walks = 400_000 if device.type == "cuda" else 30_000
    start = torch.randint(0, n, (walks,), generator=g).to(device)
    path = t_.random_walk(start, 10, p=p, q=q, generator=_gen(device, 43)).cpu()
    tt, v, x = path[:, :-2].reshape(-1), path[:, 1:-1].reshape(-1), path[:, 2:].reshape(-1)
    counts = torch.zeros(n * n, n, dtype=torch.int64).index_put_((tt * n + v, x), torch.ones_like(x), accumulate=True)
    a = torch.where(adj, 1.0, 1.0 / q).double()
    a[torch.arange(n), torch.arange(n)] = 1.0 / p
    expected = (W.unsqueeze(0) * a.unsqueeze(1)).reshape(n * n, n)
    assert _grouped_g_test(counts, expected) > P_MIN


def test_node2vec_unsorted_rows_same_law(device):
    g = torch.Generator().manual_seed(44)
    n = 9
    rowptr, col, w = _undirected(n, 12, g, sort=False)
    t_ = CSRAliasTable(rowptr.to(device), col.to(device), w.to(device))
    assert not bool(t_.rows_sorted())
    W = _dense(rowptr, col, w, n)
    adj = W > 0
    adj |= _dense(rowptr, col, torch.ones_like(w), n) > 0
    p, q = 0.5, 2.0
    path = t_.random_walk(torch.randint(0, n, (30_000,), generator=g).to(device), 10, p=p, q=q,
                          generator=_gen(device, 45)).cpu()
    tt, v, x = path[:, :-2].reshape(-1), path[:, 1:-1].reshape(-1), path[:, 2:].reshape(-1)
    counts = torch.zeros(n * n, n, dtype=torch.int64).index_put_((tt * n + v, x), torch.ones_like(x), accumulate=True)
    a = torch.where(adj, 1.0, 1.0 / q).double()
    a[torch.arange(n), torch.arange(n)] = 1.0 / p
    assert _grouped_g_test(counts, (W.unsqueeze(0) * a.unsqueeze(1)).reshape(n * n, n)) > P_MIN


def test_long_walks_visit_nodes_by_weighted_degree(device):
    # The last node of a long walk on a connected, non-bipartite undirected graph follows
    # the stationary law, strength(v) / sum(strength): independent across walks.
    g = torch.Generator().manual_seed(46)
    n = 15
    rowptr, col, w = _undirected(n, 25, g)
    t_ = CSRAliasTable(rowptr.to(device), col.to(device), w.to(device))
    walks = 1_000_000 if device.type == "cuda" else 50_000
    path = t_.random_walk(torch.randint(0, n, (walks,), generator=g).to(device), 120,
                          generator=_gen(device, 47)).cpu()
    strength = _dense(rowptr, col, w, n).sum(1)
    assert g_test_pvalue(torch.bincount(path[:, -1], minlength=n), strength) > P_MIN


def test_dead_ends_and_zero_weight_rows_stay(device):
    rowptr = torch.tensor([0, 2, 2, 4, 5])
    col = torch.tensor([1, 2, 0, 3, 0])
    w = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0])  # node 1: no edge; node 2: edges of weight 0
    t_ = CSRAliasTable(rowptr.to(device), col.to(device), w.to(device))
    for p, q in [(1.0, 1.0), (2.0, 0.5)]:
        walks = t_.random_walk(torch.tensor([0, 2, 1], device=device), 4, p=p, q=q).cpu()
        assert walks.tolist() == [[0, 1, 1, 1, 1], [2, 2, 2, 2, 2], [1, 1, 1, 1, 1]]


def test_reproducible_and_independent(device):
    g = torch.Generator().manual_seed(48)
    rowptr, col, w = _undirected(50, 200, g)
    t_ = CSRAliasTable(rowptr.to(device), col.to(device), w.to(device))
    start = torch.full((64,), 3, device=device)
    for p, q in [(1.0, 1.0), (4.0, 0.5)]:
        a = t_.random_walk(start, 20, p=p, q=q, generator=_gen(device, 7))
        b = t_.random_walk(start, 20, p=p, q=q, generator=_gen(device, 7))
        c = t_.random_walk(start, 20, p=p, q=q, generator=_gen(device, 8))
        assert torch.equal(a, b) and not torch.equal(a, c)
        assert a.unique(dim=0).shape[0] > 50, "walks from one start should differ"


def test_uniform_int32_and_edge_cases(device):
    g = torch.Generator().manual_seed(49)
    rowptr, col, w = _undirected(20, 40, g)
    uniform = CSRAliasTable(rowptr.int().to(device), col.int().to(device))
    walks = uniform.random_walk(torch.arange(20, dtype=torch.int32, device=device), 30, p=2.0, q=0.5)
    assert walks.dtype == torch.int64 and walks.shape == (20, 31)
    assert walks.min() >= 0 and walks.max() < 20
    # Every step is along an edge.
    W = _dense(rowptr, col, torch.ones_like(w), 20)
    assert (W[walks[:, :-1].cpu(), walks[:, 1:].cpu()] > 0).all()
    assert uniform.random_walk(torch.arange(3, device=device), 0).shape == (3, 1)
    assert uniform.random_walk(torch.empty(0, dtype=torch.int64, device=device), 5).shape == (0, 6)


def test_bad_input_raises(device):
    t_ = CSRAliasTable(torch.tensor([0, 1, 2], device=device), torch.tensor([1, 0], device=device),
                       torch.ones(2, device=device))
    with pytest.raises(RuntimeError, match=r"csr_random_walk: a node id is outside \[0, N\)"):
        t_.random_walk(torch.tensor([0, 2], device=device), 3)
    with pytest.raises(RuntimeError, match="walk_length must be non-negative"):
        t_.random_walk(torch.tensor([0], device=device), -1)
    with pytest.raises(RuntimeError, match="p and q must be positive and finite"):
        t_.random_walk(torch.tensor([0], device=device), 3, p=0.0)
    with pytest.raises(RuntimeError, match="p and q must be positive and finite"):
        t_.random_walk(torch.tensor([0], device=device), 3, q=math.inf)
    with pytest.raises(RuntimeError, match="need its weight too"):
        torch.ops.wrs.csr_random_walk(t_.rowptr, t_.col, t_.table, None, torch.tensor([0], device=device), 3, 2.0, 1.0)
    walks = t_.random_walk(torch.tensor([5, 0], device=device), 3, validate=False)
    assert walks[0].tolist() == [-1, -1, -1, -1] and walks[1, 0] == 0
