"""Drives one LLM-sampling case for Nsight Compute: warm-up calls, then the profiled one.

    ncu --kernel-name regex:sample_kernel --launch-skip 3 --launch-count 1 python3 scripts/profile_llm.py CASE
CASE: plain | top-p | top-k (256 x 128,256 float32 probabilities).
"""
import sys

import torch

import torch_wrs

case = sys.argv[1]
kw = {"plain": {}, "top-p": dict(top_p=0.9), "top-k": dict(top_k=50)}[case]
g = torch.Generator("cuda").manual_seed(0)
x = torch.randn(256, 128_256, device="cuda", generator=g) * 2
x[:, :200] += 8 * torch.rand(256, 200, device="cuda", generator=g)
p = torch.softmax(x, -1)
for _ in range(4):
    torch_wrs.sample_probs(p, **kw)
torch.cuda.synchronize()
