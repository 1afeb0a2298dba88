"""What a search optimises: the objective, the limits and the confidence they must hold at."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np



@dataclass(frozen=True)
class Problem:
    objective: str  # "cost" (minimise expected $) or "time" (minimise expected hours)
    deadline_hours: float | None
    budget_usd: float | None
    confidence: float  # P(meeting the deadline) and P(staying within budget) required

    @classmethod
    def of(cls, workload) -> "Problem":
        return cls(workload.objective, workload.deadline_hours, workload.budget_usd, workload.confidence)


@dataclass
class SearchResult:
    order: np.ndarray  # candidate ids of feasible candidates, best first (only those evaluated)
    evaluations: int  # candidates the searcher priced
    searcher: str
    trials: int = 0  # optuna trials (bayes only)
    first_hit: int | None = None  # evaluations until the returned best was first seen


def cost_quantile(a, q: float) -> np.ndarray:
    """Cost at quantile ``q`` (e.g. the confidence a budget must hold at).

    Uses the assessment's own quantile function when it has one; otherwise fits a lognormal to its
    expected cost and P90 (exact for q = 0.9 by construction).
    """
    if hasattr(a, "cost_quantile"):
        return np.asarray(a.cost_quantile(q), dtype=float)
    if abs(q - 0.9) < 1e-12:
        return np.asarray(a.cost_p90_usd, dtype=float)
    from statistics import NormalDist

    mean = np.maximum(np.asarray(a.cost_usd, dtype=float), 1e-12)
    p90 = np.maximum(np.asarray(a.cost_p90_usd, dtype=float), mean)
    z90 = 1.2815515655446004
    # ln p90 − ln mean = z90·s − s²/2  → the smaller root s
    d = np.log(p90 / mean)
    disc = np.maximum(z90 * z90 - 2 * d, 0.0)
    s = z90 - np.sqrt(disc)
    mu = np.log(mean) - s * s / 2
    return np.exp(mu + NormalDist().inv_cdf(q) * s)


def score(a, problem: Problem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(feasible mask, primary key, secondary key) for assessed candidates; lower keys are better."""
    feasible = np.ones(np.shape(a.hours), dtype=bool)
    if problem.deadline_hours is not None:
        feasible &= np.asarray(a.p_on_time) >= problem.confidence - 1e-12
    if problem.budget_usd is not None:
        reserve = np.asarray(getattr(a, "reserve_usd", 0.0), dtype=float)
        feasible &= cost_quantile(a, problem.confidence) + reserve <= problem.budget_usd + 1e-9
    cost, hours = np.asarray(a.cost_usd, dtype=float), np.asarray(a.hours, dtype=float)
    if problem.objective == "time":
        return feasible, hours, cost
    return feasible, cost, hours


def rank(a, problem: Problem, ids: np.ndarray) -> np.ndarray:
    """Feasible ``ids`` sorted best first (objective, then the other objective, then id)."""
    feasible, primary, secondary = score(a, problem)
    keep = np.flatnonzero(feasible)
    order = np.lexsort((ids[keep], secondary[keep], primary[keep]))
    return ids[keep][order]
