# The top-p-alone A/B of docs/llm.md (rejection, the general kernel, FlashInfer; CUDA graphs), kept in history only.
import torch, torch_wrs
from torch_wrs import benchmark_llm as bl
fi = bl.flashinfer()
gen = torch.Generator("cuda").manual_seed(0)
def peaked(b, v):
    x = torch.randn(b, v, device="cuda", generator=gen) * 1.0
    x[:, :8] += 14 + torch.rand(b, 8, device="cuda", generator=gen) * 3
    return x[:, torch.randperm(v, device="cuda", generator=gen)]
print("| kind | rows x vocab | plain (rejection) | general | FlashInfer | plain/FI | general/FI |")
for kind in ("heavy", "peaked"):
    for v in (32_000, 128_256):
        for b in (1, 16, 64, 256, 1024):
            x = bl._llm_logits(b, v, torch.float32, gen) if kind == "heavy" else peaked(b, v)
            p = torch.softmax(x, -1)
            t_plain = bl.graphed(lambda: torch_wrs.sample_probs(p, top_p=0.9))
            t_gen = bl.graphed(lambda: torch_wrs.sample_probs(p, top_p=0.9, return_logprobs="processed"))
            t_fi = bl.graphed(lambda: fi.top_p(p, 0.9, 1, 0))
            print(f"| {kind} | {b} x {v} | {t_plain:.4f} | {t_gen:.4f} | {t_fi:.4f} | {t_fi/t_plain:.2f}x | {t_fi/t_gen:.2f}x |", flush=True)
