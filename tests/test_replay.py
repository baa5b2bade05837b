"""PrioritySampler (prioritized replay): the law of the draws against a float64 mirror of the
same stream of updates (G-tests with fixed seeds), stratified counts, last-write-wins
batches, alpha/eps/beta applied once, no drift, the tree reconstructed exactly on the GPU
against the CPU, batched buffers, errors, reproducibility, opcheck, torch.compile, CUDA graphs."""
import math

import numpy as np
import pytest
import torch

import torch_wrs
from conftest import HAS_CUDA, requires_cuda
from helpers import g_test_pvalue

P_MIN = 1e-4
PrioritySampler = torch_wrs.PrioritySampler


def _gen(device, seed):
    return torch.Generator(device).manual_seed(seed)


def _stream(capacity, steps, batch, seed, zero_share=0.1):
    """A replay-like stream of (index, priority) batches with duplicates and zeros, and
    the float64 mirror it leaves (numpy assignment in order: the last write wins)."""
    rng = np.random.default_rng(seed)
    mirror = np.full(capacity, np.nan)  # NaN: never written, so never drawn
    batches = []
    for _ in range(steps):
        index = rng.integers(0, capacity, batch)
        index[: batch // 8] = index[batch // 8: 2 * (batch // 8)]  # duplicates in every batch
        p = rng.lognormal(0.0, 2.0, batch)
        p[rng.random(batch) < zero_share] = 0.0
        for i, v in zip(index, p):
            mirror[i] = v
        batches.append((torch.from_numpy(index), torch.from_numpy(p)))
    return batches, mirror


def _law(mirror, alpha, eps):
    x = np.nan_to_num(mirror, nan=-1.0) + eps
    t = np.where(x > 0, np.abs(x) ** alpha, 0.0)
    return torch.from_numpy(t / t.sum())


@pytest.mark.parametrize("alpha,eps", [(1.0, 0.0), (0.6, 1e-3), (0.0, 0.0)])
def test_iid_law_matches_mirror(device, alpha, eps):
    big = device.type == "cuda"
    capacity = 1 << 17 if big else 5000
    batches, mirror = _stream(capacity, 40, 4096 if big else 500, seed=1)
    s = PrioritySampler(capacity, alpha=alpha, eps=eps, device=device)
    for index, p in batches:
        s.update_(index.to(device), p.to(device))
    law = _law(mirror, alpha, eps)
    torch.testing.assert_close(s.probs().cpu(), law, rtol=1e-12, atol=0)
    counts = torch.zeros(capacity, dtype=torch.float64)
    draws, per_call = (100_000_000, 10_000_000) if big else (2_000_000, 500_000)
    for c in range(draws // per_call):
        index, prob = s.sample(per_call, stratified=False, generator=_gen(device, 100 + c))
        if c == 0:  # each draw's probability is its slot's, within 1e-6 of the mirror's
            torch.testing.assert_close(prob.cpu(), law[index.cpu()], rtol=1e-6, atol=0)
        counts += torch.bincount(index.cpu(), minlength=capacity).double()
    assert g_test_pvalue(counts, law) > P_MIN  # also fails if a zero-probability slot was drawn


def test_stratified_draws_lie_in_their_segments(device):
    capacity = 3000
    batches, mirror = _stream(capacity, 10, 400, seed=2)
    s = PrioritySampler(capacity, alpha=0.7, eps=0.0, device=device)
    for index, p in batches:
        s.update_(index.to(device), p.to(device))
    law = _law(mirror, 0.7, 0.0)
    n = 1_000_000
    index, prob = s.sample(n, generator=_gen(device, 3))
    index = index.cpu()
    assert (index[1:] >= index[:-1]).all()  # segment order is slot order
    counts = torch.bincount(index, minlength=capacity).double()
    assert (counts - n * law).abs().max() < 2
    assert counts[law == 0].sum() == 0


def test_last_write_wins_and_only_touched_paths_change(device):
    s = PrioritySampler(5000, device=device)
    s.update_(torch.arange(5000, device=device), torch.ones(5000, device=device))
    s.update_(torch.tensor([7, 4000, 7, 7, 4000], device=device), torch.tensor([1.0, 2.0, 3.0, 9.0, 0.0], device=device))
    p = s.priorities().cpu()
    assert p[7] == 9.0 and p[4000] == 0.0 and p[8] == 1.0
    assert s.total().item() == 5000 - 2 + 9.0
    assert s.max().item() == 9.0 and s.min().item() == 1.0


def test_alpha_eps_beta_applied_once(device):
    raw = torch.tensor([0.0, 0.5, 2.0, 7.0, 0.25], dtype=torch.float64)
    alpha, eps, beta = 0.6, 0.01, 0.4
    s = PrioritySampler(5, alpha=alpha, eps=eps, device=device)
    s.update_(torch.arange(5, device=device), raw.to(device))
    t = (raw + eps) ** alpha
    torch.testing.assert_close(s.probs().cpu(), t / t.sum(), rtol=1e-13, atol=0)
    torch.testing.assert_close(s.total().cpu(), t.sum(), rtol=1e-14, atol=0)
    index, prob = s.sample(1000, generator=_gen(device, 4))
    w = s.weights(prob, beta).cpu()
    P = t / t.sum()
    expect = (5 * P[index.cpu()]) ** -beta / ((5 * P.min()) ** -beta)  # Schaul et al., max over the buffer
    torch.testing.assert_close(w, expect, rtol=1e-12, atol=0)
    torchrl = (t[index.cpu()] / t.min()) ** -beta  # TorchRL's (p_i / p_min) ** -beta
    torch.testing.assert_close(w, torchrl, rtol=1e-12, atol=0)
    wb = s.weights(prob, beta, normalize="batch").cpu()
    torch.testing.assert_close(wb, P[index.cpu()] ** -beta / (P[index.cpu()] ** -beta).max(), rtol=1e-12, atol=0)
    s.alpha = 1.0  # rebuilt from the raw priorities
    t1 = raw + eps
    torch.testing.assert_close(s.probs().cpu(), t1 / t1.sum(), rtol=1e-13, atol=0)


def test_zero_priority_is_never_drawn(device):
    s = PrioritySampler(4096, device=device)
    p = torch.zeros(4096, dtype=torch.float64)
    p[::97] = torch.rand(p[::97].shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64) * 1e-300
    p[5] = 1e300  # one slot holds almost all the mass; the tiny ones are still drawable
    s.update_(torch.arange(4096, device=device), p.to(device))
    for stratified in (True, False):
        index, _ = s.sample(200_000, stratified=stratified, generator=_gen(device, 6))
        assert (p[index.cpu()] > 0).all()


def test_no_drift_after_a_million_updates(device):
    capacity = 1 << 14
    s = PrioritySampler(capacity, alpha=0.6, eps=1e-6, device=device)
    g = torch.Generator().manual_seed(7)
    batch = 1000
    for _ in range(1000):  # 1e6 updates
        index = torch.randint(0, capacity, (batch,), generator=g)
        p = torch.rand(batch, generator=g, dtype=torch.float64) * 10 ** torch.randint(-8, 8, (batch,), generator=g)
        s.update_(index.to(device), p.to(device))
    t = ((s.priorities().cpu() + 1e-6) ** 0.6).tolist()
    exact = math.fsum(t)
    assert abs(s.total().item() - exact) / exact < 1e-12


def test_insert_at_max_and_default(device):
    s = PrioritySampler(100, alpha=0.5, device=device)
    s.insert_(torch.tensor([0, 1], device=device))  # nothing stored: priority 1.0
    assert s.priorities()[:2].tolist() == [1.0, 1.0]
    s.update_(torch.tensor([2], device=device), torch.tensor([6.0], device=device))
    s.insert_(torch.tensor([3, 4], device=device))
    s.update_(torch.tensor([5], device=device), s.max())
    assert s.priorities()[2:6].tolist() == [6.0, 6.0, 6.0, 6.0]
    s.update_(torch.tensor([2, 3, 4, 5], device=device), 0.5)  # the largest goes down with its item
    assert s.max().item() == 1.0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_priority_dtypes_int32_index_and_non_contiguous(device, dtype):
    s = PrioritySampler(64, device=device)
    wide = torch.arange(1, 129, device=device).to(dtype).view(64, 2)[:, 1]  # non-contiguous
    index = torch.arange(64, device=device, dtype=torch.int32).flip(0)
    s.update_(index, wide)
    assert torch.equal(s.priorities().cpu(), wide.flip(0).double().cpu())


def test_batched_buffers_are_independent(device):
    shape, capacity = (3, 2), 700
    s = PrioritySampler(capacity, alpha=0.8, batch_shape=shape, device=device)
    singles = [PrioritySampler(capacity, alpha=0.8, device=device) for _ in range(6)]
    g = torch.Generator().manual_seed(8)
    for _ in range(5):
        index = torch.randint(0, capacity, (*shape, 50), generator=g)
        p = torch.rand(*shape, 50, generator=g)
        s.update_(index.to(device), p.to(device))
        for b, single in enumerate(singles):
            single.update_(index.view(6, 50)[b].to(device), p.view(6, 50)[b].to(device))
    probs = s.probs()
    assert probs.shape == (*shape, capacity)
    for b, single in enumerate(singles):
        assert torch.equal(probs.view(6, capacity)[b], single.probs())
    index, prob = s.sample(10, generator=_gen(device, 9))
    assert index.shape == (*shape, 10) and prob.shape == (*shape, 10)
    assert torch.equal(prob, probs.gather(-1, index))
    s.update_(index, 0.0)  # per-buffer draws written back
    assert (s.probs().gather(-1, index) == 0).all()
    assert s.total().shape == shape and s.weights(prob, 0.4).shape == (*shape, 10)


def test_generator_reproduces_and_seeds_differ(device):
    s = PrioritySampler(1000, device=device)
    s.update_(torch.arange(1000, device=device), torch.rand(1000, device=device) + 0.1)
    a = s.sample(64, stratified=False, generator=_gen(device, 10))[0]
    b = s.sample(64, stratified=False, generator=_gen(device, 10))[0]
    c = s.sample(64, stratified=False, generator=_gen(device, 11))[0]
    assert torch.equal(a, b) and not torch.equal(a, c)
    torch.manual_seed(12)
    d = s.sample(64)[0]
    torch.manual_seed(12)
    assert torch.equal(d, s.sample(64)[0])


def test_bad_input_raises_and_leaves_the_state(device):
    s = PrioritySampler(10, device=device)
    with pytest.raises(RuntimeError, match="every priority is 0"):
        s.sample(4)
    s.update_(torch.arange(10, device=device), torch.ones(10, device=device))
    before = s.priorities()
    for index, p, msg in [([3, 10], [1.0, 1.0], "outside \\[0, capacity\\)"), ([3, -2], [1.0, 1.0], "outside"),
                          ([3, 4], [2.0, -1.0], "finite and non-negative"),
                          ([3, 4], [float("nan"), 1.0], "finite and non-negative"),
                          ([3, 4], [float("inf"), 1.0], "finite and non-negative")]:
        with pytest.raises(RuntimeError, match=msg):
            s.update_(torch.tensor(index, device=device), torch.tensor(p, device=device))
        assert torch.equal(s.priorities(), before)  # nothing written
    with pytest.raises(RuntimeError, match="int64 or int32"):
        s.update_(torch.tensor([1.0], device=device), torch.tensor([1.0], device=device))
    with pytest.raises(RuntimeError, match="floating-point"):
        s.update_(torch.tensor([1], device=device), torch.tensor([1], device=device))
    with pytest.raises(RuntimeError, match="broadcast"):
        s.update_(torch.tensor([1, 2], device=device), torch.tensor([1.0, 2.0, 3.0], device=device))
    with pytest.raises(RuntimeError, match="capacity"):
        PrioritySampler(0)
    with pytest.raises(RuntimeError, match="alpha"):
        PrioritySampler(4, alpha=-1.0)
    with pytest.raises(RuntimeError, match="beta"):
        s.weights(torch.ones(2, device=device), -0.5)
    b = PrioritySampler(10, batch_shape=(2,), device=device)
    with pytest.raises(RuntimeError, match="index must have shape"):
        b.update_(torch.tensor([1, 2], device=device), 1.0)
    if HAS_CUDA:  # the op itself (the class moves index and priority to its device)
        other = torch.tensor([[1]], device="cuda" if device.type == "cpu" else "cpu")
        with pytest.raises(RuntimeError, match="is on"):
            torch.ops.wrs.priority_update(s._leaves, s._nodes, s._marks, other, None, 10, 1.0, 0.0)


def test_without_validation_bad_entries_are_skipped(device):
    s = PrioritySampler(10, device=device, validate=False)
    index, prob = s.sample(3)
    assert index.tolist() == [0, 0, 0] and prob.isnan().all()  # the documented empty result
    s.update_(torch.tensor([1, 99, 2, -1, 3], device=device), torch.tensor([1.0, 5.0, float("nan"), 4.0, 2.0], device=device))
    assert s.priorities().tolist() == [0.0, 1.0, 0.0, 2.0] + [0.0] * 6


def test_route_table():
    route = torch.ops.wrs._priority_route
    assert route("cpu", 1, 1 << 20, 256) == "paths" and route("cpu", 1, 1 << 20, 256, sample=True) == "thread"
    assert route("cuda", 1, 1 << 20, 256) == "one_block"
    assert route("cuda", 1, 1 << 20, 1024) == "one_block"
    assert route("cuda", 1, 1 << 20, 4096) == "levels"
    assert route("cuda", 1, 10_000_000, 65536) == "levels"
    assert route("cuda", 1, 1 << 17, 65536) == "rebuild"
    assert route("cuda", 1, 1 << 20, 8192, sample=True) == "warp"
    assert route("cuda", 1, 1 << 20, 8193, sample=True) == "thread"


@requires_cuda
def test_warp_and_thread_draws_follow_the_law():
    """Both CUDA draw kernels (a warp a draw below 8,193 draws, a thread a draw above) give
    each slot its probability: G-tests over 2e7 draws each, and the same draws where the
    two prefix orders agree (all but rounding-level boundaries)."""
    capacity = 300_000
    s = PrioritySampler(capacity, alpha=0.7, device="cuda")
    p = torch.rand(capacity, generator=torch.Generator().manual_seed(15), dtype=torch.float64) ** 4
    p[::7] = 0
    s.update_(torch.arange(capacity, device="cuda"), p.cuda())
    law = s.probs().cpu()
    for n in (8192, 1 << 20):
        counts = torch.zeros(capacity, dtype=torch.int64, device="cuda")
        for c in range(20_000_000 // n):
            index, _ = s.sample(n, stratified=False, generator=_gen("cuda", 16 + c))
            counts += torch.bincount(index, minlength=capacity)
        assert g_test_pvalue(counts.cpu(), law) > P_MIN, n
    few = s.sample(8192, stratified=False, generator=_gen("cuda", 17))[0]
    many = s.sample(3 * 8192, stratified=False, generator=_gen("cuda", 17))[0][:8192]
    assert (few == many).double().mean() > 0.999


@requires_cuda
@pytest.mark.parametrize("capacity,batch,buffers", [(1 << 20, 256, 1), (1 << 20, 4096, 1), (1 << 20, 65536, 1),
                                                    (1 << 17, 65536, 1), (40_000, 3000, 4), (10_000_000, 65536, 1),
                                                    (33, 5000, 1), (5000, 300, 3)])
def test_cuda_tree_equals_cpu_tree(capacity, batch, buffers):
    """Every route leaves the CPU's tree: the same leaves, maxima and minima bit for bit (alpha
    1: no pow), and node sums equal to the CPU's (which adds children in order; a warp adds
    them in its scan's order) to float64's last bits."""
    entries = buffers * batch
    route = torch.ops.wrs._priority_route("cuda", buffers, capacity, entries)
    g = torch.Generator().manual_seed(capacity + batch)
    cpu = PrioritySampler(capacity, batch_shape=(buffers,), eps=0.5)
    gpu = PrioritySampler(capacity, batch_shape=(buffers,), eps=0.5, device="cuda")
    for step in range(4):
        index = torch.randint(0, capacity, (buffers, batch), generator=g)
        index[:, : batch // 4] = index[:, batch // 4: batch // 2]
        p = torch.rand(buffers, batch, generator=g, dtype=torch.float64) * 100
        cpu.update_(index, p)
        gpu.update_(index.cuda(), p.cuda())
        if step == 2:
            cpu.insert_(index[:, :7])
            gpu.insert_(index[:, :7].cuda())
    assert torch.equal(gpu._leaves.cpu(), cpu._leaves), route
    assert torch.equal(gpu._nodes[1:].cpu(), cpu._nodes[1:]), route
    torch.testing.assert_close(gpu._nodes[0].cpu(), cpu._nodes[0], rtol=1e-14, atol=0, msg=route)
    assert (gpu._marks == -1).all(), route


def test_opcheck(device):
    s = PrioritySampler(100, batch_shape=(2,), device=device)
    index = torch.tensor([[1, 5, 1], [7, 99, 0]], device=device)
    p = torch.tensor([[1.0, 2.0, 3.0], [0.5, 4.0, 0.0]], device=device)
    args = (s._leaves, s._nodes, s._marks, index, p, 100, 0.6, 0.0)
    torch.library.opcheck(torch.ops.wrs.priority_update, args, test_utils=("test_schema", "test_faketensor"))
    s.update_(index, p)
    torch.library.opcheck(torch.ops.wrs.priority_sample, (s._leaves, s._nodes, 100, 5, True),
                          {"generator": _gen(device, 13)}, test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.wrs.priority_rebuild, (s._leaves, s._nodes, 100, 0.5, 0.0),
                          test_utils=("test_schema", "test_faketensor"))


def test_compile_fullgraph(device):
    s = PrioritySampler(500, alpha=0.6, device=device, validate=False)
    s.update_(torch.arange(500, device=device), torch.rand(500, device=device) + 0.01)

    @torch.compile(fullgraph=True)
    def step(td):
        index, prob = s.sample(32)
        w = s.weights(prob, 0.4)
        s.update_(index, td)
        return index, w

    index, w = step(torch.full((32,), 5.0, device=device))
    assert index.shape == (32,) and (w > 0).all() and (w <= 1 + 1e-12).all()
    assert (s.priorities()[index] == 5.0).all()


@requires_cuda
def test_cuda_graph_step():
    s = PrioritySampler(1 << 20, alpha=0.6, device="cuda")
    s.update_(torch.arange(1 << 20, device="cuda"), torch.rand(1 << 20, device="cuda"))
    td = torch.empty(256, device="cuda")
    new = torch.arange(16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # warm-up
            index, prob = s.sample(256)
            s.update_(index, td.uniform_())
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # validate=True: the read is skipped while capturing
        index, prob = s.sample(256)
        w = s.weights(prob, 0.4)
        s.update_(index, td)
        s.insert_(new)
        new.add_(16).remainder_(1 << 20)
    td.fill_(3.0)
    graph.replay()
    first = index.clone()
    assert (s.priorities()[first] == 3.0).all() and (w <= 1).all()
    graph.replay()
    assert not torch.equal(first, index)
    assert s.priorities()[16:32].eq(s.max().item()).all()  # inserted at the largest
