"""Plans for executor tests, built from real catalog rows (no planner needed)."""

from __future__ import annotations

from pathlib import Path

from cloudfit.plan.io import save_plan
from cloudfit.types import ClusterConfig, Estimate, Offering, Plan, Workload


def offering(zone: str = "us-central1-a", machine_type: str = "n1-highmem-8", accelerator: str = "T4",
             per_node: int = 1, price: float = 0.9, spot: float | None = 0.3) -> Offering:
    return Offering(machine_type, accelerator, per_node, 8, 52, zone.rsplit("-", 1)[0], zone, price, spot)


def estimate(config: ClusterConfig, hours: float = 1.0) -> Estimate:
    cost = config.price_per_hour * hours
    return Estimate(config, 1000.0, 900.0, 1100.0, hours, hours * 1.2, cost, cost * 1.2, 1.0)


def make_plan(configs: list[ClusterConfig], *, model: str = "mlp", samples: float = 64_000,
              budget_usd: float | None = None) -> Plan:
    w = Workload(model=model, samples=samples, budget_usd=budget_usd, objective="time", precision="fp32")
    ests = [estimate(c) for c in configs]
    return Plan(workload=w, chosen=ests[0], alternatives=tuple(ests[1:]), provenance={"test": True})


def write_plan(path: Path, configs: list[ClusterConfig], **kw) -> Path:
    save_plan(make_plan(configs, **kw), path)
    return path
