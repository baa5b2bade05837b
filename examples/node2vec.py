"""node2vec embeddings on a weighted graph with planted communities, on the GPU (or the CPU).

The graph is a stochastic block model: each node has --degree edges on average, a share
--mixing of them to other communities; edge weights are lognormal, heavier inside the
communities, so the weights carry the structure. Weighted node2vec walks
(torch_wrs.graph.CSRAliasTable.random_walk, return parameter p, in-out parameter q) feed
skip-gram with negative sampling; the negatives come from an AliasTable over
degree^0.75, as in word2vec. At the end a softmax regression on half the nodes predicts
the communities of the other half from the embeddings: the held-out accuracy says how
well the embeddings recover the communities (chance is 1 / --communities).

With torch_cluster installed (or its random-walk extension built from TORCH_CLUSTER_SRC,
torch_cluster 1.6.3's `csrc`), the same pipeline also runs on its walks, which cannot use
the weights.

    python examples/node2vec.py                      # 100,000 nodes, 32 communities
    python examples/node2vec.py --nodes 20000 --device cpu --epochs 1
"""
import argparse
import time

import torch

import torch_wrs


def planted_graph(nodes, communities, degree, mixing, generator, device):
    """A weighted stochastic block model as CSR (rowptr, col, weight) and the labels."""
    label = torch.randint(0, communities, (nodes,), generator=generator, device=device)
    members = torch.argsort(label)
    start = torch.searchsorted(label[members], torch.arange(communities, device=device))
    size = torch.bincount(label, minlength=communities)
    m = nodes * degree // 2
    src = torch.randint(0, nodes, (m,), generator=generator, device=device)
    inside = torch.rand(m, generator=generator, device=device) >= mixing
    c = label[src]
    pick = (torch.rand(m, generator=generator, device=device) * size[c]).long()
    dst = torch.where(inside, members[start[c] + pick], torch.randint(0, nodes, (m,), generator=generator,
                                                                      device=device))
    keep = src != dst
    src, dst = src[keep], dst[keep]
    w = torch.exp(torch.randn(src.numel(), generator=generator, device=device)) * torch.where(
        label[src] == label[dst], 4.0, 1.0)
    key = torch.cat([src * nodes + dst, dst * nodes + src])
    key, first = torch.unique(key, return_inverse=True)
    weight = torch.zeros(key.numel(), device=device).scatter_(0, first, torch.cat([w, w]))
    row, col = key // nodes, key % nodes
    rowptr = torch.zeros(nodes + 1, dtype=torch.int64, device=device)
    rowptr[1:] = torch.cumsum(torch.bincount(row, minlength=nodes), 0)
    return rowptr, col, weight, label


def skipgram_pairs(walks, window):
    """(center, context) pairs of every walk position within `window` steps."""
    centers, contexts = [], []
    for d in range(1, window + 1):
        centers += [walks[:, :-d], walks[:, d:]]
        contexts += [walks[:, d:], walks[:, :-d]]
    return torch.cat([c.reshape(-1) for c in centers]), torch.cat([c.reshape(-1) for c in contexts])


def train_embeddings(walks, nodes, negatives_table, dim, epochs, window, negatives, batch, generator):
    center, context = skipgram_pairs(walks, window)
    device = walks.device
    emb = torch.nn.Embedding(nodes, dim, sparse=True).to(device)
    ctx = torch.nn.Embedding(nodes, dim, sparse=True).to(device)
    torch.nn.init.uniform_(emb.weight, -0.5 / dim, 0.5 / dim)
    torch.nn.init.zeros_(ctx.weight)
    opt = torch.optim.SparseAdam(list(emb.parameters()) + list(ctx.parameters()), lr=0.01)
    for _ in range(epochs):
        order = torch.randperm(center.numel(), generator=generator, device=device)
        for b in range(0, order.numel(), batch):
            i = order[b:b + batch]
            u, v = emb(center[i]), ctx(context[i])
            neg = ctx(negatives_table.sample(i.numel() * negatives, generator=generator).view(i.numel(), negatives))
            loss = -(torch.nn.functional.logsigmoid((u * v).sum(-1))
                     + torch.nn.functional.logsigmoid(-(neg @ u.unsqueeze(-1)).squeeze(-1)).sum(-1)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return emb.weight.detach()


def held_out_accuracy(x, label, communities, generator):
    """A softmax regression trained on half the nodes, its accuracy on the other half."""
    x = (x - x.mean(0)) / (x.std(0) + 1e-8)
    order = torch.randperm(x.shape[0], generator=generator, device=x.device)
    train, test = order[: x.shape[0] // 2], order[x.shape[0] // 2:]
    model = torch.nn.Linear(x.shape[1], communities).to(x.device)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(300):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[train]), label[train]).backward()
        opt.step()
    return (model(x[test]).argmax(-1) == label[test]).float().mean().item()


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def run(walk_fn, name, args, graph, device, generator):
    rowptr, col, weight, label = graph
    nodes = rowptr.numel() - 1
    starts = torch.arange(nodes, device=device).repeat(args.walks_per_node)
    walk_fn(starts[:nodes], 2)  # warm-up (kernel load, compilation)
    sync(device)
    t0 = time.perf_counter()
    walks = walk_fn(starts, args.walk_length)
    sync(device)
    walk_s = time.perf_counter() - t0
    degree = (rowptr[1:] - rowptr[:-1]).double()
    negatives_table = torch_wrs.AliasTable(degree.pow(0.75))
    t0 = time.perf_counter()
    x = train_embeddings(walks, nodes, negatives_table, args.dim, args.epochs, args.window, args.negatives,
                         args.batch, generator)
    sync(device)
    train_s = time.perf_counter() - t0
    acc = held_out_accuracy(x, label, args.communities, generator)
    steps = starts.numel() * args.walk_length
    print(f"{name:<34} walks {walk_s * 1e3:8.1f} ms ({steps / walk_s / 1e9:6.2f} G steps/s)   "
          f"training {train_s:6.1f} s   held-out accuracy {acc:.3f}")
    return acc


def torch_cluster_walks(rowptr, col, p, q):
    from torch_wrs.benchmark_graph import torch_cluster_rw

    rw = torch_cluster_rw()
    if rw is None:
        return None
    col64 = col.long()
    return lambda starts, length: rw(rowptr, col64, starts, length, p, q)[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--communities", type=int, default=32)
    parser.add_argument("--degree", type=int, default=20)
    parser.add_argument("--mixing", type=float, default=0.6, help="share of each node's edges to other communities")
    parser.add_argument("--p", type=float, default=4.0)
    parser.add_argument("--q", type=float, default=0.5)
    parser.add_argument("--walk-length", type=int, default=40)
    parser.add_argument("--walks-per-node", type=int, default=5)
    parser.add_argument("--window", type=int, default=5)
    parser.add_argument("--negatives", type=int, default=5)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=65536)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--no-torch-cluster", action="store_true")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    generator = torch.Generator(device).manual_seed(args.seed)
    graph = planted_graph(args.nodes, args.communities, args.degree, args.mixing, generator, device)
    rowptr, col, weight, _ = graph
    print(f"{args.nodes:,} nodes, {col.numel():,} directed edges, {args.communities} communities, mixing "
          f"{args.mixing}; node2vec p = {args.p}, q = {args.q}; {args.walks_per_node} walks of {args.walk_length} "
          f"from every node; {device}")
    table = torch_wrs.graph.CSRAliasTable(rowptr, col, weight)
    results = {"weighted": run(lambda s, n: table.random_walk(s, n, p=args.p, q=args.q, generator=generator),
                               "torch_wrs, weighted walks", args, graph, device, generator)}
    uniform = torch_wrs.graph.CSRAliasTable(rowptr, col)
    results["unweighted"] = run(lambda s, n: uniform.random_walk(s, n, p=args.p, q=args.q, generator=generator),
                                "torch_wrs, unweighted walks", args, graph, device, generator)
    tc = None if args.no_torch_cluster or device.type != "cuda" else torch_cluster_walks(rowptr, col, args.p, args.q)
    if tc is not None:
        results["torch_cluster"] = run(tc, "torch_cluster, unweighted walks", args, graph, device, generator)
    else:
        print("torch_cluster: not available (install it, or set TORCH_CLUSTER_SRC to its csrc folder)")
    print(f"chance: {1 / args.communities:.3f}")
    return results


if __name__ == "__main__":
    main()
