"""A decode loop's sampling step with torch_wrs: a synthetic lm_head (hidden 4,096, vocabulary
128,256, bfloat16), mixed per-request temperature / top-k / top-p and seeds, eager and in a
CUDA graph, and optionally speculative acceptance against a smaller draft head.

    python examples/llm_sampling.py                       # GPU: B = 1 and 32, eager and graph
    python examples/llm_sampling.py --speculative 4       # also draft 4 tokens and accept them
    python examples/llm_sampling.py --device cpu --hidden 256 --vocab 8000 --steps 5

It prints the step time (lm_head matmul + sampling) and the sampler's share of it, for
torch_wrs, the vLLM-style torch path (sort, masks, exponential trick) and, where its
headers are present, FlashInfer (see torch_wrs/benchmark_llm.py).
"""
import argparse
import time

import torch

import torch_wrs
from torch_wrs.benchmark_llm import flashinfer, torch_native


def requests(b, device, gen):
    """Mixed per-request parameters, as a serving batch would hold them."""
    return dict(temperature=torch.rand(b, device=device, generator=gen) * 0.8 + 0.4,
                top_k=torch.randint(20, 101, (b,), device=device, generator=gen),
                top_p=torch.rand(b, device=device, generator=gen) * 0.15 + 0.8)


def timed(step, device, steps):
    for _ in range(3):
        step()
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / steps
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t) * 1e3 / steps


def in_graph(fn):
    """fn captured in a CUDA graph; each replay draws afresh."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=128_256)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--speculative", type=int, default=0, metavar="S", help="draft S tokens and accept them")
    args = ap.parse_args()
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    gen = torch.Generator(device).manual_seed(0)
    lm_head = torch.randn(args.vocab, args.hidden, device=device, dtype=dtype, generator=gen) / args.hidden**0.5
    fi = flashinfer() if device.type == "cuda" else None

    print(f"device {device}, lm_head {args.hidden} x {args.vocab} {str(dtype).replace('torch.', '')}; ms per step")
    print("| B | mode | sampler | step | matmul alone | sampler share |")
    print("|---:|---|---|---:|---:|---:|")
    for b in args.batch:
        hidden = torch.randn(b, args.hidden, device=device, dtype=dtype, generator=gen) * 4
        seeds = torch.arange(b, device=device) * 7919
        req = requests(b, device, gen)
        out = {}

        def matmul():
            out["logits"] = hidden @ lm_head.T

        def ours():
            logits = hidden @ lm_head.T
            out["tokens"], out["logp"] = torch_wrs.sample_logits(logits, seeds=seeds, return_logprobs="raw", **req)

        def native():
            probs = torch.softmax((hidden @ lm_head.T).float() / req["temperature"][:, None], -1)
            out["tokens"] = torch_native(probs, k=req["top_k"], p=req["top_p"])

        samplers = {"torch_wrs": ours, "torch sort path": native}
        if fi is not None:
            k32 = req["top_k"].int()

            def flash():
                probs = torch.softmax((hidden @ lm_head.T).float() / req["temperature"][:, None], -1)
                out["tokens"] = fi.top_k_top_p(probs, 0, 1.0, k32, req["top_p"], 1, 0)

            samplers["FlashInfer"] = flash
        modes = ["eager"] + (["CUDA graph"] if device.type == "cuda" else [])
        for mode in modes:
            base = timed(matmul if mode == "eager" else in_graph(matmul), device, args.steps)
            for name, fn in samplers.items():
                step = fn if mode == "eager" else in_graph(fn)
                ms = timed(step, device, args.steps)
                print(f"| {b} | {mode} | {name} | {ms:.4f} | {base:.4f} | {max(ms - base, 0) / ms:.0%} |")
        if args.speculative:
            s = args.speculative
            draft_head = lm_head[:, : args.hidden // 4]
            d_hidden = torch.randn(b * s, args.hidden // 4, device=device, dtype=dtype, generator=gen) * 4
            draft_probs = torch.softmax((d_hidden @ draft_head.T).float(), -1).view(b, s, -1)
            draft_tokens = torch_wrs.sample_probs(draft_probs.view(b * s, -1), seeds=torch.arange(b * s, device=device))
            t_hidden = torch.randn(b * (s + 1), args.hidden, device=device, dtype=dtype, generator=gen) * 4
            target_probs = torch.softmax((t_hidden @ lm_head.T).float(), -1).view(b, s + 1, -1)
            tokens, accepted = torch_wrs.speculative_accept(draft_probs, draft_tokens.view(b, s), target_probs,
                                                            generator=gen)
            ms = timed(lambda: torch_wrs.speculative_accept(draft_probs, draft_tokens.view(b, s), target_probs,
                                                            generator=gen), device, args.steps)
            print(f"speculative, B = {b}, S = {s}: {ms:.4f} ms a call, mean accepted "
                  f"{accepted.float().mean().item():.2f} of {s}")


if __name__ == "__main__":
    main()
