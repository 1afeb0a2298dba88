"""The deadline kept at run time: a rule after Can't Be Late, applied by the launcher while the job runs.

Reference: Z. Wu, W.-L. Chiang, Z. Mao, Z. Yang, E. Friedman, S. Shenker, I. Stoica, "Can't Be Late:
Optimizing Spot Instance Savings under Deadlines", NSDI 2024. Their result: stay on spot while there is
slack, move to on-demand *for good* when the deadline could otherwise no longer be made, and never
flap between the two (their "uniform progress" and hysteresis arguments). This module applies that
with three guards against panicking on noise:

* **Progress is measured, not guessed from the first step.** Each run segment (a launch, a restart
  after a loss, a move) has a *boot* phase (until the first step after the segment started: VM start,
  install, checkpoint restore — timed and kept apart as ``boot_s``), a *warm-up* of ``warmup_steps``
  steps (compilation, caches; not counted) and then a *window* of up to ``window_steps`` steps over
  which the speed is measured. Until a window exists the plan's speed stands in. The speed is kept as
  an *efficiency* (measured ÷ the plan's speed on that config), so it carries to other configs.
* **Switch only when it helps.** Two projections on every check: *stay* (the work left at the
  measured speed, plus, on spot, the expected cost of preemptions: hazard × time × (restart + half a
  checkpoint interval); the hazard is the plan's, or the one observed on this run if higher), and the
  best *alternative* (on-demand of the same shape, or another on-demand config from the plan's
  alternatives at its planned speed × the measured efficiency: the work after the newest checkpoint +
  restart + one check interval). The rule switches when *stay* misses the deadline **and** the
  alternative keeps it — never when both miss (then spot, the cheaper, stays and the reason says so).
* **Hysteresis**: a miss read from the measured speed must repeat on ``confirm`` consecutive checks
  (a lost node is an event, not noise: it counts at once), unless waiting one more check would make
  the alternative miss too (the last safe moment, Can't Be Late's safety net). A switch is
  for good (an on-demand cluster is never switched back).

``holds`` answers "does the deadline still hold on fewer nodes" with the same arithmetic (speed scales
with the GPUs: linear, optimistic; the job pays one restart).

Every decision is a ``Decision`` with a one-line reason and both projections in ``data``; the executors
record it in the state store (``deadline``, ``switches``) and ``cloudfit status`` prints it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from cloudfit.types import ClusterConfig


@dataclass(frozen=True)
class DeadlineSpec:
    deadline_s: float  # seconds after the launch starts (the executor's clock)
    planned_step_s: float  # the plan's seconds per optimizer step on the first config
    restart_s: float  # a switch: new VMs + restore from the checkpoint (the plan's restart cost)
    on_demand: ClusterConfig | None = None  # where the rule moves a spot cluster
    planned_gpus: int = 0  # GPUs of the first config (to scale speed to other sizes)
    hazard_per_hour: float = 0.0  # the spot cluster's revocation rate the plan assumed
    checkpoint_interval_s: float = 0.0  # the planned interval (half of it is lost per preemption)
    alternatives: tuple[tuple[ClusterConfig, float], ...] = ()  # (on-demand config, its planned s/step)
    warmup_steps: int = 3
    window_steps: int = 50
    confirm: int = 2  # consecutive checks that must miss before a switch

    def __post_init__(self) -> None:
        for k in ("deadline_s", "planned_step_s"):
            v = getattr(self, k)
            if not (v > 0 and math.isfinite(v)):
                raise ValueError(f"{k} must be positive, got {v}")
        for k in ("restart_s", "hazard_per_hour", "checkpoint_interval_s"):
            v = getattr(self, k)
            if not (v >= 0 and math.isfinite(v)):
                raise ValueError(f"{k} must be ≥ 0, got {v}")
        if self.warmup_steps < 0 or self.window_steps < 1 or self.confirm < 1:
            raise ValueError("warmup_steps ≥ 0, window_steps ≥ 1 and confirm ≥ 1")


@dataclass(frozen=True)
class Decision:
    action: str  # "stay" | "on-demand"
    reason: str
    predicted_finish_s: float | None  # launcher-clock seconds after start when the job should end
    slack_s: float | None  # deadline minus the alternative's projected finish (≤ 0: too late to switch)
    data: Mapping[str, Any] = field(default_factory=dict)
    to: ClusterConfig | None = None  # where to move (action "on-demand")


def on_demand_config(configs, first: ClusterConfig) -> ClusterConfig:
    """The plan's next on-demand alternative of ``first``'s shape (machine type, GPUs, nodes), else
    ``first`` itself on demand (same zone, the catalog's on-demand price)."""
    o = first.offering
    for c in configs:
        if (not c.spot and c.nodes == first.nodes and c.offering.machine_type == o.machine_type
                and c.offering.accelerators_per_node == o.accelerators_per_node):
            return c
    return ClusterConfig(o, first.nodes, False)


def rule_needs_s(remaining_steps: float, od_steps_per_s: float, restart_s: float, margin_s: float) -> float:
    """Seconds the job still needs if it moved now (work after the checkpoint + restart + one check)."""
    if remaining_steps <= 0:
        return 0.0
    return remaining_steps / od_steps_per_s + restart_s + margin_s


@dataclass
class _Segment:
    """One stretch of the job on one set of nodes: boot, warm-up, then the measuring window."""

    start: float
    start_step: int
    first_step_at: float | None = None  # boot ended (the first step after the segment started)
    window: list = field(default_factory=list)  # (time, step) after the warm-up


class DeadlineWatch:
    """Progress against the plan and the switch rule (see the module docstring)."""

    def __init__(self, spec: DeadlineSpec, total_steps: int, *, margin_s: float, t0: float) -> None:
        self.spec, self.total, self.margin_s, self.t0 = spec, total_steps, margin_s, t0
        self.seg: _Segment | None = None
        self.last_step = 0
        self.efficiency: float | None = None  # measured speed ÷ planned speed (carries across configs)
        self.boots: list[float] = []  # measured boot + restore times (s)
        self.losses = 0  # node losses seen on this run (an observed hazard)
        self.lost_since_check = False
        self.misses = 0  # consecutive checks on which staying missed the deadline
        self.switched = False
        self.last: Decision | None = None

    # ------------------------------------------------------------------ speed

    def planned_rate(self, gpus: int | None = None, config: ClusterConfig | None = None) -> float:
        """The plan's steps/s on ``config`` (an alternative's own estimate when the spec has one),
        else the first config's scaled by GPUs."""
        if config is not None:
            for c, step_s in self.spec.alternatives:
                if c == config:
                    return 1.0 / step_s
            gpus = config.accelerators
        r = 1.0 / self.spec.planned_step_s
        if gpus and self.spec.planned_gpus:
            r *= gpus / self.spec.planned_gpus
        return r

    def rate(self, config: ClusterConfig) -> tuple[float, bool]:
        """(steps/s on ``config``, measured?)."""
        planned = self.planned_rate(config=config)
        return (planned * self.efficiency, True) if self.efficiency is not None else (planned, False)

    def restart_s(self) -> float:
        """What a restart costs: the plan's, or the slowest boot measured on this run if longer."""
        return max([self.spec.restart_s, *self.boots])

    def hazard_per_s(self, now: float) -> float:
        """The plan's hazard, or the one this run observed (losses ÷ elapsed) if higher."""
        observed = self.losses / max(now - self.t0, 1.0)
        return max(self.spec.hazard_per_hour / 3600.0, observed)

    def lost(self) -> None:
        """Nodes were lost: work since the last checkpoint is gone; a new segment (boot) begins."""
        self.lost_since_check = True
        self.losses += 1
        self.seg = None

    def restarted(self) -> None:
        """The job was moved (a switch, a re-shard): a new segment begins, not a loss."""
        self.lost_since_check = True
        self.seg = None

    def _track(self, now: float, step: int, config: ClusterConfig, up: bool) -> None:
        if self.seg is None or step < self.seg.start_step:
            self.seg = _Segment(now, step)
            return
        s = self.seg
        if not up or step <= s.start_step:
            return
        if s.first_step_at is None:
            s.first_step_at = now
            self.boots.append(now - s.start)
        if step < s.start_step + self.spec.warmup_steps:
            return
        if s.window and step <= s.window[-1][1]:
            return
        s.window.append((now, step))
        while len(s.window) > 2 and step - s.window[1][1] >= self.window_steps():
            s.window.pop(0)
        (ta, sa), (tb, sb) = s.window[0], s.window[-1]
        if len(s.window) >= 2 and tb > ta and sb - sa >= self.window_steps():
            self.efficiency = (sb - sa) / (tb - ta) / self.planned_rate(config=config)
            self.lost_since_check = False

    def window_steps(self) -> int:
        return max(2, min(self.spec.window_steps, self.total // 10))

    # ------------------------------------------------------------------ the rule

    def observe(self, now: float, progress: Mapping[str, Any], config: ClusterConfig, *, up: bool = True,
                budget_left_usd: float | None = None) -> Decision:
        """One check. ``budget_left_usd``: what the guard has left — an alternative it cannot pay to the
        end does not keep the deadline (the budget wins, and switching would only stop the job earlier)."""
        step = int(progress.get("step") or 0)
        if self.lost_since_check and not up:  # rolled back to the newest checkpoint
            step = min(step, int(progress.get("checkpoint_step") or 0))
        # the rule counts from the newest checkpoint when the trainer reports it (a preemption any
        # moment takes the work since then)
        safe = min(step, int(progress.get("checkpoint_step") or 0)) if "checkpoint_step" in progress else step
        total = int(progress.get("total_steps") or self.total)
        self._track(now, step, config, up)
        self.last_step = step
        d = self._decide(now, step, safe, total, config, up, budget_left_usd)
        self.last = d
        return d

    def _stay_s(self, now: float, step: int, total: int, config: ClusterConfig, up: bool) -> float:
        """Seconds to the end on ``config`` as it is: work at the measured speed, a pending restart,
        and on spot the expected preemption cost."""
        rate, _ = self.rate(config)
        work = max(0, total - step) / rate
        booting = not up or self.seg is None or self.seg.first_step_at is None
        pending = self.restart_s() - (now - self.seg.start if self.seg is not None else 0.0) if booting else 0.0
        risk = 0.0
        if config.spot:
            per_loss = self.restart_s() + self.spec.checkpoint_interval_s / 2.0
            risk = self.hazard_per_s(now) * work * per_loss
        return work + max(0.0, pending) + risk

    def alternatives(self, current: ClusterConfig) -> list[ClusterConfig]:
        od = self.spec.on_demand or on_demand_config((), current)
        if od.nodes != current.nodes or od.offering.machine_type != current.offering.machine_type:
            od = on_demand_config((), current)
        out = [od]
        for c, _ in self.spec.alternatives:
            if not c.spot and c not in out:
                out.append(c)
        return out

    def _best_alternative(self, now, safe, total, current, budget_left) -> tuple[ClusterConfig, float, bool]:
        """(config, seconds it needs, the budget pays it): the cheapest alternative that finishes in time
        within the budget, else the one that finishes first."""
        left = self.spec.deadline_s - (now - self.t0)
        best = None
        for c in self.alternatives(current):
            rate, _ = self.rate(c)
            need = rule_needs_s(max(0, total - safe), rate, self.restart_s(), self.margin_s)
            cost = c.price_per_hour * need / 3600.0
            pays = budget_left is None or cost <= budget_left
            key = (need > left or not pays, cost if need <= left and pays else need)
            if best is None or key < best[0]:
                best = (key, c, need, pays)
        return best[1], best[2], best[3]

    def _decide(self, now, step, safe, total, config, up, budget_left=None) -> Decision:
        elapsed = now - self.t0
        left = self.spec.deadline_s - elapsed
        rate, measured = self.rate(config)
        stay_s = self._stay_s(now, step, total, config, up)
        data: dict[str, Any] = {
            "step": step, "total_steps": total, "steps_per_second": rate, "measured": measured,
            "boot_s": self.boots[-1] if self.boots else None, "restart_s": self.restart_s(),
            "deadline_in_s": left, "predicted_finish_s": elapsed + stay_s, "stay_needs_s": stay_s,
            "hazard_per_hour": self.hazard_per_s(now) * 3600.0 if config.spot else 0.0}
        if not config.spot or step >= total:
            self.misses = 0
            return Decision("stay", "", elapsed + stay_s, left - stay_s, data)
        alt, alt_s, pays = self._best_alternative(now, safe, total, config, budget_left)
        data.update({"alternative": alt.label(), "alternative_needs_s": alt_s, "on_demand_needs_s": alt_s,
                     "alternative_finish_s": elapsed + alt_s})
        slack = left - alt_s
        speed = f"{rate:.3g} steps/s, {'measured' if measured else 'planned'}"
        if stay_s <= left:
            self.misses = 0
            return Decision("stay", "", elapsed + stay_s, slack, data)
        self.misses += 1
        if alt_s > left or not pays:
            why = (f"behind the deadline, but no alternative keeps it: staying costs {stay_s:,.0f} s and "
                   f"{alt.label()} would need {alt_s:,.0f} s of the {left:,.0f} s left"
                   + ("" if pays else f" and ${alt.price_per_hour * alt_s / 3600:,.0f} of the ${budget_left:,.0f} "
                      "budget left") + ": staying on spot")
            return Decision("stay", why, elapsed + stay_s, slack, data)
        last_chance = slack < self.margin_s * 2  # one more check and the alternative misses too
        noisy = up and not self.lost_since_check  # a speed reading (noise) needs confirming; a lost node does not
        if noisy and self.misses < self.spec.confirm and not last_chance:
            return Decision("stay", f"behind the deadline on {self.misses} check(s): confirming", elapsed + stay_s,
                            slack, data)
        why = (f"behind the deadline: staying needs {stay_s:,.0f} s ({total - step} steps at {speed}"
               + (f", {data['hazard_per_hour']:.3g} preemptions/h expected" if data["hazard_per_hour"] else "")
               + f") but only {left:,.0f} s are left; {alt.label()} needs {alt_s:,.0f} s "
               f"({total - safe} steps after the checkpoint + {self.restart_s():,.0f} s restart + {self.margin_s:g} s check)")
        self.switched = True
        return Decision("on-demand", why, elapsed + alt_s, slack, data, to=alt)

    def holds(self, now: float, step: int, config: ClusterConfig, current: ClusterConfig) -> tuple[bool, str]:
        """Would the deadline still hold after moving to ``config`` now (a smaller cluster), with the
        switch rule's safety net still able to move to on-demand afterwards?"""
        base = self.efficiency if self.efficiency is not None else 1.0
        rate = self.planned_rate(current.accelerators) * base * config.accelerators / current.accelerators
        remaining = max(0, self.total - step)
        left = self.spec.deadline_s - (now - self.t0)
        need = remaining / rate + self.restart_s() + self.margin_s
        ok = need < left
        return ok, (f"{remaining} steps at {rate:.3g} steps/s on {config.accelerators} GPUs + {self.restart_s():,.0f} s "
                    f"restart = {need:,.0f} s {'<' if ok else '≥'} {left:,.0f} s left")


def deadline_spec(plan, configs, steps: int | None = None, *, hazard_per_hour: float | None = None,
                  checkpoint_interval_s: float | None = None, deadline_hours: float | None = None) -> DeadlineSpec | None:
    """The deadline rule's inputs from a plan, any family (None when the plan has no deadline).

    ``steps``: the job's optimizer steps (a CNN plan's, computed by the launcher; an LLM plan carries
    its own). Alternatives: the plan's on-demand configs whose steps mean the same work (an LLM plan's
    global batch is fixed; a CNN job's steps only on the same number of GPUs)."""
    w = plan.workload
    hours = deadline_hours or getattr(w, "deadline_hours", None)
    if not hours:
        return None
    c = plan.chosen
    layout = plan.layout or {}
    n = int(layout.get("steps") or 0) or steps
    if not n:
        return None
    step_s = float(c.hours) * 3600.0 / n
    if not (step_s > 0 and math.isfinite(step_s)):
        return None
    ck = layout.get("checkpoint") or {}
    restart_s = float(ck.get("restart_s") or 0.0)
    if not restart_s:
        from cloudfit.spot.model import DEFAULT_OVERHEADS

        restart_s = float(getattr(DEFAULT_OVERHEADS, "restart_s", 0.0) or 600.0)
    first = configs[0]
    if hazard_per_hour is None:
        exp = float(ck.get("expected_preemptions") or 0.0)
        hazard_per_hour = exp / float(c.hours) if exp > 0 and c.hours > 0 else 0.0
    if checkpoint_interval_s is None:
        checkpoint_interval_s = float(ck.get("interval_h") or 0.0) * 3600.0
    alts = []
    for e in (plan.chosen, *plan.alternatives):
        cfg = e.config
        same_work = bool(layout) or cfg.accelerators == first.accelerators
        if not cfg.spot and same_work and e.hours > 0 and math.isfinite(e.hours):
            alts.append((cfg, float(e.hours) * 3600.0 / n))
    return DeadlineSpec(deadline_s=float(hours) * 3600.0, planned_step_s=step_s, restart_s=restart_s,
                        on_demand=on_demand_config(configs, first) if first.spot else None,
                        planned_gpus=first.accelerators, hazard_per_hour=float(hazard_per_hour),
                        checkpoint_interval_s=float(checkpoint_interval_s), alternatives=tuple(alts[:20]))


class DeadlineLog:
    """Writes the watch's decisions where `cloudfit status` reads them (the cluster's info in the state
    store: ``deadline`` at most every ``every_s`` of wall time, every switch and every new reason at once)."""

    def __init__(self, store, name: str, watch: "DeadlineWatch | None", clock, every_s: float = 2.0) -> None:
        self.store, self.name, self.watch, self.clock, self.every_s = store, name, watch, clock, every_s
        self._written = -math.inf
        self._reason = ""

    def seen(self, d: Decision, config: ClusterConfig) -> None:
        import time

        now = time.monotonic()
        new_reason = d.reason and d.reason.split(":")[0] != self._reason.split(":")[0]
        if now - self._written < self.every_s and d.action == "stay" and not new_reason:
            return
        self._written = now
        if new_reason:
            self._reason = d.reason
            self.store.event(self.name, "deadline", d.reason)
        since = self.clock() - self.watch.t0
        wall0 = time.time() - since
        self.store.update_cluster(self.name, info={"deadline": {
            **dict(d.data), "predicted_finish_at": wall0 + d.predicted_finish_s if d.predicted_finish_s is not None
            else None, "alternative_finish_at": wall0 + d.data["alternative_finish_s"]
            if d.data.get("alternative_finish_s") is not None else None,
            "deadline_at": wall0 + self.watch.spec.deadline_s, "slack_s": d.slack_s, "reason": d.reason,
            "config": config.label()}})

    def switch(self, kind: str, frm: ClusterConfig, to: ClusterConfig, why: str) -> str:
        import time

        line = f"{kind}: {frm.label()} → {to.label()}: {why}"
        rec = self.store.find_cluster(self.name)
        prior = list(rec.info.get("switches", [])) if rec is not None else []
        prior.append({"at": time.time(), "kind": kind, "from": frm.label(), "to": to.label(), "reason": why})
        self.store.update_cluster(self.name, info={"switches": prior})
        self.store.event(self.name, "switch", line)
        return line


def with_deadline(spec, plan, hours: float):
    """``spec`` keeping a deadline ``hours`` from the launch (``launch --deadline``), for any plan family."""
    import dataclasses

    from cloudfit.errors import UsageError

    if not (hours > 0 and math.isfinite(hours)):
        raise UsageError(f"--deadline must be a positive duration, got {hours:g} h")
    if spec.deadline is not None:
        return dataclasses.replace(spec, deadline=dataclasses.replace(spec.deadline, deadline_s=hours * 3600.0))
    d = deadline_spec(plan, spec.configs, spec.job.steps, deadline_hours=hours,
                      hazard_per_hour=spec.job.hazard_per_hour or None,
                      checkpoint_interval_s=spec.job.checkpoint_interval_s)
    if d is None:
        raise UsageError("--deadline needs the plan's predicted hours (this plan has none)")
    return dataclasses.replace(spec, deadline=d)
