"""The budget guard: exact accounting, and ≥100 simulated runs that never overspend."""

from __future__ import annotations

import collections

import pytest

from cloudfit.errors import BudgetExceeded
from cloudfit.executors.budget import BudgetTooSmallError, Guard, PriceSchedule
from cloudfit.executors.budget_sim import simulate


def test_price_schedule_integrates_steps():
    s = PriceSchedule((0.0, 3600.0), (1.0, 3.0))
    assert s.cost(0, 3600) == pytest.approx(1.0)
    assert s.cost(1800, 5400) == pytest.approx(0.5 + 1.5)
    assert s.max_price(0, 100) == 1.0 and s.max_price(0, 3600) == 3.0
    assert s.price_at(-5) == 1.0 and s.price_at(1e9) == 3.0
    assert s.cost(10, 5) == 0.0


def test_caps_commit_exactly_the_budget_and_stop_comes_one_interval_early():
    g = Guard(10.0, interval_s=30, teardown_s=120, min_billed_s=60, provision_slack_s=0)
    sched = [PriceSchedule.constant(3.6)] * 2  # $7.2/h for the cluster
    cap = g.reserve(["a", "b"], sched, 0.0)
    assert g.committed(0.0) <= 10.0
    assert cap == pytest.approx(10.0 / 7.2 * 3600 - 120, abs=1.0)  # (cap + teardown) × rate = budget
    # The launcher's check stops while running on to the next check and tearing down still fits.
    stop_at = next(t for t in range(0, 20000) if g.should_stop(float(t)))
    assert (stop_at + 30 + 120) * 7.2 / 3600 > 10.0
    assert (stop_at - 1 + 30 + 120) * 7.2 / 3600 <= 10.0 + 1e-9
    g.end("a", stop_at + 120)
    g.end("b", stop_at + 120)
    assert g.accrued(1e9) <= 10.0


def test_a_preempted_node_frees_its_share_for_the_replacement():
    g = Guard(10.0, interval_s=30, teardown_s=60, min_billed_s=60, provision_slack_s=0)
    s = PriceSchedule.constant(1.8)
    cap = g.reserve(["a", "b"], [s, s], 0.0)
    with pytest.raises(BudgetExceeded):
        g.reserve(["c"], [s], 100.0)  # nothing left while both hold their caps
    g.end("b", 1000.0)  # preempted after 1000 s
    new_cap = g.cap_for([s], 1000.0)
    assert new_cap == pytest.approx(cap - 1000, abs=2)  # what b did not use
    g.reserve(["b"], [s], 1000.0)
    assert g.committed(1000.0) <= 10.0 + 1e-9


def test_refused_inserts_cost_nothing_and_minimum_billing_applies():
    g = Guard(5.0, interval_s=10, teardown_s=10, min_billed_s=60, provision_slack_s=0)
    s = PriceSchedule.constant(36.0)  # 1 cent per second
    g.reserve(["a", "b"], [s, s], 0.0)
    g.cancel("b", 2.0)
    g.end("a", 5.0)
    assert g.accrued(100.0) == pytest.approx(0.60)  # a: 60 s minimum; b: never existed


def test_budget_below_one_interval_is_refused_before_anything():
    g = Guard(0.01, interval_s=30, teardown_s=120, min_billed_s=60, provision_slack_s=0)
    with pytest.raises(BudgetTooSmallError, match="below one guard interval"):
        g.check_launchable([PriceSchedule.constant(3.0)] * 4)
    assert g.lives == []


def test_many_simulated_runs_never_spend_past_the_budget():
    runs = simulate(200, seed=7)
    over = [r for r in runs if not r.within_budget]
    assert not over, over[:3]
    reasons = collections.Counter(r.reason for r in runs)
    # the simulation really exercised every path
    assert reasons["budget"] > 30 and reasons["completed"] > 10 and reasons["launcher-died"] > 5
    assert sum(r.preemptions for r in runs) > 100 and sum(r.fallbacks for r in runs) > 10
    # and the guard does not stop absurdly early: runs ended by the budget use most of it
    used = sorted(r.billed_usd / r.budget_usd for r in runs if r.reason == "budget")
    assert used[len(used) // 2] > 0.7


def test_the_simulation_catches_a_guard_that_underestimates_teardown():
    runs = simulate(120, seed=7, guard_teardown_factor=0.0)
    assert any(not r.within_budget for r in runs)
