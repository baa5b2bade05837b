"""``python -m torch_wrs.benchmark llm-extras``: what the pass before sampling (apart and
fused), top-n log-probs, typical-p, top-n-sigma and masked rows cost against sampling alone, on the GPU,
in CUDA graphs (ms per call, medians)."""
import datetime

import torch

import torch_wrs
from . import penalties
from .benchmark_llm import _llm_logits, graphed

V = 128_256


def _pass_inputs(b, gen):
    """A decode step's per-request state: 512 tokens of history, 8 biased ids, a grammar
    bitmask allowing half the vocabulary, 4 banned ids."""
    history = torch.randint(V, (b, 512), device="cuda", generator=gen)
    bias_ids = torch.randint(V, (b, 8), device="cuda", generator=gen)
    words = (V + 31) // 32
    bitmask = torch.randint(-2**31, 2**31 - 1, (b, words), device="cuda", dtype=torch.int64)
    return dict(output_ids=history, logit_bias=(bias_ids, torch.randn(b, 8, device="cuda", generator=gen)),
                allowed_bitmask=bitmask.to(torch.int32), banned_ids=torch.arange(4, device="cuda"),
                repetition_penalty=1.1, frequency_penalty=0.2, presence_penalty=0.1, validate=False)


def _torch_reference(x, kw, temperature, top_k, top_p):
    """What a user writes without torch_wrs: the pass and Hugging Face's warpers in torch ops."""
    rows, v = x.shape
    shifts = torch.arange(32, device=x.device)
    allowed = ((kw["allowed_bitmask"][..., None] >> shifts) & 1).flatten(1)[:, :v].bool()
    y = torch.where(allowed, x, float("-inf"))
    y = y.index_fill(1, kw["banned_ids"], float("-inf"))
    ids, values = kw["logit_bias"]
    y = y.scatter_add(1, ids, values)
    hist = kw["output_ids"]
    counts = torch.zeros_like(y).scatter_add_(1, hist, torch.ones_like(hist, dtype=y.dtype))
    seen = counts > 0
    r = kw["repetition_penalty"]
    y = torch.where(seen, torch.where(y > 0, y / r, y * r), y)
    y = y - kw["frequency_penalty"] * counts - kw["presence_penalty"] * seen
    y = y / temperature
    kth = y.topk(top_k, -1).values[:, -1:]
    y = y.masked_fill(y < kth, float("-inf"))
    sorted_y, order = y.sort(-1, descending=True)
    cum = sorted_y.softmax(-1).cumsum(-1)
    drop = (cum - sorted_y.softmax(-1)) > top_p
    y = y.scatter(1, order, sorted_y.masked_fill(drop, float("-inf")))
    return torch.multinomial(y.softmax(-1), 1)


def _typical_torch(x, mass):
    """Hugging Face's TypicalLogitsWarper as written in transformers (float32 torch ops)."""
    normalized = torch.log_softmax(x, -1)
    p = torch.exp(normalized)
    ent = -(normalized * p).nansum(-1, keepdim=True)
    shifted_scores = torch.abs((-normalized) - ent)
    sorted_scores, sorted_indices = torch.sort(shifted_scores, descending=False)
    cumulative_probs = x.gather(-1, sorted_indices).softmax(dim=-1).cumsum(dim=-1)
    last_ind = (cumulative_probs < mass).sum(dim=1).clamp_(max=x.shape[-1] - 1)
    remove = sorted_scores > sorted_scores.gather(1, last_ind.view(-1, 1))
    return x.masked_fill(remove.scatter(1, sorted_indices, remove), float("-inf"))


def _top_n_sigma_torch(x, n):
    """Top-n-sigma as its authors' reference writes it (float32 torch ops)."""
    return x.masked_fill(x < x.amax(-1, keepdim=True) - n * x.std(-1, keepdim=True), float("-inf"))


def run(args):
    gen = torch.Generator("cuda").manual_seed(0)
    controls = dict(temperature=0.7, top_k=50, top_p=0.9)
    lines = [f"Extras against sampling alone on {torch.cuda.get_device_name()}, torch {torch.__version__}, "
             f"CUDA {torch.version.cuda}, {datetime.date.today()}; float32 logits, V = {V:,}; ms per call in a CUDA graph.", "",
             "| rows | case | ms | sampling alone ms | ratio |", "|---:|---|---:|---:|---:|"]

    def row(b, name, ms, alone):
        lines.append(f"| {b} | {name} | {ms:.4f} | {alone:.4f} | {ms / alone:.2f}x |")
        print(lines[-1], flush=True)

    for b in (1, 256):
        x = _llm_logits(b, V, torch.float32, gen)
        alone = graphed(lambda: torch_wrs.sample_logits(x, **controls))
        kw = _pass_inputs(b, gen)
        row(b, "process_logits + sampling (temperature, top-k, top-p)",
            graphed(lambda: torch_wrs.sample_logits(torch_wrs.process_logits(x, **kw), **controls)),
            alone)
        ops = dict(temperature_value=0.7, top_k_value=50, top_p_value=0.9)  # `controls` as the op takes them
        row(b, "the pass fused into the sampler's read (penalty_plan, then sample_llm(overrides=))",
            graphed(lambda: torch.ops.wrs.sample_llm(x, 1, overrides=penalties._plan(x, **kw), **ops)), alone)
        row(b, "the pass and sampling in torch ops (sort, softmax, multinomial)",
            graphed(lambda: _torch_reference(x, kw, **controls)), alone)
        row(b, "top_logprobs=20", graphed(lambda: torch_wrs.sample_logits(x, top_logprobs=20,
                                                                           **controls)), alone)
        # Where top_logprobs' time goes: its op after the draw, the op without a top n (the
        # log-sum-exp and the rank), and one plain read of the row (the floor of a pass).
        drawn = torch_wrs.sample_logits(x, **controls)
        scale = torch.full((b,), 1 / controls["temperature"], device="cuda")
        row(b, "torch.ops.wrs.top_logprobs alone, n = 20", graphed(
            lambda: torch.ops.wrs.top_logprobs(x, drawn, 20, scale=scale)), alone)
        row(b, "torch.ops.wrs.top_logprobs alone, n = 0", graphed(
            lambda: torch.ops.wrs.top_logprobs(x, drawn, 0, scale=scale)), alone)
        row(b, "one read of the row (amax)", graphed(lambda: x.amax(-1)), alone)
        top_p = graphed(lambda: torch_wrs.sample_logits(x, top_p=0.9))
        row(b, "typical_p=0.9 (against top_p=0.9)", graphed(lambda: torch_wrs.sample_logits(x,
                                                                                             typical_p=0.9)), top_p)
        row(b, "top_n_sigma=1 (against top_p=0.9)", graphed(lambda: torch_wrs.sample_logits(x,
                                                                                             top_n_sigma=1.0)), top_p)
        row(b, "typical_p=0.9 in torch ops (TypicalLogitsWarper), then sampling (against top_p=0.9)",
            graphed(lambda: torch_wrs.sample_logits(_typical_torch(x, 0.9))), top_p)
        row(b, "top_n_sigma=1 in torch ops, then sampling (against top_p=0.9)",
            graphed(lambda: torch_wrs.sample_logits(_top_n_sigma_torch(x, 1.0))), top_p)
        masked = x.clone()
        masked[:, ::2] = float("-inf")
        for name, kw in (("plain", {}), ("top-k 50", dict(top_k=50)), ("top-p 0.9", dict(top_p=0.9)),
                         ("min-p 0.1", dict(min_p=0.1)), ("top-k 50 + top-p 0.9", dict(top_k=50, top_p=0.9))):
            unmasked = graphed(lambda: torch_wrs.sample_logits(x, **kw))
            row(b, f"half the logits -inf, {name} (against unmasked)",
                graphed(lambda: torch_wrs.sample_logits(masked, **kw)), unmasked)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write("\n".join(lines) + "\n")
