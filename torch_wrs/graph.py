"""Weighted graph sampling over CSR: per-node alias tables, neighbour sampling, walks.

A CSR graph (``rowptr [N + 1]``, ``col [E]``) with edge weights is a batch of N
distributions of every length. :class:`CSRAliasTable` builds the alias table of every
node in one call (8 bytes an edge, laid out as ``col``), after which a weighted draw is
one 8-byte load: neighbour sampling with or without replacement, multi-hop sampling in
pyg-lib's format, first-order and node2vec walks.
"""
from typing import List, Optional, Sequence, Tuple

import torch

from . import _library  # noqa: F401  (registers torch.ops.wrs)

_BUCKET = 1 << 32
_DEAD = -(1 << 32)  # graph.h's kDeadBucket: every bucket of a row whose weights sum to zero


class CSRAliasTable:
    """The alias tables of every node of a CSR graph: build once, sample many times.

    Parameters
    ----------
    rowptr : Tensor
        ``[N + 1]`` int64 or int32 offsets: node v's edges are ``rowptr[v]:rowptr[v + 1]``.
    col : Tensor
        ``[E]`` int64 or int32 neighbour ids, on rowptr's device.
    weight : Tensor, optional
        ``[E]`` non-negative edge weights, any float dtype. ``None``: every edge weighs the
        same (no table is built). A node whose weights sum to zero has no neighbour to give.
    validate : bool
        Raise for a malformed ``rowptr`` and negative, NaN or inf weights (on CUDA one
        read back at build time). ``False`` inside CUDA graphs; bad input then gives
        unspecified tables whose draws stay in range.

    Raises
    ------
    RuntimeError
        For tensors of the wrong dtype, shape or device, a malformed ``rowptr``, bad
        weights, or a node of ``2**31`` edges or more.

    Examples
    --------
    >>> rowptr = torch.tensor([0, 2, 3, 3]); col = torch.tensor([1, 2, 0])
    >>> g = torch_wrs.graph.CSRAliasTable(rowptr, col, torch.tensor([1.0, 3.0, 2.0]))
    >>> nbr, eid, counts = g.sample_neighbors(torch.tensor([0, 2]), 4)
    >>> counts
    tensor([4, 0])
    >>> g.random_walk(torch.tensor([0, 1]), 5, p=4.0, q=0.5).shape
    torch.Size([2, 6])
    """

    def __init__(self, rowptr: torch.Tensor, col: torch.Tensor, weight: Optional[torch.Tensor] = None, *,
                 validate: bool = True):
        if not isinstance(rowptr, torch.Tensor) or rowptr.dtype not in (torch.int32, torch.int64):
            raise RuntimeError("CSRAliasTable: rowptr must be an int64 or int32 tensor")
        self.rowptr = rowptr.to(torch.int64).contiguous()
        self.col = col.contiguous()
        self.table = None
        self.weight = None
        if weight is not None:
            self.table = torch.ops.wrs.csr_alias_table(self.rowptr, weight, validate=validate)
            # Kept for the exact fallbacks of sampling without replacement and of node2vec.
            self.weight = weight.contiguous() if weight.dtype in (torch.float32, torch.float64) else weight.float()
        self._rows_sorted = None

    @property
    def num_nodes(self) -> int:
        return self.rowptr.numel() - 1

    @property
    def num_edges(self) -> int:
        return self.col.numel()

    @property
    def device(self) -> torch.device:
        return self.rowptr.device

    def degree(self) -> torch.Tensor:
        """Each node's number of edges.

        Parameters
        ----------
        None

        Returns
        -------
        Tensor
            int64 ``[N]``.

        Raises
        ------
        None

        Examples
        --------
        >>> g.degree().max()
        """
        return self.rowptr[1:] - self.rowptr[:-1]

    def edge_probs(self) -> torch.Tensor:
        """The probability of each edge in one draw from its node, reconstructed exactly from
        the tables: the law every sampling method here draws from.

        Parameters
        ----------
        None

        Returns
        -------
        Tensor
            float64 ``[E]``; zero for the edges of a node whose weights sum to zero.

        Raises
        ------
        RuntimeError
            For a table whose aliases leave their rows (not one ``csr_alias_table`` made).

        Examples
        --------
        >>> p = g.edge_probs()   # within 2**-33 / degree of w / sum(w) per node
        """
        degree = self.degree()
        if self.table is None:
            return torch.repeat_interleave((1.0 / degree.double()).nan_to_num(0.0), degree,
                                           output_size=self.num_edges)
        start = torch.repeat_interleave(self.rowptr[:-1], degree, output_size=self.num_edges)
        live = self.table != _DEAD
        threshold = (self.table & 0xFFFFFFFF).double() * live
        mass = threshold.clone()
        mass.index_add_(0, start + (self.table >> 32) * live, (_BUCKET - threshold) * live)
        return mass / (torch.repeat_interleave(degree, degree, output_size=self.num_edges).double() * _BUCKET)

    def rows_sorted(self) -> torch.Tensor:
        """Whether every row of ``col`` is sorted, so that node2vec's neighbour test may
        binary-search. Computed once on the device, nothing read back.

        Parameters
        ----------
        None

        Returns
        -------
        Tensor
            A one-element bool tensor on the graph's device.

        Raises
        ------
        None

        Examples
        --------
        >>> bool(g.rows_sorted())
        True
        """
        if self._rows_sorted is None:
            e = self.num_edges
            if e <= 1:
                self._rows_sorted = torch.ones((), dtype=torch.bool, device=self.device)
            else:
                rising = self.col[1:] >= self.col[:-1]
                ends = self.rowptr[1:-1] - 1  # pair (e, e + 1) crosses a row boundary when e ends a row
                ends = ends[(ends >= 0) & (ends < e - 1)]
                rising[ends] = True
                self._rows_sorted = rising.all()
        return self._rows_sorted

    def sample_neighbors_padded(self, nodes: torch.Tensor, k: int, *, replace: bool = True,
                                validate: bool = True,
                                generator: Optional[torch.Generator] = None
                                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`sample_neighbors` with fixed shapes: ``[len(nodes), k]`` neighbours and edge ids,
        ``-1`` past each node's count, and the counts. Nothing is read back with
        ``validate=False`` (then capturable in a CUDA graph and traceable by torch.compile).

        Parameters
        ----------
        nodes, k, replace, generator
            As :meth:`sample_neighbors`.
        validate : bool
            Raise for a node id outside ``[0, N)`` (one read back on CUDA, skipped while
            capturing). Otherwise such a node gets count 0.

        Returns
        -------
        (Tensor, Tensor, Tensor)
            int64 neighbours ``[S, k]``, edge ids ``[S, k]``, counts ``[S]``.

        Raises
        ------
        RuntimeError
            As :meth:`sample_neighbors`.

        Examples
        --------
        >>> nbr, eid, counts = g.sample_neighbors_padded(seeds, 15, validate=False)
        """
        return torch.ops.wrs.csr_sample_neighbors(self.rowptr, self.col, self.table, self.weight, nodes, k, replace,
                                                  validate=validate, generator=generator)

    def sample_neighbors(self, nodes: torch.Tensor, k: int, *, replace: bool = True,
                         generator: Optional[torch.Generator] = None
                         ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """k weighted neighbours of each node.

        With replacement, i.i.d. draws from ``w / sum(w)`` of the node's edges. Without,
        successive sampling (each draw from the weights of the edges not yet drawn, the law
        of pyg-lib's, DGL's and cuGraph's ``u ** (1 / w)`` keys), in draw order; a node with
        at most k edges of positive weight gives all of them, in CSR order.

        Parameters
        ----------
        nodes : Tensor
            ``[S]`` int64 or int32 node ids.
        k : int
            Neighbours a node (non-negative).
        replace : bool
            With replacement (default) or without.
        generator : torch.Generator, optional

        Returns
        -------
        (Tensor, Tensor, Tensor)
            int64 ``neighbors`` and ``edge_ids`` (positions in ``col``), each node's together,
            nodes in order, and int64 ``counts [S]``.

        Raises
        ------
        RuntimeError
            For a node id outside ``[0, N)``, a negative k, or tensors of the wrong dtype,
            shape or device.

        Examples
        --------
        >>> nbr, eid, counts = g.sample_neighbors(torch.tensor([0, 1]), 3, replace=False)
        """
        nbr, eid, counts = self.sample_neighbors_padded(nodes, k, replace=replace, generator=generator)
        keep = torch.arange(k, device=counts.device) < counts.unsqueeze(-1)
        return nbr[keep], eid[keep], counts

    def random_walk(self, start: torch.Tensor, walk_length: int, *, p: float = 1.0, q: float = 1.0,
                    validate: bool = True, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """Weighted random walks: first order for ``p = q = 1``, node2vec's second order otherwise.

        A step from v goes to x with probability proportional to ``w(v, x)``; node2vec's, having
        come from t, to ``w(v, x) * a(t, x)`` with ``a = 1/p`` for x = t, 1 for x a neighbour of t
        (an edge t -> x), ``1/q`` otherwise. Exact: rejection against v's table, then inversion
        over v's row after 256 rejections. A node with no edge of positive weight keeps the
        walk where it is. Walk i draws from its own random stream, so walks from the same
        start are independent and a generator's seed reproduces them.

        Parameters
        ----------
        start : Tensor
            ``[S]`` int64 or int32 start nodes.
        walk_length : int
            Steps (non-negative).
        p, q : float
            node2vec's return and in-out parameters (positive).
        validate : bool
            Raise for a start outside ``[0, N)`` (one read back on CUDA, skipped while
            capturing); otherwise its walk is all ``-1``.
        generator : torch.Generator, optional

        Returns
        -------
        Tensor
            int64 ``[S, walk_length + 1]``, the start first.

        Raises
        ------
        RuntimeError
            For a start outside ``[0, N)``, a negative walk_length, p or q not positive and
            finite, or tensors of the wrong dtype, shape or device.

        Examples
        --------
        >>> walks = g.random_walk(torch.arange(g.num_nodes), 80, p=4.0, q=0.5)
        """
        second = p != 1.0 or q != 1.0
        return torch.ops.wrs.csr_random_walk(self.rowptr, self.col, self.table, self.weight, start, walk_length,
                                             float(p), float(q), rows_sorted=self.rows_sorted() if second else None,
                                             validate=validate, generator=generator)

    def neighbor_sample(self, seeds: torch.Tensor, num_neighbors: Sequence[int], *, replace: bool = False,
                        generator: Optional[torch.Generator] = None):
        """Multi-hop sampling for GNN mini-batches, in pyg-lib's ``neighbor_sample`` format:
        :func:`neighbor_sample` on this table, reused across batches.

        Parameters
        ----------
        seeds, num_neighbors, replace, generator
            As :func:`neighbor_sample`.

        Returns
        -------
        (Tensor, Tensor, Tensor, Tensor, list of int, list of int)
            As :func:`neighbor_sample`.

        Raises
        ------
        RuntimeError
            For a seed outside ``[0, N)``.

        Examples
        --------
        >>> row, col, node, edge, nodes_per_hop, edges_per_hop = g.neighbor_sample(seeds, [15, 10, 5])
        """
        return _multi_hop(self, seeds, num_neighbors, replace, generator)

    def to(self, device) -> "CSRAliasTable":
        """The same tables on another device (copied, not rebuilt).

        Parameters
        ----------
        device : torch.device or str

        Returns
        -------
        CSRAliasTable

        Raises
        ------
        RuntimeError
            Where torch's ``Tensor.to`` does.

        Examples
        --------
        >>> g_cuda = g.to("cuda")
        """
        out = CSRAliasTable.__new__(CSRAliasTable)
        out.rowptr = self.rowptr.to(device)
        out.col = self.col.to(device)
        out.table = None if self.table is None else self.table.to(device)
        out.weight = None if self.weight is None else self.weight.to(device)
        out._rows_sorted = None
        return out

    def __repr__(self) -> str:
        kind = "weighted" if self.table is not None else "uniform"
        return f"CSRAliasTable(num_nodes={self.num_nodes}, num_edges={self.num_edges}, {kind}, device={self.device})"


_NONE = torch.iinfo(torch.int64).max


def _first_appearances(dst: torch.Tensor, local: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
    """The entries of dst not yet in `local` (-1 there), each once, in the order they first
    appear. `first` is scratch of N entries holding _NONE, and is left so."""
    position = torch.arange(dst.numel(), device=dst.device)
    fresh = local[dst] < 0
    first.scatter_reduce_(0, dst, torch.where(fresh, position, _NONE), "amin")
    new = dst[fresh & (first[dst] == position)]
    first[dst] = _NONE
    return new


def _multi_hop(graph: CSRAliasTable, seeds: torch.Tensor, num_neighbors: Sequence[int], replace: bool,
               generator: Optional[torch.Generator]):
    device = graph.device
    seeds = seeds.to(device=device, dtype=torch.int64)
    n = graph.num_nodes
    if seeds.numel():
        low, high = torch.aminmax(seeds)
        if int(low) < 0 or int(high) >= n:
            raise RuntimeError("neighbor_sample: a seed is outside [0, N), N = rowptr.numel() - 1")
    local = torch.full((n,), -1, dtype=torch.int64, device=device)  # global id -> position in `node`
    local[seeds] = torch.arange(seeds.numel(), device=device)
    first = torch.full((n,), _NONE, dtype=torch.int64, device=device)
    nodes: List[torch.Tensor] = [seeds]
    rows: List[torch.Tensor] = []
    cols: List[torch.Tensor] = []
    edges: List[torch.Tensor] = []
    num_sampled_nodes = [seeds.numel()]
    num_sampled_edges: List[int] = []
    frontier = seeds
    frontier_local = torch.arange(seeds.numel(), device=device)
    total = seeds.numel()
    for k in num_neighbors:
        if k < 0:  # every edge, as pyg-lib
            degree = graph.rowptr[frontier + 1] - graph.rowptr[frontier]
            counts = degree
            first_edge = torch.repeat_interleave(graph.rowptr[frontier] - torch.cumsum(degree, 0) + degree, degree)
            eid = first_edge + torch.arange(first_edge.numel(), device=device)
            dst = graph.col[eid].long()
        else:
            dst, eid, counts = graph.sample_neighbors(frontier, int(k), replace=replace, generator=generator)
        src = torch.repeat_interleave(frontier_local, counts, output_size=eid.numel())
        new = _first_appearances(dst, local, first)  # pyg-lib's order of new nodes
        local[new] = torch.arange(total, total + new.numel(), device=device)
        rows.append(src)
        cols.append(local[dst])
        edges.append(eid)
        nodes.append(new)
        num_sampled_nodes.append(new.numel())
        num_sampled_edges.append(eid.numel())
        frontier = new
        frontier_local = torch.arange(total, total + new.numel(), device=device)
        total += new.numel()
    empty = torch.empty(0, dtype=torch.int64, device=device)
    cat = lambda xs: torch.cat(xs) if xs else empty  # noqa: E731
    return cat(rows), cat(cols), cat(nodes), cat(edges), num_sampled_nodes, num_sampled_edges


def neighbor_sample(rowptr: torch.Tensor, col: torch.Tensor, seeds: torch.Tensor, num_neighbors: Sequence[int], *,
                    weight: Optional[torch.Tensor] = None, replace: bool = False,
                    generator: Optional[torch.Generator] = None):
    """Multi-hop weighted neighbour sampling, deduplicated and relabelled, in the output format
    of pyg-lib's ``neighbor_sample`` (``csc=False``, directed).

    Hop h samples ``num_neighbors[h]`` neighbours (``-1``: every edge) of each node first
    reached at hop h - 1 (the seeds at hop 0), with :meth:`CSRAliasTable.sample_neighbors`'s law.

    Parameters
    ----------
    rowptr, col : Tensor
        The CSR graph (as :class:`CSRAliasTable`).
    seeds : Tensor
        ``[S]`` node ids.
    num_neighbors : list of int
        Fanout per hop.
    weight : Tensor, optional
        ``[E]`` edge weights; ``None`` for uniform sampling.
    replace : bool
        With replacement, or without (default, as pyg-lib).
    generator : torch.Generator, optional

    Returns
    -------
    (Tensor, Tensor, Tensor, Tensor, list of int, list of int)
        ``row`` (local index of the node sampled from), ``col`` (local index of the sampled
        neighbour), ``node`` (global ids: the seeds, then each hop's new nodes in order of
        first appearance), ``edge`` (edge ids, positions in ``col``), ``num_sampled_nodes``
        (per hop, seeds first) and ``num_sampled_edges`` (per hop).

    Raises
    ------
    RuntimeError
        As :class:`CSRAliasTable`, and for a seed outside ``[0, N)``.

    Examples
    --------
    >>> row, col_, node, edge, nodes_per_hop, edges_per_hop = torch_wrs.graph.neighbor_sample(
    ...     rowptr, col, seeds, [15, 10, 5], weight=w)

    To sample many batches from one graph, build :class:`CSRAliasTable` once and call its
    :meth:`~CSRAliasTable.neighbor_sample`.
    """
    return _multi_hop(CSRAliasTable(rowptr, col, weight), seeds, num_neighbors, replace, generator)


def random_walk(rowptr: torch.Tensor, col: torch.Tensor, start: torch.Tensor, walk_length: int, *,
                weight: Optional[torch.Tensor] = None, p: float = 1.0, q: float = 1.0,
                generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Weighted (node2vec) random walks over a CSR graph: :meth:`CSRAliasTable.random_walk`
    on a table built for this call.

    Parameters
    ----------
    rowptr, col, weight
        The graph (as :class:`CSRAliasTable`).
    start, walk_length, p, q, generator
        As :meth:`CSRAliasTable.random_walk`.

    Returns
    -------
    Tensor
        int64 ``[len(start), walk_length + 1]``.

    Raises
    ------
    RuntimeError
        As :class:`CSRAliasTable` and :meth:`CSRAliasTable.random_walk`.

    Examples
    --------
    >>> walks = torch_wrs.graph.random_walk(rowptr, col, starts, 80, weight=w, p=4.0, q=0.5)
    """
    return CSRAliasTable(rowptr, col, weight).random_walk(start, walk_length, p=p, q=q, generator=generator)


__all__ = ["CSRAliasTable", "neighbor_sample", "random_walk"]
