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
    on_demand_hours: float = 0.0  # cluster-hours bought on demand
    launcher_deaths: int = 0  # launcher killed, cluster brought down, same plan relaunched
    spend_recorded_usd: float = 0.0  # what the state store carried from launch to relaunch (the guards' sum)

    @property
    def within_budget(self) -> bool:
        return self.billed_usd <= self.budget_usd * (1 + 1e-9) + 1e-9

    @property
    def deadline_kept(self) -> bool:
        return self.finished_h is not None and self.finished_h <= self.deadline_h + 1e-9


def _sim_configs(nodes: int, spot_price: float, od_price: float):
    from cloudfit.types import ClusterConfig, Offering

    o = Offering("sim-8g", "SIM", 8, 96.0, 680.0, "sim-region", "sim-region-a", od_price, spot_price)
    return ClusterConfig(o, nodes, True), ClusterConfig(o, nodes, False)


def simulate_deadline_run(seed: int, *, switching: bool, deaths: bool = False, watch_cls=None) -> DeadlineSimResult:
    """One spot job under a deadline and a budget, with or without the deadline rule (the real
    ``DeadlineWatch``: Can't Be Late's rule with measured speed and hysteresis).

    Draws (the same for both variants of a seed): 1–8 nodes; spot $1–12 per node-hour, on-demand
    2.5–8× that; 4–96 h of work at 0.8–1.1× the plan's speed; checkpoint write 30–300 s at the
    Young/Daly interval for the cluster's hazard (0.01–0.3 per node-hour); restart 5–20 min; after a
    preemption, with chance 0.3, no spot capacity for Exp(0.5–6 h); a deadline of 1.1–2.5× the planned
    work plus one restart; a budget of 1.2–6× the expected spot cost. The launcher checks every 2–10 min:
    a preempted cluster is recreated on spot when capacity is back (work since the last checkpoint
    lost). With ``deaths``, in 30% of runs the launcher is killed 1–3 times: nobody checks or recreates
    until, 0.5–4 h later, `cloudfit down` deletes what is left and the same plan is relaunched — with a
    guard whose budget is what the previous launches left (spend carried per plan), resuming from the
    checkpoint. The simulated cloud bills each VM from creation until it is deleted, preempted or its
    ``max_run_duration`` expires.
    """
    from cloudfit.executors.deadline import DeadlineSpec, DeadlineWatch
    from cloudfit.spot.checkpointing import young_daly_s

    rng = random.Random(seed)
    nodes = rng.randint(1, 8)
    spot_price = rng.uniform(1.0, 12.0)
    od_price = spot_price * rng.uniform(2.5, 8.0)
    plan_work_s = rng.uniform(4, 96) * 3600.0
    speed = rng.uniform(0.8, 1.1)
    work_s = plan_work_s / speed
    write_s = rng.uniform(30, 300)
    restart_s = rng.uniform(300, 1200)
    hazard = rng.choice([0.01, 0.05, 0.1, 0.3]) * nodes  # per hour, the whole cluster
    outage_mean_s = rng.uniform(0.5, 6) * 3600.0
    interval = rng.uniform(120, 600)
    teardown = rng.uniform(30, 180)
    deadline_s = plan_work_s * rng.uniform(1.1, 2.5) + restart_s
    tau = young_daly_s(hazard, write_s)
    eff = tau / (tau + write_s)  # fraction of up time that trains (the rest writes checkpoints)
    exp_cost = nodes * spot_price * (plan_work_s / eff) / 3600.0 * 1.2
    budget = exp_cost * rng.uniform(1.2, 6.0)
    preempt_gaps = [rng.expovariate(hazard / 3600.0) for _ in range(600)]
    outages = [rng.expovariate(1.0 / outage_mean_s) if rng.random() < 0.3 else 0.0 for _ in range(600)]
    n_deaths = rng.randint(1, 3) if deaths and rng.random() < 0.3 else 0
    death_times = sorted(rng.uniform(0, deadline_s) for _ in range(n_deaths))
    death_gaps = [rng.uniform(0.5, 4) * 3600.0 for _ in range(n_deaths)]
    od_tau = young_daly_s(0.0, write_s)
    od_eff = od_tau / (od_tau + write_s)
    spot_cfg, od_cfg = _sim_configs(nodes, spot_price, od_price)
    spec = DeadlineSpec(deadline_s=deadline_s, planned_step_s=1.0 / eff, restart_s=restart_s, on_demand=od_cfg,
                        planned_gpus=spot_cfg.accelerators, hazard_per_hour=hazard, checkpoint_interval_s=tau)
    sim = _DeadlineSim(rng, budget, interval, teardown, restart_s, nodes, spot_price, od_price)
    watch = (watch_cls or DeadlineWatch)(spec, int(work_s), margin_s=interval, t0=0.0)
    return sim.run(work_s, eff, od_eff, tau, od_tau, preempt_gaps, outages, death_times, death_gaps,
                   watch if switching else None, spot_cfg, deadline_s)


class _DeadlineSim:
    """The simulated launcher and cloud of ``simulate_deadline_run`` (state kept on the instance)."""

    def __init__(self, rng, budget, interval, teardown, restart_s, nodes, spot_price, od_price) -> None:
        self.rng, self.budget, self.interval, self.teardown = rng, budget, interval, teardown
        self.restart_s, self.nodes, self.prices = restart_s, nodes, {True: spot_price, False: od_price}
        self.guard = self._guard(budget)
        self.billed = 0.0
        self.recorded = 0.0  # spend closed by earlier launches (carried to the relaunch)
        self.spot, self.keys, self.gen = True, [], 0
        self.vm_start = self.vm_cap = self.up_at = 0.0
        self.next_preempt = math.inf
        self.od_hours = 0.0

    def _guard(self, budget: float) -> Guard:
        return Guard(budget, interval_s=self.interval, teardown_s=self.teardown, min_billed_s=60.0,
                     provision_slack_s=self.restart_s)

    def price(self) -> float:
        return self.prices[self.spot]

    def create(self, now: float, gap: float) -> bool:
        self.gen += 1
        self.keys = [f"g{self.gen}-n{i}" for i in range(self.nodes)]
        try:
            self.vm_cap = self.guard.reserve(self.keys, [PriceSchedule.constant(self.price())] * self.nodes, now)
        except (BudgetExceeded, BudgetTooSmallError):
            self.keys = []
            return False
        self.vm_start, self.up_at = now, now + self.restart_s
        self.next_preempt = now + gap if self.spot else math.inf
        return True

    def bill_until(self, end: float, guard_end: float) -> None:
        end = min(end, self.vm_start + self.vm_cap)
        hours = max(end - self.vm_start, 60.0) / 3600.0
        self.billed += self.nodes * self.price() * hours
        if not self.spot:
            self.od_hours += hours
        for k in self.keys:
            if self.guard.is_live(k):
                self.guard.end(k, guard_end)
        self.keys = []

    def delete(self, now: float, *, graceful: bool) -> None:
        if self.keys:
            self.bill_until(now + (self.rng.uniform(0, self.teardown) if graceful else 0.0),
                            now + (self.teardown if graceful else 0.0))

    def relaunch(self, now: float) -> None:
        """`cloudfit down` then the same plan again: the new guard's budget is what is left of the plan's."""
        self.delete(now, graceful=False)
        self.recorded += self.guard.accrued(now)
        self.guard = self._guard(max(0.0, self.budget - self.recorded))

    def run(self, work_s, eff, od_eff, tau, od_tau, gaps, outages, death_times, death_gaps, watch, spot_cfg,
            deadline_s) -> DeadlineSimResult:
        t, work, ckpt, preemptions, down_until = 0.0, 0.0, 0.0, 0, 0.0
        deaths = list(zip(death_times, death_gaps))
        dead_until = -1.0
        switched = False

        def result(reason, finished):
            return DeadlineSimResult(self.budget, self.billed, deadline_s / 3600, None if finished is None else
                                     finished / 3600, reason, switched, preemptions, self.od_hours,
                                     len(death_times), self.recorded + self.guard.accrued(t))

        if not self.create(0.0, gaps[0]):
            return result("budget", None)
        while True:
            t_next = t + self.interval
            if self.keys:
                rate = eff if self.spot else od_eff
                if self.spot and self.next_preempt <= t_next:
                    tp = max(self.next_preempt, t)
                    if tp > self.up_at and work + (tp - max(t, self.up_at)) * rate >= work_s:
                        finished = max(t, self.up_at) + (work_s - work) / rate
                        self.delete(finished, graceful=True)
                        return result("completed", finished)
                    if tp > self.up_at:  # checkpoints written before the preemption survive it
                        w_tp = work + (tp - max(t, self.up_at)) * rate
                        ckpt = max(ckpt, w_tp - w_tp % tau)
                    work = ckpt
                    self.bill_until(tp, tp)
                    down_until = tp + outages[min(preemptions, len(outages) - 1)]
                    preemptions += 1
                    if watch is not None:
                        watch.lost()
                elif t_next > self.vm_start + self.vm_cap:  # max_run_duration: this launch's budget is used up
                    self.bill_until(self.vm_start + self.vm_cap, self.vm_start + self.vm_cap)
                    if t_next >= dead_until:
                        return result("budget", None)
                elif t_next > self.up_at:
                    start = max(t, self.up_at)
                    if work + (t_next - start) * rate >= work_s:  # the job ends inside this interval
                        finished = start + (work_s - work) / rate
                        self.delete(finished, graceful=True)
                        return result("completed", finished)
                    work += (t_next - start) * rate
                    ckpt = max(ckpt, work - (work % tau if self.spot else work % od_tau))
            t = t_next
            if deaths and t >= deaths[0][0]:  # the launcher is killed: nobody checks until the relaunch
                dead_until = t + deaths.pop(0)[1]
            if t < dead_until:
                continue
            if dead_until > 0:  # relaunched: down, then the same plan with the budget that is left
                dead_until = -1.0
                self.relaunch(t)
                work = ckpt
            if self.keys and self.guard.should_stop(t):
                self.delete(t, graceful=True)
                return result("budget", None)
            if watch is not None and self.spot:
                cfg = spot_cfg
                d = watch.observe(t, {"step": int(work), "checkpoint_step": int(ckpt), "total_steps": int(work_s)},
                                  cfg, up=bool(self.keys) and t > self.up_at, budget_left_usd=self.guard.remaining(t))
                if d.action == "on-demand":
                    if self.keys and t > self.up_at:
                        ckpt = work  # stop = one more checkpoint
                    work = ckpt
                    self.delete(t, graceful=True)
                    self.spot, switched = False, True
                    watch.restarted()
                    if not self.create(t, 0.0):
                        return result("budget", None)
                    continue
            if not self.keys and (not self.spot or t >= down_until):
                work = ckpt
                if not self.create(t, gaps[min(preemptions, len(gaps) - 1)]):
                    return result("budget", None)


def simulate_deadline(n: int, seed: int = 0, *, switching: bool, deaths: bool = False,
                      watch_cls=None) -> list[DeadlineSimResult]:
    """``watch_cls``: another rule with ``DeadlineWatch``'s interface (the benchmark's comparisons)."""
    return [simulate_deadline_run(seed * 1_000_003 + i, switching=switching, deaths=deaths, watch_cls=watch_cls)
            for i in range(n)]


# ------------------------------------------------------------------------------ a plan's own deadline rule

@dataclass(frozen=True)
class PlanRunResult:
    finished_s: float | None
    deadline_s: float
    switches: tuple[str, ...]  # each switch's reason, in order
    spot_hours: float  # cluster-hours billed on spot
    on_demand_hours: float  # cluster-hours billed on demand (after a switch)
    spend_usd: float
    checks: int

    @property
    def deadline_kept(self) -> bool:
        return self.finished_s is not None and self.finished_s <= self.deadline_s


def simulate_plan_deadline(spec, total_steps: int, config, *, speed: float = 1.0, boot_s: float = 60.0,
                           interval_s: float = 30.0, checkpoint_every_s: float | None = None,
                           preempt_at: tuple[float, ...] = (), horizon_s: float | None = None) -> PlanRunResult:
    """Drive the real ``DeadlineWatch`` with a simulated trainer on simulated time.

    The job runs ``total_steps`` at ``speed`` × the plan's speed on every config (the model's error is
    the same everywhere), boots for ``boot_s`` on every (re)start, checkpoints every
    ``checkpoint_every_s`` (the plan's interval by default) and on every stop; preemptions at the
    times in ``preempt_at`` cost the work since the checkpoint and a ``spec.restart_s`` outage. The
    launcher checks every ``interval_s`` and does what the rule says (a switch: checkpoint, restart
    on the alternative after ``spec.restart_s``)."""
    from cloudfit.executors.deadline import DeadlineWatch

    watch = DeadlineWatch(spec, total_steps, margin_s=interval_s, t0=0.0)
    every = checkpoint_every_s or spec.checkpoint_interval_s or 3600.0
    horizon = horizon_s or spec.deadline_s * 3
    t, up_at, done, ckpt, last_ckpt_t = 0.0, boot_s, 0.0, 0, boot_s
    pending = sorted(preempt_at)
    switches: list[str] = []
    hours = {True: 0.0, False: 0.0}
    spend = 0.0
    checks = 0
    while t < horizon:
        step_s = 1.0 / (watch.planned_rate(config=config) * speed)
        t_next = t + interval_s
        if pending and pending[0] <= t_next and config.spot:  # preempted: back to the checkpoint, outage
            tp = pending.pop(0)
            done = float(ckpt)
            hours[True] += (tp - t) / 3600.0
            spend += config.price_per_hour * (tp - t) / 3600.0
            t, up_at = tp, tp + spec.restart_s
            watch.lost()
            watch.observe(t, {"step": int(done), "checkpoint_step": ckpt, "total_steps": total_steps}, config, up=False)
            continue
        if t_next > up_at:
            run_from = max(t, up_at)
            done = min(total_steps, done + (t_next - run_from) / step_s)
            if done >= total_steps:
                end = run_from + (total_steps - (done - (t_next - run_from) / step_s)) * step_s
                hours[config.spot] += (end - t) / 3600.0
                spend += config.price_per_hour * (end - t) / 3600.0
                return PlanRunResult(end, spec.deadline_s, tuple(switches), hours[True], hours[False], spend, checks)
            if t_next - last_ckpt_t >= every:
                ckpt, last_ckpt_t = int(done), t_next
        hours[config.spot] += interval_s / 3600.0
        spend += config.price_per_hour * interval_s / 3600.0
        t = t_next
        checks += 1
        d = watch.observe(t, {"step": int(done), "checkpoint_step": ckpt, "total_steps": total_steps}, config,
                          up=t > up_at)
        if d.action == "on-demand":
            switches.append(d.reason)
            ckpt = int(done)  # a stop writes one more checkpoint
            config, up_at, last_ckpt_t = d.to, t + spec.restart_s, t + spec.restart_s
            watch.restarted()
    return PlanRunResult(None, spec.deadline_s, tuple(switches), hours[True], hours[False], spend, checks)
