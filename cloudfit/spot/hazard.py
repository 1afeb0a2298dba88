"""Revocation hazards per node-hour, looked up in the fitted ``cloudfit/data/spot_hazards.json``.

Lookup order for (accelerator, region) on GCP, each step documented in the JSON's ``method``:
1. the region's empirical-Bayes rate for that accelerator (data: CM-DARE 2019 lifetimes);
2. the accelerator's own rate (a region the data did not cover);
3. the pooled GPU rate (an accelerator the data did not cover: everything newer than V100).
``CPU`` (no accelerator) uses the Can't Be Late GCP c3 Spot trace the same way.

Other clouds (``cloudfit.catalog.clouds``): AWS looks up its measured V100 Spot rates (Can't Be Late,
per region) and gives other GPUs the AWS V100 pooled rate — the only AWS GPU measurement, a documented
default. A cloud without any revocation data (Nebius; Lambda and RunPod sell no spot, so theirs is never
used) gets the highest pooled GPU rate measured on any cloud: pessimistic on purpose, and named so.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from cloudfit.errors import ModelError

PARAMS_PATH = Path(__file__).resolve().parents[1] / "data" / "spot_hazards.json"
SCHEMA_VERSION = 1
_ZONE = re.compile(r"^([a-z]+-[a-z]+\d+)-[a-z]$")  # us-central1-a → us-central1 (GCP)
_AWS_AZ = re.compile(r"^([a-z]+-[a-z]+-\d+)[a-z]$")  # us-east-1f → us-east-1


@cache
def load_params(path: str | None = None) -> dict[str, Any]:
    """The fitted parameter file (cached). Raises ``ModelError`` if it is missing or of another schema."""
    p = Path(path) if path else PARAMS_PATH
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot read spot parameters {p}: {e}; rebuild with `python scripts/fit_spot.py`") from e
    if d.get("schema_version") != SCHEMA_VERSION:
        raise ModelError(f"{p} has schema_version {d.get('schema_version')!r}, this cloudfit reads {SCHEMA_VERSION}")
    return d


@dataclass(frozen=True)
class HazardInfo:
    """One looked-up hazard and where it came from (for explanations and reports)."""

    accelerator: str
    region: str
    rate_per_node_hour: float
    source: str  # "region", "accelerator" or "fallback"
    detail: str  # one human sentence naming the data behind the number


def _region_of(name: str) -> str:
    name = name.strip().lower()
    m = _ZONE.match(name) or _AWS_AZ.match(name)
    return m.group(1) if m else name


def _canonical(accelerator: str | None) -> str:
    """A user's spelling of an accelerator → its canonical name (the catalog's); "CPU" for none."""
    if accelerator is None or accelerator.strip() == "" or accelerator.strip().upper() in ("CPU", "NONE"):
        return "CPU"
    from cloudfit.catalog.hardware import canonical_name  # raises UnknownAcceleratorError on typos

    return canonical_name(accelerator)


def _known(accelerator: str) -> str:
    """A canonical name as the catalog gives it, checked (not re-spelled): UnknownAcceleratorError otherwise."""
    from cloudfit.catalog.hardware import ACCELERATORS

    if accelerator != "CPU" and accelerator not in ACCELERATORS:
        from cloudfit.errors import UnknownAcceleratorError

        raise UnknownAcceleratorError(f"unknown accelerator {accelerator!r}: hazards() takes the catalog's "
                                      "canonical names (hazard_info() accepts any spelling)")
    return accelerator


def hazard_info(accelerator: str | None, region: str, *, cloud: str = "gcp") -> HazardInfo:
    """The hazard of one node of ``accelerator`` (any spelling) in ``region`` (a zone is accepted too)."""
    return _lookup(_canonical(accelerator), region, cloud)


@cache
def _lookup(acc: str, region: str, cloud: str) -> HazardInfo:
    """The hazard of a canonical accelerator name in a region or zone."""
    params = load_params()
    reg = _region_of(region)
    block = params.get(cloud)
    if block is None:
        from cloudfit.types import CLOUDS

        if cloud not in CLOUDS:
            raise ModelError(f"no spot hazards for cloud {cloud!r} (known: {', '.join(CLOUDS)})")
        return _unmeasured_cloud(params, acc, reg, cloud)
    table = block.get("accelerators", block)
    entry = block.get("CPU") if acc == "CPU" and "CPU" in block else table.get(acc)
    if entry is not None:
        r = entry.get("regions", {}).get(reg)
        if r is not None:
            return HazardInfo(acc, reg, float(r["rate_per_node_hour"]), "region",
                              f"{acc} in {reg}: {r['revocations']} revocations in {r['exposure_node_hours']:g} "
                              f"node-hours, shrunk toward the {acc} rate")
        return HazardInfo(acc, reg, float(entry["rate_per_node_hour"]), "accelerator",
                          f"{acc} (no data for {reg}): {entry['revocations']} revocations in "
                          f"{entry['exposure_node_hours']:g} node-hours across its measured regions")
    fb = block.get("fallback")
    if fb is None and cloud == "aws" and "V100" in table:  # the only AWS GPU measured: its pooled rate
        v = table["V100"]
        return HazardInfo(acc, reg, float(v["rate_per_node_hour"]), "fallback",
                          f"no AWS revocation data for {acc}: the AWS V100 Spot rate stands in (documented default; "
                          f"{v['revocations']} revocations in {v['exposure_node_hours']:g} node-hours, Can't Be Late 2022-23)")
    if fb is None:
        raise ModelError(f"no {cloud} spot hazard for {acc} and no fallback in {PARAMS_PATH.name}")
    lo, hi = fb["range_of_accelerator_rates"]
    return HazardInfo(acc, reg, float(fb["rate_per_node_hour"]), "fallback",
                      f"no revocation data for {acc}: pooled GPU rate ({fb['revocations']} revocations in "
                      f"{fb['exposure_node_hours']:g} node-hours; measured GPUs ranged {lo:.3g}–{hi:.3g}/h)")


def _unmeasured_cloud(params: dict[str, Any], acc: str, reg: str, cloud: str) -> HazardInfo:
    """A cloud with no revocation data: the highest pooled GPU rate measured on any cloud (documented default)."""
    rates = [(float(params["gcp"]["fallback"]["rate_per_node_hour"]), "GCP pooled GPU lifetimes (2019)")]
    aws = params.get("aws", {})
    for name, e in aws.get("accelerators", aws).items():
        if isinstance(e, dict) and "rate_per_node_hour" in e:
            rates.append((float(e["rate_per_node_hour"]), f"AWS {name} Spot, Can't Be Late 2022-23"))
    rate, what = max(rates)
    return HazardInfo(acc, reg, rate, "fallback",
                      f"no revocation data for {cloud}: the highest pooled GPU rate measured on any cloud "
                      f"({rate:.3g}/h, {what}) as a pessimistic documented default")


def hazards(accelerators: Sequence[str], regions: Sequence[str], *, cloud: str = "gcp",
            clouds: Sequence[str] | None = None) -> np.ndarray:
    """Revocations per node per hour for each (accelerator, region) pair, element-wise.

    ``accelerators`` are canonical names as the catalog holds them (names are resolved once, in the
    catalog; ``hazard_info`` takes a user's spelling).

    Lookups are cached per distinct pair, so a call over the catalog's offerings costs well under a
    millisecond after the first; call it per offering and index the result by candidate.
    """
    if len(accelerators) != len(regions):
        from cloudfit.errors import UsageError

        raise UsageError(f"hazards(): {len(accelerators)} accelerators but {len(regions)} regions")
    per = [cloud] * len(accelerators) if clouds is None else list(clouds)
    if len(per) != len(accelerators):
        from cloudfit.errors import UsageError

        raise UsageError(f"hazards(): {len(accelerators)} accelerators but {len(per)} clouds")
    return np.fromiter((_lookup(_known(a), r, c).rate_per_node_hour for a, r, c in zip(accelerators, regions, per)),
                       dtype=float, count=len(accelerators))
