"""A short run of bench/plan_fuzz.py (the bench runs ≥ 200 mutations): mutated plan files never give a
traceback, never launch below the catalog's price, never leave a cluster `down` cannot clear."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_mutated_plans_are_refused_or_launched_safely():
    from bench.plan_fuzz import run

    out = run(mutations=25, seed=7)
    assert out["failures"] == [], out["failures"]
    assert out["launched"] >= 3 and out["exit_codes"].get(2, 0) >= 5  # both paths were exercised
