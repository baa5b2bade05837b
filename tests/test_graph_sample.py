"""Weighted neighbour sampling over CSR (csr_sample_neighbors, neighbor_sample): the law of
the draws with and without replacement (G-tests with fixed seeds; without replacement the
expectation is the exact successive-sampling probability of each ordered tuple, enumerated),
zero weights, dead rows, reproducibility, and the multi-hop output format."""
import itertools

import pytest
import torch

import torch_wrs
from conftest import HAS_CUDA, requires_cuda
from helpers import csr_from_degrees, g_test_pvalue

P_MIN = 1e-4
CSRAliasTable = torch_wrs.graph.CSRAliasTable


def _gen(device, seed):
    return torch.Generator(device).manual_seed(seed)


def _row_law(rowptr, w, v):
    x = w[rowptr[v]:rowptr[v + 1]].double()
    return x / x.sum()


@pytest.mark.parametrize("weights", ["lognormal", "dominant"])
def test_with_replacement_law_per_degree(device, weights):
    big = device.type == "cuda"
    degrees = [1, 2, 17, 1000, 5000] + ([1_000_000] if big else [])
    g = torch.Generator().manual_seed(20)
    rowptr, col, w = csr_from_degrees(degrees, g, weights)
    w[rowptr[3]:rowptr[3] + 100] = 0  # zero-weight edges are never drawn
    t = CSRAliasTable(rowptr.to(device), col.to(device), w.to(device))
    draws = 100_000_000 if big else 1_000_000
    for v, d in enumerate(degrees):
        k = 50
        nodes = torch.full((draws // k // len(degrees),), v, device=device)
        nbr, eid, counts = t.sample_neighbors(nodes, k, generator=_gen(device, 21 + v))
        assert (counts == k).all()
        assert torch.equal(nbr, t.col[eid].long())
        assert ((eid >= rowptr[v]) & (eid < rowptr[v + 1])).all()
        hits = torch.bincount((eid - rowptr[v]).cpu(), minlength=d)
        assert g_test_pvalue(hits, _row_law(rowptr, w, v)) > P_MIN, f"degree {d}"


def test_uniform_graph_samples_uniformly(device):
    g = torch.Generator().manual_seed(22)
    rowptr, col, _ = csr_from_degrees([7, 300], g)
    t = CSRAliasTable(rowptr.to(device), col.to(device))
    assert t.table is None
    nbr, eid, counts = t.sample_neighbors(torch.ones(20_000, dtype=torch.int64, device=device), 30,
                                          generator=_gen(device, 23))
    assert g_test_pvalue(torch.bincount((eid - 7).cpu(), minlength=300), torch.ones(300)) > P_MIN


def _successive_probs(p, k):
    """Probability of every ordered k-tuple of distinct items under successive sampling."""
    out = {}
    for tup in itertools.permutations(range(len(p)), k):
        prob, left = 1.0, 1.0
        for i in tup:
            prob *= p[i] / left
            left -= p[i]
        out[tup] = prob
    return out


@pytest.mark.parametrize("weights,k", [
    ([1.0, 2.0, 3.0, 4.0, 10.0], 2),
    ([5.0, 0.5, 3.0, 0.0, 1.0, 2.5, 7.0], 3),
    ([1e6, 1e6, 1.0, 2.0, 3.0, 4.0], 4),  # the two heavy items leave the trials mostly rejected: inversion
])
def test_without_replacement_ordered_tuples(device, weights, k):
    w = torch.tensor(weights, dtype=torch.float64)
    rowptr = torch.tensor([0, len(weights)])
    col = torch.arange(len(weights))
    t = CSRAliasTable(rowptr.to(device), col.to(device), w.to(device))
    reps = 2_000_000 if device.type == "cuda" else 200_000
    nbr, eid, counts = t.sample_neighbors_padded(torch.zeros(reps, dtype=torch.int64, device=device), k,
                                                 replace=False, generator=_gen(device, 24))
    assert (counts == k).all()
    probs = _successive_probs((w / w.sum()).tolist(), k)
    keys = {tup: i for i, tup in enumerate(probs)}
    code = torch.zeros(reps, dtype=torch.int64)
    e = eid.cpu()
    for j in range(k):
        code = code * len(weights) + e[:, j]
    index = {sum(c * len(weights) ** (k - 1 - j) for j, c in enumerate(tup)): keys[tup] for tup in probs}
    lookup = torch.full((len(weights) ** k,), -1, dtype=torch.int64)
    for c, i in index.items():
        lookup[c] = i
    cat = lookup[code]
    assert (cat >= 0).all(), "a draw repeated an item or drew a zero-weight one"
    expected = torch.tensor(list(probs.values()), dtype=torch.float64)
    assert g_test_pvalue(torch.bincount(cat, minlength=len(probs)), expected) > P_MIN


def test_without_replacement_on_a_hub_is_distinct_and_weighted(device):
    g = torch.Generator().manual_seed(25)
    rowptr, col, w = csr_from_degrees([3, 50_000], g)
    t = CSRAliasTable(rowptr.to(device), col.to(device), w.to(device))
    nbr, eid, counts = t.sample_neighbors_padded(torch.ones(4000, dtype=torch.int64, device=device), 20,
                                                 replace=False, generator=_gen(device, 26))
    assert (counts == 20).all()
    s = eid.sort(1).values
    assert (s[:, 1:] != s[:, :-1]).all(), "an edge drawn twice for one seed"
    # The first draw of each seed is one draw from the row's law.
    first = (eid[:, 0] - 3).cpu()
    p = _row_law(rowptr, w, 1)
    heavy = p > 1e-4
    hits = torch.bincount(first, minlength=50_000)
    assert g_test_pvalue(torch.cat([hits[heavy], hits[~heavy].sum().view(1)]),
                         torch.cat([p[heavy], p[~heavy].sum().view(1)])) > P_MIN


def test_few_nonzero_edges_give_all_of_them(device):
    # At most k edges: every one of positive weight, in CSR order; more edges, but only
    # some of positive weight: all of those, in draw order.
    rowptr = torch.tensor([0, 4, 14, 14])
    w = torch.tensor([1.0, 0.0, 2.0, 3.0] + [0.0] * 7 + [1.0, 5.0, 0.5], dtype=torch.float64)
    col = torch.arange(14) % 3
    t = CSRAliasTable(rowptr.to(device), col.to(device), w.to(device))
    nbr, eid, counts = t.sample_neighbors_padded(torch.tensor([0, 1, 2], device=device), 5, replace=False,
                                                 generator=_gen(device, 27))
    assert counts.tolist() == [3, 3, 0]
    assert eid[0].tolist() == [0, 2, 3, -1, -1]
    assert sorted(eid[1, :3].tolist()) == [11, 12, 13] and eid[1, 3:].tolist() == [-1, -1]
    assert (eid[2] == -1).all() and (nbr[2] == -1).all()


def test_zero_sum_and_empty_rows_give_nothing(device):
    rowptr = torch.tensor([0, 3, 3, 5000])
    w = torch.zeros(5000, dtype=torch.float64)
    w[:3] = 1
    t = CSRAliasTable(rowptr.to(device), torch.zeros(5000, dtype=torch.int64, device=device), w.to(device))
    for replace in (True, False):
        nbr, eid, counts = t.sample_neighbors(torch.tensor([1, 2, 0], device=device), 4, replace=replace)
        assert counts.tolist() == [0, 0, 3 if not replace else 4]


def test_generator_reproduces_and_seeds_differ(device):
    g = torch.Generator().manual_seed(28)
    rowptr, col, w = csr_from_degrees([40, 3000, 2], g)
    t = CSRAliasTable(rowptr.to(device), col.to(device), w.to(device))
    nodes = torch.tensor([0, 1, 2, 1], device=device)
    for replace in (True, False):
        a = t.sample_neighbors_padded(nodes, 10, replace=replace, generator=_gen(device, 1))
        b = t.sample_neighbors_padded(nodes, 10, replace=replace, generator=_gen(device, 1))
        c = t.sample_neighbors_padded(nodes, 10, replace=replace, generator=_gen(device, 2))
        assert all(torch.equal(x, y) for x, y in zip(a, b))
        assert not torch.equal(a[1], c[1])
        assert not torch.equal(a[1][1], a[1][3]), "two seeds of one node drew the same neighbours"
        torch.manual_seed(5)
        d = t.sample_neighbors_padded(nodes, 10, replace=replace)
        torch.manual_seed(5)
        e = t.sample_neighbors_padded(nodes, 10, replace=replace)
        assert torch.equal(d[1], e[1])


def test_int32_col_and_nodes(device):
    g = torch.Generator().manual_seed(29)
    rowptr, col, w = csr_from_degrees([5, 3000], g)
    wide = CSRAliasTable(rowptr.to(device), col.to(device), w.to(device))
    narrow = CSRAliasTable(rowptr.int().to(device), col.int().to(device), w.to(device))
    nodes = torch.tensor([1, 0, 1], device=device)
    for replace in (True, False):
        a = wide.sample_neighbors_padded(nodes, 8, replace=replace, generator=_gen(device, 3))
        b = narrow.sample_neighbors_padded(nodes.int(), 8, replace=replace, generator=_gen(device, 3))
        assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_k_zero_and_no_nodes(device):
    t = CSRAliasTable(torch.tensor([0, 2], device=device), torch.tensor([0, 0], device=device),
                      torch.ones(2, device=device))
    nbr, eid, counts = t.sample_neighbors(torch.tensor([0, 0], device=device), 0)
    assert nbr.numel() == 0 and counts.tolist() == [0, 0]
    nbr, eid, counts = t.sample_neighbors(torch.empty(0, dtype=torch.int64, device=device), 5, replace=False)
    assert nbr.numel() == 0 and counts.numel() == 0


def test_bad_input_raises(device):
    t = CSRAliasTable(torch.tensor([0, 2, 3], device=device), torch.tensor([1, 0, 0], device=device),
                      torch.ones(3, device=device))
    with pytest.raises(RuntimeError, match=r"csr_sample_neighbors: a node id is outside \[0, N\)"):
        t.sample_neighbors(torch.tensor([0, 2], device=device), 3)
    with pytest.raises(RuntimeError, match=r"a node id is outside \[0, N\)"):
        t.sample_neighbors(torch.tensor([-1], device=device), 3, replace=False)
    with pytest.raises(RuntimeError, match="k must be non-negative"):
        t.sample_neighbors(torch.tensor([0], device=device), -2)
    with pytest.raises(RuntimeError, match="nodes must be int64 or int32"):
        t.sample_neighbors(torch.tensor([0.0], device=device), 3)
    op = torch.ops.wrs.csr_sample_neighbors
    with pytest.raises(RuntimeError, match="table must be a 1-D tensor with one entry per edge"):
        op(t.rowptr, t.col, t.table[:2], t.weight, torch.tensor([0], device=device), 2)
    with pytest.raises(RuntimeError, match="without replacement over a weighted table needs its weight"):
        op(t.rowptr, t.col, t.table, None, torch.tensor([0], device=device), 2, False)
    # Unchecked, a bad node gets nothing.
    nbr, eid, counts = t.sample_neighbors_padded(torch.tensor([5, 0], device=device), 2, validate=False)
    assert counts.tolist() == [0, 2] and (eid[0] == -1).all()


def _check_multi_hop(rowptr, col, seeds, fanouts, out, replace):
    row, col_local, node, edge, n_nodes, n_edges = [x.cpu() if isinstance(x, torch.Tensor) else x for x in out]
    rowptr, col = rowptr.cpu(), col.cpu()
    assert node[:len(seeds)].tolist() == seeds.cpu().tolist()
    assert sum(n_nodes) == node.numel() and sum(n_edges) == edge.numel() == row.numel() == col_local.numel()
    assert len(n_nodes) == len(fanouts) + 1 and len(n_edges) == len(fanouts)
    assert node.unique().numel() == node.numel(), "a node appears twice"
    src, dst = node[row], node[col_local]
    assert ((edge >= rowptr[src]) & (edge < rowptr[src + 1])).all(), "an edge is not the source's"
    assert torch.equal(col[edge], dst), "an edge's neighbour is not its column"
    start_n, start_e = 0, 0
    for h, k in enumerate(fanouts):
        frontier = torch.arange(start_n, start_n + n_nodes[h])
        hop_rows = row[start_e:start_e + n_edges[h]]
        assert torch.isin(hop_rows, frontier).all(), f"hop {h} sampled from a node not reached at hop {h - 1}"
        per_source = torch.bincount(hop_rows - start_n, minlength=n_nodes[h])
        assert (per_source <= k).all()
        if not replace:
            pairs = hop_rows * (edge.max() + 1) + edge[start_e:start_e + n_edges[h]]
            assert pairs.unique().numel() == pairs.numel(), "an edge drawn twice from one node"
        # New nodes come in the order they first appear among this hop's neighbours.
        new = node[start_n + n_nodes[h]:start_n + n_nodes[h] + n_nodes[h + 1]]
        hop_dst = dst[start_e:start_e + n_edges[h]]
        fresh = hop_dst[torch.isin(hop_dst, new)]
        order = []
        for x in fresh.tolist():
            if x not in order:
                order.append(x)
        assert order == new.tolist()
        start_n += n_nodes[h]
        start_e += n_edges[h]


@pytest.mark.parametrize("replace", [False, True])
def test_multi_hop_format(device, replace):
    g = torch.Generator().manual_seed(30)
    degrees = (torch.rand(3000, generator=g).pow(-1.3)).long().clamp(max=2000)
    rowptr, col, w = csr_from_degrees(degrees, g, num_nodes=3000)
    seeds = torch.randperm(3000, generator=g)[:64]
    out = torch_wrs.graph.neighbor_sample(rowptr.to(device), col.to(device), seeds.to(device), [15, 10, 5],
                                          weight=w.to(device), replace=replace, generator=_gen(device, 31))
    _check_multi_hop(rowptr, col, seeds, [15, 10, 5], out, replace)


def test_multi_hop_all_neighbours(device):
    rowptr = torch.tensor([0, 2, 4, 5, 5])
    col = torch.tensor([1, 2, 0, 3, 1])
    out = torch_wrs.graph.neighbor_sample(rowptr.to(device), col.to(device), torch.tensor([0], device=device),
                                          [-1, -1])
    row, col_local, node, edge, n_nodes, n_edges = out
    assert node.tolist() == [0, 1, 2, 3] and n_nodes == [1, 2, 1]
    assert edge.tolist() == [0, 1, 2, 3, 4] and n_edges == [2, 3]
    _check_multi_hop(rowptr, col, torch.tensor([0]), [100, 100], out, False)


def test_opcheck(device):
    g = torch.Generator().manual_seed(32)
    rowptr, col, w = csr_from_degrees([4, 2600, 0, 9], g)
    rowptr, col, w = rowptr.to(device), col.to(device), w.to(device)
    table = torch.ops.wrs.csr_alias_table(rowptr, w)
    torch.library.opcheck(torch.ops.wrs.csr_alias_table, (rowptr, w))
    nodes = torch.tensor([0, 1, 2, 3, 1], device=device)
    for replace in (True, False):
        torch.library.opcheck(torch.ops.wrs.csr_sample_neighbors, (rowptr, col, table, w, nodes, 6, replace),
                              {"generator": _gen(device, 1)}, test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.wrs.csr_random_walk, (rowptr, col, table, w, nodes, 7, 2.0, 0.5),
                          {"generator": _gen(device, 1)}, test_utils=("test_schema", "test_faketensor"))


def test_compile_fullgraph(device):
    g = torch.Generator().manual_seed(33)
    rowptr, col, w = csr_from_degrees([4, 260, 1, 9], g)
    t = CSRAliasTable(rowptr.to(device), col.to(device), w.to(device))
    nodes = torch.tensor([0, 1, 3], device=device)

    @torch.compile(fullgraph=True)
    def step(nodes):
        nbr, eid, counts = t.sample_neighbors_padded(nodes, 5, validate=False)
        walks = t.random_walk(nodes, 4, validate=False)
        return nbr, counts, walks

    nbr, counts, walks = step(nodes)
    assert nbr.shape == (3, 5) and counts.tolist() == [5, 5, 5] and walks.shape == (3, 5)
    assert torch.equal(walks[:, 0], nodes)


@requires_cuda
def test_cuda_graph_capture_draws_fresh_samples():
    g = torch.Generator().manual_seed(34)
    rowptr, col, w = csr_from_degrees([50, 3000, 7], g)
    t = CSRAliasTable(rowptr.cuda(), col.cuda(), w.cuda())
    nodes = torch.tensor([0, 1, 2, 1], device="cuda")
    t.rows_sorted()  # made before capture
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(2):  # warm-up
            t.sample_neighbors_padded(nodes, 8, validate=False)
            t.sample_neighbors_padded(nodes, 8, replace=False, validate=False)
            t.random_walk(nodes, 6, p=2.0, q=0.5, validate=False)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        a = t.sample_neighbors_padded(nodes, 8, validate=False)
        b = t.sample_neighbors_padded(nodes, 8, replace=False, validate=True)  # the read is skipped while capturing
        c = t.random_walk(nodes, 6, p=2.0, q=0.5, validate=False)
    graph.replay()
    first = [a[1].clone(), b[1].clone(), c.clone()]
    graph.replay()
    assert not torch.equal(first[0], a[1]) and not torch.equal(first[1], b[1]) and not torch.equal(first[2], c)
    assert a[2].tolist() == [8, 8, 8, 8] and b[2].tolist() == [8, 8, 7, 8]  # node 2 has 7 edges


def test_pyg_loader_gets_weighted_batches(device):
    tg = pytest.importorskip("torch_geometric", reason="torch_geometric is not installed")
    from torch_geometric.data import Data
    from torch_geometric.loader import NodeLoader

    from torch_wrs.integrations.pyg import WeightedNeighborSampler

    g = torch.Generator().manual_seed(35)
    n = 500
    edge_index = torch.randint(0, n, (2, 6000), generator=g)
    weight = torch.exp(torch.randn(6000, generator=g))
    weight[:1000] = 0  # never sampled
    data = Data(x=torch.randn(n, 4, generator=g), edge_index=edge_index, edge_weight=weight, num_nodes=n).to(device)
    sampler = WeightedNeighborSampler(data, [10, 5], weight_attr="edge_weight")
    loader = NodeLoader(data, node_sampler=sampler, input_nodes=torch.arange(100, device=device), batch_size=32)
    seen = 0
    for batch in loader:
        assert batch.n_id.device.type == device.type
        assert torch.equal(batch.x, data.x[batch.n_id])
        src, dst = batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]]
        # Each sampled edge is an edge of the graph, j -> i with i sampled from (message flow to the seeds).
        assert torch.equal(data.edge_index[0, batch.e_id], src) and torch.equal(data.edge_index[1, batch.e_id], dst)
        assert (data.edge_weight[batch.e_id] > 0).all()
        assert torch.equal(batch.n_id[:batch.batch_size].cpu(), batch.input_id.cpu())
        seen += batch.batch_size
    assert seen == 100 and tg.__version__
