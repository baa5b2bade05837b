"""Per-kernel device time of the pieces of a sharded sample() call on one GPU (torch
profiler), against the one-GPU calls they replace: for finding where a rank's time goes.

    python3 scripts/profile_distributed.py [--log2-categories 30] [--log2-draws 28] [--ranks 2]
"""
import argparse
import collections

import torch
from torch.profiler import ProfilerActivity, profile

import torch_wrs
from torch_wrs.benchmark_distributed import _weights


def kernel_ms(name, fn, reps=5):
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    per = collections.Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per[e.name[:70]] += e.device_time_total / 1e3 / reps
    total = sum(per.values())
    print(f"\n{name}: {total:.2f} ms of kernels a call")
    for k, ms in per.most_common(6):
        print(f"  {ms:7.3f} ms  {k}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log2-categories", type=int, default=30)
    ap.add_argument("--log2-draws", type=int, default=28)
    ap.add_argument("--ranks", type=int, default=2)
    a = ap.parse_args()
    n, draws, P = 1 << a.log2_categories, 1 << a.log2_draws, a.ranks
    dev = torch.device("cuda")
    g = torch.Generator(dev).manual_seed(1)
    print(torch.cuda.get_device_name(), f"2^{a.log2_categories} categories, 2^{a.log2_draws} draws a rank, P = {P}")
    whole = torch_wrs.alias_table(_weights(n, 0, dev), validate=False)
    for ordered in (True, False):
        kernel_ms(f"one GPU, {P} x 2^{a.log2_draws} draws, ordered={ordered}",
                  lambda: torch.ops.wrs.alias_sample(whole, P * draws, ordered=ordered, generator=g))
    del whole
    torch.cuda.empty_cache()
    shard = torch_wrs.alias_table(_weights(n // P, 0, dev), validate=False)
    cdf = torch.arange(1, P + 1, dtype=torch.float64, device=dev) / P
    kernel_ms("labels", lambda: torch.ops.wrs._ordered_labels(cdf, draws, generator=g))
    labels, blocks = torch.ops.wrs._ordered_labels(cdf, draws, generator=g)
    counts = blocks.clone()
    counts[:, 0] = 0
    start = (counts.t().cumsum(1) - counts.t()).t().contiguous()
    received = torch.randint(n // P, (int(counts.sum()),), dtype=torch.int32, device=dev)
    offsets = torch.arange(P, dtype=torch.int64, device=dev) * (n // P)
    remote = draws - draws // P
    kernel_ms("draws for the other ranks, ordered int32",
              lambda: torch.ops.wrs.alias_sample(shard, remote, dtype=torch.int32, generator=g))
    kernel_ms("fill", lambda: torch.ops.wrs._ordered_fill(received, labels, start, offsets, shard, 0, generator=g))
    kernel_ms("own draws alone, ordered int64",
              lambda: torch.ops.wrs.alias_sample(shard, draws // P, generator=g))
    kernel_ms("sectioned, one call of every rank's share, int32",
              lambda: torch.ops.wrs.alias_sample(shard, draws, ordered=False, dtype=torch.int32, generator=g))
    kernel_ms(f"segments, {P} askers, one pass, int32",
              lambda: torch.ops.wrs._alias_sample_segments(shard, [draws // P] * P, dtype=torch.int32, generator=g))
    runs = [k * (n // P) // 8 for k in range(9)]
    kernel_ms(f"segments, {P} askers, 8 runs, int32",
              lambda: [torch.ops.wrs._alias_sample_segments(shard, [draws // P // 8] * P, runs[k], runs[k + 1],
                                                            dtype=torch.int32, generator=g) for k in range(8)])


if __name__ == "__main__":
    main()
