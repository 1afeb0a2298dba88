"""Which point to probe next: the plan's own point first, then the largest expected improvement.

If the plan's hardware point has not been probed, probe it (the search starts from the model's
prediction, not from random points, and a plan ends on a measured point unless a stop intervenes);
otherwise probe the unprobed point of largest expected improvement net of its probe's cost — a
lookahead re-pricing the point's best offerings as if it measured each of 13 quantiles of its
predicted throughput (``acquisition="tpe"`` lets optuna's seeded TPE sampler choose instead). With
no plan at all, probe the point most likely to meet the limits (the model may be wrong).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from cloudfit.active.record import Point, point_from_key, point_key
from cloudfit.search.problem import Problem, score, violation
from cloudfit.types import ClusterConfig, Workload

ACQUISITIONS = ("ei", "tpe")
#: Normal quantiles (and their weights) at which the lookahead prices a point as if it measured
#: that throughput: a deterministic expected-improvement integral, no sampling noise.
LOOKAHEAD_QUANTILES = np.array([-2.326, -1.645, -1.282, -0.842, -0.524, -0.253, 0.0, 0.253, 0.524, 0.842, 1.282,
                                1.645, 2.326])
LOOKAHEAD_WEIGHTS = np.array([0.01, 0.04, 0.05, 0.1, 0.1, 0.1, 0.2, 0.1, 0.1, 0.1, 0.05, 0.04, 0.01])
#: Per hardware point, the lookahead re-prices this many of its best candidates (zones × spot).
LOOKAHEAD_PER_POINT = 4

Lookahead = dict[Point, tuple[float, float, float]]  # point → (expected improvement, P(feasible), expected best)


def best_per_point(space, problem: Problem) -> tuple[dict[Point, tuple[float, bool, int]], object]:
    """For every hardware point: (best objective value, feasible?, candidate id) under the space."""
    a = space.assess(problem)
    feasible, primary, _ = score(a, problem)
    keys, inv = space.point_ids("hardware")
    out: dict[Point, tuple[float, bool, int]] = {}
    for i in np.lexsort((primary, ~feasible)):  # feasible first, then best value
        k = keys[int(inv[i])]
        if k not in out:
            out[k] = (float(primary[i]), bool(feasible[i]), int(i))
    return out, a


def lookahead(space, problem: Problem, incumbent: float, open_points: set[Point]) -> Lookahead:
    """Per open point: (expected improvement over ``incumbent``, P(some config of it is feasible),
    expected best value where feasible), if it were probed.

    The point's throughput is lognormal with its (surrogate) band; at each of ``LOOKAHEAD_QUANTILES``
    the point's best ``LOOKAHEAD_PER_POINT`` candidates are re-priced as if measured (no band), which
    gets the preemption, the deadline and the budget right instead of assuming value ∝ 1/throughput.
    """
    if not open_points:
        return {}
    a = space.assess(problem)
    feasible, primary, _ = score(a, problem)
    keys, inv = space.point_ids("hardware")
    want = np.array([k in open_points for k in keys], dtype=bool)
    cand = np.flatnonzero(want[inv])
    if cand.size == 0:
        return {}
    # the best few candidates of each open point under the current predictions
    order = cand[np.lexsort((primary[cand], ~feasible[cand], inv[cand]))]
    pt = inv[order]
    first = np.searchsorted(pt, pt, side="left")
    ids = order[(np.arange(order.size) - first) < LOOKAHEAD_PER_POINT]
    n_q = len(LOOKAHEAD_QUANTILES)
    rows = np.repeat(ids, n_q)
    quantile = np.tile(LOOKAHEAD_QUANTILES, ids.size)
    throughput = space.samples_per_second[rows] * np.exp(space.log_sigma[rows] * quantile)
    cols = {k: getattr(space, k)[rows] for k in ("offering", "shape", "nodes", "spot", "price_per_hour",
                                                  "hazard_per_node_hour")}
    as_measured = replace(space, **cols, samples_per_second=throughput, low=throughput, high=throughput, _cache={})
    feasible_q, value_q, _ = score(as_measured.assess(problem), problem)
    value_q = np.where(feasible_q, value_q, np.inf)
    # best value per (point, quantile)
    group = inv[rows] * n_q + np.tile(np.arange(n_q), ids.size)
    best = np.full(len(keys) * n_q, np.inf)
    np.minimum.at(best, group, value_q)
    best = best.reshape(len(keys), n_q)
    out: Lookahead = {}
    w = LOOKAHEAD_WEIGHTS
    for j in np.unique(inv[ids]):
        b = best[j]
        ok = np.isfinite(b)
        p_ok = float(w[ok].sum())
        ei = float(np.sum(w[ok] * np.maximum(incumbent - b[ok], 0.0))) if math.isfinite(incumbent) else 0.0
        ev = float(np.sum(w[ok] * b[ok]) / p_ok) if p_ok > 0 else math.inf
        out[keys[int(j)]] = (ei, p_ok, ev)
    return out


def acquire(look: Lookahead, space, value_per_unit: float, probe_seconds: float, ei_stop: bool) -> Point | None:
    """The open point of largest expected improvement (in $) net of its probe's cost; None if no net
    gain is positive (with ``ei_stop``) or no point improves at all."""
    best, arg = -math.inf, None
    prices = probe_prices(space)
    for k, (ei, _, _) in sorted(look.items()):
        if ei <= 0:
            continue
        net = ei * value_per_unit - prices[k][0] * probe_seconds / 3600
        if net > best:
            best, arg = net, k
    if arg is None or (ei_stop and best <= 0):
        return None
    return arg


def closest(look: Lookahead, space, problem: Problem, open_points: set[Point]) -> Point | None:
    """The open point most likely to meet the limits (then of best expected value); if none may, the
    one whose best candidate misses them by the least (``search.problem.violation``)."""
    cands = [(k, v) for k, v in look.items() if v[1] > 0]
    if cands:
        return min(cands, key=lambda kv: (-kv[1][1], kv[1][2], kv[0]))[0]
    if not open_points:
        return None
    miss = violation(space.assess(problem), problem)
    keys, inv = space.point_ids("hardware")
    best = np.full(len(keys), np.inf)
    np.minimum.at(best, inv, miss)
    at = {k: j for j, k in enumerate(keys)}
    return min(open_points, key=lambda k: (best[at[k]], k))


def probe_prices(space) -> dict[Point, tuple[float, int]]:
    """Per hardware point: ($/h, candidate id) of its cheapest on-demand offering (a probe must not be
    preempted), or of its cheapest spot one if it has no on-demand offering."""
    keys, inv = space.point_ids("hardware")
    order = np.lexsort((np.arange(len(space)), space.price_per_hour, space.spot, inv))  # per point: on-demand first
    out: dict[Point, tuple[float, int]] = {}
    for i in order:
        k = keys[int(inv[i])]
        if k not in out:
            out[k] = (float(space.price_per_hour[i]), int(i))
    return out


def probe_config(space, point: Point) -> ClusterConfig:
    """The configuration a probe of ``point`` runs on (see ``probe_prices``)."""
    return space.config(probe_prices(space)[point][1])


def point_value(space, problem: Problem, point: Point) -> float:
    """The objective value optuna is told for a probed point (×10 if it cannot meet the limits)."""
    best, _ = best_per_point(space, problem)
    v, feasible, _ = best[point]
    return v if feasible else 10.0 * v


def any_feasible(space, workload: Workload | None) -> bool:
    """Whether some candidate meets ``workload``'s limits (None: nothing left to train with)."""
    if workload is None:
        return False
    problem = Problem.of(workload)
    feasible, _, _ = score(space.assess(problem), problem)
    return bool(feasible.any())


def distribution(points):
    """The optuna distribution over hardware points."""
    import optuna

    return optuna.distributions.CategoricalDistribution(sorted(point_key(k) for k in points))


def ask_sampler(study, dist, probed: set[Point], measured: dict[Point, float], space, problem: Problem):
    """(trial, point): the sampler's pick among unprobed points, the trial left open for its probe.

    A proposal of an already probed point is told that point's known value (no probe needed) and the
    sampler is asked again; after 20 such proposals give up and return (None, None).
    """
    import optuna

    for _ in range(20):
        t = study.ask({"point": dist})
        k = point_from_key(t.params["point"])
        if k not in probed:
            return t, k
        if k in measured:
            study.tell(t, point_value(space, problem, k))
        else:
            study.tell(t, state=optuna.trial.TrialState.FAIL)
    return None, None
