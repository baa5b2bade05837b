"""examples/prioritized_replay.py: DQN with PrioritySampler learns CartPole (the return of
the last quarter of the run far above the first's), and its replay step is timed."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import prioritized_replay  # noqa: E402


def test_dqn_with_prioritized_replay_learns():
    result = prioritized_replay.main(["--env", "builtin", "--steps", "3000", "--device", "cpu", "--no-torchrl"])
    assert result["first"] < 40, result  # a random policy's CartPole return is about 20
    assert result["last"] > 100, result
    assert result["ours_us"] > 0
