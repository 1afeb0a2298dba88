"""The cost × time knee: the fastest plan whose extra cost still buys a real time saving.

Under a budget the literal fastest plan tends to spend the whole budget to save seconds (64 spot
H100s for 2 minutes at $8.27 where 4 minutes cost $0.35). CherryPick's point applies: the aim is a
plan close to the best, not the last second at any price. The rule, one line:

    knee = the feasible plan that minimises  expected $ × (expected hours) ** KNEE_ELASTICITY

With ``KNEE_ELASTICITY = 1`` (cost × time, like the energy-delay product of chip design) a faster
plan is preferred exactly while each 1% of time it saves costs less than ~1% more money: doubling
the GPUs of a job that scales perfectly costs nothing extra and is always taken; paying 9× the
money to halve the time (the bert-base case) is not. The minimiser always lies on the cost × time
Pareto front of the feasible plans (a plan beaten on both counts has a larger product), so it is
"the knee" of that front in log–log coordinates: the point where the front's slope crosses −1.
The ranking below orders every feasible candidate by the same product, so launch's fallbacks are
the next-best trade-offs (other zones of the knee first), not ever bigger fleets.

``--objective fastest`` keeps the literal fastest plan; the knee's explanation always says what
that plan would cost.
"""

from __future__ import annotations

import numpy as np

from cloudfit.search.problem import score

#: The exponent of hours in the knee's score (1 = cost × time): 1% less time is worth 1% more money.
KNEE_ELASTICITY = 1.0


def knee_key(cost_usd: np.ndarray, hours: np.ndarray, elasticity: float = KNEE_ELASTICITY) -> np.ndarray:
    """The knee's score (lower is better): ln(expected $) + elasticity × ln(expected hours)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(np.maximum(cost_usd, 1e-12)) + elasticity * np.log(np.maximum(hours, 1e-12))


def _feasible_ids(a, problem, ids: np.ndarray | None) -> np.ndarray:
    """The feasible ids of ``ids`` (default all), in their order."""
    feasible, _, _ = score(a, problem)
    return np.flatnonzero(feasible) if ids is None else np.asarray(ids, dtype=np.int64)[feasible[ids]]


def knee_order(a, problem, ids: np.ndarray | None = None) -> np.ndarray:
    """Feasible candidate ids (of ``ids``, default all) best first by the knee's score, then hours, then id."""
    keep = _feasible_ids(a, problem, ids)
    cost, hours = np.asarray(a.cost_usd, dtype=float)[keep], np.asarray(a.hours, dtype=float)[keep]
    # round the score to 1e-9 relative so float noise between zones does not decide the order
    key = np.round(knee_key(cost, hours), 9)
    return keep[np.lexsort((keep, cost, hours, key))]


def fastest_id(a, problem, ids: np.ndarray | None = None) -> int | None:
    """The literal fastest feasible candidate (ties: cheaper, then lower id)."""
    keep = _feasible_ids(a, problem, ids)
    if keep.size == 0:
        return None
    hours, cost = np.asarray(a.hours, dtype=float)[keep], np.asarray(a.cost_usd, dtype=float)[keep]
    return int(keep[np.lexsort((keep, cost, hours))[0]])


def cheapest_id(a, problem, ids: np.ndarray | None = None) -> int | None:
    """The cheapest feasible candidate (ties: faster, then lower id)."""
    keep = _feasible_ids(a, problem, ids)
    if keep.size == 0:
        return None
    hours, cost = np.asarray(a.hours, dtype=float)[keep], np.asarray(a.cost_usd, dtype=float)[keep]
    return int(keep[np.lexsort((keep, hours, cost))[0]])
