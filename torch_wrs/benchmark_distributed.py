"""`python -m torch_wrs.benchmark distributed`, under torchrun (one process per GPU, NCCL):

    torchrun --nproc_per_node=2 -m torch_wrs.benchmark distributed [--log2-categories 30]
        [--log2-draws 28] [--huge-log2-categories H]
    python -m torch_wrs.benchmark distributed --one-gpu-ranks 2 4     # one GPU, no network

1. Sampling: a table of 2^C categories split over the ranks, 2^D draws per rank, against
   rank 0 alone drawing the same total from one 2^C table. Times are the slowest rank's,
   wall clock around the call after a barrier (a collective's time is its slowest rank's),
   medians of several calls. The all-to-all share is a bare all_to_all_single of the same
   split sizes and bytes, timed the same way.
2. A table no single GPU holds: by default the most categories, a power of two, that the
   GPUs' free memory holds (fit_log2_categories: 12 bytes a category over the ranks, plus
   build scratch on each; 2^33 on two H100s, 2^34 on two H200s), or 2^H with
   --huge-log2-categories H: build time, draws/s, and a G-test of the draws on 1,024 coarse
   bins against the weights' bin sums. Skipped with --huge-log2-categories 0.
3. With --one-gpu-ranks P [P ...], without torchrun: one GPU does what rank 0 of P ranks
   does in a sample() call, with the network left out (every rank asks what rank 0 asks,
   and the exchange moves nothing), against the same GPU drawing the P ranks' total from
   the whole table: how far the GPU work alone lets P GPUs scale.
"""
import statistics
import time

import torch
import torch.distributed as dist

from .alias import AliasTable
from .distributed import ShardedAliasTable


def _slowest_ms(fn, reps=5, warmup=1):
    """Median over reps of the slowest rank's wall time of fn() (after a barrier)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ms = torch.tensor([(time.perf_counter() - t0) * 1e3], device="cuda")
        dist.all_reduce(ms, op=dist.ReduceOp.MAX)
        times.append(float(ms))
    return statistics.median(times)


def _weights(n, rank, device, block=1 << 24, dtype=torch.float32):
    """Uniform weights times a per-block factor (1..7), so coarse bins differ."""
    g = torch.Generator(device=device).manual_seed(1000 + rank)
    w = torch.rand(n, device=device, generator=g, dtype=dtype)
    full = n // block * block
    if full:
        scale = (torch.arange(n // block, device=device) + rank * 3) % 7 + 1
        w[:full].view(-1, block).mul_(scale[:, None].to(dtype))
    return w


def sampling(args, rank, world, say):
    n = 1 << args.log2_categories
    draws = 1 << args.log2_draws
    device = torch.device("cuda", torch.cuda.current_device())
    rows = []
    # One GPU, the same total from one table (rank 0; the others wait).
    one = {}
    if rank == 0:
        w = _weights(n, 0, device)
        table = AliasTable(w, validate=False)
        del w
        for ordered in (True, False):
            for _ in range(2):
                table.sample(world * draws, ordered=ordered)
            times = []
            for _ in range(5):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                table.sample(world * draws, ordered=ordered)
                torch.cuda.synchronize()
                times.append((time.perf_counter() - t0) * 1e3)
            one[ordered] = statistics.median(times)
        del table
        torch.cuda.empty_cache()
    dist.barrier()
    local = _weights(n // world, rank, device)
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    sharded = ShardedAliasTable(local, placement=args.placement)
    torch.cuda.synchronize()
    build_ms = (time.perf_counter() - t0) * 1e3
    a2a_ms = _bare_all_to_all_ms(draws, device)
    parts = _parts_ms(sharded, draws, world) if sharded._compact else {}
    for ordered in (True, False):
        ms = _slowest_ms(lambda: sharded.sample(draws, ordered=ordered))
        ours = world * draws / (ms * 1e-3)
        theirs = world * draws / (one[ordered] * 1e-3) if rank == 0 else float("nan")
        rows.append((f"2^{args.log2_categories} over {world} GPUs ({sharded.placement}), 2^{args.log2_draws} "
                     f"draws/rank, ordered={ordered}", ms, one.get(ordered, float("nan")), ours / 1e9, theirs / 1e9,
                     ours / theirs, a2a_ms / ms))
    say(f"\nbuild of the sharded table: {build_ms:.0f} ms on rank 0 (2^{args.log2_categories - (world - 1).bit_length()} "
        f"per rank)")
    say("\n| case | sharded ms | 1 GPU ms (same total) | sharded G draws/s | 1 GPU G draws/s | ratio | all-to-all share |")
    say("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, ms, ms1, g, g1, ratio, share in rows:
        say(f"| {name} | {ms:.2f} | {ms1:.2f} | {g:.2f} | {g1:.2f} | {ratio:.2f}x | {share:.0%} |")
    say("\nWhere a call's time goes, each part alone (slowest rank, ms): " +
        ", ".join(f"{name} {ms:.2f}" for name, ms in parts.items()))
    sharded = local = None
    torch.cuda.empty_cache()


def _bare_all_to_all_ms(draws, device, dtype=torch.int32):
    """The exchange alone: each rank sends an equal share of `draws` to every rank, as
    `dtype` (draws travel as int32 within their piece, but ordered calls on shards of
    several pieces as int64)."""
    send = torch.ones(draws, dtype=dtype, device=device)
    recv = torch.empty_like(send)
    return _slowest_ms(lambda: dist.all_to_all_single(recv, send))


def _parts_ms(sharded, draws, world, timer=None):
    """The parts of sample() timed one at a time, for 2^D draws a rank asked evenly of the
    shards: ordered, the shard labels, the draws for the other ranks (int32, ordered) and
    the fill (the placement of the received draws and this shard's own draws); unordered,
    the one pass over the shard that draws every rank's share."""
    timer = timer or _slowest_ms
    g = torch.Generator(device=sharded.device).manual_seed(5)
    share = draws // world
    remote = draws - share
    state = {}

    def labels():
        state["labels"] = torch.ops.wrs._ordered_labels(sharded._cdf, draws, generator=g)

    labels()
    lab, block_counts = state["labels"]
    counts = block_counts.clone()
    counts[:, sharded.rank] = 0
    start = (counts.t().cumsum(1) - counts.t()).t().contiguous()
    received = torch.zeros(int(counts.sum()), dtype=torch.int32, device=sharded.device)
    table = sharded.tables[0]
    return {
        "labels": timer(labels),
        "draws for other ranks (ordered)": timer(
            lambda: torch.ops.wrs.alias_sample(table, remote, dtype=torch.int32, generator=g)),
        "fill (ordered)": timer(lambda: torch.ops.wrs._ordered_fill(
            received, lab, start, sharded._offsets, table, sharded.rank, generator=g)),
        "one pass for every rank (unordered)": timer(
            lambda: torch.ops.wrs._alias_sample_segments(table, [share] * world, dtype=torch.int32, generator=g)),
    }


# Each rank holds 12 bytes a category (float32 weights, kept for probs_of, and the int64
# table) and up to about 18 GiB of build scratch and draws (110 GiB peak at 2^34 on two
# H200s: docs/distributed.md); the margin covers the rest.
BYTES_PER_CATEGORY = 12
SCRATCH_BYTES = 20 << 30


def fit_log2_categories(free_bytes: int, world: int) -> int:
    """The largest H such that 2^H categories over `world` ranks, each with `free_bytes` of
    free GPU memory, fit: 12 * 2^H / world + 20 GiB <= free_bytes. At least 2^10 per rank
    (the G-test's bins); 0 where not even that fits."""
    h = 0
    while BYTES_PER_CATEGORY * (1 << (h + 1)) // world + SCRATCH_BYTES <= free_bytes:
        h += 1
    return h if (1 << h) >= 1024 * world else 0


def huge_table(args, rank, world, say):
    """A table no single GPU holds: build, draw, and a G-test on 1,024 coarse bins."""
    if args.huge_log2_categories < 0:  # sized to the smallest free memory of any rank
        free = torch.tensor([torch.cuda.mem_get_info()[0]], dtype=torch.int64, device="cuda")
        dist.all_reduce(free, op=dist.ReduceOp.MIN)
        args.huge_log2_categories = fit_log2_categories(int(free), world)
        say(f"\nsized to free memory: 2^{args.huge_log2_categories} categories ({float(free) / 2**30:.1f} GiB free on "
            f"the fullest GPU; {BYTES_PER_CATEGORY} bytes a category over {world} GPUs, plus "
            f"{SCRATCH_BYTES >> 30} GiB of scratch each)")
        if args.huge_log2_categories == 0:
            say("too little free memory for the large table: skipped")
            return
    n_total = 1 << args.huge_log2_categories
    n = n_total // world
    device = torch.device("cuda", torch.cuda.current_device())
    w = _weights(n, rank, device)
    bins = 1024
    bin_size = n_total // bins
    # Expected bin masses from every rank's weights (float64), then the draws' bins.
    mass = torch.zeros(bins, dtype=torch.float64, device=device)
    first_bin = rank * n // bin_size
    mass[first_bin:first_bin + n // bin_size] = w.view(-1, bin_size).sum(1, dtype=torch.float64)
    dist.all_reduce(mass)
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    table = ShardedAliasTable(w, placement="shard")  # the table no GPU holds alone
    torch.cuda.synchronize()
    build = torch.tensor([time.perf_counter() - t0], device=device)
    dist.all_reduce(build, op=dist.ReduceOp.MAX)
    draws = 1 << args.log2_draws
    ms = _slowest_ms(lambda: table.sample(draws, ordered=False), reps=3)
    # The floor: the call's exchange alone, 8 bytes a remote draw (the int64 index) and 4 (the
    # int32 within a piece that draws travel as); and the owner's draws alone.
    floor8, floor4 = (_bare_all_to_all_ms(draws, device, t) for t in (torch.int64, torch.int32))
    drawing = _owner_draws_ms(table, draws, world)
    counts = torch.zeros(bins, dtype=torch.float64, device=device)
    for _ in range(4):
        idx = table.sample(draws, ordered=False)
        counts += torch.bincount(idx // bin_size, minlength=bins).double()
        del idx
    dist.all_reduce(counts)
    peak = torch.tensor([torch.cuda.max_memory_allocated() / 2**30], device=device)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    if rank == 0:
        import scipy.stats

        expected = mass / mass.sum() * counts.sum()
        g = 2 * float((counts * torch.log(counts / expected)).nansum())
        p = float(scipy.stats.chi2.sf(g, bins - 1))
        say(f"\n2^{args.huge_log2_categories} categories over {world} GPUs ({len(table.tables)} tables of <= 2^29 "
            f"per rank): build {float(build):.1f} s; {world * draws / (ms * 1e-3) / 1e9:.2f} G draws/s "
            f"(2^{args.log2_draws} per rank, ordered=False, {ms:.1f} ms); G-test on {bins} coarse bins over "
            f"{counts.sum():.3g} draws: G = {g:.0f}, p = {p:.3f}; peak memory {float(peak):.0f} GiB per GPU")
        if p < 1e-4:
            say("  G-TEST FAILED")
        per_gpu = draws / (ms * 1e-3) / 1e9
        say(f"  per GPU: {per_gpu:.2f} G draws/s; the exchange alone, 8 bytes a remote draw: {floor8:.1f} ms "
            f"({draws / (floor8 * 1e-3) / 1e9:.1f} G draws/s, ours at {ms / floor8:.2f}x its time); 4 bytes (int32, "
            f"as they travel): {floor4:.1f} ms; the owner's draws for every rank alone: {drawing:.1f} ms")


def _owner_draws_ms(table, draws, world):
    """One owner's draws of a call alone (no network): every rank asks draws / world of
    this shard, spread over its runs by weight, drawn run by run as sample() does."""
    g = torch.Generator(device=table.device).manual_seed(7)
    me = table.rank
    weights = table._run_weights.view(world, -1)[me]
    share = (weights / weights.sum() * (draws // world)).long().tolist() if weights.sum() > 0 else []

    def run():
        for (piece, begin, end), c in zip(table._runs, share):
            table._draw_segments(piece, begin, end, [c] * world + [0], g)

    return _slowest_ms(run)


class _Done:
    def wait(self):
        return None


class _RanksOnOneGpu:
    """What torch_wrs.distributed sees of torch.distributed as rank 0 of `world` ranks that
    all hold and ask what rank 0 does: all_gather copies this rank's tensor to every slot,
    and all_to_all_single moves nothing (its output keeps whatever it held)."""

    def __init__(self, world):
        self.world = world

    def get_rank(self, group=None):
        return 0

    def get_world_size(self, group=None):
        return self.world

    def get_backend(self, group=None):
        return "nccl"

    def all_gather(self, outputs, tensor, group=None):
        for out in outputs:
            out.copy_(tensor)

    def all_to_all_single(self, *args, async_op=False, **kwargs):
        return _Done() if async_op else None


def one_gpu_ranks(args):
    """Rank 0's GPU work in sample() for each P of --one-gpu-ranks, network left out."""
    import torch_wrs.distributed as D

    n, draws = 1 << args.log2_categories, 1 << args.log2_draws
    device = torch.device("cuda")
    print(f"{torch.cuda.get_device_name()}: rank 0's work of P ranks on one GPU, no network; "
          f"2^{args.log2_categories} categories, 2^{args.log2_draws} draws a rank")
    print("\n| P | ordered | rank 0 ms | 1 GPU ms (P x draws, whole table) | ratio | rank 0 G draws/s |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    real, parts = D.dist, {}
    for world in args.one_gpu_ranks:
        whole = AliasTable(_weights(n, 0, device), validate=False)
        one = {o: _median_ms(lambda: whole.sample(world * draws, ordered=o)) for o in (True, False)}
        del whole
        torch.cuda.empty_cache()
        D.dist = _RanksOnOneGpu(world)
        try:
            shard = ShardedAliasTable(_weights(n // world, 0, device), placement="shard")
            for ordered in (True, False):
                ms = _median_ms(lambda: shard.sample(draws, ordered=ordered))
                print(f"| {world} | {ordered} | {ms:.2f} | {one[ordered]:.2f} | {one[ordered] / ms:.2f}x | "
                      f"{draws / ms / 1e6:.1f} |")
            parts[world] = _parts_ms(shard, draws, world, timer=_median_ms)
        finally:
            D.dist = real
        del shard
        torch.cuda.empty_cache()
    for world, times in parts.items():
        print(f"\nP = {world}, each part alone (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in times.items()))


def _median_ms(fn, reps=7):
    fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def run(args):
    if args.one_gpu_ranks:
        return one_gpu_ranks(args)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    say = print if rank == 0 else (lambda *a, **k: None)
    say(f"{world} x {torch.cuda.get_device_name()}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}")
    sampling(args, rank, world, say)
    if args.huge_log2_categories:
        huge_table(args, rank, world, say)
    dist.destroy_process_group()
