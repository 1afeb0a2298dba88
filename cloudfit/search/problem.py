"""What a search optimises: the objective, the limits and the confidence they must hold at."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cloudfit.units import Z90


@dataclass(frozen=True)
class Problem:
    objective: str  # "cost" (minimise expected $) or "time" (minimise expected hours)
    deadline_hours: float | None
    budget_usd: float | None
    confidence: float  # P(meeting the deadline) and P(staying within budget) required

    @classmethod
    def of(cls, workload) -> "Problem":
        # "time" (the cost × time knee, cloudfit.plan.knee) and "fastest" both search on hours;
        # recommend() then picks the knee for "time"
        objective = "time" if workload.objective == "fastest" else workload.objective
        return cls(objective, workload.deadline_hours, workload.budget_usd, workload.confidence)


class SearchResult:
    """What a searcher found: the feasible candidates it evaluated, best first.

    ``order`` holds their ids ranked (objective, then the other objective, then id). A searcher may
    hand over a ``ranking`` (assessment, problem, ids) instead: ``order`` is then sorted on first
    use, while ``n_feasible`` and ``head(n)`` — all ``recommend`` needs — cost a partition, not a sort.
    """

    def __init__(self, order: np.ndarray | None = None, evaluations: int = 0, searcher: str = "",
                 trials: int = 0, first_hit: int | None = None, *,
                 ranking: tuple[object, "Problem", np.ndarray] | None = None) -> None:
        if (order is None) == (ranking is None):
            raise ValueError("SearchResult needs either order or ranking")
        self._order = order
        self._scored = None if ranking is None else Ranking(*ranking)
        self.evaluations = evaluations  # candidates the searcher priced
        self.searcher = searcher
        self.trials = trials  # optuna trials (bayes only)
        self.first_hit = first_hit  # evaluations until the returned best was first seen

    @property
    def order(self) -> np.ndarray:
        """Candidate ids of the feasible candidates evaluated, best first."""
        if self._order is None:
            self._order = self._scored.head(self._scored.n_feasible)
        return self._order

    @property
    def n_feasible(self) -> int:
        return int(self._order.size) if self._order is not None else self._scored.n_feasible

    def head(self, n: int) -> np.ndarray:
        """``order[:n]`` without sorting the rest."""
        return self._order[:n] if self._order is not None else self._scored.head(n)

    def __repr__(self) -> str:
        return (f"SearchResult(searcher={self.searcher!r}, evaluations={self.evaluations}, "
                f"feasible={self.n_feasible}, trials={self.trials}, first_hit={self.first_hit})")


class Ranking:
    """Assessed candidates ranked best first (objective, then the other objective, then id),
    lazily: ``head(n)`` gives the best ``n`` without sorting the rest."""

    def __init__(self, a, problem: "Problem", ids: np.ndarray) -> None:
        self.feasible, self.primary, self.secondary = score(a, problem)
        self.ids = ids
        self.keep = np.flatnonzero(self.feasible)
        self.n_feasible = int(self.keep.size)

    def head(self, n: int) -> np.ndarray:
        """The best ``n`` feasible ids, exactly as a full sort would order them, sorting only what can be among them."""
        keep = self.keep
        if 0 < n < keep.size:
            p = self.primary[keep]
            t = np.partition(p, n - 1)[n - 1]  # the n-th smallest objective
            if not np.isnan(t):  # (lexsort puts NaN last; then sort everything)
                keep = keep[p <= t]  # every one of the first n, and their ties
        order = np.lexsort((self.ids[keep], self.secondary[keep], self.primary[keep]))
        return self.ids[keep][order][:n]


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
    # ln p90 − ln mean = Z90·s − s²/2  → the smaller root s
    d = np.log(p90 / mean)
    disc = np.maximum(Z90 * Z90 - 2 * d, 0.0)
    s = Z90 - np.sqrt(disc)
    mu = np.log(mean) - s * s / 2
    return np.exp(mu + NormalDist().inv_cdf(q) * s)


def violation(a, problem: Problem) -> np.ndarray:
    """How far each assessed candidate is from meeting the limits: 0 where it meets them (``score``'s
    feasible mask is exactly ``violation == 0``), else the largest of the shortfall in P(on time)
    (confidence − P), the relative overrun of the expected hours on the deadline (which still ranks
    candidates when P(on time) is 0 for all), and the budget's relative overrun ((cost quantile +
    guard reserve) / budget − 1).

    The one measure of "how far from feasible": the Bayesian searcher's constraint and active
    search's closest point. Tolerances: 1e-12 on the probability, $1e-9 on the budget.
    """
    v = np.zeros(np.shape(a.hours), dtype=float)
    if problem.deadline_hours is not None:
        gap = problem.confidence - np.asarray(a.p_on_time, dtype=float)
        late = np.asarray(a.hours, dtype=float) / problem.deadline_hours - 1.0
        v = np.maximum(v, np.where(gap <= 1e-12, 0.0, np.maximum(np.maximum(gap, late), 1e-15)))
    if problem.budget_usd is not None:
        reserve = np.asarray(getattr(a, "reserve_usd", 0.0), dtype=float)
        need = cost_quantile(a, problem.confidence) + reserve
        over = need / problem.budget_usd - 1.0
        v = np.maximum(v, np.where(need <= problem.budget_usd + 1e-9, 0.0, np.maximum(over, 1e-15)))
    return v


def reasons(a, problem: Problem) -> list[str]:
    """Per assessed candidate, why it misses the limits in words ("" where it meets them; the same tests
    as :func:`violation`): "P(on time) 62% < 90%", "P90 cost $599.39 + $8.49 guard reserve > $600.00 budget"."""
    n = int(np.size(a.hours))
    out = [[] for _ in range(n)]
    if problem.deadline_hours is not None:
        p = np.asarray(a.p_on_time, dtype=float)
        for i in np.flatnonzero(problem.confidence - p > 1e-12):
            out[i].append(f"P(on time) {p[i]:.0%} < {problem.confidence:.0%} of meeting the deadline")
    if problem.budget_usd is not None:
        q = cost_quantile(a, problem.confidence)
        reserve = np.broadcast_to(np.asarray(getattr(a, "reserve_usd", 0.0), dtype=float), q.shape)
        for i in np.flatnonzero(q + reserve > problem.budget_usd + 1e-9):
            out[i].append(f"P{problem.confidence * 100:g} cost ${q[i]:,.2f} + ${reserve[i]:,.2f} guard reserve > "
                          f"${problem.budget_usd:,.2f} budget")
    return ["; ".join(r) for r in out]


def score(a, problem: Problem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(feasible mask, primary key, secondary key) for assessed candidates; lower keys are better."""
    feasible = violation(a, problem) == 0.0
    cost, hours = np.asarray(a.cost_usd, dtype=float), np.asarray(a.hours, dtype=float)
    if problem.objective == "time":
        return feasible, hours, cost
    return feasible, cost, hours


def rank(a, problem: Problem, ids: np.ndarray) -> np.ndarray:
    """Feasible ``ids`` sorted best first (objective, then the other objective, then id)."""
    r = Ranking(a, problem, ids)
    return r.head(r.n_feasible)
