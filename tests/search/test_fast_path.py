"""The recommender's fast path gives exactly what a straightforward per-zone evaluation gives.

``recommend`` prices the space through one representative per group of candidates that differ only
in price, ranks only the head of the ranking, reduces the Pareto front to the cheapest of each group,
re-prices only candidates no dearer than the winner for the sensitivity line, and reads the chosen,
alternatives, runner-up and front from the whole-space pricing. Here each of those is compared,
number for number, with the plain algorithm on every candidate (what the code did before:
``Space._assess`` on all rows, a full lexsort, the front over all candidates, each shown estimate
priced again on its own).
"""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np
import pytest

from cloudfit import catalog
from cloudfit.plan import explain as explain_mod, planner as plan_mod
from cloudfit.search import Problem
from cloudfit.search.exhaustive import ExhaustiveSearcher
from cloudfit.search.problem import Ranking, rank, reasons, score
from cloudfit.search.space import Priced, build_space, estimate
from cloudfit.workload import make_workload

CASES = [
    dict(model="resnet50", epochs=90, dataset_size=1_281_167, deadline="24h"),  # the bench workload
    dict(model="resnet50", samples=1e8, deadline="3h"),  # a later deadline saves money
    dict(model="bert-large", samples=5e7, deadline="90m", confidence=0.8),
    dict(model="resnet50", samples=5e7, budget="100"),  # budget only: time objective
    dict(model="gpt2", samples=3e7, budget="400", objective="cost"),
    dict(model="resnet18", samples=5e7, deadline="2h", budget="50", objective="time"),
    dict(model="bert-base", samples=3e7, deadline="8h", spot="only", regions=["us-*", "europe-west4"]),
    dict(model="vgg16", samples=2e8, deadline="12h", spot="never", max_nodes=16),
]


@pytest.fixture(scope="module")
def cat():
    return catalog.load()


def _profile(name):
    from cloudfit.profiling.io import load_profile, resolve_profile

    return load_profile(resolve_profile(name))


def _plain(space, deadline):
    """Every candidate through the preemption model, as before the grouping."""
    return space._assess(deadline, slice(None))


def _reference(space, problem):
    """(picked ids, runner-up id, Pareto ids, best id at the looser limit) the plain way."""
    n = len(space)
    a = _plain(space, problem.deadline_hours)
    order = rank(a, problem, np.arange(n))
    counts, picked = {}, []
    for i in order:
        k = (int(space.shape[i]), int(space.nodes[i]), bool(space.spot[i]))
        if counts.get(k, 0) < plan_mod.ZONES_PER_CONFIG:
            counts[k] = counts.get(k, 0) + 1
            picked.append(int(i))
            if len(picked) == plan_mod.N_ALTERNATIVES + 1:
                break
    key0 = (space.shape[order[0]], space.nodes[order[0]], space.spot[order[0]])
    runner = next((int(i) for i in order[1:] if (space.shape[i], space.nodes[i], space.spot[i]) != key0), None)
    o = np.lexsort((np.arange(n), a.cost_usd, a.hours))
    c = a.cost_usd[o]
    prev = np.concatenate(([np.inf], np.minimum.accumulate(c)[:-1]))
    front = o[c < prev * (1 - 1e-9)]
    if problem.objective == "cost" and problem.deadline_hours is not None:
        looser = replace(problem, deadline_hours=problem.deadline_hours + explain_mod.deadline_slack_hours(problem.deadline_hours))
    else:
        looser = replace(problem, budget_usd=None if problem.budget_usd is None else problem.budget_usd * 1.1)
    best = rank(_plain(space, looser.deadline_hours), looser, np.arange(n))
    return order, picked, runner, front, looser, (int(best[0]) if best.size else None)


@pytest.mark.parametrize("kw", CASES, ids=lambda kw: f"{kw['model']}-{kw.get('deadline')}-{kw.get('budget')}")
def test_recommend_equals_the_plain_evaluation(cat, kw):
    w = make_workload(**kw)
    if w.objective == "time":  # the literal fastest: the knee re-ranks after the search (tests/test_knee.py)
        w = replace(w, objective="fastest")
    prof = _profile(w.model)
    space = build_space(w, prof, cat)
    problem = Problem.of(w)
    order, picked, runner, front, looser, best = _reference(build_space(w, prof, cat), problem)

    # the grouped whole-space assessment is the plain one, number for number
    for d in {problem.deadline_hours, looser.deadline_hours, None}:
        fast, plain = space.assess(replace(problem, deadline_hours=d)), _plain(space, d)
        for f in fields(Priced):
            assert np.array_equal(getattr(fast, f.name), getattr(plain, f.name), equal_nan=True), (d, f.name)

    # the lazy ranking: its head and its full order are the full lexsort's
    res = ExhaustiveSearcher().search(space, problem)
    assert res.n_feasible == order.size
    for k in (1, 2, 7, 31, 124, 500):
        assert np.array_equal(res.head(k), order[:k])
    assert np.array_equal(res.order, order)

    p = plan_mod.recommend(w, space=build_space(w, prof, cat))
    a = _plain(space, problem.deadline_hours)
    sub = space._assess(problem.deadline_hours, np.asarray(picked))
    assert (p.chosen,) + p.alternatives == tuple(estimate(space, i, sub, j) for j, i in enumerate(picked))
    assert p.provenance["feasible"] == order.size
    d = problem.deadline_hours
    runner_e = None if runner is None else estimate(space, runner, space._assess(d, np.asarray([runner])), 0)
    notice = p.provenance.get("preemption_notice")  # a spot pick: its stop checkpoint against the notice, after
    assert p.explanation == explain_mod.explain(p.chosen, runner_e, problem) + (f" {notice['note']}" if notice else "")
    ids = np.asarray(_thin(front, space, problem))
    sub = space._assess(d, ids)
    feasible, why = score(sub, problem)[0], reasons(sub, problem)
    assert p.pareto == tuple(estimate(space, int(i), sub, j, feasible=bool(feasible[j]), reason=why[j])
                             for j, i in enumerate(ids))
    assert [(e.hours, e.cost_usd) for e in p.pareto] == [(float(a.hours[i]), float(a.cost_usd[i])) for i in ids]

    # the sensitivity line's best candidate at the looser limit
    fresh = build_space(w, prof, cat)
    fresh.assess(problem)
    if looser.deadline_hours != problem.deadline_hours:
        got = explain_mod._best_later_deadline(fresh, problem, looser, picked[0])
        assert not fresh.assessed(looser)  # only a few groups were re-priced
    else:
        got = explain_mod._best(fresh, looser)
    assert (None if got is None else got[0]) == best
    assert p.sensitivity == explain_mod.sensitivity(space, problem, p.chosen)  # the plain path's sentence


def _thin(front, space, problem):
    """Both ends, an even spread, and the fastest and the cheapest point within the limits (plain Python)."""
    front = front.tolist()
    if len(front) > plan_mod.N_PARETO:
        ok = [k for k, f in enumerate(score(space._assess(problem.deadline_hours, np.asarray(front)), problem)[0]) if f]
        ends = {ok[0], ok[-1]} if ok else set()
        n = max(2, plan_mod.N_PARETO - len(ends))
        pick = {round(k * (len(front) - 1) / (n - 1)) for k in range(n)} | ends
        front = [front[k] for k in sorted(pick)]
    return front


def test_replaced_columns_drop_the_grouping(cat):
    """A space whose columns are replaced (active search does) is priced row by row again."""
    w = make_workload(model="resnet50", samples=5e7, deadline="12h", max_nodes=8)
    space = build_space(w, _profile("resnet50"), cat)
    assert space.price_groups is not None
    sps = space.samples_per_second * np.linspace(0.5, 1.5, len(space))  # zones now differ in speed
    other = replace(space, samples_per_second=sps, low=sps * 0.8, high=sps * 1.2, _cache={})
    fast, plain = other.assess(Problem.of(w)), other._assess(12.0, slice(None))
    assert np.array_equal(fast.hours, plain.hours) and np.array_equal(fast.cost_usd, plain.cost_usd)


@pytest.mark.parametrize("seed", range(4))
def test_head_of_the_ranking_with_ties_and_nan(seed):
    """``Ranking.head(n)`` is ``rank(...)[:n]`` however many ties (zones) and NaNs there are."""
    rng = np.random.default_rng(seed)
    n = 5000
    cost = rng.choice(rng.random(300) * 100, n)  # heavy ties
    hours = rng.choice(np.array([1.0, 2.0, 3.0, np.inf]), n)
    cost[rng.random(n) < 0.01] = np.nan
    a = Priced(hours=hours, hours_p90=hours, cost_usd=cost, cost_p90_usd=cost * 1.2,
               p_on_time=rng.random(n), expected_preemptions=np.zeros(n), checkpoint_interval_h=np.ones(n),
               overhead_hours=np.zeros(n), reserve_usd=np.zeros(n))
    ids = rng.permutation(n)
    for problem in (Problem("cost", 2.0, None, 0.5), Problem("time", None, 80.0, 0.9), Problem("cost", 9.0, 50.0, 0.2)):
        full = rank(a, problem, ids)
        s = Ranking(a, problem, ids)
        assert s.n_feasible == full.size
        for k in (1, 3, 10, 64, 1000, full.size, full.size + 5):
            assert np.array_equal(s.head(k), full[:k]), (problem, k)
