"""Min-p through the plain streaming kernel (a scalar min_p) against the general kernel (the
same min_p as a per-row tensor), side by side on one GPU: ms per call, float32 probabilities."""
import torch

import torch_wrs
from torch_wrs.benchmark_llm import _llm_logits, timed

gen = torch.Generator("cuda").manual_seed(0)
print("| rows x vocab | plain kernel | general kernel | general / plain |")
print("|---|---:|---:|---:|")
for b, v in ((1, 32_000), (32, 32_000), (256, 32_000), (1, 128_256), (32, 128_256), (256, 128_256)):
    p = torch.softmax(_llm_logits(b, v, torch.float32, gen), -1)
    plain = timed(lambda: torch_wrs.sample_probs(p, min_p=0.1))
    general = timed(lambda: torch_wrs.sample_probs(p, min_p=torch.full((b,), 0.1, device="cuda")))
    print(f"| {b:,} x {v:,} | {plain:.4f} | {general:.4f} | {general / plain:.2f}x |", flush=True)
