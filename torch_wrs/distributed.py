"""Sampling from a distribution sharded over the ranks of a torch.distributed group.

Each rank holds the alias tables of its own contiguous range of categories (global order
is rank order); no rank ever holds more than its shard. A call to ``sample`` is a
collective: every rank draws the shard of each of its samples, the ranks exchange the
counts and then the drawn indices with ``all_to_all_single`` (NCCL on GPUs, gloo on CPUs),
in chunks, each sent while the next is drawn. An owner draws every asking rank's share of
a chunk in one launch (ordered: one i.i.d. sequence cut into the askers' segments;
unordered: one pass over a run of its table for all of them), and ordered calls end with
one pass that places the received draws and draws the rank's own positions
(docs/distributed.md, "How a call runs").

Law. Rank r's shard has total W_r (float64) of W. A sample falls in shard r with probability
W_r / W (to float64 rounding: an inverse CDF of one float64 uniform with ``ordered=True``,
exact conditional binomials with ``ordered=False``), then on item i of the shard with the
shard's alias-table law (within 2^-33 / N_r of w_i / W_r, zero weights never drawn).

Randomness. Each call takes the rank's generator (``generator=`` or torch's default for the
device) and derives from its state and the rank a fresh stream for that rank, so ranks
seeded alike still draw independently, and a fixed seed per rank and world size gives the
same draws. With world size 1 nothing is derived: the draws equal ``AliasTable.sample``'s.
"""
import operator
import os
from typing import List, NamedTuple, Optional, Tuple

import torch
import torch.distributed as dist

from .alias import alias_sample, alias_table
from .multinomial import multinomial_counts

# Longer shards keep several tables (a table row holds at most 2^31 categories): pieces of
# 2^29 keep the build's scratch (about 36 bytes an item) near 18 GiB, so a GPU holds more
# table. One piece: draws travel as int32 indices within the shard.
_MAX_PIECE = 1 << 29
# A replicated table is held as AliasTable holds one: a table up to 2^31 categories (the
# most a table row holds), so that its draws cost what one GPU's do.
_MAX_REPLICA_PIECE = 1 << 31
_MASK64 = (1 << 64) - 1

# Problems found on one rank and reported to all (codes gathered before any exchange).
_PROBLEMS = {
    1: "local_weights must be a 1-D tensor",
    2: "local_weights must be a floating-point tensor",
    3: "local_weights contains a negative entry",
    4: "local_weights contains NaN",
    5: "local_weights contains inf",
    6: "local_weights is on a different kind of device than on rank 0",
    7: "local_weights has a different dtype than on rank 0",
    8: "placement must be \"auto\", \"replicate\" or \"shard\"",
    9: "placement or memory_share differs from rank 0's",
    10: "memory_share must be a number in [0, 1]",
}
_PLACEMENTS = ("auto", "replicate", "shard")


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _rank_generators(generator: Optional[torch.Generator], device: torch.device,
                     rank: int) -> Tuple[torch.Generator, torch.Generator]:
    """Generators for this call on this rank (one on `device`, one on the CPU for the small
    draws made on the host), keyed by the given one's state and the rank; the given one
    advances, so the next call differs. Host-side only (no device sync)."""
    if generator is None:
        generator = torch.cuda.default_generators[device.index or 0] if device.type == "cuda" else torch.default_generator
    if generator.device.type == "cuda":
        offset = generator.get_offset()
        state = _splitmix64(generator.initial_seed() ^ _splitmix64(offset))
        generator.set_offset(offset + 4)
    else:
        state = int(torch.randint(0, 1 << 62, (), generator=generator))
    seed = _splitmix64(state ^ _splitmix64(rank + 1)) & ((1 << 63) - 1)
    return torch.Generator(device=device).manual_seed(seed), torch.Generator().manual_seed(seed ^ 1)


class ShardedAliasTable:
    """Alias tables over categories sharded across the ranks of ``group``.

    Every rank passes the weights of its own contiguous range of categories (1-D, any float
    dtype, any length including 0 and more than 2^31); global category order is rank order.
    Building is a collective: it gathers each shard's size, dtype, float64 total and value
    checks, and raises the same ``RuntimeError`` on every rank if any rank's input is bad.

    Placement. A table that fits is replicated: the weights are all-gathered once and every
    rank builds the whole table, so that ``sample`` draws locally with no exchange (and no
    collective). One that does not fit stays sharded: each rank holds its shard's tables and
    ``sample`` exchanges draws. ``sample_owned`` and ``probs_of`` work on the shards either way.

    Parameters
    ----------
    local_weights : Tensor
        This rank's categories' weights: 1-D, non-negative, any float dtype and length.
    group : ProcessGroup, optional
        The ranks that share the table (default: the world). NCCL on GPUs, gloo on CPUs.
    placement : str
        ``"replicate"``, ``"shard"``, or ``"auto"``: replicate where the whole table (8 bytes
        a category, plus the gathered weights and the build's scratch) fits in
        ``memory_share`` of every rank's free memory (its GPU's, or the host's), else shard.
        The choice is ``table.placement``, the same on every rank.
    memory_share : float
        The share of free memory ``"auto"`` may fill, in [0, 1].

    Raises
    ------
    RuntimeError
        On every rank, if any rank's weights are not a 1-D float tensor, hold negative, NaN
        or inf values, or the global total is zero, or the ranks' devices differ, or the
        ranks' placement or memory_share differ or are not valid.

    Examples
    --------
    >>> table = ShardedAliasTable(my_weights)          # on every rank
    >>> table.placement                                 # "replicate" where the whole table fits
    >>> idx = table.sample(1 << 20)                     # global int64 indices, i.i.d. from w / W
    >>> p = table.probs_of(idx[:10])                    # their probabilities
    """

    def __init__(self, local_weights: torch.Tensor, *, group: Optional[dist.ProcessGroup] = None,
                 placement: str = "auto", memory_share: float = 0.5):
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.device = local_weights.device if isinstance(local_weights, torch.Tensor) else torch.device("cpu")
        self._comm = self.device if dist.get_backend(group) == "nccl" else torch.device("cpu")

        problem = self._local_problem(local_weights)
        if problem == 0 and placement not in _PLACEMENTS:
            problem = 8
        share_ok = isinstance(memory_share, (int, float)) and not isinstance(memory_share, bool)
        if problem == 0 and not (share_ok and 0 <= memory_share <= 1):
            problem = 10
        numel = local_weights.numel() if problem not in (1, 2) else 0
        total = float(local_weights.sum(dtype=torch.float64)) if problem == 0 else 0.0
        dtype_code = _DTYPES.index(local_weights.dtype) if problem not in (1, 2) else -1
        policy = float(_PLACEMENTS.index(placement)) if placement in _PLACEMENTS else -1.0
        share = float(memory_share) if share_ok else -1.0
        mine = torch.tensor([[float(problem), float(numel), total, float(dtype_code),
                              float(self.device.type == "cuda"), policy, share, float(_free_bytes(self.device))]],
                            dtype=torch.float64, device=self._comm)
        every = [torch.empty_like(mine) for _ in range(self.world_size)]
        dist.all_gather(every, mine, group=group)
        every = torch.cat(every).cpu().tolist()
        for r, (code, _, _, dtype_r, cuda_r, policy_r, share_r, _) in enumerate(every):
            if code == 0 and cuda_r != every[0][4]:
                code = 6
            elif code == 0 and every[0][0] == 0 and dtype_r != every[0][3]:
                code = 7
            elif code == 0 and every[0][0] == 0 and (policy_r, share_r) != (every[0][5], every[0][6]):
                code = 9
            if code:
                raise RuntimeError(f"ShardedAliasTable: on rank {r}: {_PROBLEMS[int(code)]}")
        self.sizes = [int(row[1]) for row in every]
        self.totals = [row[2] for row in every]
        self.total_weight = sum(self.totals)
        if not (0 < self.total_weight < float("inf")):
            raise RuntimeError("ShardedAliasTable: the weights of all ranks sum to "
                               f"{self.total_weight}; they must have a positive finite sum")
        self.offsets = [0]
        for n in self.sizes:
            self.offsets.append(self.offsets[-1] + n)
        self.num_categories = self.offsets[-1]

        # This rank's shard: one alias table per piece of at most _MAX_PIECE categories.
        self.weights = local_weights  # kept for probs_of (a reference, not a copy)
        self.first = self.offsets[self.rank]
        pieces = local_weights.split(_MAX_PIECE) if local_weights.numel() else ()
        self.piece_starts = [self.first + i * _MAX_PIECE for i in range(len(pieces))]
        self.piece_totals = torch.stack([p.sum(dtype=torch.float64) for p in pieces]) if pieces else None
        self.tables = [alias_table(p, validate=False) for p in pieces]
        self._shard_totals = torch.tensor(self.totals, dtype=torch.float64, device=self.device)
        # Every shard one table: draws travel as int32 indices within their shard.
        self._compact = max(self.sizes) <= _MAX_PIECE
        self._cdf = _cdf(self._shard_totals)
        self._offsets = torch.tensor(self.offsets[:-1], dtype=torch.int64, device=self.device)
        # Unordered calls draw and exchange each shard in runs of buckets, one after another:
        # _CHUNKS runs of a one-table shard, or the pieces of a longer one (each cut alike
        # where there are fewer than _CHUNKS). Every rank knows every run's weight.
        pieces = self._every_piece(group)
        most = max(len(p) for p, _ in pieces)
        self._runs, self._run_bases, self._run_weights = self._plan_runs(pieces, -(-_CHUNKS // most))
        self._whole_runs = self._plan_runs(pieces, 1)  # one run a piece, for calls too small to chunk

        # Placement: the whole table on every rank where it fits (chosen alike on every rank).
        free = min(row[7] for row in every) * memory_share
        fits = replicated_bytes(self.num_categories, local_weights.element_size(), self.world_size) <= free
        self.placement = "replicate" if placement == "replicate" or (placement == "auto" and fits) else "shard"
        self.full_tables, self.full_starts, self.full_totals = self.tables, self.piece_starts, self.piece_totals
        if self.placement == "replicate" and self.world_size > 1:
            everything = self._gather_weights(local_weights)
            full = everything.split(_MAX_REPLICA_PIECE)
            self.full_starts = [i * _MAX_REPLICA_PIECE for i in range(len(full))]
            self.full_totals = torch.stack([p.sum(dtype=torch.float64) for p in full])
            self.full_tables = [alias_table(p, validate=False) for p in full]
            del everything, full

    @staticmethod
    def _local_problem(w) -> int:
        if not isinstance(w, torch.Tensor) or w.dim() != 1:
            return 1
        if not w.is_floating_point():
            return 2
        if w.numel() == 0:
            return 0
        lo, hi = torch.aminmax(w)  # one pass, no mask the size of the shard; NaN propagates
        lo, hi = float(lo), float(hi)
        return 4 if lo != lo else 3 if lo < 0 else 5 if hi == float("inf") else 0

    def _every_piece(self, group):
        """Every shard's pieces as (sizes, float64 totals), alike on every rank: one more
        collective at build time where some shard has several pieces."""
        sizes = [[min(_MAX_PIECE, n - i) for i in range(0, n, _MAX_PIECE)] for n in self.sizes]
        most = max(len(p) for p in sizes)
        if most <= 1:
            return [(p, [t] if p else []) for p, t in zip(sizes, self.totals)]
        mine = torch.zeros(most, dtype=torch.float64)
        if self.piece_totals is not None:
            mine[:self.piece_totals.numel()] = self.piece_totals.cpu()
        every = [torch.empty_like(mine, device=self._comm) for _ in range(self.world_size)]
        dist.all_gather(every, mine.to(self._comm), group=group)
        return [(p, e.cpu()[:len(p)].tolist()) for p, e in zip(sizes, every)]

    def _plan_runs(self, pieces, per_piece: int):
        """Each shard's pieces cut into ``per_piece`` runs of buckets, padded with empty runs
        to the same count R for every shard: this rank's runs (piece, begin, end), each run's
        first global index [R][P], and the runs' weights (the piece's total x the run's share
        of its buckets) as float64 [P * R], shard-major, alike on every rank."""
        count = max(len(p) for p, _ in pieces) * per_piece
        runs, bases, weights = [], [[0] * self.world_size for _ in range(count)], []
        for r, (sizes, totals) in enumerate(pieces):
            shard = []
            for k, (n, w) in enumerate(zip(sizes, totals)):
                cuts = [j * n // per_piece for j in range(per_piece + 1)]
                shard += [(k, cuts[j], cuts[j + 1], w * (cuts[j + 1] - cuts[j]) / n) for j in range(per_piece)]
            shard += [(-1, 0, 0, 0.0)] * (count - len(shard))
            for j, (k, _, _, w) in enumerate(shard):
                bases[j][r] = self.offsets[r] + max(k, 0) * _MAX_PIECE
                weights.append(w)
            if r == self.rank:
                runs = [(k, begin, end) for k, begin, end, _ in shard]
        return runs, bases, torch.tensor(weights, dtype=torch.float64)

    def shard_range(self, rank: int) -> Tuple[int, int]:
        """The global categories ``[start, end)`` that ``rank`` holds.

        Parameters
        ----------
        rank : int
            In ``[0, world_size)``.

        Returns
        -------
        (int, int)

        Raises
        ------
        RuntimeError
            For a rank out of range.

        Examples
        --------
        >>> start, end = table.shard_range(table.rank)
        """
        if not 0 <= rank < self.world_size:
            raise RuntimeError(f"ShardedAliasTable.shard_range: rank must be in [0, {self.world_size}), got {rank}")
        return self.offsets[rank], self.offsets[rank + 1]

    # -- sampling --
    def sample(self, num_samples: int, *, ordered: bool = True,
               generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """This rank's draws, i.i.d. from the global law w / W. A collective: every rank calls
        it, each with its own ``num_samples``.

        Parameters
        ----------
        num_samples : int
            Draws for this rank, 0 allowed.
        ordered : bool
            ``True``: i.i.d. order; ``False``: grouped by shard (the same multiset law, cheaper).
        generator : torch.Generator, optional
            Ranks seeded alike still draw independently (a per-rank stream is derived).

        Returns
        -------
        Tensor
            int64 ``[num_samples]`` global indices on this rank's device.

        Raises
        ------
        RuntimeError
            On every rank, if any rank's ``num_samples`` is not a non-negative int (with
            ``placement == "replicate"`` the call is local, so on the rank that passed it).

        Examples
        --------
        >>> negatives = table.sample(1 << 20, ordered=False)
        """
        num_samples, bad = _count(num_samples)
        if self.world_size == 1 or self.placement == "replicate":  # local draws: no collective
            if bad:
                raise RuntimeError(f"ShardedAliasTable.sample: num_samples must be a non-negative int, got {num_samples!r}")
            if self.world_size == 1:
                return self._draw_local(num_samples, generator, ordered=ordered)
            g, _ = _rank_generators(generator, self.device, self.rank)
            return _draw(self.full_tables, self.full_starts, self.full_totals, num_samples, g, ordered, self.device)
        n = 0 if bad else num_samples
        problem = f"num_samples must be a non-negative int, got {num_samples!r}"
        g, g_host = _rank_generators(generator, self.device, self.rank)
        if self.world_size > _MAX_FUSED_RANKS or (ordered and not self._compact):
            return self._sample_pieces(n, bad, problem, ordered, g, g_host)
        if ordered:
            return self._sample_ordered(n, bad, problem, g)
        return self._sample_unordered(n, bad, problem, g, g_host)

    def _sample_ordered(self, n: int, bad: bool, problem: str, g) -> torch.Tensor:
        """Every shard one table. Each position's shard is labelled on the device; the
        labels' block counts, summed over _CHUNKS chunks of positions, are what this rank
        asks of each shard, chunk by chunk. Each rank draws what the others asked of it, a
        chunk at a time (one i.i.d. sequence cut into the askers' segments, as int32 within
        the shard), each chunk exchanged while the next is drawn; then one pass places the
        received draws at their positions and draws this shard's own positions from its
        table (_ordered_fill)."""
        P, me = self.world_size, self.rank
        labels, block_counts = torch.ops.wrs._ordered_labels(self._cdf, n, generator=g)
        blocks = block_counts.shape[0]
        chunk_of_block = torch.arange(blocks, device=self.device) * _CHUNKS // max(blocks, 1)
        asks = torch.zeros(_CHUNKS, P, dtype=torch.int64, device=self.device).index_add_(0, chunk_of_block, block_counts)
        if bad:
            asks.fill_(-1)
        ask = torch.tensor(self._exchange(asks.view(-1), "sample", problem)).view(P, _CHUNKS, P)  # asker, chunk, shard
        if _largest_remote(ask.sum(1)) < _CHUNK_FROM:
            ask = ask.sum(1, keepdim=True)  # one chunk
        sends = ask[:, :, me].t().clone()  # [chunk, asker]: what each rank asks of this shard
        receives = ask[me].clone()  # [chunk, shard]: what this rank asks of each shard
        sends[:, me] = 0
        receives[:, me] = 0
        send_lists, receive_lists = sends.tolist(), receives.tolist()
        received = torch.empty(int(receives.sum()), dtype=torch.int32, device=self.device)
        pending, at = [], 0
        for to_send, to_receive in zip(send_lists, receive_lists):
            send = self._draw_local(sum(to_send), g, ordered=True, local=True)
            part = received[at:at + sum(to_receive)]
            pending.append(self._all_to_all(part, send, to_receive, to_send, async_op=True))
            at += sum(to_receive)
        # Where chunk j's draws of shard p start in `received`, less shard p's draws in the
        # chunks before j: a block's start is that plus the block counts before it.
        flat = receives.view(-1)
        shift = (flat.cumsum(0) - flat).view_as(receives) - (receives.cumsum(0) - receives)
        shift = shift.expand(_CHUNKS, P) if shift.shape[0] == 1 else shift
        for work in pending:
            if work is not None:
                work.wait()
        counts = block_counts.clone()
        counts[:, me] = 0
        per_part = counts.t().contiguous()  # scans along the last dimension (see _interleave)
        start = (per_part.cumsum(1) - per_part).t() + shift.to(self.device)[chunk_of_block]
        table = self.tables[0] if self.tables else torch.zeros(0, dtype=torch.int64, device=self.device)
        return torch.ops.wrs._ordered_fill(received, labels, start, self._offsets, table,
                                           me if self.tables else -1, generator=g)

    def _sample_unordered(self, n: int, bad: bool, problem: str, g, g_host) -> torch.Tensor:
        """This rank's draws fall in shard r's run k of buckets (an eighth of a one-table
        shard, or a piece of a longer one) as exact multinomial counts over the runs'
        weights; each owner draws, run by run, every asker's count (one pass over the run
        for all of them, or, where they are sparse in a whole piece, one i.i.d. sequence
        cut into their segments), and each run's draws travel as int32 within their piece
        while the next run is drawn."""
        P, me = self.world_size, self.rank
        counts = multinomial_counts(self._run_weights, n, generator=g_host)
        if bad:
            counts = torch.full_like(counts, -1)
        ask = torch.tensor(self._exchange(counts, "sample", problem)).view(P, P, -1)  # asker, shard, run
        runs, bases = self._runs, self._run_bases
        if _largest_remote(ask.sum(2)) < _CHUNK_FROM and len(self._whole_runs[0]) < len(runs):
            runs, bases = self._whole_runs[:2]  # too few draws to chunk: a run a piece
            ask = ask.view(P, P, len(runs), -1).sum(3)
        asked = ask[:, me, :].t().tolist()  # [run][asker]: what each rank asks of this shard
        mine = ask[me].t()  # [run, shard]: what this rank asks of each shard
        # Shard r's draws of run j go to out[at[j][r]:], grouped by shard, then by run.
        flat = mine.t().reshape(-1)
        at = (flat.cumsum(0) - flat).view(P, -1).t().tolist()
        mine = mine.tolist()
        out = torch.empty(n, dtype=torch.int64, device=self.device)
        pending = []
        for j, (piece, begin, end) in enumerate(runs):
            # The askers' segments in rank order, this rank's own last (kept here).
            segments = [0 if a == me else c for a, c in enumerate(asked[j])] + [asked[j][me]]
            drawn = self._draw_segments(piece, begin, end, segments, g)
            to_receive = [0 if r == me else c for r, c in enumerate(mine[j])]
            received = torch.empty(sum(to_receive), dtype=torch.int32, device=self.device)
            work = self._all_to_all(received, drawn[:drawn.numel() - asked[j][me]], to_receive, segments[:P],
                                    async_op=True)
            if asked[j][me]:
                own = drawn[drawn.numel() - asked[j][me]:]
                _add_base(own, bases[j][me], out[at[j][me]:at[j][me] + own.numel()])
            pending.append((work, received, to_receive, at[j], bases[j]))
            if len(pending) > 1:  # the run before, placed once this one is on its way
                self._place_runs(out, *pending.pop(0))
        for item in pending:
            self._place_runs(out, *item)
        return out

    def _draw_segments(self, piece: int, begin: int, end: int, segments: List[int], g) -> torch.Tensor:
        """Independent multisets of segments[a] draws from buckets [begin, end) of this
        shard's piece, int32 within the piece, concatenated (the method: _segment_method)."""
        total = sum(segments)
        if not total or piece < 0:
            return torch.zeros(0, dtype=torch.int32, device=self.device)
        table = self.tables[piece]
        if _segment_method(total, begin, end, table.numel()) == "sequence":
            return alias_sample(table, total, ordered=True, dtype=torch.int32, generator=g)
        return torch.ops.wrs._alias_sample_segments(table, segments, begin, end, dtype=torch.int32, generator=g)

    def _place_runs(self, out, work, received, to_receive, at, bases):
        """Shard r's draws of a run, int32 within its piece, into out[at[r]:] as global
        indices (bases[r] is the piece's first)."""
        if work is not None:
            work.wait()
        got = 0
        for r, c in enumerate(to_receive):
            if c:
                _add_base(received[got:got + c], bases[r], out[at[r]:at[r] + c])
                got += c

    def _sample_pieces(self, n: int, bad: bool, problem: str, ordered: bool, g, g_host) -> torch.Tensor:
        """Shards of several tables (past _MAX_PIECE categories), or more ranks than a byte
        labels: draws travel as int64 global indices, grouped by shard and placed by
        _interleave."""
        if ordered:  # each output position's shard, i.i.d., on the device
            counts, labels = _split(self._shard_totals, n, g, ordered=True)
        else:  # the counts alone: world_size binomials, on the host
            counts, labels = multinomial_counts(self._shard_totals.cpu(), n, generator=g_host), None
        if bad:
            counts = torch.full_like(counts, -1)
        matrix = self._exchange(counts, "sample", problem)
        me = self.rank
        mine, asked = matrix[me], [row[me] for row in matrix]
        out = torch.empty(n, dtype=torch.int64, device=self.device)
        group_start = [sum(mine[:r]) for r in range(self.world_size)]
        # What the other ranks asked of this shard goes out while this rank draws its own
        # share, in one piece.
        send = self._draw_apart([0 if r == me else c for r, c in enumerate(asked)], g, ordered, local=False)
        to_receive = [0 if r == me else c for r, c in enumerate(mine)]
        received = torch.empty(sum(to_receive), dtype=torch.int64, device=self.device)
        work = self._all_to_all(received, send, to_receive, [0 if r == me else c for r, c in enumerate(asked)],
                                async_op=True)
        own = self._draw_local(mine[me], g, ordered=ordered)
        out[group_start[me]:group_start[me] + own.numel()] = own
        if work is not None:
            work.wait()
        got = 0
        for r, c in enumerate(to_receive):
            if c:
                out[group_start[r]:group_start[r] + c] = received[got:got + c]
                got += c
        return out if labels is None else _interleave(out, labels, self.world_size)

    def sample_owned(self, num_samples: int, *,
                     generator: Optional[torch.Generator] = None) -> Tuple[torch.Tensor, List[int]]:
        """The draws that fall in this rank's shard, of every rank's ``num_samples`` i.i.d.
        draws from the global law w / W: the owner draws them, and only counts cross the
        network (8 bytes for each pair of ranks). For sharded models, whose lookups of the drawn
        rows then happen where the rows live. A collective: every rank calls it.

        Each rank's draws fall in shard s as exact multinomial counts over the shards'
        totals; the owner of s draws each asking rank's count apart, i.i.d. from its own
        weights. So, for each asking rank, the union over owners of its segments is a
        multiset of ``num_samples`` i.i.d. draws from w / W, as ``sample(ordered=False)``
        would return on that rank.

        Parameters
        ----------
        num_samples : int
            Draws this rank asks for, 0 allowed.
        generator : torch.Generator, optional
            Ranks seeded alike still draw independently (a per-rank stream is derived).

        Returns
        -------
        (Tensor, list of int)
            int64 global indices, all in this rank's shard, on this rank's device: rank 0's
            segment first, then rank 1's, and so on; and each segment's length, per asking rank.

        Raises
        ------
        RuntimeError
            On every rank, if any rank's ``num_samples`` is not a non-negative int.

        Examples
        --------
        >>> rows, per_rank = table.sample_owned(1 << 20)   # rows of this rank's embedding shard
        """
        num_samples, bad = _count(num_samples)
        if self.world_size == 1:
            if bad:
                raise RuntimeError(
                    f"ShardedAliasTable.sample_owned: num_samples must be a non-negative int, got {num_samples!r}")
            return self._draw_local(num_samples, generator, ordered=False), [num_samples]
        g, g_host = _rank_generators(generator, self.device, self.rank)
        counts = multinomial_counts(self._shard_totals.cpu(), 0 if bad else num_samples, generator=g_host)
        if bad:
            counts = torch.full_like(counts, -1)
        matrix = self._exchange(counts, "sample_owned", f"num_samples must be a non-negative int, got {num_samples!r}")
        asked = [row[self.rank] for row in matrix]
        if self._compact and self.tables and sum(asked):  # one pass over the table for every asker
            out = torch.ops.wrs._alias_sample_segments(self.tables[0], asked, generator=g).add_(self.first)
        else:
            out = self._draw_apart(asked, g, local=False)
        return out, asked

    def _draw_apart(self, counts: List[int], generator, ordered: bool = False,
                    local: Optional[bool] = None) -> torch.Tensor:
        """Each asker's counts[a] draws from this shard, independent multisets (i.i.d.
        sequences where ``ordered``), asker 0's first (int32 within the shard where ``local``,
        by default where it is one table)."""
        local = self._compact if local is None else local
        parts = [self._draw_local(c, generator, ordered=ordered, local=local) for c in counts]
        nonempty = [p for p in parts if p.numel()]
        return nonempty[0] if len(nonempty) == 1 else torch.cat(parts)  # no copy of a lone part

    def _draw_local(self, count: int, generator, ordered: bool, local: bool = False) -> torch.Tensor:
        """``count`` i.i.d. global int64 indices from this rank's shard (in i.i.d. order when
        ``ordered``), or with ``local`` (one table) int32 indices within the shard."""
        if local and count and self.tables:
            return alias_sample(self.tables[0], count, ordered=ordered, dtype=torch.int32, generator=generator)
        draws = _draw(self.tables, self.piece_starts, self.piece_totals, count, generator, ordered, self.device)
        return draws.int() if local else draws

    def _gather_weights(self, local_weights: torch.Tensor) -> torch.Tensor:
        """Every rank's weights, in rank order, on this rank's device (for replication)."""
        longest = max(self.sizes)
        padded = torch.zeros(longest, dtype=local_weights.dtype, device=self._comm)
        padded[:local_weights.numel()] = local_weights
        every = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(every, padded, group=self.group)
        return torch.cat([e[:n] for e, n in zip(every, self.sizes)]).to(self.device)

    # -- lookups --
    def probs_of(self, indices: torch.Tensor) -> torch.Tensor:
        """The probabilities w_i / W of global ``indices``, looked up on the ranks that own them.
        A collective.

        Parameters
        ----------
        indices : Tensor
            int64 or int32, any shape, global category indices.

        Returns
        -------
        Tensor
            float64, the shape of ``indices``.

        Raises
        ------
        RuntimeError
            On every rank, if any rank's indices are not integers or are out of range.

        Examples
        --------
        >>> p = table.probs_of(torch.tensor([0, 5, 17]))
        """
        problem = None
        if not isinstance(indices, torch.Tensor) or indices.dtype not in (torch.int64, torch.int32):
            problem = "indices must be an int64 or int32 tensor"
            flat = torch.zeros(0, dtype=torch.int64, device=self.device)
        else:
            flat = indices.reshape(-1).to(device=self.device, dtype=torch.int64)
            if flat.numel() and not bool(((flat >= 0) & (flat < self.num_categories)).all()):
                problem = f"indices must be in [0, {self.num_categories})"
                flat = flat[:0]
        ends = torch.tensor(self.offsets[1:], dtype=torch.int64, device=self.device)
        owner = torch.searchsorted(ends, flat, right=True)
        order = torch.sort(owner, stable=True).indices
        counts = torch.bincount(owner, minlength=self.world_size)
        if problem:
            counts = torch.full_like(counts, -1)
        matrix = self._exchange(counts, "probs_of", problem or "")
        mine, asked = matrix[self.rank], [row[self.rank] for row in matrix]
        wanted = torch.empty(sum(asked), dtype=torch.int64, device=self.device)
        self._all_to_all(wanted, flat[order], asked, mine)
        local = self.weights[wanted - self.first].double() / self.total_weight
        answers = torch.empty(flat.numel(), dtype=torch.float64, device=self.device)
        self._all_to_all(answers, local, mine, asked)
        result = torch.empty_like(answers).index_copy_(0, order, answers)
        return result.view(indices.shape)

    # -- collectives --
    def _exchange(self, counts: torch.Tensor, op: str, problem: str) -> List[List[int]]:
        """Every rank's counts (counts[d]: what it sends to rank d), gathered on every rank
        as a host matrix: the one sync the uneven exchange needs, and every rank sees the
        same sizes. A rank with bad input sends -1s, and every rank raises."""
        every = [torch.empty_like(counts, device=self._comm) for _ in range(self.world_size)]
        dist.all_gather(every, counts.to(self._comm), group=self.group)
        matrix = torch.stack(every).tolist()
        bad = [r for r, row in enumerate(matrix) if min(row) < 0]
        if bad:
            where = "on this rank" if bad[0] == self.rank else f"on rank {bad[0]}"
            raise RuntimeError(f"ShardedAliasTable.{op}: {problem if bad[0] == self.rank else 'bad input'} ({where})")
        return matrix

    def _all_to_all(self, output: torch.Tensor, input: torch.Tensor, output_splits, input_splits,
                    async_op: bool = False):
        """all_to_all_single; with async_op (where no staging is needed) returns its work."""
        if self._comm == output.device:
            return dist.all_to_all_single(output, input, output_splits, input_splits, group=self.group,
                                          async_op=async_op)
        staged = torch.empty(output.shape, dtype=output.dtype, device=self._comm)
        dist.all_to_all_single(staged, input.to(self._comm), output_splits, input_splits, group=self.group)
        output.copy_(staged)
        return None

    def __repr__(self) -> str:
        return (f"ShardedAliasTable(num_categories={self.num_categories}, rank={self.rank}, "
                f"world_size={self.world_size}, shard={self.shard_range(self.rank)}, placement={self.placement}, "
                f"device={self.device})")


def replicated_bytes(categories: int, itemsize: int, world_size: int) -> int:
    """Memory a replicated table takes on each rank: 8 bytes a category for the table, the
    gathered weights twice (padded per rank, then joined), and the build's scratch of about
    36 bytes an item of the largest piece."""
    return categories * (8 + 2 * itemsize) + min(categories, _MAX_REPLICA_PIECE) * 36


def _free_bytes(device: torch.device) -> int:
    """Free memory where the table would live: the GPU's, or the host's available pages."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def _draw(tables, starts, totals, count: int, generator, ordered: bool, device) -> torch.Tensor:
    """``count`` i.i.d. global int64 indices from the pieces ``tables`` (piece i's first
    category ``starts[i]``, its float64 total ``totals[i]``), in i.i.d. order when ``ordered``."""
    if count == 0 or not tables:
        return torch.zeros(0, dtype=torch.int64, device=device)
    if len(tables) == 1:
        return _shifted(alias_sample(tables[0], count, ordered=ordered, generator=generator), starts[0])
    per_piece, labels = _split(totals, count, generator, ordered)
    draws = torch.cat([_shifted(alias_sample(t, c, generator=generator), start)
                       for t, c, start in zip(tables, per_piece.tolist(), starts) if c])
    return draws if labels is None else _interleave(draws, labels, len(tables))


# Worlds up to this many ranks take the chunked calls with one pass per owner: ordered
# labels are a byte (_ordered_labels), and unordered owners draw for each rank and
# themselves (_alias_sample_segments: 256 segments at most). Larger worlds take
# _sample_pieces.
_MAX_FUSED_RANKS = 255

# Draws travel in _CHUNKS chunks (each exchanged while the next is drawn) once the most
# that one rank asks of another reaches _CHUNK_FROM; below that, in one
# (docs/distributed.md, "How a call runs").
_CHUNKS = 8
_CHUNK_FROM = 1 << 22


def _shifted(draws: torch.Tensor, start: int) -> torch.Tensor:
    """draws + start in place, skipped where start is 0 (a pass over the draws: a tenth of
    a replicated call's time)."""
    return draws.add_(start) if start else draws


def _add_base(local: torch.Tensor, base: int, out: torch.Tensor) -> None:
    """out = local + base as int64 global indices, from int32 indices within a piece: one
    pass where the sum stays within int32 (torch adds an int32 tensor and an int in
    int32), else a copy and an add."""
    if base + _MAX_PIECE < 2**31:
        torch.add(local, base, out=out)
    else:
        out.copy_(local).add_(base)


def _segment_method(total: int, begin: int, end: int, buckets: int) -> str:
    """How an owner draws ``total`` draws of a run for its askers: ``"sequence"`` (one
    i.i.d. sequence of random table reads, cut into the askers' segments) where the run is a
    whole table and the draws are fewer than an eighth of its buckets, as alias_sample's
    own choice of its baseline; else ``"segments"`` (one pass over the run, staging each
    section once for every asker)."""
    whole = begin == 0 and end == buckets
    return "sequence" if whole and total * 8 < buckets else "segments"


def _largest_remote(asks: torch.Tensor) -> int:
    """The most that one rank asks of another's shard, of asks[asker, shard]."""
    remote = asks.clone()
    remote.fill_diagonal_(0)
    return int(remote.max())


def _cdf(totals: torch.Tensor) -> torch.Tensor:
    """The float64 CDF over parts of weights `totals`, exactly 1 from the last part of
    positive weight on, so that no position is labelled with a part of zero weight."""
    cdf = torch.cumsum(totals, 0) / totals.sum()
    positive = torch.nonzero(totals > 0)
    last = int(positive[-1]) if positive.numel() else totals.numel() - 1
    cdf[last:] = 1.0
    return cdf


def _count(num_samples):
    """(num_samples as an int, whether it is bad): any integer type (int, numpy or 0-d
    integer tensors) that is non-negative, never bool."""
    try:
        bad = isinstance(num_samples, bool) or operator.index(num_samples) < 0
        return operator.index(num_samples), bad
    except TypeError:
        return num_samples, True


# Devices whose ordered draws take the fused labels and placement (csrc/distributed/:
# two passes, a byte a label).
_FUSED_PLACEMENT = ("cpu", "cuda")


class _Labels(NamedTuple):
    """Each position's part (uint8), and each block of 4,096 positions' counts per part."""
    labels: torch.Tensor
    block_counts: torch.Tensor


def _split(totals: torch.Tensor, count: int, generator, ordered: bool):
    """How many of `count` draws fall in each part (weights `totals`, float64), and with
    `ordered` each draw's part (i.i.d.: the inverse CDF of a float64 uniform), else None
    (the counts alone: exact conditional binomials)."""
    if not ordered:
        return multinomial_counts(totals, count, generator=generator), None
    cdf = _cdf(totals)
    if totals.device.type in _FUSED_PLACEMENT and totals.numel() <= 256:
        labels, block_counts = torch.ops.wrs._ordered_labels(cdf, count, generator=generator)
        return block_counts.sum(0), _Labels(labels, block_counts)
    u = torch.rand(count, dtype=torch.float64, device=totals.device, generator=generator)
    labels = torch.searchsorted(cdf, u, right=True).clamp_(max=totals.numel() - 1)
    if totals.numel() > 8:
        return torch.bincount(labels, minlength=totals.numel()), labels
    # Few parts: one sum each (bincount's atomics on a few bins serialise).
    return torch.stack([(labels == p).sum() for p in range(totals.numel())]), labels


def _interleave(grouped: torch.Tensor, labels, parts: int) -> torch.Tensor:
    """Draws grouped by part (each group i.i.d.) placed at the positions of their part's
    labels, in order: an i.i.d. sequence. Fused labels (_Labels): one pass, each block
    starting each part where the blocks before it left off. Few parts: position t takes
    draw start[label] + (how many earlier positions share its label), one running count
    per part (O(parts n), cheaper than a sort there); more parts: a stable sort."""
    if isinstance(labels, _Labels):
        # Scans along the last dimension: torch scans an outer dimension of few columns
        # serially (a [65,536, 2] cumsum over dim 0 took milliseconds on a GPU).
        per_part = labels.block_counts.t().contiguous()  # [parts, blocks]
        totals = per_part.sum(1)
        before = per_part.cumsum(1) - per_part + (totals.cumsum(0) - totals)[:, None]
        return torch.ops.wrs._ordered_place(grouped, labels.labels, before.t().contiguous())
    if parts > 8:
        small = torch.int16 if parts <= (1 << 15) else torch.int32
        order = torch.sort(labels.to(small), stable=True).indices
        return torch.empty_like(grouped).index_copy_(0, order, grouped)
    source = torch.empty_like(labels)
    start = 0
    for part in range(parts):
        mine = labels == part
        running = torch.cumsum(mine, 0)
        source = torch.where(mine, running + (start - 1), source)
        start = start + running[-1] if labels.numel() else start
    return grouped[source]


_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
