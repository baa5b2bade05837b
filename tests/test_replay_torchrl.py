"""The TorchRL adapter (torch_wrs.integrations.torchrl.PrioritizedSampler) inside TorchRL's
replay buffers. The tests marked "ported" follow TorchRL's own prioritized-sampler tests
(pytorch/rl, test/test_rb.py: test_prb_update_max_priority, test_prb_ndim, test_prb and the
PrioritizedSampler docstring example), with our sampler passed where TorchRL builds its own."""
import numpy as np
import pytest
import torch

from conftest import DEVICES
from helpers import g_test_pvalue

try:
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, ListStorage, ReplayBuffer, TensorDictReplayBuffer

    from torch_wrs.integrations.torchrl import PrioritizedSampler
except ImportError as e:  # not installed, or built for another Python or torch
    pytest.skip(f"TorchRL is not importable here ({e}); pip install torchrl", allow_module_level=True)


def _tree(rb, n):
    return torch.tensor([rb.sampler._sum_tree[i] for i in range(n)])


def test_docstring_example_ported():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=PrioritizedSampler(max_capacity=10, alpha=1.0, beta=1.0))
    priority = torch.tensor([0, 1000])
    rb.add(TensorDict({"reward": 0, "obs": [0], "priority": priority[0]}, []))
    rb.add(TensorDict({"reward": 1, "obs": [1], "priority": priority[1]}, []))
    rb.update_priority(torch.tensor([0, 1]), priority=priority)
    sample, info = rb.sample(10, return_info=True)
    assert (info["index"] == 1).all() and (sample["reward"] == 1).all()
    torch.testing.assert_close(info["priority_weight"], torch.full((10,), 1e-8 / (1000 + 1e-8)))
    assert info["priority_weight"].dtype == torch.float32


@pytest.mark.parametrize("max_priority_within_buffer", [True, False])
def test_prb_update_max_priority_ported(max_priority_within_buffer):
    rb = ReplayBuffer(storage=LazyTensorStorage(11),
                      sampler=PrioritizedSampler(max_capacity=11, alpha=1.0, beta=1.0,
                                                 max_priority_within_buffer=max_priority_within_buffer))
    for data in torch.arange(20):
        idx = rb.add(data)
        rb.update_priority(idx, 21 - data)
        if data <= 10 or not max_priority_within_buffer:
            assert rb.sampler._max_priority[0] == 21
            assert rb.sampler._max_priority[1] == 0
        else:
            sumtree = _tree(rb, 11)
            assert rb.sampler._max_priority[0] == sumtree.max()
            assert rb.sampler._max_priority[1] == sumtree.argmax()
    idx = rb.extend(torch.arange(10))
    rb.update_priority(idx, 12)
    if max_priority_within_buffer:
        assert rb.sampler._max_priority[0] == 12 and rb.sampler._max_priority[1] == 0
    else:
        assert rb.sampler._max_priority[0] == 21 and rb.sampler._max_priority[1] == 0


def test_prb_ndim_ported():
    torch.manual_seed(0)
    for make in (ReplayBuffer, TensorDictReplayBuffer):  # 1-D storage
        rb = make(sampler=PrioritizedSampler(max_capacity=100, alpha=1.0, beta=1.0), storage=LazyTensorStorage(100),
                  batch_size=4)
        idx = rb.extend(TensorDict({"a": torch.arange(10), "p": torch.ones(10) / 2}, [10]))
        assert (_tree(rb, 10) == 1).all()  # new items at the default priority
        rb.update_priority(idx, 2)
        assert (_tree(rb, 10) == 2).all()
        s, info = rb.sample(return_info=True)
        rb.update_priority(info["index"], 3)
        assert (_tree(rb, 10)[info["index"]] == 3).all()
    # TorchRL's TensorDictPrioritizedReplayBuffer case: a TensorDictReplayBuffer with priority_key
    rb = TensorDictReplayBuffer(sampler=PrioritizedSampler(max_capacity=100, alpha=1.0, beta=1.0),
                                storage=LazyTensorStorage(100), batch_size=4, priority_key="p")
    idx = rb.extend(TensorDict({"a": torch.arange(10), "p": torch.ones(10) / 2}, [10]))
    assert (_tree(rb, 10) == 0.5).all()
    rb.update_priority(idx, 2)
    s = rb.sample()
    s["p"] = torch.ones(4) * 10_000
    rb.update_tensordict_priority(s)
    assert (_tree(rb, 10)[s["index"]] == 10_000).all()
    s2 = rb.sample()  # the heavy items take every draw
    assert (s2["index"].unsqueeze(0) == s["index"].unsqueeze(1)).any(0).all()
    for make in (ReplayBuffer, TensorDictReplayBuffer):  # 2-D storage
        rb = make(sampler=PrioritizedSampler(max_capacity=100, alpha=1.0, beta=1.0),
                  storage=LazyTensorStorage(100, ndim=2), batch_size=4)
        idx = rb.extend(TensorDict({"a": torch.arange(5).expand(2, 5), "p": torch.ones(2, 5) / 2}, [2, 5]))
        assert (_tree(rb, 10) == 1).all()
        rb.update_priority(idx, 2)
        assert (_tree(rb, 10) == 2).all()
        s, info = rb.sample(return_info=True)
        rb.update_priority(info["index"], 10_000)
        priorities = _tree(rb, 10).reshape(5, 2)
        assert (priorities[info["index"]] == 10_000).all()


@pytest.mark.parametrize("device", DEVICES)
def test_prb_ported(device):
    torch.manual_seed(0)
    rb = TensorDictReplayBuffer(storage=ListStorage(5), sampler=PrioritizedSampler(5, alpha=0.7, beta=0.9),
                                priority_key="td_error", batch_size=5)
    td1 = TensorDict({"a": torch.randn(3, 1), "td_error": torch.rand(3, 1) / 10, "_idx": torch.arange(3).view(3, 1)},
                     batch_size=[3]).to(device)
    rb.extend(td1)
    s = rb.sample()
    assert s.batch_size == torch.Size([5])
    assert (td1[s.get("_idx").squeeze()].get("a") == s.get("a")).all()
    td2 = TensorDict({"a": torch.randn(5, 1), "td_error": torch.rand(5, 1) / 10, "_idx": torch.arange(5).view(5, 1)},
                     batch_size=[5]).to(device)
    rb.extend(td2)
    s = rb.sample()
    assert (td2[s.get("_idx").squeeze()].get("a") == s.get("a")).all()
    s.set("td_error", torch.full((5, 1), 1e6, device=device))  # the drawn items now dominate
    rb.update_tensordict_priority(s)
    again = rb.sample()
    assert set(again.get("_idx").view(-1).tolist()) <= set(s.get("_idx").view(-1).tolist())


@pytest.mark.parametrize("device", DEVICES)
def test_law_and_weights_are_torchrl_s(device):
    """Draws follow (p + eps)^alpha / sum, weights (t_i / t_min)^-beta, with the tree on the storage's device."""
    n, alpha, beta, eps = 300, 0.6, 0.4, 1e-8
    rb = ReplayBuffer(storage=LazyTensorStorage(n, device=device), sampler=PrioritizedSampler(n, alpha, beta, eps),
                      batch_size=50_000)
    rb.extend(torch.arange(n, dtype=torch.float32, device=device))
    assert rb.sampler.device.type == torch.device(device).type
    p = torch.from_numpy(np.random.default_rng(0).lognormal(0, 1.5, n))
    rb.update_priority(torch.arange(n), p)
    t = (p + eps) ** alpha
    counts = torch.zeros(n, dtype=torch.float64)
    for _ in range(20):
        data, info = rb.sample(return_info=True)
        index = info["index"].cpu()
        torch.testing.assert_close(info["priority_weight"].cpu().double(), (t[index] / t.min()) ** -beta,
                                   rtol=1e-6, atol=0)
        counts += torch.bincount(index, minlength=n).double()
    assert g_test_pvalue(counts, t) > 1e-4


def test_state_dict_dumps_and_alpha_schedule(tmp_path):
    a = PrioritizedSampler(50, alpha=0.5, beta=0.5)
    a.update_priority(torch.arange(20), torch.arange(20.0))
    b = PrioritizedSampler(50, alpha=0.9, beta=0.1)
    b.load_state_dict(a.state_dict())
    assert b.alpha == 0.5 and torch.equal(b._core.probs(), a._core.probs())
    a.dumps(tmp_path)
    c = PrioritizedSampler(50, alpha=0.9, beta=0.1)
    c.loads(tmp_path)
    assert torch.equal(c._core.probs(), a._core.probs()) and c._max_priority[0] == 19
    a.alpha = 1.0  # re-transformed from the raw priorities, as TorchRL's setter does
    expect = torch.arange(20.0, dtype=torch.float64) + 1e-8
    torch.testing.assert_close(a._core.probs()[:20], expect / expect.sum(), rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="alpha must be greater or equal than 0"):
        PrioritizedSampler(10, alpha=-1.0, beta=0.5)
    with pytest.raises(RuntimeError, match="Cannot sample from an empty storage"):
        ReplayBuffer(storage=LazyTensorStorage(10), sampler=PrioritizedSampler(10, 1.0, 1.0)).sample(2)
