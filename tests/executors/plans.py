"""Plans for executor tests, built from real catalog rows (no planner needed)."""

from __future__ import annotations

from pathlib import Path

from cloudfit.plan.io import save_plan
from cloudfit.types import ClusterConfig, Estimate, Offering, Plan, Workload


_UNSET = object()


def catalog_offering(zone: str = "us-central1-a", machine_type: str = "n1-highmem-8", accelerator: str = "T4",
                     per_node: int = 1) -> Offering:
    """The shipped catalog's row (plans that `launch` reads must match it: it re-prices them)."""
    from cloudfit import catalog

    for o in catalog.load().offerings:
        if (o.zone, o.machine_type, o.accelerator, o.accelerators_per_node) == (zone, machine_type, accelerator, per_node):
            return o
    raise LookupError(f"{machine_type} {per_node}x{accelerator} is not in the catalog in {zone}")


def offering(zone: str = "us-central1-a", machine_type: str = "n1-highmem-8", accelerator: str = "T4",
             per_node: int = 1, price: float | None = 0.9, spot=_UNSET) -> Offering:
    """An offering with test prices (executor-level tests); ``price=None``: the catalog's row."""
    if price is None:
        return catalog_offering(zone, machine_type, accelerator, per_node)
    spot = price / 3 if spot is _UNSET else spot
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
