"""torch.ops.wrs.top_logprobs (what sample_logits(..., top_logprobs=n) returns beside its
tokens) against a float64 reference of csrc/llm/top_logprobs.h's rule: log-probs of
y = float32(x) * scale, ranks by the exact order of y, the top n by (y, lower index first)."""
import pytest
import torch

from conftest import requires_cuda

op = torch.ops.wrs.top_logprobs


def reference(x, tokens, n, scale=None):
    y = x.float()
    if scale is not None:
        y = y * scale[:, None]
    lse = torch.logsumexp(y.double(), -1, keepdim=True)
    lp = (y.double() - lse).float()
    drawn = y.gather(-1, tokens)
    ranks = (y.unsqueeze(-2) > drawn.unsqueeze(-1)).sum(-1) + 1
    # stable sort of -y: equal values keep the lower index first
    order = torch.sort(-y.double(), dim=-1, stable=True).indices[:, :n]
    return lp.gather(-1, tokens), order, lp.gather(-1, order), ranks


def _law(rows, v, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, v, generator=g) * 2
    x[:, : v // 50] += torch.rand(rows, v // 50, generator=g) * 8
    x = x[:, torch.randperm(v, generator=g)]
    x[:, 7] = x[:, 3]  # ties
    return x.to(dtype)


def _check(x, tokens, n, scale=None):
    got = op(x, tokens, n, scale=scale)
    want = reference(x.cpu(), tokens.cpu(), n, None if scale is None else scale.cpu())
    lp, top_tokens, top_lp, ranks = (t.cpu() for t in got)
    torch.testing.assert_close(lp, want[0])
    assert torch.equal(top_tokens, want[1])
    torch.testing.assert_close(top_lp, want[2])
    assert torch.equal(ranks, want[3])
    return got


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("v,n", [(1000, 5), (5000, 20), (40_000, 64), (3000, 100), (4099, 20)])
def test_matches_the_reference(device, dtype, v, n):
    x = _law(6, v, v + n, dtype).to(device)
    g = torch.Generator().manual_seed(n)
    tokens = torch.randint(0, v, (6, 7), generator=g).to(device)
    tokens[:, 0] = x.float().argmax(-1)  # rank 1
    scale = (torch.rand(6, generator=g) + 0.5).to(device)
    _check(x, tokens, n)
    _check(x, tokens, n, scale)


def test_a_share_holding_the_whole_top(device):
    """The top 40 items at a stride of 512 (indices 3 + 512 j), each alone in its segment."""
    v = 512 * 60
    x = _law(2, v, 3)
    x[:, 3::512] += 40.0
    tokens = torch.tensor([[3, 5], [515, 0]])
    got = _check(x.to(device), tokens.to(device), 40)
    assert set(got[1][0].tolist()) <= set(range(3, v, 512))


def test_ties_and_a_crowded_segment(device):
    """Equal items past the n-th (every segment's maximum ties the floor: more candidates than
    CUDA ranks in shared memory, and the exact search takes over), a top in one segment, and a
    long row of 10 finite items under 20 asked for."""
    x = _law(4, 40_000, 9)
    x[0] = 0.5  # all equal: the top is 0, 1, ..., n - 1
    x[1, 256:320] += 30.0  # the top 64 inside segments 2 and 3
    x[2, 10:] = float("-inf")
    x[3, ::3] = x[3, 0]  # a third of the row tied
    tokens = torch.tensor([[5], [300], [3], [6]])
    got = _check(x.to(device), tokens.to(device), 64)
    assert torch.equal(got[1][0].cpu(), torch.arange(64))
    assert set(got[1][1].cpu().tolist()) == set(range(256, 320))


@requires_cuda
def test_a_row_longer_than_the_chunks_hold():
    """9 million items: more segments than 32 CTAs keep maxima for, so they fold onto slots."""
    x = _law(1, 9_000_000, 10)
    x[0, 8_999_990:] += 50.0  # the top at the row's end, in one CTA's last segment
    tokens = torch.tensor([[0, 8_999_999]])
    _check(x.cuda(), tokens.cuda(), 20)


def test_masked_rows_invalid_rows_and_bad_tokens(device):
    x = _law(4, 300, 4)
    x[0, 10:] = float("-inf")  # 10 finite items, 20 asked for: the top ends in -inf, lowest index first
    x[1, 5] = float("nan")
    x[2] = float("-inf")
    x[3, 9] = float("inf")
    tokens = torch.tensor([[2, 400], [0, 1], [0, 1], [0, 1]])
    lp, top_tokens, top_lp, ranks = (t.cpu() for t in op(x.to(device), tokens.to(device), 20))
    want = reference(x[:1], tokens[:1].clamp(max=299), 20)
    assert torch.equal(top_tokens[0], want[1][0]) and torch.equal(top_tokens[0, 10:], torch.arange(10, 20))
    torch.testing.assert_close(top_lp[0], want[2][0])
    assert torch.isinf(top_lp[0, 10:]).all()
    assert torch.isnan(lp[0, 1]) and ranks[0, 1] == 0 and ranks[0, 0] == want[3][0, 0]
    for r in (1, 2, 3):  # invalid: NaN log-probs, rank 0, the first n indices
        assert torch.isnan(lp[r]).all() and torch.isnan(top_lp[r]).all() and (ranks[r] == 0).all()
        assert torch.equal(top_tokens[r], torch.arange(20))


def test_many_samples_and_empty(device):
    x = _law(3, 700, 5).to(device)
    tokens = torch.randint(0, 700, (3, 11), generator=torch.Generator().manual_seed(1)).to(device)
    _check(x, tokens, 0)
    _check(x, tokens, 3)
    out = op(x[:0], tokens[:0], 2)
    assert [tuple(t.shape) for t in out] == [(0, 11), (0, 2), (0, 2), (0, 11)]


@pytest.mark.parametrize("bad,match", [
    (dict(n=701), "n must be in"), (dict(tokens="int32"), "tokens must be int64"),
    (dict(scale="short"), "scale must be float32"), (dict(law="int"), "law must be a floating-point"),
])
def test_errors_name_the_argument(device, bad, match):
    x = _law(3, 700, 6).to(device)
    tokens = torch.zeros(3, 1, dtype=torch.long, device=device)
    scale = None
    if bad.get("tokens"):
        tokens = tokens.int()
    if bad.get("scale"):
        scale = torch.ones(2, device=device)
    if bad.get("law"):
        x = x.long()
    with pytest.raises(RuntimeError, match=match):
        op(x, tokens, bad.get("n", 2), scale=scale)


def test_opcheck(device):
    x = _law(3, 500, 7).to(device)
    tokens = torch.randint(0, 500, (3, 2), generator=torch.Generator().manual_seed(2)).to(device)
    torch.library.opcheck(op, (x, tokens, 4), dict(scale=torch.full((3,), 0.5, device=device)))


@requires_cuda
def test_cuda_equals_cpu_and_captures_in_a_graph():
    x = _law(8, 128_256, 8)
    tokens = torch.randint(0, 128_256, (8, 2), generator=torch.Generator().manual_seed(3))
    cpu = op(x, tokens, 20)
    xc, tc = x.cuda(), tokens.cuda()
    eager = op(xc, tc, 20)
    assert torch.equal(eager[1].cpu(), cpu[1]) and torch.equal(eager[3].cpu(), cpu[3])
    torch.testing.assert_close(eager[0].cpu(), cpu[0])
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = op(xc, tc, 20)
    graph.replay()
    for a, b in zip(captured, eager):
        assert torch.equal(a, b)
