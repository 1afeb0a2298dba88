"""The deadline rule in simulation: under the real budget guard, never over budget; keeps more deadlines."""

from __future__ import annotations

from cloudfit.executors.budget_sim import simulate_deadline


def test_switching_keeps_more_deadlines_and_never_passes_the_budget():
    n = 80
    plain = simulate_deadline(n, seed=7, switching=False)
    rule = simulate_deadline(n, seed=7, switching=True)
    assert all(r.within_budget for r in plain + rule)
    assert not any(r.switched for r in plain) and any(r.switched for r in rule)
    kept_plain = sum(r.deadline_kept for r in plain)
    kept_rule = sum(r.deadline_kept for r in rule)
    assert kept_rule > kept_plain
    # a run the rule moved to on-demand and that was not stopped by the budget made its deadline
    moved = [r for r in rule if r.switched and r.reason == "completed"]
    assert moved and sum(r.deadline_kept for r in moved) >= 0.9 * len(moved)
