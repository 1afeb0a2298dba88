"""What active search records: one ``Trial`` per probe, the ``ActiveResult``, and probes as profile measurements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cloudfit.types import ClusterConfig, Measurement, Plan, Profile

#: Length of one probe run (s): also its cost cap, this long at the VM's price.
PROBE_SECONDS = 600.0
STOP_REASONS = ("max-trials", "probe-budget", "budget", "expected-improvement", "exhausted")

Point = tuple[str, int, int]  # (accelerator, accelerators per node, nodes): what a probe measures


def point_of(c: ClusterConfig) -> Point:
    """The hardware point a configuration runs on."""
    return (c.offering.accelerator, c.offering.accelerators_per_node, c.nodes)


def point_key(k: Point) -> str:
    """The point as an optuna categorical value (``"A100|8|2"``)."""
    return f"{k[0]}|{k[1]}|{k[2]}"


def point_from_key(s: str) -> Point:
    a, c, n = s.split("|")
    return (a, int(c), int(n))


@dataclass(frozen=True)
class Trial:
    """One probe: where it ran, what it measured (or why it failed) and what it cost."""

    number: int
    accelerator: str
    accelerators_per_node: int
    nodes: int
    machine_type: str
    zone: str
    status: str  # ok | failed
    samples_per_second: float | None
    predicted_samples_per_second: float
    probe_cost_usd: float
    reason: str = ""
    run: str = ""  # the executor's name for the probe run (`cloudfit status NAME` on local/gcp)

    @property
    def point(self) -> Point:
        return (self.accelerator, self.accelerators_per_node, self.nodes)

    @property
    def retryable(self) -> bool:
        """An interrupted probe says nothing about its point: it may be probed again."""
        return self.status != "ok" and self.reason.startswith(("interrupted", "error"))


@dataclass(frozen=True)
class ActiveResult:
    plan: Plan  # under the workload's budget minus the probe spend
    profile: Profile  # the input profile plus every successful probe as a measurement
    trials: tuple[Trial, ...]
    probe_spend_usd: float
    stop_reason: str  # one of STOP_REASONS
    history: tuple[dict[str, Any], ...] = field(default_factory=tuple)  # the plan after each trial

    @property
    def total_expected_usd(self) -> float:
        return self.probe_spend_usd + self.plan.chosen.cost_usd

    def to_dict(self) -> dict[str, Any]:
        from cloudfit.plan.io import plan_to_dict

        return {"stop_reason": self.stop_reason, "probe_spend_usd": self.probe_spend_usd,
                "plan_expected_cost_usd": self.plan.chosen.cost_usd, "total_expected_usd": self.total_expected_usd,
                "trials": [t.__dict__ for t in self.trials], "history": list(self.history),
                "chosen": self.plan.chosen.row(), "plan": plan_to_dict(self.plan)}


def with_probe(profile: Profile, tr: Trial, batch: int, precision: str) -> Profile:
    """The profile with the probe's measurement (once: a profile saved by an earlier run may hold it)."""
    m = Measurement(accelerator=tr.accelerator, count=tr.accelerators_per_node, nodes=tr.nodes,
                    batch_size_per_device=int(batch), precision=precision,
                    samples_per_second=float(tr.samples_per_second), source="probe",
                    note=f"active search trial {tr.number} on {tr.machine_type} in {tr.zone}")
    if any(x.source == "probe" and x.note == m.note and x.samples_per_second == m.samples_per_second
           and (x.accelerator, x.count, x.nodes) == (m.accelerator, m.count, m.nodes) for x in profile.measurements):
        return profile
    return profile.with_measurement(m)
