"""speculative_accept: the emitted tokens' law against the target rows, acceptance against
its closed form, the residual and bonus draws wherever their weight lies in a long row (the
CUDA kernel splits a row over a cluster of CTAs), more drafts than a warp has lanes, and the
zero residual that falls back to the target row."""
import math

import pytest
import torch

import torch_wrs
from conftest import requires_cuda
from helpers import g_test_pvalue

P_MIN = 1e-4


def test_speculative_law_and_acceptance(device):
    g = torch.Generator().manual_seed(8)
    v, s = 30, 3
    p = torch.softmax(torch.randn(s, v, generator=g), -1)
    q = torch.softmax(torch.randn(s + 1, v, generator=g), -1)
    b = 200_000 if device.type == "cuda" else 50_000
    gen = torch.Generator(device).manual_seed(3)
    draft_tokens = torch.multinomial(p, b, replacement=True, generator=torch.Generator().manual_seed(4)).T.contiguous()
    out, acc = torch_wrs.speculative_accept(p.to(device).expand(b, -1, -1), draft_tokens.to(device),
                                            q.to(device).expand(b, -1, -1), generator=gen)
    out, acc = out.cpu(), acc.cpu()
    # the first emitted token follows the target's first row exactly
    assert g_test_pvalue(torch.bincount(out[:, 0], minlength=v), q[0]) > P_MIN
    # acceptance of the first draft: sum min(p, q)
    a1 = torch.minimum(p[0], q[0]).sum().item()
    assert abs((acc >= 1).double().mean().item() - a1) < 5 * math.sqrt(a1 * (1 - a1) / b)
    # given acceptance of the first, the second emitted token follows the target's second row
    second = out[acc >= 1, 1]
    assert g_test_pvalue(torch.bincount(second, minlength=v), q[1]) > P_MIN
    assert ((out == -1) == (torch.arange(s + 1) > acc[:, None])).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_speculative_point_masses_anywhere_in_a_long_row(device, dtype):
    """Row r rejects its draft `reject[r]` for certain (or accepts all 40), and the residual
    (or the bonus row) is positive at one item only, `where[r]`: that item must be emitted.
    An odd V leaves rows unaligned; 40 drafts span two warps' worth of acceptance tests."""
    v = 200_003 if device.type == "cuda" else 20_011
    s = 40
    where = torch.tensor([0, 1, 127, 128, v // 8 + 3, v // 2, v - 129, v - 1])
    reject = torch.tensor([0, 5, 31, 32, 35, 39, 40, 40])
    b = len(where)
    g = torch.Generator().manual_seed(17)
    q = torch.rand(b, s + 1, v, generator=g).to(dtype)
    p = q[:, :s].clone()  # q - p = 0: no residual but where it is made
    tokens = torch.full((b, s), 7, dtype=torch.long)
    for r in range(b):
        p[r, :, 7] = 0.0  # every draft is accepted (u p = 0 < q) ...
        j = int(reject[r])
        if j < s:  # ... but draft j, whose target weight is 0
            p[r, j, 7], q[r, j, 7] = 1.0, 0.0
        q[r, j, where[r]] = q[r, j, where[r]] + 1.0  # the residual's (or bonus row's) one item
        if j == s:
            q[r, j] = 0.0
            q[r, j, where[r]] = 0.5
    out, acc = torch_wrs.speculative_accept(p.to(device), tokens.to(device), q.to(device),
                                            generator=torch.Generator(device).manual_seed(1))
    out, acc = out.cpu(), acc.cpu()
    assert torch.equal(acc, reject)
    assert torch.equal(out.gather(1, acc[:, None])[:, 0], where)
    assert ((out == 7) == (torch.arange(s + 1) < acc[:, None])).all()
    assert ((out == -1) == (torch.arange(s + 1) > acc[:, None])).all()


def test_speculative_zero_residual_falls_back_to_the_target(device):
    """p = 2q: a rejected draft leaves max(0, q - p) = 0 everywhere, and the token comes from
    the target row, here one item; each draft is accepted with probability 1/2."""
    v, s, b = 5_000, 2, 20_000
    where = 1234
    q = torch.zeros(s + 1, v)
    q[:, where] = 0.5
    q[:, ::97] += 1e-3  # more items with weight, all in p = 2q too
    p = 2 * q[:s]
    tokens = torch.full((b, s), where, dtype=torch.long)
    out, acc = torch_wrs.speculative_accept(p.to(device).expand(b, -1, -1), tokens.to(device),
                                            q.to(device).expand(b, -1, -1),
                                            generator=torch.Generator(device).manual_seed(2))
    out, acc = out.cpu(), acc.cpu()
    rejected = acc < s
    # after a rejection the target row's law: item `where` or the 1e-3 items
    law = q[0] / q[0].sum()
    last = out.gather(1, acc[:, None])[:, 0]
    assert g_test_pvalue(torch.bincount(last[rejected], minlength=v), law) > P_MIN
    # acceptance of each draft: min(1, q / p) = 1/2 at `where`
    assert abs((acc >= 1).double().mean().item() - 0.5) < 5 * math.sqrt(0.25 / b)


@requires_cuda
def test_speculative_cuda_residual_law_over_a_cluster():
    """Few rows of 65,536 items: each row's cluster spans 8 CTAs. The residual has weight on
    40 items spread over the row; 640,000 draws (CUDA graph replays) against its law."""
    v, b = 65_536, 8
    g = torch.Generator().manual_seed(21)
    support = torch.randperm(v, generator=g)[:40]
    q = torch.rand(2, v, generator=g) * 1e-3
    p = q[:1].clone()
    q[0, support] += torch.rand(40, generator=g) + 0.1
    p[0, 3], q[0, 3] = 1.0, 0.0  # the draft token 3 is always rejected
    residual = torch.clamp(q[0] - p[0], min=0).double()
    draft = p.cuda().expand(b, -1, -1).contiguous()
    target = q.cuda().expand(b, -1, -1).contiguous()
    tokens = torch.full((b, 1), 3, device="cuda")
    counts = torch.zeros(v, dtype=torch.long, device="cuda")
    ones = torch.ones(b, dtype=torch.long, device="cuda")

    def step():
        out, _ = torch_wrs.speculative_accept(draft, tokens, target)
        counts.index_add_(0, out[:, 0], ones)

    torch.manual_seed(0)
    step()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(200):
            step()
    counts.zero_()
    for _ in range(400):
        graph.replay()
    counts = counts.cpu()
    assert counts.sum() == 400 * 200 * b
    assert counts[residual == 0].sum() == 0
    assert g_test_pvalue(counts[residual > 0], residual[residual > 0] / residual.sum()) > P_MIN
