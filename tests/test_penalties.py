"""process_logits: the pass before sampling (bitmask, banned ids, min_tokens, logit bias,
repetition / frequency / presence penalties) against a float64 reference that applies each
rule token by token in vLLM's order."""
import pytest
import torch

import torch_wrs
from conftest import requires_cuda

V = 70


def reference(x, allowed=None, banned=(), young=False, eos=(), bias=(), output=(), prompt=(), rep=None, freq=None,
              pres=None):
    """One row, rule by rule, in vLLM's order."""
    x = x.double().clone()
    for t in range(V):
        if allowed is not None and t not in allowed:
            x[t] = float("-inf")
    for t in banned:
        x[t] = float("-inf")
    if young:
        for t in eos:
            x[t] = float("-inf")
    for t, b in bias:
        x[t] += b
    counts = torch.zeros(V, dtype=torch.float64)
    for t in output:
        counts[t] += 1
    seen = set(output) | set(prompt)
    if rep is not None:
        for t in seen:
            x[t] = x[t] / rep if x[t] > 0 else x[t] * rep
    if freq is not None:
        x -= freq * counts
    if pres is not None:
        x -= pres * (counts > 0).double()
    return x


def _bitmask(allowed_rows):
    words = (V + 31) // 32
    mask = torch.zeros(len(allowed_rows), words, dtype=torch.int64)
    for r, allowed in enumerate(allowed_rows):
        for t in allowed:
            mask[r, t // 32] |= 1 << (t % 32)
    return torch.where(mask >= 2**31, mask - 2**32, mask).to(torch.int32)  # bit 31 as the sign bit


def test_every_rule_in_vllms_order(device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, V, generator=g) * 3
    allowed = [set(range(0, V, 2)) | {63}, set(range(V)), {1, 2, 3, 31, 32, 64, 69}]
    banned = torch.tensor([[4, 10, -1], [0, -1, -1], [2, 3, 69]])
    eos = torch.tensor([7, 8])
    lengths = torch.tensor([0, 5, 1])
    bias_ids = torch.tensor([[6, 12, -1], [7, 20, 21], [1, -1, -1]])
    bias_val = torch.tensor([[1.5, -2.0, 9.0], [4.0, 0.5, -0.5], [-3.0, 9.0, 9.0]])
    out_ids = torch.tensor([[12, 12, 6, 30, -1], [20, 20, 20, 7, 0], [-1, -1, -1, -1, -1]])
    prompt_ids = torch.tensor([[1, 2, 3], [44, -1, -1], [64, 1, -1]])
    rep = torch.tensor([1.3, 0.8, 2.0])
    got = torch_wrs.process_logits(
        x.to(device), allowed_bitmask=_bitmask(allowed).to(device), banned_ids=banned.to(device), min_tokens=2,
        output_lengths=lengths.to(device), eos_ids=eos.to(device),
        logit_bias=(bias_ids.to(device), bias_val.to(device)), output_ids=out_ids.to(device),
        prompt_ids=prompt_ids.to(device), repetition_penalty=rep.to(device), frequency_penalty=0.4,
        presence_penalty=torch.tensor([0.1, 0.2, 0.3], device=device))
    assert got.dtype == torch.float32 and got.shape == x.shape
    for r in range(3):
        ref = reference(x[r], allowed[r], [t for t in banned[r].tolist() if t >= 0], int(lengths[r]) < 2,
                        eos.tolist(), [(t, v) for t, v in zip(bias_ids[r].tolist(), bias_val[r].tolist()) if t >= 0],
                        [t for t in out_ids[r].tolist() if t >= 0], [t for t in prompt_ids[r].tolist() if t >= 0],
                        float(rep[r]), 0.4, [0.1, 0.2, 0.3][r])
        torch.testing.assert_close(got[r].cpu().double(), ref, rtol=1e-6, atol=1e-5)


def test_counts_equal_ids_and_batched_leading_dimensions(device):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(2, 3, V, generator=g)).to(device, torch.bfloat16)
    ids = torch.randint(-1, V, (6, 9), generator=g).to(device)
    counts = torch.zeros(6, V, device=device)
    for r in range(6):
        for t in ids[r].tolist():
            if t >= 0:
                counts[r, t] += 1
    a = torch_wrs.process_logits(x, output_ids=ids, frequency_penalty=0.3, presence_penalty=0.2,
                                 repetition_penalty=1.1)
    b = torch_wrs.process_logits(x, output_counts=counts, frequency_penalty=0.3, presence_penalty=0.2,
                                 repetition_penalty=1.1)
    assert a.shape == (2, 3, V) and torch.equal(a, b)
    plain = torch_wrs.process_logits(x.transpose(0, 1))  # non-contiguous, nothing to do
    assert torch.equal(plain, x.transpose(0, 1).float())


def test_masked_rows_sample_only_allowed_tokens(device):
    x = torch.randn(64, V, device=device)
    allowed = [set(range(r % 5, V, 5)) for r in range(64)]
    got = torch_wrs.process_logits(x, allowed_bitmask=_bitmask(allowed).to(device))
    tokens = torch_wrs.sample_logits(got, 50, top_p=0.9)
    for r in range(64):
        assert set(tokens[r].tolist()) <= allowed[r]


def test_errors_name_the_argument(device):
    x = torch.randn(2, V, device=device)
    cases = [
        (dict(banned_ids=torch.tensor([V], device=device)), "banned_ids holds ids out of"),
        (dict(output_ids=torch.tensor([[1], [-2]], device=device), frequency_penalty=1.0), "output_ids holds ids"),
        (dict(allowed_bitmask=torch.zeros(2, 2, dtype=torch.int64, device=device)), "allowed_bitmask must be int32"),
        (dict(min_tokens=3), "min_tokens needs output_lengths and eos_ids"),
        (dict(repetition_penalty=0.0, output_ids=torch.tensor([1], device=device)), "repetition_penalty must be > 0"),
        (dict(frequency_penalty=torch.ones(3, device=device), output_ids=torch.tensor([1], device=device)),
         "frequency_penalty must hold one value per row"),
        (dict(output_ids=torch.tensor([1.0], device=device)), "output_ids must be an int32 or int64"),
        (dict(output_ids=torch.tensor([1], device=device), output_counts=torch.zeros(2, V, device=device)),
         "not both"),
    ]
    for kw, text in cases:
        with pytest.raises(RuntimeError, match=text):
            torch_wrs.process_logits(x, **kw)
    # validate=False: ids out of range are left out, nothing is read back.
    got = torch_wrs.process_logits(x, banned_ids=torch.tensor([V, 3], device=device), validate=False)
    assert torch.isinf(got[:, 3]).all() and int(torch.isinf(got).sum()) == 2
    bad = torch_wrs.process_logits(x, output_ids=torch.tensor([1], device=device),
                                   repetition_penalty=torch.tensor([1.2, -1.0], device=device))
    assert torch.isnan(bad[1]).all() and not torch.isnan(bad[0]).any()


def test_long_histories_with_many_repeats(device):
    """Hash-table collisions and repeats: 600 ids a row over 70 tokens, prompt and output."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(5, V, generator=g) * 2
    out_ids = torch.randint(-1, V, (5, 600), generator=g)
    prompt_ids = torch.randint(-1, V, (5, 300), generator=g)
    got = torch_wrs.process_logits(x.to(device), output_ids=out_ids.to(device), prompt_ids=prompt_ids.to(device),
                                   repetition_penalty=1.7, frequency_penalty=0.05, presence_penalty=0.3)
    for r in range(5):
        ref = reference(x[r], output=[t for t in out_ids[r].tolist() if t >= 0],
                        prompt=[t for t in prompt_ids[r].tolist() if t >= 0], rep=1.7, freq=0.05, pres=0.3)
        torch.testing.assert_close(got[r].cpu().double(), ref, rtol=1e-6, atol=1e-5)


def test_opcheck(device):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, V, generator=g).to(device)
    ids = torch.randint(-1, V, (3, 6), generator=g).to(device)
    kw = dict(allowed_bitmask=_bitmask([set(range(0, V, 3))] * 3).to(device), masked_ids=ids, bias_ids=ids,
              bias_values=torch.ones(3, 6, device=device), output_ids=ids, prompt_ids=ids,
              repetition_penalty=torch.full((3,), 1.2, device=device),
              frequency_penalty=torch.full((3,), 0.1, device=device),
              presence_penalty=torch.full((3,), 0.1, device=device))
    torch.library.opcheck(torch.ops.wrs.penalize_logits.default, (x,), kw)


@requires_cuda
def test_cuda_equals_cpu_and_captures_in_a_graph():
    g = torch.Generator().manual_seed(6)
    x = torch.randn(8, 1000, generator=g, dtype=torch.float64).to(torch.bfloat16)
    words = (1000 + 31) // 32
    bits = torch.randint(-2**31, 2**31 - 1, (8, words), generator=g, dtype=torch.int64).to(torch.int32)
    kw = dict(allowed_bitmask=bits, banned_ids=torch.tensor([1, 2, 3]),
              logit_bias=(torch.randperm(1000, generator=g)[:40].view(8, 5), torch.randn(8, 5, generator=g)),
              output_ids=torch.randint(-1, 1000, (8, 64), generator=g),
              prompt_ids=torch.randint(-1, 1000, (8, 32), generator=g), repetition_penalty=1.3,
              frequency_penalty=torch.rand(8, generator=g), presence_penalty=0.2, validate=False)
    cpu = torch_wrs.process_logits(x, **kw)
    to_cuda = {k: (v.cuda() if isinstance(v, torch.Tensor) else tuple(t.cuda() for t in v) if isinstance(v, tuple)
                   else v) for k, v in kw.items()}
    xc = x.cuda()
    assert torch.equal(torch_wrs.process_logits(xc, **to_cuda).cpu(), cpu)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = torch_wrs.process_logits(xc, **to_cuda)
        tokens = torch_wrs.sample_logits(captured, top_p=0.9)
    xc.copy_(x.flip(-1).cuda())
    graph.replay()
    assert torch.equal(captured.cpu(), torch_wrs.process_logits(x.flip(-1), **kw))
    assert torch.isfinite(captured.gather(1, tokens)).all()
