"""What differs between clouds besides their prices: spot markets, real zones, multi-node networking.

Every number has a source below; where nothing was measured or published the value is a **documented
default**, named as such in ``Cloud.notes`` (and so in ``catalogs/README.md``, "Other clouds").

* ``sells_spot``: whether the cloud sells interruptible capacity that its catalog prices. GCP and AWS
  (Spot), Nebius (preemptible VMs, priced in the source for H100/H200). Lambda sells no spot tier
  (on-demand and reserved only). RunPod's catalog lists a "spot" price equal to the on-demand price in
  every row read, i.e. no discount is recorded: shipped without spot.
* ``zones_are_real``: whether the catalog's zones are places with their own capacity (GCP zones, AWS
  availability-zone ids, RunPod data centres are real; Lambda's catalog lists every instance type in every
  region at one price whatever is in stock, so its regions say nothing about capacity). Launch falls back
  across real zones only (``cloudfit.spot.capacity``).
* ``max_nodes``: RunPod Pods are single machines; its multi-node product (Instant Clusters) is not in the
  catalog, so RunPod offerings are single-node (a documented default, not a measurement).
* Revocation hazard (``cloudfit.spot.hazard``): GCP and AWS have measured traces; a cloud that sells
  spot without any public trace (Nebius) takes the highest pooled GPU rate measured on any cloud (AWS
  V100 Spot 2022–23, 0.229 per node-hour) — a pessimistic documented default, not a measurement.
* Preemption notice: GCP Spot 30 s, AWS Spot 2 min (provider documentation, sources in
  ``catalogs/README.md``, "Preemption notice"); Nebius publishes none (``None``: never counted on).
  Every spot plan checks its stop checkpoint against it (``cloudfit.spot.checkpointing.preemption_notice``);
  the price counts the lost interval per preemption either way (a notice is best effort).
"""

from __future__ import annotations

from dataclasses import dataclass

from cloudfit.types import CLOUDS


@dataclass(frozen=True)
class Cloud:
    name: str
    title: str
    sells_spot: bool
    zones_are_real: bool
    max_nodes: int | None  # None: no limit besides the workload's
    preemption_notice_s: float | None
    notes: str


_TABLE = {
    "gcp": Cloud("gcp", "Google Compute Engine", True, True, None, 30.0,
                 "Spot VMs; hazards from CM-DARE's 2019 GCP lifetimes (cloudfit/data/spot_hazards.json)"),
    "aws": Cloud("aws", "Amazon EC2", True, True, None, 120.0,
                 "Spot instances; hazards from the Can't Be Late AWS V100 traces (2022-23), the V100 rate "
                 "standing in for other GPUs (documented default)"),
    "lambda": Cloud("lambda", "Lambda Cloud", False, False, None, None,
                    "no spot tier; the catalog lists every instance type in every region at one price, so "
                    "regions are not capacity (documented default: one zone tried)"),
    "runpod": Cloud("runpod", "RunPod (Secure Cloud Pods)", False, True, 1, None,
                    "Pods are single machines (Instant Clusters, the multi-node product, are not in the "
                    "catalog); the source's spot price equals on-demand in every row read: no spot"),
    "nebius": Cloud("nebius", "Nebius AI Cloud", True, False, None, None,
                    "preemptible VMs without a public revocation trace: the highest measured pooled GPU "
                    "rate (AWS V100) as a pessimistic documented default; one region each, no zones"),
}
assert tuple(_TABLE) == CLOUDS


def get(name: str) -> Cloud:
    return _TABLE[name]
