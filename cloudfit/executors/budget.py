"""The budget guard: pure accounting that decides when a cluster must stop and how long each VM may live.

Two independent fences keep spend under the budget:

1. **The launcher's check** (``Guard.should_stop``): every ``interval_s`` the launcher asks whether
   running until the next check *and then* tearing down (``teardown_s``: checkpoint + delete) could
   pass the budget; if so it checkpoints and deletes every VM now.
2. **The cloud-side cap** (``Guard.reserve``): every VM is created with a ``max_run_duration`` so the
   cloud deletes it even if the launcher dies. Caps are handed out so that the *committed* spend —
   everything already spent plus every live VM running to its cap and then taking ``teardown_s`` to
   go away — never exceeds the budget. A preempted VM releases what it did not use, and its
   replacement is capped by what is left.

Billing follows Compute Engine: per second with a minimum of ``min_billed_s`` (60 s) per VM life,
at the price the VM was launched with (spot or on-demand). Prices may follow a known schedule
(``PriceSchedule``); a constant price is the common case. Times are seconds on any monotonic
clock; nothing here reads a clock, so the logic can be simulated (``budget_sim``).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from cloudfit.errors import BudgetExceeded, UsageError

#: Compute Engine accepts max_run_duration between 30 s and 120 days.
MIN_CAP_S = 30.0
MAX_CAP_S = 120 * 86400.0


class BudgetTooSmallError(UsageError):
    """The budget does not cover one guard interval (plus teardown) of the cluster: nothing is created."""


@dataclass(frozen=True)
class PriceSchedule:
    """USD per hour as a step function of time: ``prices[i]`` holds from ``times[i]`` until ``times[i+1]``.

    The first step extends back to -inf and the last to +inf.
    """

    times: tuple[float, ...]
    prices: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.times) != len(self.prices) or not self.times:
            raise ValueError("a price schedule needs one price per breakpoint")
        if any(b <= a for a, b in zip(self.times, self.times[1:])):
            raise ValueError("price schedule breakpoints must increase")
        if any(p < 0 or math.isnan(p) for p in self.prices):
            raise ValueError("prices must be non-negative")

    @classmethod
    def constant(cls, price_per_hour: float) -> "PriceSchedule":
        return cls((0.0,), (float(price_per_hour),))

    def price_at(self, t: float) -> float:
        i = bisect.bisect_right(self.times, t) - 1
        return self.prices[max(i, 0)]

    def max_price(self, t0: float, t1: float) -> float:
        """Highest price in force anywhere in ``[t0, t1]``."""
        lo = max(bisect.bisect_right(self.times, t0) - 1, 0)
        hi = max(bisect.bisect_right(self.times, t1) - 1, 0)
        return max(self.prices[lo : hi + 1])

    def cost(self, t0: float, t1: float) -> float:
        """USD for one VM billed from ``t0`` to ``t1`` (0 if ``t1 <= t0``)."""
        if t1 <= t0:
            return 0.0
        total = 0.0
        i = max(bisect.bisect_right(self.times, t0) - 1, 0)
        t = t0
        while t < t1:
            nxt = self.times[i + 1] if i + 1 < len(self.times) else math.inf
            seg_end = min(nxt, t1)
            total += self.prices[i] * (seg_end - t) / 3600.0
            t = seg_end
            i += 1
        return total


@dataclass
class NodeLife:
    """One VM from the moment it is reserved (before the insert call) until it is confirmed gone."""

    key: str
    schedule: PriceSchedule
    start: float
    cap_s: float
    end: float | None = None
    billed: bool = True  # False when the VM never came to exist (insert refused): costs nothing


@dataclass
class Guard:
    """Budget accounting for one cluster. See the module docstring for the two fences.

    ``interval_s``: the longest gap between two ``should_stop`` checks.
    ``teardown_s``: the longest billed time from a stop decision (or a cap expiring) until a VM is gone.
    ``provision_slack_s``: how long after the insert call a VM may start RUNNING (the cloud's cap
    counts from RUNNING), only used to bound prices of a changing schedule.
    """

    budget_usd: float
    interval_s: float
    teardown_s: float
    min_billed_s: float = 60.0
    provision_slack_s: float = 600.0
    min_cap_s: float = MIN_CAP_S
    lives: list[NodeLife] = field(default_factory=list)  # every VM life, ended ones included
    _closed_usd: float = 0.0  # billed cost of ended lives (kept as a sum: checks stay O(live VMs))
    _live: dict[str, NodeLife] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (self.budget_usd >= 0 and math.isfinite(self.budget_usd)):
            raise UsageError(f"budget must be a non-negative number of USD, got {self.budget_usd!r}")
        if self.interval_s <= 0 or self.teardown_s < 0:
            raise ValueError("interval_s must be positive and teardown_s non-negative")

    # ---------------------------------------------------------------- accounting

    def _billed_until(self, life: NodeLife, t: float) -> float:
        return max(t, life.start + self.min_billed_s)

    def _life_cost(self, life: NodeLife, until: float) -> float:
        if not life.billed:
            return 0.0
        return life.schedule.cost(life.start, self._billed_until(life, until))

    def _worst_cost(self, schedule: PriceSchedule, start: float, cap_s: float) -> float:
        """Upper bound on one VM's bill if it runs to its cap and then takes ``teardown_s`` to go.

        The cloud counts the cap from RUNNING, which may be up to ``provision_slack_s`` after
        ``start``; the price is bounded by the schedule's maximum over that whole window.
        """
        billed = max(cap_s + self.teardown_s, self.min_billed_s)
        window_end = start + self.provision_slack_s + billed
        return schedule.max_price(start, window_end) * billed / 3600.0

    def live(self) -> list[NodeLife]:
        return list(self._live.values())

    def accrued(self, now: float) -> float:
        """USD spent so far, counting every live VM as if it were deleted right now."""
        return self._closed_usd + sum(self._life_cost(n, now) for n in self._live.values())

    def committed(self, now: float) -> float:
        """Worst-case spend if the launcher died now: ended VMs as billed, live VMs to their caps."""
        return self._closed_usd + sum(
            max(self._worst_cost(n.schedule, n.start, n.cap_s), self._life_cost(n, now))
            for n in self._live.values()
        )

    def rate_per_hour(self, now: float) -> float:
        """USD/hour of the VMs live now."""
        return sum(n.schedule.price_at(now) for n in self._live.values())

    def remaining(self, now: float) -> float:
        return self.budget_usd - self.accrued(now)

    # ---------------------------------------------------------------- decisions

    def projected(self, now: float) -> float:
        """Spend if the cluster keeps running until the next check and is then torn down."""
        horizon = now + self.interval_s + self.teardown_s
        total = self._closed_usd
        for n in self._live.values():
            until = self._billed_until(n, horizon)
            total += n.schedule.max_price(n.start, until) * (until - n.start) / 3600.0
        return total

    def should_stop(self, now: float) -> bool:
        """True when waiting for the next check could overrun the budget: checkpoint and stop now."""
        return self.projected(now) > self.budget_usd + 1e-12

    def cap_for(self, schedules: Sequence[PriceSchedule], now: float) -> float:
        """The largest equal cap (seconds) for new VMs with these schedules that keeps
        ``committed`` within the budget; 0 if not even ``min_cap_s`` fits."""
        allowance = self.budget_usd - self.committed(now)
        if not schedules:
            return MAX_CAP_S

        def worst(cap: float) -> float:
            return sum(self._worst_cost(s, now, cap) for s in schedules)

        if worst(self.min_cap_s) > allowance + 1e-12:
            return 0.0
        if worst(MAX_CAP_S) <= allowance:
            return MAX_CAP_S
        lo, hi = self.min_cap_s, MAX_CAP_S
        for _ in range(80):  # bisection: worst() is monotone in the cap
            mid = (lo + hi) / 2
            if worst(mid) <= allowance:
                lo = mid
            else:
                hi = mid
        return math.floor(lo)  # whole seconds: what Duration(seconds=…) carries

    def minimum_budget(self, schedules: Sequence[PriceSchedule], now: float = 0.0) -> float:
        """Smallest budget that lets these VMs start: one interval plus teardown (and at least the
        minimum cap and the minimum billed time) for every VM."""
        need = max(self.interval_s + self.teardown_s, self.min_cap_s + self.teardown_s, self.min_billed_s)
        return sum(s.max_price(now, now + self.provision_slack_s + need) * need / 3600.0 for s in schedules)

    def check_launchable(self, schedules: Sequence[PriceSchedule], now: float = 0.0) -> None:
        """Raise ``BudgetTooSmallError`` if the budget cannot pay for one guard interval of these VMs."""
        need = self.minimum_budget(schedules, now)
        if self.budget_usd < need:
            rate = sum(s.price_at(now) for s in schedules)
            span = max(self.interval_s + self.teardown_s, self.min_cap_s + self.teardown_s, self.min_billed_s)
            raise BudgetTooSmallError(
                f"budget ${self.budget_usd:.4g} is below one guard interval of this cluster "
                f"({span:g} s at ${rate:.4g}/h = ${need:.4g}); raise --budget"
            )

    def reserve(self, keys: Iterable[str], schedules: Sequence[PriceSchedule], now: float) -> float:
        """Start accounting for new VMs (before their insert calls) and return their common cap in
        seconds. Raises ``BudgetExceeded`` when what is left cannot cover ``min_cap_s``."""
        keys = list(keys)
        if len(keys) != len(schedules):
            raise ValueError("one schedule per key")
        cap = self.cap_for(schedules, now)
        if cap < self.min_cap_s:
            left = self.budget_usd - self.committed(now)
            raise BudgetExceeded(
                f"${left:.4g} of the ${self.budget_usd:.4g} budget is left: not enough to run "
                f"{len(keys)} more VM(s) for {self.min_cap_s:g} s"
            )
        for k, s in zip(keys, schedules):
            if k in self._live:
                raise ValueError(f"{k} is already live")
            life = NodeLife(k, s, now, cap)
            self.lives.append(life)
            self._live[k] = life
        return cap

    def end(self, key: str, now: float) -> None:
        """The VM is confirmed gone (deleted, preempted, expired)."""
        n = self._live.pop(key)
        n.end = max(now, n.start)
        self._closed_usd += self._life_cost(n, n.end)

    def cancel(self, key: str, now: float) -> None:
        """The insert was refused (stockout, quota): the VM never existed and costs nothing."""
        n = self._live.pop(key)
        n.end = max(now, n.start)
        n.billed = False

    def is_live(self, key: str) -> bool:
        return key in self._live


#: The longest run a plan may predict before its default budget is refused (a year): beyond it the
#: plan's hours are not a training run (a typo, a hand-edited file) and P90 × price is no budget.
MAX_PLAN_HOURS = 24 * 365.0


def default_budget(plan, margin: float) -> float:
    """The budget when none is given: the plan's own, else its P90 hours at the catalog's price × ``margin``.
    A plan predicting more than ``MAX_PLAN_HOURS`` (or nothing finite) gets no default: one line, give --budget."""
    if plan.workload.budget_usd:
        return float(plan.workload.budget_usd)
    c = plan.chosen
    hours = float(c.hours_p90)
    if not (0 < hours <= MAX_PLAN_HOURS):
        raise UsageError(f"the plan predicts {hours:.3g} h (P90) for {c.config.label()}: not a training run to "
                         f"derive a budget from (over {MAX_PLAN_HOURS:,.0f} h); give --budget USD or re-plan")
    return round(hours * c.config.price_per_hour * margin, 2)


def check_launchable(guard: Guard, schedules, prior: float, budget: float) -> None:
    """``guard.check_launchable``, naming what earlier launches of the plan spent when that is why."""
    try:
        guard.check_launchable(schedules)
    except BudgetTooSmallError as e:
        if prior > 0:
            raise BudgetTooSmallError(f"{e} (earlier launches of this plan spent ${prior:.4g} of its "
                                      f"${budget:.4g})") from None
        raise
