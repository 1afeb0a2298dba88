"""``recommend(workload) -> Plan``: the cheapest cluster under a deadline, or the fastest under a budget.

Planning is a pure function of the workload, the profile, the catalog and the shipped performance
and preemption models: build the space (every offering × nodes × spot), let a searcher rank it,
then explain the winner, price a looser limit, and keep ranked alternatives for launch fallback.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from cloudfit import __version__
from cloudfit.catalog import Catalog
from cloudfit.plan.explain import explain, infeasible, sensitivity
from cloudfit.search import Problem, get_searcher
from cloudfit.search.problem import score
from cloudfit.search.space import Space, build_space, estimate
from cloudfit.types import Estimate, Plan, Profile, Workload

#: Ranked fallbacks kept in plan.json for launch (stockout, quota): other zones first come for free.
N_ALTERNATIVES = 30
#: At most this many zones of one hardware config (shape, nodes, spot) among the alternatives, so
#: that fallbacks and the top-K table show different options, not the same VM in every zone.
ZONES_PER_CONFIG = 2
#: Pareto points kept in plan.json (thinned evenly if the front is longer).
N_PARETO = 40


def _profile_file(workload: Workload) -> str:
    from cloudfit.profiling.io import resolve_profile

    return str(resolve_profile(workload.profile_path or workload.model))


def load_workload_profile(workload: Workload) -> Profile:
    from cloudfit.profiling.io import load_profile, resolve_profile

    return load_profile(resolve_profile(workload.profile_path or workload.model))


def recommend(
    workload: Workload,
    *,
    catalog: Catalog | str | Path | None = None,
    profile: Profile | None = None,
    searcher: str = "exhaustive",
    searcher_options: dict[str, Any] | None = None,
    space: Space | None = None,
) -> Plan:
    """Search the catalog for the best cluster for ``workload``; raise ``InfeasibleError`` if none.

    The returned Plan holds the chosen estimate, up to 30 ranked alternatives (launch falls back
    through them), the cost × time Pareto front, a one-sentence explanation and sensitivity, and
    provenance (catalog digest, performance-model version, searcher, evaluations).
    """
    from cloudfit import catalog as catalog_mod
    from cloudfit import perf, spot

    workload.require_limit()
    profile_file = None
    if space is None:
        cat = catalog if isinstance(catalog, Catalog) else catalog_mod.load(catalog, clouds=workload.clouds)
        prof = profile or load_workload_profile(workload)
        profile_file = None if profile is not None else _profile_file(workload)
        space = build_space(workload, prof, cat)
    problem = Problem.of(workload)
    result = get_searcher(searcher, **(searcher_options or {})).search(space, problem)
    if result.n_feasible == 0:
        raise infeasible(space, problem)

    r = rank(space, problem, workload, result)
    chosen = r.chosen
    pareto = pareto_front(space, problem)
    provenance = {
        "cloudfit_version": __version__,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "catalog": space.catalog.path,
        "catalog_digest": space.catalog.digest,
        "prices": _price_date(space.catalog.path),
        "model_version": perf.model_version(),
        "spot_model_version": getattr(spot, "MODEL_VERSION", ""),
        "profile_model": space.profile.model,
        "profile_file": profile_file,
        "prediction_basis": space.basis,
        "searcher": result.searcher,
        "evaluations": int(result.evaluations),
        "space_size": len(space),
        "feasible": result.n_feasible if result.searcher == "exhaustive" else None,
        "excluded": dict(space.excluded),
    }
    provenance.update(r.provenance)
    plan = Plan(workload=workload, chosen=chosen, alternatives=r.alternatives, pareto=pareto,
                provenance=provenance, explanation=r.explanation)
    return replace(plan, sensitivity=r.sensitivity(space, problem))


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


def _price_date(path: str) -> str:
    from cloudfit.catalog.dates import price_date

    return price_date(path)


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
    if len(front) > limit:  # keep both ends and an even spread between
        pick = np.round(np.linspace(0, len(front) - 1, limit)).astype(int)
        pick = pick[np.concatenate(([True], np.diff(pick) > 0))]  # sorted already; np.unique would import numpy.ma
        front = [front[k] for k in pick]
    ids = np.asarray(front, dtype=np.int64)
    feasible, _, _ = score(a.take(ids), problem)
    return tuple(estimate(space, int(i), a, feasible=bool(feasible[j])) for j, i in enumerate(ids))


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
