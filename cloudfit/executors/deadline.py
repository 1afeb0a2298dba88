"""The deadline kept at run time: Can't Be Late's rule, applied by the launcher while the job runs.

Wu et al. (NSDI'24, "Can't Be Late") show that the safe way to use spot VMs under a deadline is to stay
on spot while there is slack and to move to on-demand *for good* at the last moment the deadline can
still be made there: when

    time left  <  work left after the newest checkpoint, at on-demand speed  +  restart overhead  +  one check interval

(the work since the checkpoint because a preemption can take it at any moment; the check interval
because the rule is next looked at only then). ``DeadlineWatch`` tracks progress
against the plan from the trainer's progress file (the step, and the newest checkpoint: a lost node
throws away the work since then), measures the cluster's speed (steps per second of the launcher's
clock, since the last restart; the plan's speed until it has two readings) and answers, on every
poll, with the predicted finish and whether to switch. The same arithmetic answers "does the deadline
still hold on fewer nodes" (``holds``): speed scales with the GPUs (a linear, optimistic scaling —
the plan's model would be stricter) and the job pays one restart.

Every decision is a ``Decision`` with a one-line reason; the executors record it in the state store
(``switches``) and ``cloudfit status`` prints it.
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

    def __post_init__(self) -> None:
        for k in ("deadline_s", "planned_step_s"):
            v = getattr(self, k)
            if not (v > 0 and math.isfinite(v)):
                raise ValueError(f"{k} must be positive, got {v}")
        if not (self.restart_s >= 0 and math.isfinite(self.restart_s)):
            raise ValueError(f"restart_s must be ≥ 0, got {self.restart_s}")


@dataclass(frozen=True)
class Decision:
    action: str  # "stay" | "on-demand" | "shrink"
    reason: str
    predicted_finish_s: float | None  # launcher-clock seconds after start when the job should end
    slack_s: float | None  # time left minus what the on-demand rule needs (≤ 0: switch)
    data: Mapping[str, Any] = field(default_factory=dict)


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
    """Seconds the job still needs if it moved to on-demand now (Can't Be Late's safety net)."""
    if remaining_steps <= 0:
        return 0.0
    return remaining_steps / od_steps_per_s + restart_s + margin_s


class DeadlineWatch:
    """Progress against the plan and the switch rule (see the module docstring)."""

    def __init__(self, spec: DeadlineSpec, total_steps: int, *, margin_s: float, t0: float) -> None:
        self.spec, self.total, self.margin_s, self.t0 = spec, total_steps, margin_s, t0
        self.segment: tuple[float, int] | None = None  # (time, step) when the current run segment started
        self.last_step = 0
        self.rate_per_gpu: float | None = None  # measured steps/s per GPU (kept across a loss: same VMs' speed)
        self.lost_since_check = False

    def planned_rate(self, gpus: int | None = None) -> float:
        r = 1.0 / self.spec.planned_step_s
        if gpus and self.spec.planned_gpus:
            r *= gpus / self.spec.planned_gpus
        return r

    def lost(self) -> None:
        """Nodes were lost: work since the last checkpoint is gone, the speed is measured afresh."""
        self.lost_since_check = True
        self.segment = None

    def observe(self, now: float, progress: Mapping[str, Any], config: ClusterConfig, *, up: bool = True) -> Decision:
        step = int(progress.get("step") or 0)
        if self.lost_since_check:  # rolled back to the newest checkpoint
            step = min(step, int(progress.get("checkpoint_step") or 0))
        # the rule counts from the newest checkpoint (a preemption any moment takes the work since then)
        # when the trainer reports it (cloudfit.train_llm does)
        safe = min(step, int(progress["checkpoint_step"] or 0)) if "checkpoint_step" in progress else step
        total = int(progress.get("total_steps") or self.total)
        if step < self.last_step or self.segment is None:
            self.segment = (now, step)
        elif up and step > self.segment[1] and now > self.segment[0]:
            self.rate_per_gpu = (step - self.segment[1]) / (now - self.segment[0]) / config.accelerators
            self.lost_since_check = False
        self.last_step = step
        measured = self.rate_per_gpu is not None
        rate = self.rate_per_gpu * config.accelerators if measured else self.planned_rate(config.accelerators)
        od = self.spec.on_demand or config
        od_rate = rate * od.accelerators / config.accelerators
        remaining = max(0, total - step)
        elapsed = now - self.t0
        left = self.spec.deadline_s - elapsed
        finish = elapsed + remaining / rate + (0.0 if up and not self.lost_since_check else self.spec.restart_s)
        needs = rule_needs_s(max(0, total - safe), od_rate, self.spec.restart_s, self.margin_s)
        slack = left - needs
        data = {"step": step, "total_steps": total, "steps_per_second": rate, "measured": measured,
                "deadline_in_s": left, "on_demand_needs_s": needs, "predicted_finish_s": finish}
        if config.spot and remaining > 0 and slack <= 0:
            why = (f"behind the deadline: {total - safe} steps left after the newest checkpoint need "
                   f"{(total - safe) / od_rate:,.0f} s on demand + "
                   f"{self.spec.restart_s:,.0f} s restart + {self.margin_s:g} s check interval = {needs:,.0f} s, "
                   f"but only {left:,.0f} s are left (at {rate:.3g} steps/s, {'measured' if measured else 'planned'})")
            return Decision("on-demand", why, finish, slack, data)
        return Decision("stay", "", finish, slack, data)

    def holds(self, now: float, step: int, config: ClusterConfig, current: ClusterConfig) -> tuple[bool, str]:
        """Would the deadline still hold after moving to ``config`` now (a smaller cluster), with the
        switch rule's safety net still able to move to on-demand afterwards?"""
        rate = (self.rate_per_gpu * config.accelerators if self.rate_per_gpu is not None
                else self.planned_rate(current.accelerators) * config.accelerators / current.accelerators)
        remaining = max(0, self.total - step)
        left = self.spec.deadline_s - (now - self.t0)
        need = remaining / rate + self.spec.restart_s + self.margin_s
        ok = need < left
        return ok, (f"{remaining} steps at {rate:.3g} steps/s on {config.accelerators} GPUs + {self.spec.restart_s:,.0f} s "
                    f"restart = {need:,.0f} s {'<' if ok else '≥'} {left:,.0f} s left")


def deadline_spec(plan, configs, steps: int | None = None) -> DeadlineSpec | None:
    """The deadline rule's inputs from a plan (None when the plan has no deadline)."""
    w = plan.workload
    hours = getattr(w, "deadline_hours", None)
    if not hours:
        return None
    c = plan.chosen
    layout = plan.layout or {}
    plan_steps = int(layout.get("steps") or 0) or None
    total_s = float(c.hours) * 3600.0
    if plan_steps:
        step_s = total_s / plan_steps
    elif steps:
        step_s = total_s / steps
    else:
        return None
    restart_s = float((layout.get("checkpoint") or {}).get("restart_s") or 0.0)
    if not restart_s:
        from cloudfit.spot.model import DEFAULT_OVERHEADS

        restart_s = float(getattr(DEFAULT_OVERHEADS, "restart_s", 0.0) or 600.0)
    first = configs[0]
    if not (step_s > 0 and math.isfinite(step_s)):
        return None
    return DeadlineSpec(deadline_s=float(hours) * 3600.0, planned_step_s=step_s, restart_s=restart_s,
                        on_demand=on_demand_config(configs, first) if first.spot else None,
                        planned_gpus=first.accelerators)
