"""DQN with prioritized experience replay on CartPole, storage and priorities on the GPU (or
the CPU).

Transitions go into preallocated tensors on the device; torch_wrs.PrioritySampler keeps
their priorities: new ones enter at the largest priority (insert_), a training batch is a
stratified draw with importance weights (sample, weights, beta annealed from 0.4 to 1), and
the batch's new |TD errors| go back in one batched update (update_). Nothing is read back
to the host in the replay loop.

The environment is gymnasium's CartPole-v1 when gymnasium is installed (--env gym), or the
same dynamics in torch with --envs copies side by side (--env builtin, the default without
gymnasium). The run prints the return of the first and last episodes, then the replay
part's time per step (sample, weights, update, insert) against TorchRL's PrioritizedSampler
at the same sizes where TorchRL imports (its trees built from its sources if need be).

    python examples/prioritized_replay.py                       # the GPU where there is one
    python examples/prioritized_replay.py --env builtin --steps 3000 --device cpu
"""
import argparse
import math
import statistics
import time

import torch

import torch_wrs


class CartPole:
    """gymnasium's CartPole-v1 dynamics for `envs` copies at once, in torch on `device`."""

    def __init__(self, envs, device, generator):
        self.envs, self.device, self.g = envs, device, generator
        self.state = self._fresh(envs)
        self.steps = torch.zeros(envs, dtype=torch.int64, device=device)

    def _fresh(self, n):
        return (torch.rand(n, 4, generator=self.g, device=self.device) - 0.5) * 0.1

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state.unbind(1)
        force = (action.float() * 2 - 1) * 10.0
        cos, sin = torch.cos(theta), torch.sin(theta)
        temp = (force + 0.05 * theta_dot ** 2 * sin) / 1.1
        theta_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos ** 2 / 1.1))
        x_acc = temp - 0.05 * theta_acc * cos / 1.1
        self.state = torch.stack([x + 0.02 * x_dot, x_dot + 0.02 * x_acc, theta + 0.02 * theta_dot,
                                  theta_dot + 0.02 * theta_acc], 1)
        self.steps += 1
        failed = (self.state[:, 0].abs() > 2.4) | (self.state[:, 2].abs() > 12 * 2 * math.pi / 360)
        done = failed | (self.steps >= 500)
        next_obs = self.state.clone()
        self.state = torch.where(done.unsqueeze(1), self._fresh(self.envs), self.state)
        self.steps = torch.where(done, 0, self.steps)
        return next_obs, torch.ones(self.envs, device=self.device), failed, done


class GymCartPole:
    """gymnasium's CartPole-v1, one copy, as tensors on `device`."""

    def __init__(self, device, seed):
        import gymnasium

        self.env, self.device, self.envs = gymnasium.make("CartPole-v1"), device, 1
        obs, _ = self.env.reset(seed=seed)
        self.state = torch.as_tensor(obs, device=device).view(1, 4)

    def step(self, action):
        obs, reward, terminated, truncated, _ = self.env.step(int(action.item()))
        next_obs = torch.as_tensor(obs, device=self.device).view(1, 4)
        done = terminated or truncated
        self.state = torch.as_tensor(self.env.reset()[0], device=self.device).view(1, 4) if done else next_obs
        flag = lambda v: torch.tensor([v], device=self.device)  # noqa: E731
        return next_obs, flag(float(reward)), flag(terminated), flag(done)


def q_net(device):
    return torch.nn.Sequential(torch.nn.Linear(4, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128), torch.nn.ReLU(),
                               torch.nn.Linear(128, 2)).to(device)


def replay_step_us(make, capacity, batch, inserts, device, reps=200):
    """Microseconds of one replay step (sample, weights, update, insert) of a sampler."""
    step = make(capacity, device)
    for _ in range(20):
        step(batch, inserts)
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        step(batch, inserts)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps * 1e6


def ours(capacity, device):
    s = torch_wrs.PrioritySampler(capacity, alpha=0.6, eps=1e-6, device=device, validate=False)
    s.update_(torch.arange(capacity, device=device), torch.rand(capacity, device=device))
    td = torch.rand(4096, device=device)
    new = torch.arange(4096, device=device)

    def step(batch, inserts):
        index, prob = s.sample(batch)
        w = s.weights(prob, 0.4)
        s.update_(index, td[:batch])
        s.insert_(new[:inserts])
        return w
    return step


def torchrl(capacity, device):
    from torch_wrs.benchmark_replay import _Storage, torchrl_sampler

    cls, _ = torchrl_sampler(device.type == "cuda")
    if cls is None:
        raise ImportError("TorchRL's trees are not available")
    s = cls(capacity, 0.6, 0.4, eps=1e-6, device=device if device.type == "cuda" else None)
    storage = _Storage(capacity, device)
    s.update_priority(torch.arange(capacity, device=device), torch.rand(capacity, device=device))
    td = torch.rand(4096, device=device)
    new = torch.arange(4096, device=device)

    def step(batch, inserts):
        index, info = s.sample(storage, batch)
        s.update_priority(index, td[:batch])
        s.mark_update(new[:inserts])
        return info
    return step


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", choices=["gym", "builtin"], default=None)
    p.add_argument("--envs", type=int, default=8, help="builtin: copies stepped side by side")
    p.add_argument("--steps", type=int, default=6000, help="environment steps (each trains once)")
    p.add_argument("--capacity", type=int, default=50_000)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-torchrl", action="store_true", help="skip the comparison with TorchRL's sampler")
    args = p.parse_args(argv)
    if args.env is None:
        try:
            import gymnasium  # noqa: F401
            args.env = "gym"
        except ImportError:
            args.env = "builtin"
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    g = torch.Generator(device).manual_seed(args.seed)
    env = GymCartPole(device, args.seed) if args.env == "gym" else CartPole(args.envs, device, g)
    E, C = env.envs, args.capacity
    obs_b = torch.zeros(C, 4, device=device)
    next_b = torch.zeros(C, 4, device=device)
    act_b = torch.zeros(C, dtype=torch.int64, device=device)
    rew_b = torch.zeros(C, device=device)
    fail_b = torch.zeros(C, device=device)
    per = torch_wrs.PrioritySampler(C, alpha=0.6, eps=1e-6, device=device, validate=False)
    q, target = q_net(device), q_net(device)
    target.load_state_dict(q.state_dict())
    opt = torch.optim.Adam(q.parameters(), lr=5e-4)
    ret = torch.zeros(E, device=device)
    finished = []  # (sum of returns, episodes) per step, read at the end
    slots = torch.arange(E, device=device)
    for step in range(args.steps):
        eps = max(0.05, 1.0 - step / (0.4 * args.steps))
        with torch.no_grad():
            greedy = q(env.state).argmax(1)
        explore = torch.rand(E, generator=g, device=device) < eps
        action = torch.where(explore, torch.randint(0, 2, (E,), generator=g, device=device), greedy)
        state = env.state
        next_obs, reward, failed, done = env.step(action)
        at = (slots + step * E) % C
        obs_b[at], next_b[at], act_b[at], rew_b[at], fail_b[at] = state, next_obs, action, reward, failed.float()
        per.insert_(at)  # new transitions at the largest priority
        ret += reward
        finished.append(((ret * done).sum(), done.sum()))
        ret = torch.where(done, 0.0, ret)
        if (step + 1) * E < 1000:
            continue
        beta = 0.4 + 0.6 * step / args.steps
        index, prob = per.sample(args.batch)
        w = per.weights(prob, beta).float()
        with torch.no_grad():
            best = q(next_b[index]).argmax(1, keepdim=True)  # double DQN
            y = rew_b[index] + 0.99 * (1 - fail_b[index]) * target(next_b[index]).gather(1, best).squeeze(1)
        td = q(obs_b[index]).gather(1, act_b[index].unsqueeze(1)).squeeze(1) - y
        loss = (w * torch.nn.functional.smooth_l1_loss(td, torch.zeros_like(td), reduction="none")).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(q.parameters(), 10.0)
        opt.step()
        per.update_(index, td.detach().abs())  # the batch's new priorities, one batched update
        if step % 250 == 0:
            target.load_state_dict(q.state_dict())
    sums = torch.stack([s for s, _ in finished]).cpu()
    counts = torch.stack([c for _, c in finished]).cpu()
    quarter = len(finished) // 4
    first = float(sums[:quarter].sum() / counts[:quarter].sum().clamp_min(1))
    last = float(sums[-quarter:].sum() / counts[-quarter:].sum().clamp_min(1))
    print(f"{args.env} CartPole, {args.steps} steps x {E} env(s) on {device}: mean return "
          f"{first:.1f} in the first quarter of the run, {last:.1f} in the last")
    result = {"first": first, "last": last}
    result["ours_us"] = replay_step_us(ours, C, args.batch, E, device)
    line = f"replay step (sample {args.batch}, weights, update, insert {E}): torch_wrs {result['ours_us']:.1f} us"
    if not args.no_torchrl:
        try:
            result["torchrl_us"] = replay_step_us(torchrl, C, args.batch, E, device)
            line += f", TorchRL's PrioritizedSampler {result['torchrl_us']:.1f} us"
        except ImportError as e:
            line += f" (TorchRL not compared: {e})"
    print(line)
    return result


if __name__ == "__main__":
    main()
