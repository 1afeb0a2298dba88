"""GPU quotas a plan must fit: a user's table (``--quota FILE``) or the live GCP quotas (``--quota gcp``).

A quota is (cloud, region, gpu, spot|on-demand) → the most GPUs of that kind at once. A candidate whose
GPUs (per node × nodes) exceed its region's limit is left out of the space, under a reason naming the
limit; a (cloud, region, gpu, mode) the table does not name is not limited.

Live GCP quotas come from ``RegionsClient.get`` (``Region.quotas``: metric, limit, usage) on the same
endpoint mechanism as the launcher (``cloudfit.executors.gcp.clients``; ``CLOUDFIT_COMPUTE_ENDPOINT``
points it at the fake server in tests). What is free is limit − usage. Spot VMs count against
``PREEMPTIBLE_NVIDIA_*_GPUS`` where the region lists that metric (GCP's rule: preemptible quota when
granted, else the standard one), on-demand against ``NVIDIA_*_GPUS``.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cloudfit.errors import UsageError

#: cloudfit accelerator → GCP quota metric (without the PREEMPTIBLE_ prefix)
GCP_METRIC = {"H100": "NVIDIA_H100_GPUS", "H100-MEGA": "NVIDIA_H100_MEGA_GPUS", "H200": "NVIDIA_H200_GPUS",
              "B200": "NVIDIA_B200_GPUS", "A100": "NVIDIA_A100_GPUS", "A100-80GB": "NVIDIA_A100_80GB_GPUS",
              "L4": "NVIDIA_L4_GPUS", "T4": "NVIDIA_T4_GPUS", "V100": "NVIDIA_V100_GPUS", "P100": "NVIDIA_P100_GPUS",
              "P4": "NVIDIA_P4_GPUS"}
MODES = ("spot", "on-demand")


@dataclass
class Quotas:
    """(cloud, region, gpu, mode) → GPUs allowed; ``source`` says where they came from."""

    limits: dict[tuple[str, str, str, str], float]
    source: str

    def limit(self, cloud: str, region: str, gpu: str, spot: bool) -> float:
        return self.limits.get((cloud, region, gpu, "spot" if spot else "on-demand"), np.inf)

    def over(self, space) -> tuple[np.ndarray, np.ndarray]:
        """(mask of candidates over their limit, the limit of each candidate)."""
        offs = space.catalog.offerings
        lim = np.full(len(space), np.inf)
        if not self.limits:
            return np.zeros(len(space), dtype=bool), lim
        per_off = {s: np.array([self.limit(o.cloud, o.region, o.accelerator, s) for o in offs]) for s in (False, True)}
        lim = np.where(space.spot, per_off[True][space.offering], per_off[False][space.offering])
        gpus = space.gpus_per_node * space.nodes
        return gpus > lim, lim


def load_file(path: str | Path) -> Quotas:
    """A CSV (header cloud,region,gpu,mode,limit) or JSON (a list of such objects) quota table."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--quota {path}: cannot read it ({e.__class__.__name__})") from None
    rows: list[dict]
    if text.lstrip().startswith(("[", "{")):
        try:
            data = json.loads(text)
        except ValueError as e:
            raise UsageError(f"--quota {path}: not valid JSON ({e.msg}, line {e.lineno})") from None
        rows = data.get("quotas") if isinstance(data, dict) else data
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise UsageError(f"--quota {path}: JSON must be a list of {{cloud, region, gpu, mode, limit}} objects")
    else:
        rows = list(csv.DictReader(text.splitlines()))
        need = {"cloud", "region", "gpu", "mode", "limit"}
        head = set((csv.DictReader(text.splitlines()).fieldnames or []))
        if not need <= {h.strip() for h in head}:
            raise UsageError(f"--quota {path}: not a quota table (a CSV needs the columns "
                             f"cloud,region,gpu,mode,limit, or a JSON list of such objects)")
        rows = [{k.strip(): v for k, v in r.items() if k is not None} for r in rows]
    return Quotas(_validate(rows, str(path)), f"quota table {path}")


def _validate(rows: list[dict], where: str) -> dict:
    from cloudfit.catalog import hardware
    from cloudfit.types import CLOUDS

    out = {}
    for n, r in enumerate(rows, 1):
        cloud, region = str(r.get("cloud", "")).strip().lower(), str(r.get("region", "")).strip()
        gpu, mode = str(r.get("gpu", "")).strip(), str(r.get("mode", "")).strip().lower()
        if cloud not in CLOUDS:
            raise UsageError(f"--quota {where} row {n}: unknown cloud {cloud!r} (known: {', '.join(CLOUDS)})")
        if not region:
            raise UsageError(f"--quota {where} row {n}: no region")
        try:
            gpu = hardware.get(gpu).name
        except Exception:
            raise UsageError(f"--quota {where} row {n}: unknown gpu {gpu!r}") from None
        mode = {"preemptible": "spot", "ondemand": "on-demand", "on_demand": "on-demand"}.get(mode, mode)
        if mode not in MODES:
            raise UsageError(f"--quota {where} row {n}: mode must be spot or on-demand, got {r.get('mode')!r}")
        try:
            limit = float(r.get("limit"))
        except (TypeError, ValueError):
            limit = float("nan")
        if not limit >= 0 or limit == float("inf"):
            raise UsageError(f"--quota {where} row {n}: limit must be a number of GPUs ≥ 0, got {r.get('limit')!r}")
        out[(cloud, region, gpu, mode)] = limit
    return out


def from_gcp(regions: list[str], project: str | None = None, endpoint: str | None = None) -> Quotas:
    """Live GPU quotas of ``regions`` through ``RegionsClient.get`` (free = limit − usage)."""
    from google.api_core import exceptions as gex

    from cloudfit.executors.gcp.clients import client_kwargs

    project, kw = client_kwargs(project, endpoint)
    from google.cloud import compute_v1

    client = compute_v1.RegionsClient(**kw)
    by_metric = {v: k for k, v in GCP_METRIC.items()}
    limits: dict = {}
    for region in sorted(set(regions)):
        try:
            r = client.get(project=project, region=region)
        except gex.NotFound:
            continue  # a region the project cannot see: nothing to plan there is limited by us
        except gex.GoogleAPICallError as e:
            code = getattr(e, "code", None)
            raise UsageError(f"--quota gcp: reading quotas of {region} failed (HTTP {code}: "
                             f"{getattr(e, 'message', e)})") from None
        metrics = {q.metric: max(float(q.limit) - float(q.usage), 0.0) for q in r.quotas}
        for metric, free in metrics.items():
            pre = metric.startswith("PREEMPTIBLE_")
            gpu = by_metric.get(metric[len("PREEMPTIBLE_"):] if pre else metric)
            if gpu is None:
                continue
            limits[("gcp", region, gpu, "spot" if pre else "on-demand")] = free
            if not pre and ("PREEMPTIBLE_" + metric) not in metrics:  # spot draws on standard quota then
                limits.setdefault(("gcp", region, gpu, "spot"), free)
    return Quotas(limits, f"live GCP quotas of project {project} ({len(set(regions))} regions, regions.get)")
