"""The cost × time knee under a budget, and --objective fastest."""

from __future__ import annotations

import numpy as np
import pytest

from cloudfit.plan import recommend
from cloudfit.plan.knee import knee_key, knee_order
from cloudfit.search import Problem
from cloudfit.workload import make_workload

BERT = dict(model="bert-base", epochs=2, dataset_size=88_000, budget="10", spot="only")


class _A:
    def __init__(self, hours, cost):
        self.hours, self.cost_usd = np.asarray(hours, float), np.asarray(cost, float)
        self.cost_p90_usd, self.p_on_time, self.reserve_usd = self.cost_usd, np.ones(len(hours)), np.zeros(len(hours))


def test_knee_takes_free_speed_and_refuses_dear_speed():
    # 4 min for $0.35, 2 min for $3.16 (9x the money for half the time), 1 min for $0.36 (free speed)
    a = _A([4 / 60, 2 / 60], [0.35, 3.16])
    assert knee_order(a, Problem("time", None, 10.0, 0.9))[0] == 0
    b = _A([4 / 60, 1 / 60], [0.35, 0.36])
    assert knee_order(b, Problem("time", None, 10.0, 0.9))[0] == 1
    # the budget still binds: the knee is chosen among feasible plans only
    c = _A([4 / 60, 1 / 60], [0.35, 0.36])
    assert knee_order(c, Problem("time", None, 0.355, 0.9)).tolist() == [0]


def test_knee_is_on_the_pareto_front_and_minimises_the_product():
    rng = np.random.default_rng(0)
    h, c = rng.random(500) + 0.01, rng.random(500) + 0.01
    a = _A(h, c)
    k = knee_order(a, Problem("time", None, None, 0.9))[0]
    assert not np.any((h < h[k]) & (c < c[k]))  # nothing beats it on both counts
    assert knee_key(c, h)[k] == pytest.approx(knee_key(c, h).min())


def test_bert_base_budget_picks_minutes_and_cents_and_names_the_fastest():
    plan = recommend(make_workload(**BERT))
    fastest = recommend(make_workload(**BERT, objective="fastest"))
    assert plan.chosen.cost_usd < 1.0 and plan.chosen.hours < 1.0  # minutes and cents, not hours and dollars
    assert fastest.chosen.hours <= plan.chosen.hours and fastest.chosen.cost_usd > 3 * plan.chosen.cost_usd
    assert "knee" in plan.explanation and "literal fastest" in plan.sensitivity
    assert f"${fastest.chosen.cost_usd:,.2f}" in plan.sensitivity


def test_objective_is_validated():
    from cloudfit.errors import UsageError

    with pytest.raises(UsageError, match="cost, time or fastest"):
        make_workload(**BERT, objective="quickest")
