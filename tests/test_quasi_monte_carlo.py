"""examples/quasi_monte_carlo.py: through a radix forest, Sobol points give a clearly lower
error than through an alias table (the forest keeps their low discrepancy)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import quasi_monte_carlo  # noqa: E402


def test_forest_error_clearly_below_alias(device):
    sizes = [2**14, 2**16, 2**18]
    e = quasi_monte_carlo.quadratic_errors(sizes, device)
    for k, n in enumerate(sizes):
        forest, alias, random = (e[m][k] for m in ("radix forest, Sobol", "alias table, Sobol", "radix forest, random"))
        assert forest * 3 < alias, f"n={n}: forest {forest:.3g} is not clearly below alias {alias:.3g}"
        assert forest * 5 < random, f"n={n}: Sobol through the forest {forest:.3g} vs random {random:.3g}"
    # Quasi-Monte Carlo convergence: about n^-2 for the forest (x16 in n -> far below /16).
    assert e["radix forest, Sobol"][2] < e["radix forest, Sobol"][0] / 30
