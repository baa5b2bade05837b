"""A few LLM-sampling cells of one build, for scripts/gpu_llm_ab.sh: ours eager and in a CUDA
graph, and FlashInfer's matching kernel in a CUDA graph (when its headers are carried), ms
per call.
Rows are the benchmark's (most of the mass in a heavy tail), with DIST=peaked a few strong
candidates over a light tail (top-1 probability about 0.1-0.5, the tail about 13%), or with
DIST=mixed the CUDA-graph grid's rows of mixed sharpness.
CONTROLS="none,top-p 0.9" times only those controls; CELLS="128x128256,64x32000" other shapes.
    python3 scripts/llm_ab.py LABEL"""
import os
import sys

import torch

import torch_wrs
from torch_wrs import benchmark_llm as b

CELLS = [tuple(map(int, c.split("x"))) for c in
         os.environ.get("CELLS", "1x32000,32x32000,256x32000,1x128256,32x128256,256x128256").split(",")]
CONTROLS = os.environ.get("CONTROLS", "none,top-k 50,top-p 0.9,min-p 0.1").split(",")


def peaked_logits(rows, v, gen):
    x = torch.randn(rows, v, device="cuda", generator=gen)
    x[:, :50] += 6 + torch.rand(rows, 50, device="cuda", generator=gen) * 6
    return x[:, torch.randperm(v, device="cuda", generator=gen)]


def main(label):
    fi = b.flashinfer()
    gen = torch.Generator("cuda").manual_seed(0)
    dist = os.environ.get("DIST", "heavy")
    for rows, v in CELLS:
        x = peaked_logits(rows, v, gen) if dist == "peaked" else b._llm_logits(rows, v, torch.float32, gen,
                                                                                 mixed=dist == "mixed")
        probs = torch.softmax(x, -1)
        for name in CONTROLS:
            kw = b._controls(name, rows, "cuda")
            ours = lambda: torch_wrs.sample_probs(probs, **kw)  # noqa: E731
            f = b._fi_call(fi, name, probs, kw)
            eager, graph = b.timed(ours), b.graphed(ours)
            fi_ms = (b._maybe(b.graphed, f) if f is not None else None) or float("nan")
            tag = name + ("" if dist == "heavy" else " " + dist)
            print(f"{label:10s} {rows:4d} x {v:7d} {tag:10s} eager {eager:.4f} graph {graph:.4f} "
                  f"FI {fi_ms:.4f} FI/ours {fi_ms / graph:.2f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
