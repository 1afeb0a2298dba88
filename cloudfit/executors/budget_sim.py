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


# ------------------------------------------------------------------------------ the deadline at run time

@dataclass(frozen=True)
class DeadlineSimResult:
    budget_usd: float
    billed_usd: float
    deadline_h: float
    finished_h: float | None  # None: not finished (stopped by the budget)
    reason: str  # completed | budget
    switched: bool  # moved to on-demand by the rule
    preemptions: int

    @property
    def within_budget(self) -> bool:
        return self.billed_usd <= self.budget_usd * (1 + 1e-9) + 1e-9

    @property
    def deadline_kept(self) -> bool:
        return self.finished_h is not None and self.finished_h <= self.deadline_h + 1e-9


def simulate_deadline_run(seed: int, *, switching: bool) -> DeadlineSimResult:
    """One spot job under a deadline and a budget, with or without Can't Be Late's switching rule.

    Draws (the same for both variants of a seed): 1–8 nodes; spot $1–12 per node-hour, on-demand
    2.5–8× that; 4–96 h of work; checkpoint write 30–300 s at the Young/Daly interval for the
    cluster's hazard (0.01–0.3 per node-hour); restart 5–20 min; after a preemption, with chance
    0.3, no spot capacity for Exp(0.5–6 h); a deadline of 1.1–2.5× the work plus one restart; a
    budget of 1.2–6× the expected spot cost. The launcher checks every 2–10 min: a preempted
    cluster is recreated on spot when capacity is back (work since the last checkpoint lost); with
    ``switching``, as soon as time left < work left after the newest checkpoint, on demand + restart +
    one check interval,
    it checkpoints (if up) and moves to on-demand for good. The budget guard (``Guard``) prices every
    cluster before it is created and stops the run before the next check could pass the budget; the
    simulated cloud bills each VM from creation until it is deleted (within the teardown the guard
    assumes), preempted or its ``max_run_duration`` expires.
    """
    from cloudfit.spot.checkpointing import young_daly_s

    rng = random.Random(seed)
    nodes = rng.randint(1, 8)
    spot_price = rng.uniform(1.0, 12.0)
    od_price = spot_price * rng.uniform(2.5, 8.0)
    work_s = rng.uniform(4, 96) * 3600.0
    write_s = rng.uniform(30, 300)
    restart_s = rng.uniform(300, 1200)
    hazard = rng.choice([0.01, 0.05, 0.1, 0.3]) * nodes  # per hour, the whole cluster
    p_outage = 0.3
    outage_mean_s = rng.uniform(0.5, 6) * 3600.0
    interval = rng.uniform(120, 600)
    teardown = rng.uniform(30, 180)
    deadline_s = work_s * rng.uniform(1.1, 2.5) + restart_s
    tau = young_daly_s(hazard, write_s)
    eff = tau / (tau + write_s)  # fraction of up time that trains (the rest writes checkpoints)
    exp_cost = nodes * spot_price * (work_s / eff) / 3600.0 * 1.2
    budget = exp_cost * rng.uniform(1.2, 6.0)
    # spot events drawn up front (so both variants see the same cloud until one of them leaves spot)
    preempt_gaps = [rng.expovariate(hazard / 3600.0) for _ in range(600)]
    outages = [rng.expovariate(1.0 / outage_mean_s) if rng.random() < p_outage else 0.0 for _ in range(600)]
    od_tau = young_daly_s(0.0, write_s)
    od_eff = od_tau / (od_tau + write_s)

    guard = Guard(budget, interval_s=interval, teardown_s=teardown, min_billed_s=60.0, provision_slack_s=restart_s)
    billed = 0.0
    t = 0.0
    spot = True
    work = ckpt = 0.0  # training seconds done, and saved in the newest checkpoint
    preemptions = 0
    switched = False
    gen = 0
    keys: list[str] = []
    vm_start = 0.0  # when the current VMs started billing
    vm_cap = 0.0
    up_at = 0.0  # training starts at (after the restart)
    next_preempt = math.inf
    down_until = 0.0  # no spot capacity before this

    def price() -> float:
        return spot_price if spot else od_price

    def create(now: float) -> bool:
        nonlocal keys, gen, vm_start, vm_cap, up_at, next_preempt
        gen += 1
        keys = [f"g{gen}-n{i}" for i in range(nodes)]
        try:
            vm_cap = guard.reserve(keys, [PriceSchedule.constant(price())] * nodes, now)
        except (BudgetExceeded, BudgetTooSmallError):
            keys = []
            return False
        vm_start = now
        up_at = now + restart_s
        next_preempt = (now + preempt_gaps[min(preemptions, len(preempt_gaps) - 1)]) if spot else math.inf
        return True

    def delete(now: float, *, graceful: bool) -> None:
        nonlocal billed, keys
        if not keys:
            return
        end = min(now + (rng.uniform(0, teardown) if graceful else 0.0), vm_start + vm_cap)
        billed += nodes * price() * max(end - vm_start, 60.0) / 3600.0
        for k in keys:
            guard.end(k, now + (teardown if graceful else 0.0))
        keys = []

    def result(reason: str, finished: float | None) -> DeadlineSimResult:
        return DeadlineSimResult(budget, billed, deadline_s / 3600, None if finished is None else finished / 3600,
                                 reason, switched, preemptions)

    if not create(0.0):
        return result("budget", None)
    while True:
        t_next = t + interval
        if keys:
            # preemption within this check interval
            if spot and next_preempt <= t_next:
                tp = max(next_preempt, t)
                if tp > up_at and work + (tp - max(t, up_at)) * eff >= work_s:  # it ended before the preemption
                    finished = max(t, up_at) + (work_s - work) / eff
                    delete(finished, graceful=True)
                    return result("completed", finished)
                if tp > up_at:  # checkpoints written before the preemption survive it
                    w_tp = work + (tp - max(t, up_at)) * eff
                    ckpt = max(ckpt, w_tp - w_tp % tau)
                work = ckpt  # the work since the checkpoint is lost
                end = min(tp, vm_start + vm_cap)
                billed += nodes * price() * max(end - vm_start, 60.0) / 3600.0
                for k in keys:
                    guard.end(k, tp)
                keys = []
                down_until = tp + outages[min(preemptions, len(outages) - 1)]
                preemptions += 1
            elif t_next > vm_start + vm_cap:  # the VMs reached their max_run_duration: the budget is used up
                delete(vm_start + vm_cap, graceful=False)
                return result("budget", None)
            else:
                if t_next > up_at:
                    rate = eff if spot else od_eff
                    start = max(t, up_at)
                    if work + (t_next - start) * rate >= work_s:  # the job ends inside this interval
                        finished = start + (work_s - work) / rate
                        delete(finished, graceful=True)
                        return result("completed", finished)
                    work = work + (t_next - start) * rate
                    ckpt = max(ckpt, work - (work % tau if spot else work % od_tau))
        t = t_next
        if keys and guard.should_stop(t):
            delete(t, graceful=True)
            return result("budget", None)
        if switching and spot:
            remaining = (work_s - ckpt) / od_eff  # a preemption any moment takes the work since the checkpoint
            if deadline_s - t < remaining + restart_s + interval:
                if keys and t > up_at:
                    ckpt = work  # stop = one more checkpoint
                work = ckpt
                delete(t, graceful=True)
                spot, switched = False, True
                if not create(t):
                    return result("budget", None)
                continue
        if not keys and (not spot or t >= down_until):
            work = ckpt
            if not create(t):
                return result("budget", None)


def simulate_deadline(n: int, seed: int = 0, *, switching: bool) -> list[DeadlineSimResult]:
    return [simulate_deadline_run(seed * 1_000_003 + i, switching=switching) for i in range(n)]
