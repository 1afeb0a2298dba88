"""Discrete-event simulation of the budget guard against a model of Compute Engine billing.

Each simulated run draws a budget, a cluster, a price schedule, fallbacks after stockouts,
random preemptions, provisioning and deletion delays, late launcher checks and (sometimes) a
launcher that dies mid-run. The launcher follows the same protocol as the real executors
(``Guard.reserve`` before inserts, ``should_stop`` every check, recreate preempted VMs within the
remaining allowance); the "cloud" bills each VM per second from RUNNING, with a 60 s minimum,
until it is deleted, preempted or its ``max_run_duration`` expires. ``simulate_run`` returns what
the cloud billed — the number that must never exceed the budget.

Used by ``tests/executors/test_budget.py`` and ``bench/budget_sim.py``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from cloudfit.executors.budget import BudgetTooSmallError, Guard, PriceSchedule
from cloudfit.errors import BudgetExceeded


@dataclass(frozen=True)
class SimResult:
    budget_usd: float
    billed_usd: float  # what the cloud charged
    accrued_usd: float  # what the guard believed
    reason: str  # completed | budget | launcher-died | budget-too-small | no-capacity
    preemptions: int
    fallbacks: int
    seconds: float

    @property
    def within_budget(self) -> bool:
        return self.billed_usd <= self.budget_usd * (1 + 1e-9) + 1e-9


@dataclass
class _Vm:
    key: str
    schedule: PriceSchedule
    running_at: float
    cap_s: float
    end: float = math.inf  # when billing stops
    preempt_at: float = math.inf

    def billing_end(self) -> float:
        return min(self.end, self.preempt_at, self.running_at + self.cap_s + self._expiry_delay)

    _expiry_delay: float = 0.0

    def bill(self, min_billed_s: float) -> float:
        end = self.billing_end()
        return self.schedule.cost(self.running_at, max(end, self.running_at + min_billed_s))


def random_schedule(rng: random.Random, base: float, horizon_s: float) -> PriceSchedule:
    """A step schedule around ``base`` with 0–4 changes (×0.5–×2) within ``horizon_s``."""
    k = rng.randint(0, 4)
    times = sorted(rng.uniform(1, horizon_s) for _ in range(k))
    times = [0.0] + [t for i, t in enumerate(times) if i == 0 or t > times[i - 1]]
    prices = [base] + [base * rng.uniform(0.5, 2.0) for _ in times[1:]]
    return PriceSchedule(tuple(times), tuple(prices))


def simulate_run(rng: random.Random, *, guard_teardown_factor: float = 1.0) -> SimResult:
    """One random run. ``guard_teardown_factor`` < 1 tells the guard that teardown is quicker than
    the simulated cloud makes it — a deliberately broken guard, to show the check can fail."""
    budget = math.exp(rng.uniform(math.log(0.5), math.log(500)))
    nodes = rng.randint(1, 8)
    interval = rng.uniform(5, 120)
    teardown = rng.uniform(10, 180)
    slack = rng.uniform(30, 600)
    guard = Guard(budget, interval_s=interval, teardown_s=teardown * guard_teardown_factor, min_billed_s=60.0,
                  provision_slack_s=slack)
    n_configs = rng.randint(1, 3)
    horizon = 48 * 3600.0
    configs = [random_schedule(rng, math.exp(rng.uniform(math.log(0.1), math.log(40))), horizon) for _ in range(n_configs)]
    p_stockout = rng.choice([0.0, 0.0, 0.3, 0.6])  # chance that a config's zone is out of capacity
    hazard_per_hour = rng.choice([0.0, 0.1, 1.0, 5.0])
    job_s = rng.uniform(60, 36 * 3600)
    death_at = rng.uniform(0, 20 * 3600) if rng.random() < 0.3 else math.inf

    vms: list[_Vm] = []
    t = 0.0
    preemptions = fallbacks = 0

    def start_vm(key: str, sched: PriceSchedule, cap: float, now: float) -> _Vm:
        vm = _Vm(key, sched, running_at=now + rng.uniform(0, slack), cap_s=cap)
        vm._expiry_delay = rng.uniform(0, teardown)
        if hazard_per_hour > 0:
            vm.preempt_at = vm.running_at + rng.expovariate(hazard_per_hour / 3600.0)
        vms.append(vm)
        return vm

    def result(reason: str) -> SimResult:
        billed = sum(v.bill(guard.min_billed_s) for v in vms)
        return SimResult(budget, billed, guard.accrued(t), reason, preemptions, fallbacks, t)

    # ---- launch, falling back through the configs on stockout
    cluster: dict[str, _Vm] = {}
    sched = configs[0]
    for ci, sched in enumerate(configs):
        try:
            guard.check_launchable([sched] * nodes, t)
        except BudgetTooSmallError:
            return result("budget-too-small")
        try:
            cap = guard.reserve([f"c{ci}-n{i}" for i in range(nodes)], [sched] * nodes, t)
        except BudgetExceeded:
            return result("budget")
        # A stockout is a property of the zone: it hits this config at some node, or never.
        failed_at = rng.randrange(nodes) if rng.random() < p_stockout else None
        for i in range(nodes):
            key = f"c{ci}-n{i}"
            t += rng.uniform(0.5, 5)  # insert call + operation wait
            if i == failed_at:
                break
            cluster[key] = start_vm(key, sched, cap, t)
        if failed_at is None:
            break
        fallbacks += 1
        for i in range(failed_at, nodes):
            guard.cancel(f"c{ci}-n{i}", t)
        for key, vm in list(cluster.items()):  # clean up the partial cluster
            vm.end = min(vm.end, t + rng.uniform(0, teardown))
            guard.end(key, t + teardown)
        cluster.clear()
        t += teardown
    else:
        return result("no-capacity")

    started = t
    while True:
        t += rng.uniform(0.2 * interval, interval)
        if t >= death_at:
            # Nobody deletes anything any more: the caps (and preemptions) end every VM.
            t = max(v.billing_end() for v in vms)
            return result("launcher-died")
        # Detect VMs that are gone: preempted or expired.
        for key, vm in list(cluster.items()):
            if vm.billing_end() <= t:
                guard.end(key, t)
                del cluster[key]
                if vm.preempt_at <= t:
                    preemptions += 1
        done = t - started >= job_s
        stop = guard.should_stop(t)
        if done or stop or not cluster and not _can_recreate(guard, sched, nodes, t):
            for key, vm in cluster.items():
                vm.end = min(vm.end, t + rng.uniform(0, teardown))
                guard.end(key, t + teardown)
            t += teardown
            return result("completed" if done else "budget")
        # Recreate what was lost, within what is left.
        missing = nodes - len(cluster)
        for j in range(missing):
            key = f"r{preemptions}-{j}-{t:.0f}"
            try:
                cap = guard.reserve([key], [sched], t)
            except BudgetExceeded:
                break
            cluster[key] = start_vm(key, sched, cap, t)


def _can_recreate(guard: Guard, sched: PriceSchedule, nodes: int, t: float) -> bool:
    return guard.cap_for([sched], t) >= guard.min_cap_s


def simulate(n: int, seed: int = 0, **kw) -> list[SimResult]:
    rng = random.Random(seed)
    return [simulate_run(rng, **kw) for _ in range(n)]
