"""examples/node2vec.py: weighted node2vec walks and skip-gram recover the planted
communities (held-out accuracy far above chance, and above walks that ignore the weights)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import node2vec  # noqa: E402


def test_weighted_walks_recover_communities():
    torch.manual_seed(0)
    results = node2vec.main(["--nodes", "3000", "--communities", "6", "--device", "cpu", "--walks-per-node", "2",
                             "--walk-length", "20", "--batch", "4096", "--dim", "32", "--no-torch-cluster"])
    assert results["weighted"] > 0.7, results  # chance is 1/6
    assert results["weighted"] > results["unweighted"] + 0.1, results
