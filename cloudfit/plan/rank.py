"""Ranking a searched space: the winner, diverse fallbacks, the cost × time Pareto front.

Shared by the single-model planner (``cloudfit.plan.planner``) and the large-model planner
(``cloudfit.plan.llm``), whose spaces have the same interface; it imports neither of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from cloudfit.plan.explain import explain, sensitivity
from cloudfit.search import Problem
from cloudfit.search.problem import reasons, score
from cloudfit.search.space import Space, estimate
from cloudfit.types import Estimate, Workload

#: Ranked fallbacks kept in plan.json for launch (stockout, quota): other zones first come for free.
N_ALTERNATIVES = 30
#: At most this many zones of one hardware config (shape, nodes, spot) among the alternatives, so
#: that fallbacks and the top-K table show different options, not the same VM in every zone.
ZONES_PER_CONFIG = 2
#: Pareto points kept in plan.json (thinned evenly if the front is longer).
N_PARETO = 40


@dataclass(frozen=True)
class Ranked:
    """What a planner keeps of a search: the winner, its alternatives and why (see :func:`rank`)."""

    assessment: Any
    picked: np.ndarray  # the winner, then the alternatives (ids, at most ZONES_PER_CONFIG zones per config)
    chosen: Estimate
    alternatives: tuple[Estimate, ...]
    explanation: str
    knee_note: str | None  # the knee's "what the fastest and the cheapest would be", else None

    @property
    def provenance(self) -> dict:
        if self.knee_note is None:
            return {}
        return {"objective_rule": "knee: minimise expected $ × expected hours (cloudfit.plan.knee)"}

    def sensitivity(self, space, problem: Problem) -> str:
        if self.knee_note is not None:
            return self.knee_note
        return sensitivity(space, problem, self.chosen, int(self.picked[0]))


def rank(space, problem: Problem, workload: Workload, result) -> Ranked:
    """The winner and up to ``N_ALTERNATIVES`` diverse fallbacks of a search, and its explanation.

    Under ``--objective time`` (a budget's default) the order is the cost × time knee
    (cloudfit.plan.knee), not the literal fastest; "fastest" and "cost" keep the searcher's order.
    Shared by the single-model planner and the LLM planner (whose space has the same interface).
    """
    knee = workload.objective == "time"
    ids = None if result.searcher == "exhaustive" else result.order
    a = space.assess(problem)  # the whole space, priced once (cached)
    if knee:
        from cloudfit.plan.knee import knee_order

        knee_ranked = knee_order(a, problem, ids)
    # the best few of the ranking are enough: take a longer head only if it runs out
    n = 4 * (N_ALTERNATIVES + 1)
    while True:
        head = knee_ranked[:n] if knee else result.head(n)
        picked = _diverse(space, head, per_config=ZONES_PER_CONFIG, limit=N_ALTERNATIVES + 1)
        runner = _runner_up(space, head)
        if (picked.size == N_ALTERNATIVES + 1 and runner is not None) or head.size < n:
            break
        n *= 4
    ranked = [estimate(space, int(i), a) for i in picked]
    chosen = ranked[0]
    explanation = explain(chosen, None if runner is None else estimate(space, runner, a), problem)
    knee_note = None
    if knee:
        from cloudfit.plan.explain import explain_knee

        explanation, knee_note = explain_knee(space, problem, chosen, a, ids)
    return Ranked(a, picked, chosen, tuple(ranked[1:]), explanation, knee_note)


# --------------------------------------------------------------------------------------------
# Pareto front, explanation, sensitivity


def pareto_front(space: Space, problem: Problem, limit: int = N_PARETO) -> tuple[Estimate, ...]:
    """Candidates no other beats on both expected hours and expected cost, fastest first.

    Every candidate of the space takes part; each point's ``feasible`` says whether it meets the
    workload's limits at the required confidence.
    """
    a = space.assess(problem)
    hours, cost = np.asarray(a.hours), np.asarray(a.cost_usd)
    cand = _cheapest_of_each_group(space, hours, cost)
    order = cand[np.lexsort((cand, cost[cand], hours[cand]))]
    c = cost[order]
    # on the front: strictly cheaper than everything at least as fast (fastest first)
    prev_min = np.concatenate(([np.inf], np.minimum.accumulate(c)[:-1]))
    front = order[c < prev_min * (1 - 1e-9)].tolist()
    if len(front) > limit:  # keep both ends, the fastest and the cheapest plan within the limits, an even spread
        ok = np.flatnonzero(score(a.take(np.asarray(front, dtype=np.int64)), problem)[0])
        ends = {int(ok[0]), int(ok[-1])} if ok.size else set()
        spread = np.round(np.linspace(0, len(front) - 1, max(2, limit - len(ends)))).astype(int)
        pick = sorted(set(spread.tolist()) | ends)
        front = [front[k] for k in pick]
    ids = np.asarray(front, dtype=np.int64)
    feasible, _, _ = score(a.take(ids), problem)
    why = reasons(a.take(ids), problem)
    return tuple(estimate(space, int(i), a, feasible=bool(feasible[j]), reason=why[j]) for j, i in enumerate(ids))


def _cheapest_of_each_group(space: Space, hours: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """Ids that can be on the Pareto front: of each group of candidates that differ only in price
    (equal hours), the cheapest, lowest id first. Sorted by (hours, cost, id), every other member
    follows one at least as fast and as cheap, so it never passes the front's strict test."""
    groups = space.price_groups
    n = len(space)
    if groups is None or np.isnan(cost).any() or np.isnan(hours).any():
        return np.arange(n)
    rep, inv = groups
    if not np.array_equal(hours[rep][inv], hours):  # not the grouping this assessment came from
        return np.arange(n)
    low = np.full(rep.size, np.inf)
    np.minimum.at(low, inv, cost)
    ids = np.flatnonzero(cost == low[inv])
    first = np.full(rep.size, n)
    np.minimum.at(first, inv[ids], ids)
    return first


def _diverse(space: Space, order: np.ndarray, *, per_config: int, limit: int) -> np.ndarray:
    """The first ``limit`` ids of ``order`` keeping at most ``per_config`` per (shape, nodes, spot)."""
    counts: dict[tuple, int] = {}
    out = []
    for i in order:
        k = (int(space.shape[i]), int(space.nodes[i]), bool(space.spot[i]))
        if counts.get(k, 0) >= per_config:
            continue
        counts[k] = counts.get(k, 0) + 1
        out.append(int(i))
        if len(out) == limit:
            break
    return np.asarray(out, dtype=np.int64)


def _runner_up(space: Space, order: np.ndarray) -> int | None:
    """The best candidate that is different hardware (shape, nodes or spot), not just another zone."""
    first = int(order[0])
    key = (space.shape[first], space.nodes[first], space.spot[first])
    for i in order[1:]:
        if (space.shape[i], space.nodes[i], space.spot[i]) != key:
            return int(i)
    return None
