"""torch_wrs.distributed.ShardedAliasTable and data-parallel LDA over torch.distributed.

Each world runs once, in spawned processes (gloo on CPUs; NCCL with one GPU per rank when
the machine has enough GPUs), and every rank saves what it drew; the tests then check the
union of the ranks' draws against w / W, each rank's own draws, the order of ordered draws,
reproducibility, errors raised on every rank, and LDA counts after distributed sweeps."""
import os
import socket
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import torch_wrs
from torch_wrs.distributed import ShardedAliasTable
from helpers import g_test_pvalue

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 1234
P_MIN = 1e-4  # fixed seeds: a p-value this small means a wrong law


def shard_weights(rank, sizes, dtype=torch.float32):
    """Rank `rank`'s shard of the global weights: uneven sizes, every 7th weight zero."""
    g = torch.Generator().manual_seed(100 + rank)
    w = torch.rand(sizes[rank], generator=g, dtype=torch.float64) * (rank + 1)
    w[::7] = 0
    return w.to(dtype)


def global_weights(sizes):
    return torch.cat([shard_weights(r, sizes).double() for r in range(len(sizes))])


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _expect_error(fn, *texts):
    """Runs fn; returns the RuntimeError's text (checked by the test), or 'no error'."""
    try:
        fn()
    except RuntimeError as e:
        return str(e)
    return "no error"


def _worker(rank, world, port, out_dir, backend, sizes, draws):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    sys.path.insert(0, os.path.join(HERE, "..", "examples"))
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=rank, world_size=world)
    import torch_wrs.distributed as D

    res = {}
    table = ShardedAliasTable(shard_weights(rank, sizes).to(device), placement="shard")
    gen = lambda: torch.Generator(device=device).manual_seed(SEED)  # every rank seeded alike  # noqa: E731
    res["ordered"] = table.sample(draws, generator=gen()).cpu()
    res["again"] = table.sample(draws, generator=gen()).cpu()
    res["unordered"] = table.sample(draws, ordered=False, generator=gen()).cpu()
    res["default_gen"] = table.sample(1000).cpu()  # torch's default generator, advancing
    res["default_gen2"] = table.sample(1000).cpu()
    res["empty"] = table.sample(0).cpu()
    owned, askers = table.sample_owned(draws + rank, generator=gen())
    res["owned"] = (owned.cpu(), askers)
    res["sizes"] = (table.num_categories, table.shard_range(rank), table.total_weight)
    probe = torch.randint(table.num_categories, (5000,), generator=torch.Generator().manual_seed(rank)).to(device)
    res["probe"] = probe.cpu()
    res["probs_of"] = table.probs_of(probe.view(50, 100)).cpu()

    # Bad input on one rank raises on every rank, and the group stays usable.
    last = world - 1
    bad = shard_weights(rank, sizes).to(device)
    if rank == last and bad.numel():
        bad[3] = -1.0
    res["err_negative"] = _expect_error(lambda: ShardedAliasTable(bad))
    mixed = shard_weights(rank, sizes).to(device)
    res["err_dtype"] = _expect_error(lambda: ShardedAliasTable(mixed.double() if rank == last else mixed))
    res["err_2d"] = _expect_error(lambda: ShardedAliasTable(mixed.view(1, -1) if rank == 0 else mixed))
    res["err_num_samples"] = _expect_error(lambda: table.sample(-3 if rank == 0 else 10))
    res["err_owned"] = _expect_error(lambda: table.sample_owned(-1 if rank == last else 10))
    oob = torch.tensor([table.num_categories if rank == last else 0], device=device)
    res["err_probs_of"] = _expect_error(lambda: table.probs_of(oob))
    res["after_errors"] = table.sample(100, generator=gen()).cpu()

    # Placement: the whole table on every rank, drawn locally; "auto" replicates what fits.
    rep = ShardedAliasTable(shard_weights(rank, sizes).to(device), placement="replicate")
    res["rep"] = (rep.placement, len(rep.full_tables), len(rep.tables))
    res["rep_ordered"] = rep.sample(draws, generator=gen()).cpu()
    res["rep_again"] = rep.sample(draws, generator=gen()).cpu()
    res["rep_unordered"] = rep.sample(draws, ordered=False, generator=gen()).cpu()
    res["rep_owned"] = rep.sample_owned(draws, generator=gen())[0].cpu()
    res["rep_probs_of"] = rep.probs_of(probe).cpu()
    res["auto"] = ShardedAliasTable(shard_weights(rank, sizes).to(device)).placement
    res["auto_no_room"] = ShardedAliasTable(shard_weights(rank, sizes).to(device), memory_share=0.0).placement
    res["err_placement"] = _expect_error(
        lambda: ShardedAliasTable(shard_weights(rank, sizes).to(device), placement="shard" if rank == last else "auto"))
    res["err_placement_name"] = _expect_error(
        lambda: ShardedAliasTable(shard_weights(rank, sizes).to(device), placement="everywhere" if rank == 0 else "auto"))
    res["err_share"] = _expect_error(
        lambda: ShardedAliasTable(shard_weights(rank, sizes).to(device), memory_share=2.0 if rank == last else 0.5))

    # Shards held as several tables (as past 2^31 categories), here pieces of 256: the
    # replicated table too.
    D._MAX_PIECE = D._MAX_REPLICA_PIECE = 256
    pieces = ShardedAliasTable(shard_weights(rank, sizes).to(device), placement="shard")
    rep_pieces = ShardedAliasTable(shard_weights(rank, sizes).to(device), placement="replicate")
    res["rep_pieces"] = len(rep_pieces.full_tables)
    res["rep_pieces_ordered"] = rep_pieces.sample(draws, generator=gen()).cpu()
    res["rep_pieces_unordered"] = rep_pieces.sample(draws, ordered=False, generator=gen()).cpu()
    res["pieces_tables"] = len(pieces.tables)
    res["pieces_ordered"] = pieces.sample(draws, generator=gen()).cpu()
    res["pieces_unordered"] = pieces.sample(draws, ordered=False, generator=gen()).cpu()
    # Owners draw sparse whole pieces as one i.i.d. sequence cut into the askers' segments.
    route = D._segment_method
    D._segment_method = lambda total, begin, end, buckets: "sequence" if (begin, end) == (0, buckets) else "segments"
    res["pieces_sequence"] = pieces.sample(draws, ordered=False, generator=gen()).cpu()
    D._segment_method = route
    D._MAX_PIECE, D._MAX_REPLICA_PIECE = 1 << 29, 1 << 31

    # Ordered draws exchanged in chunks (as from 2^22 remote draws), here from the first draw.
    D._CHUNK_FROM = 1
    res["chunked_ordered"] = table.sample(draws + 3 * rank, generator=gen()).cpu()
    res["chunked_unordered"] = table.sample(draws + 5 * rank, ordered=False, generator=gen()).cpu()
    res["chunked_pieces"] = pieces.sample(draws, generator=gen()).cpu()
    res["chunked_pieces_unordered"] = pieces.sample(draws, ordered=False, generator=gen()).cpu()
    D._CHUNK_FROM = 1 << 22

    # Worlds past a byte of labels take the general path, here from two ranks on.
    D._MAX_FUSED_RANKS = 1
    res["general_ordered"] = table.sample(draws, generator=gen()).cpu()
    res["general_unordered"] = table.sample(draws, ordered=False, generator=gen()).cpu()
    D._MAX_FUSED_RANKS = 255

    # Data-parallel LDA: counts consistent with the tokens after every sweep.
    import lda_gibbs

    corpus = lda_gibbs.synthetic_corpus(60, 200, 30, 4, seed=5, device=device)
    local = lda_gibbs.shard_corpus(corpus, rank, world)
    lda = {}
    for sampler in ("mh", "exact"):
        model, history = lda_gibbs.train(local, sampler, 3, 4, 0.5, 0.05, seed=1, check=True, progress=False,
                                         compile=False)
        lda[sampler] = (model.n_wk.cpu(), model.z.cpu(), history[-1][2])
    res["lda"] = lda
    res["lda_docs"] = (local.first_doc, local.num_docs, local.num_tokens)
    blocks = lda_gibbs.synthetic_corpus_blocks(300, 150, 20, 4, seed=3, device=device, rank=rank,
                                               world_size=world, block_docs=64)
    res["blocks"] = (blocks.first_doc, blocks.num_docs, blocks.doc.cpu(), blocks.word.cpu(), blocks.total_tokens)
    torch.save(res, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


def run_world(tmp_path_factory, world, backend="gloo", draws=1 << 18):
    sizes = {1: [1500], 2: [700, 1300], 3: [900, 0, 1100]}[world]
    out = tmp_path_factory.mktemp(f"world{world}{backend}")
    mp.spawn(_worker, args=(world, _free_port(), str(out), backend, sizes, draws), nprocs=world, join=True)
    return sizes, [torch.load(out / f"rank{r}.pt") for r in range(world)]


WORLDS = [2, 3]


@pytest.fixture(scope="module", params=WORLDS, ids=[f"gloo{w}" for w in WORLDS])
def world(request, tmp_path_factory):
    return run_world(tmp_path_factory, request.param)


def _shard_of(indices, sizes):
    ends = torch.tensor(sizes).cumsum(0)
    return torch.searchsorted(ends, indices, right=True)


def check_laws(sizes, results, key):
    w = global_weights(sizes)
    n = w.numel()
    union = torch.cat([r[key] for r in results])
    assert union.min() >= 0 and union.max() < n
    assert g_test_pvalue(torch.bincount(union, minlength=n), w) > P_MIN, f"{key}: the union of the ranks' draws"
    for rank, r in enumerate(results):
        assert g_test_pvalue(torch.bincount(r[key], minlength=n), w) > P_MIN, f"{key}: rank {rank}'s own draws"


def test_union_and_each_rank_follow_the_global_law(world):
    sizes, results = world
    for key in ("ordered", "unordered", "pieces_ordered", "pieces_unordered", "pieces_sequence", "chunked_ordered",
                "chunked_unordered", "chunked_pieces_unordered",
                "chunked_pieces", "general_ordered", "general_unordered", "rep_ordered", "rep_unordered",
                "rep_pieces_ordered", "rep_pieces_unordered"):
        check_laws(sizes, results, key)


def test_placement_replicate_auto_and_shard(world):
    """"replicate" builds the whole table on every rank (in pieces where it is long) and
    draws locally, reproducibly, independently across ranks; "auto" replicates what fits in
    memory_share of the free memory (a small table on the CPU) and shards where nothing may
    be filled; sample_owned and probs_of keep working on the shards; a rank whose
    placement or memory_share differs, or is not valid, raises on every rank."""
    sizes, results = world
    w = global_weights(sizes)
    last = len(sizes) - 1
    for rank, r in enumerate(results):
        placement, full, shard = r["rep"]
        assert placement == "replicate" and full == 1 and shard == (1 if sizes[rank] else 0)
        assert r["rep_pieces"] == (w.numel() + 255) // 256
        assert torch.equal(r["rep_ordered"], r["rep_again"])
        assert r["auto"] == "replicate" and r["auto_no_room"] == "shard"
        lo, hi = sum(sizes[:rank]), sum(sizes[:rank + 1])
        assert r["rep_owned"].numel() == 0 or (r["rep_owned"].min() >= lo and r["rep_owned"].max() < hi)
        torch.testing.assert_close(r["rep_probs_of"], (w / w.sum())[r["probe"]], rtol=1e-12, atol=0)
        assert f"rank {last}" in r["err_placement"] and "placement or memory_share differs" in r["err_placement"]
        assert "rank 0" in r["err_placement_name"] and "placement must be" in r["err_placement_name"]
        assert f"rank {last}" in r["err_share"] and "memory_share" in r["err_share"]
    assert not torch.equal(results[0]["rep_ordered"], results[1]["rep_ordered"]), "ranks seeded alike drew the same"


def _bins(indices, n, bins=8):
    return indices * bins // n


def test_ordered_draws_are_in_iid_order_and_unordered_grouped(world):
    """Consecutive ordered draws, in 8 coarse bins of the categories (several a shard, so
    draws placed in a sorted or grouped order within a shard show), are independent."""
    sizes, results = world
    w = global_weights(sizes)
    n, m = w.numel(), 8
    bin_p = torch.zeros(m, dtype=torch.float64).index_add_(0, _bins(torch.arange(n), n), w)
    bin_p = bin_p / bin_p.sum()
    expected = torch.outer(bin_p, bin_p).reshape(-1)
    for r in results:
        for key in ("ordered", "chunked_ordered", "chunked_pieces", "pieces_ordered", "general_ordered", "rep_ordered",
                    "rep_pieces_ordered"):
            b = _bins(r[key], n)
            pairs = torch.bincount(b[:-1] * m + b[1:], minlength=m * m).double()
            assert g_test_pvalue(pairs, expected) > P_MIN, f"{key}: consecutive draws correlated"
        for key in ("unordered", "chunked_unordered", "pieces_unordered", "pieces_sequence", "chunked_pieces_unordered",
                    "general_unordered"):
            u = _shard_of(r[key], sizes)
            assert (u[1:] >= u[:-1]).all(), f"{key}: ordered=False draws come grouped by shard, in shard order"
    # Ranks seeded alike draw independently: the bins of draw t on ranks 0 and 1.
    a, b = (_bins(r["ordered"], n) for r in results[:2])
    joint = torch.bincount(a * m + b, minlength=m * m).double()
    assert g_test_pvalue(joint, expected) > P_MIN, "ranks' draws correlated"


def test_reproducible_and_independent_across_ranks(world):
    _, results = world
    for r in results:
        assert torch.equal(r["ordered"], r["again"]), "the same seed gave different draws"
        assert not torch.equal(r["default_gen"], r["default_gen2"]), "the default generator did not advance"
        assert r["empty"].shape == (0,) and r["empty"].dtype == torch.int64
        assert r["after_errors"].shape == (100,)
    assert not torch.equal(results[0]["ordered"], results[1]["ordered"]), "ranks seeded alike drew the same"


def test_sizes_ranges_and_probs_of(world):
    sizes, results = world
    w = global_weights(sizes)
    starts = [0] + torch.tensor(sizes).cumsum(0).tolist()
    for rank, r in enumerate(results):
        n, shard, total = r["sizes"]
        assert n == sum(sizes) and shard == (starts[rank], starts[rank + 1])
        assert total == pytest.approx(float(w.sum()), rel=1e-12)
        expected = (w / w.sum())[r["probe"]].view(50, 100)
        torch.testing.assert_close(r["probs_of"], expected, rtol=1e-12, atol=0)
        assert r["pieces_tables"] == (sizes[rank] + 255) // 256


def test_bad_input_on_one_rank_raises_on_every_rank(world):
    sizes, results = world
    last = len(sizes) - 1
    for rank, r in enumerate(results):
        if sizes[last]:
            assert f"rank {last}" in r["err_negative"] and "negative" in r["err_negative"]
        assert "dtype" in r["err_dtype"]
        assert "rank 0" in r["err_2d"] and "1-D" in r["err_2d"]
        assert "ShardedAliasTable.sample" in r["err_num_samples"]
        assert ("num_samples must be a non-negative int" if rank == 0 else "on rank 0") in r["err_num_samples"]
        assert "ShardedAliasTable.probs_of" in r["err_probs_of"]
        assert ("indices must be in" if rank == last else f"on rank {last}") in r["err_probs_of"]


def test_distributed_lda_counts_agree_across_ranks(world):
    sizes, results = world
    first = results[0]["lda"]
    for r in results:  # every rank holds the same global word-topic counts
        for sampler in ("mh", "exact"):
            assert torch.equal(r["lda"][sampler][0], first[sampler][0])
            assert r["lda"][sampler][2] == first[sampler][2]
    docs = [r["lda_docs"] for r in results]
    assert docs[0][0] == 0 and all(a[0] + a[1] == b[0] for a, b in zip(docs, docs[1:]))
    assert sum(d[1] for d in docs) == 60


def test_block_corpus_is_the_same_whatever_the_world_size(world):
    sys.path.insert(0, os.path.join(HERE, "..", "examples"))
    import lda_gibbs

    _, results = world
    whole = lda_gibbs.synthetic_corpus_blocks(300, 150, 20, 4, seed=3, block_docs=64)
    doc = torch.cat([r["blocks"][2] + r["blocks"][0] for r in results])
    word = torch.cat([r["blocks"][3] for r in results])
    assert torch.equal(doc, whole.doc) and torch.equal(word, whole.word)
    assert all(r["blocks"][4] == whole.num_tokens for r in results)


def test_int32_draws_become_int64_indices_past_2_31():
    """Draws travel as int32 within their piece; their global indices may pass 2^31."""
    from torch_wrs.distributed import _add_base

    local = torch.tensor([0, 5, (1 << 29) - 1], dtype=torch.int32)
    for base in (0, (1 << 31) - (1 << 29) - 1, 1 << 31, 3 << 33):
        out = torch.empty(3, dtype=torch.int64)
        _add_base(local, base, out)
        assert out.tolist() == [base, base + 5, base + (1 << 29) - 1]


def test_owner_draw_route():
    """An owner draws a run for its askers in one pass over it, except a whole table asked
    for fewer draws than an eighth of its buckets: one i.i.d. sequence of table reads."""
    from torch_wrs.distributed import _segment_method

    assert _segment_method(1 << 24, 0, 1 << 29, 1 << 29) == "sequence"
    assert _segment_method(1 << 26, 0, 1 << 29, 1 << 29) == "segments"
    assert _segment_method(10, 0, 1 << 20, 1 << 29) == "segments"  # a run inside a table
    assert _segment_method(10, 1 << 20, 1 << 29, 1 << 29) == "segments"


def test_world_size_one_equals_alias_table():
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        w = shard_weights(0, [5000])
        table = ShardedAliasTable(w)
        for ordered in (True, False):
            ours = table.sample(100_000, ordered=ordered, generator=torch.Generator().manual_seed(7))
            ref = torch_wrs.AliasTable(w).sample(100_000, ordered=ordered, generator=torch.Generator().manual_seed(7))
            assert torch.equal(ours, ref)
        with pytest.raises(RuntimeError, match="num_samples"):
            table.sample(-1)
        with pytest.raises(RuntimeError, match="num_samples"):
            table.sample(2.5)
        assert table.sample(torch.tensor(7)).shape == (7,)
        owned, askers = table.sample_owned(100_000, generator=torch.Generator().manual_seed(7))
        ref = torch_wrs.AliasTable(w).sample(100_000, ordered=False, generator=torch.Generator().manual_seed(7))
        assert torch.equal(owned, ref) and askers == [100_000]
        with pytest.raises(RuntimeError, match="num_samples"):
            table.sample_owned(-1)
        with pytest.raises(RuntimeError, match="positive finite sum"):
            ShardedAliasTable(torch.zeros(4))
        for placement in ("replicate", "shard"):  # one rank: the whole table either way
            one = ShardedAliasTable(w, placement=placement)
            assert one.placement == placement
            ours = one.sample(1000, generator=torch.Generator().manual_seed(8))
            assert torch.equal(ours, torch_wrs.AliasTable(w).sample(1000, generator=torch.Generator().manual_seed(8)))
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs for NCCL")
def test_nccl_two_gpus(tmp_path_factory):
    """The same checks with NCCL, one GPU per rank, and 2^22 draws per rank."""
    world = run_world(tmp_path_factory, 2, backend="nccl", draws=1 << 22)
    test_union_and_each_rank_follow_the_global_law(world)
    test_ordered_draws_are_in_iid_order_and_unordered_grouped(world)
    test_reproducible_and_independent_across_ranks(world)
    test_sizes_ranges_and_probs_of(world)
    test_bad_input_on_one_rank_raises_on_every_rank(world)
    test_distributed_lda_counts_agree_across_ranks(world)


@pytest.mark.parametrize("parts", [3, 40])
def test_interleave_places_each_part_in_label_order(parts):
    """Both ways of placing grouped draws (running counts for few parts, a stable sort for
    many) put part p's draws, in order, at the positions labelled p."""
    from torch_wrs.distributed import _interleave

    labels = torch.randint(parts, (10_000,), generator=torch.Generator().manual_seed(parts))
    counts = torch.bincount(labels, minlength=parts)
    grouped = torch.cat([torch.arange(int(c)) * 1000 + p for p, c in enumerate(counts)])
    out = _interleave(grouped, labels, parts)
    assert torch.equal(out % 1000, labels)
    for p in range(parts):
        assert torch.equal(out[labels == p] // 1000, torch.arange(int(counts[p])))


def test_capacity_benchmark_sizes_itself_to_free_memory():
    """The large table of `python -m torch_wrs.benchmark distributed` takes the most
    categories that 12 bytes each over the ranks plus 20 GiB of scratch per GPU leave in
    the free memory: 2^33 on two H100s (79 GiB free), 2^34 on two H200s (139 GiB) and on
    four H100s; none where even 2^10 per rank does not fit."""
    from torch_wrs.benchmark_distributed import fit_log2_categories

    gib = 1 << 30
    assert fit_log2_categories(79 * gib, 2) == 33
    assert fit_log2_categories(139 * gib, 2) == 34
    assert fit_log2_categories(79 * gib, 4) == 34
    assert fit_log2_categories(68 * gib, 2) == 33 and fit_log2_categories(68 * gib - 1, 2) == 32
    assert fit_log2_categories(20 * gib, 2) == 0
    for free, world in ((79 * gib, 2), (139 * gib, 2), (79 * gib, 8)):
        h = fit_log2_categories(free, world)
        assert 12 * (1 << h) // world + 20 * gib <= free < 12 * (1 << (h + 1)) // world + 20 * gib


def test_owner_side_draws_follow_each_askers_law(world):
    """sample_owned: each rank returns only draws in its own shard, a segment per asking
    rank; for each asking rank, the union of its segments over the owners is its
    draws + rank i.i.d. draws from the global law."""
    sizes, results = world
    w = global_weights(sizes)
    ends = torch.tensor(sizes).cumsum(0).tolist()
    draws = sum(r["owned"][1][0] for r in results)  # rank 0 asked this many
    for owner, r in enumerate(results):
        owned, askers = r["owned"]
        assert len(askers) == len(results) and sum(askers) == owned.numel()
        first = ends[owner] - sizes[owner]
        assert owned.numel() == 0 or (owned.min() >= first and owned.max() < ends[owner]), "a draw outside the shard"
    for asker in range(len(results)):
        segments = []
        for r in results:
            owned, askers = r["owned"]
            start = sum(askers[:asker])
            segments.append(owned[start:start + askers[asker]])
        union = torch.cat(segments)
        assert union.numel() == draws + asker
        assert g_test_pvalue(torch.bincount(union, minlength=w.numel()), w) > P_MIN, f"rank {asker}'s owned draws"
    for r in results:
        assert "num_samples must be a non-negative int" in r["err_owned"] or "bad input" in r["err_owned"]


def test_one_gpu_ranks_runs_rank_zeros_work(monkeypatch):
    """`benchmark distributed --one-gpu-ranks`: rank 0 of P ranks on one device, the network
    left out, runs a whole sample() call (chunked) and returns its draws' shape; its own
    unordered draws, which never cross the network, lie in its shard."""
    import torch_wrs.distributed as D
    from torch_wrs.benchmark_distributed import _RanksOnOneGpu

    monkeypatch.setattr(D, "dist", _RanksOnOneGpu(4))
    monkeypatch.setattr(D, "_CHUNK_FROM", 1)
    table = ShardedAliasTable(shard_weights(0, [3000]), placement="shard")
    assert (table.world_size, table.num_categories) == (4, 12_000)
    ordered = table.sample(50_000, generator=torch.Generator().manual_seed(1))
    unordered = table.sample(50_000, ordered=False, generator=torch.Generator().manual_seed(1))
    assert ordered.shape == unordered.shape == (50_000,) and ordered.dtype == unordered.dtype == torch.int64
    own = unordered[:10_000]  # shard 0's draws come first (about 12,500 of them), then the received
    assert int(own.min()) >= 0 and int(own.max()) < 3000
