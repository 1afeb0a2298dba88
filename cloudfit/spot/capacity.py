"""Can the fleet be had? Start-up that grows with the cluster, and a capacity (stockout) prior.

Two effects the per-VM preemption model leaves out, both larger for larger clusters
(every number's source is below and in ``catalogs/README.md``, "Obtainability and start-up"):

Start-up (seconds, paid once, billed for the whole cluster)
-----------------------------------------------------------
``startup_seconds(nodes, spot)`` = the slowest of ``nodes`` VM starts + node 0's head start + the
API calls + installing cloudfit on the VMs:

* VM start: CM-DARE's 100 GCE GPU VM launches (provisioning + staging + booting; 55 on-demand,
  45 preemptible): mean 71.0 s (sd 7.3) on-demand, 87.3 s (sd 5.5) preemptible. A cluster trains
  when its slowest node is up: the expected maximum of ``nodes`` normal draws (Blom's
  approximation of the normal order statistic), i.e. +0 s for 1 node, +13 s for 8, +18 s for 64
  on-demand.
* Node 0 first: cloudfit's GCP executor creates node 0, waits for its insert operation (to learn
  the rendezvous address) and only then creates the others — the provisioning + staging part of a
  start again for multi-node clusters (CM-DARE: 31 s on-demand, 47 s preemptible).
* API calls: the other nodes' inserts are sent one after another; ``INSERT_S_PER_NODE`` = 1 s each
  (an assumption: a REST round trip; no public measurement found).
* Image pull and install: the Deep Learning VM image carries PyTorch and CUDA (its pull is part of
  CM-DARE's staging time); the startup script pip-installs cloudfit and its other dependencies:
  ``INSTALL_S`` = 48 s, a full fresh install of cloudfit with torch on the 2-core development
  machine (DESIGN.md, "Known traps", 2026-11-22) — an upper bound where torch is preinstalled.

Capacity (stockouts)
--------------------
A zone rarely has dozens of free GPU VMs. The only public availability traces are AWS spot V100
(Can't Be Late, skypilot-org/spot-traces, 2022–2023: 1-node traces in 9 zones, 8-GPU p3.16xlarge in
2 zones, 16 × p3.2xlarge in 3 zones, one sample every 3–10 min). The share of samples at which the
whole request was obtainable: median 0.72 for 1 GPU, 0.475 for one 8-GPU VM, 0.42 for 16 one-GPU
VMs — a power law ``P(k GPUs) = 0.72 × k^−0.2`` fits all three (k = 8: 0.48, k = 16: 0.42). Larger
fleets are an extrapolation of that law (k = 232: 0.24). Spells without capacity lasted 1.6 h on
average (median over the traces of the mean spell; medians of spells 0.2–0.9 h, i.e. heavy-tailed).

* Fallback: launch tries a stockout's next alternative, the same fleet in another zone first (two
  zones per configuration among a plan's alternatives), so the fleet is obtained at once with
  probability 1 − (1 − P)^z, z = min(zones offering the shape, 2), zones taken as independent (an
  assumption: stockouts within a region are likely correlated, so this is optimistic for big fleets).
* What is modelled is the growth with fleet size, not the level: even one spot VM was missing 28%
  of the time in the traces, but a single-VM stockout is what launch's fallback (next zone, next
  alternative) and a Can't Be Late-style switch to on-demand absorb. So one VM of up to
  ``FREE_GPUS`` = 8 GPUs counts as obtainable, and larger fleets follow the traces' exponent:
  ``P(k) = min(1, (k / 8)^−0.2)`` — 64 GPUs 0.66, 232 GPUs 0.51, 456 GPUs 0.45 — for spot and
  on-demand alike (no public on-demand trace; a stated prior, not a measurement). ``--max-gpus``
  caps fleets outright.
* The request then waits ``Exp(mean 1.6 h)`` with probability 1 − P (capacity returns after a
  spell). Expected hours gain (1 − P)·1.6 h; P90 gains the wait's 90% quantile; P(on time) becomes
  P(on time | no wait) × (P + (1 − P)·P(wait ≤ slack)), slack = deadline − expected hours. Waiting
  with no VMs is not billed (launch falls back to other zones and alternatives rather than holding
  part of a fleet), so costs do not change; ``capacity_note`` says when a fleet is large.
* Quota is not modelled (it is per project); ``capacity_note`` reminds the user above
  ``QUOTA_NOTE_GPUS`` GPUs.
* Per accelerator and zone: no data ranks GPUs or zones by free capacity, so every accelerator and
  zone gets the same prior (as the spot hazards do for GPUs without data).
* Per cloud (``cloudfit.catalog.clouds``): the same law everywhere (no public trace for any other
  provider), but the fallback counts only real zones — Lambda's catalog lists every instance type in every
  region whatever is in stock and Nebius has one place per region, so a fleet there is tried in one place
  and is harder to get than the same fleet in two GCP or AWS zones (P(64 GPUs at once) 0.66 instead of 0.88);
  RunPod Pods are single machines, so RunPod fleets beyond one node are not offered at all. Start-up uses
  GCP's measured VM starts for every cloud (a documented default: no other cloud's were measured).
"""

from __future__ import annotations

import math

import numpy as np

#: CM-DARE launches: sd of VM start (s) and provisioning + staging (s), on-demand / preemptible.
START_SD_S = {False: 7.34, True: 5.47}
FIRST_NODE_S = {False: 31.4, True: 47.3}
INSERT_S_PER_NODE = 1.0
INSTALL_S = 48.0
#: Can't Be Late availability traces (AWS spot V100): P(1 GPU obtainable) (for reference) and the
#: power-law exponent of P(k GPUs) = 0.72·k^−0.2 that fits 1, 8 and 16 GPUs.
P_ONE_GPU = 0.72
CAPACITY_EXPONENT = 0.2
UNAVAILABLE_MEAN_H = 1.6
FREE_GPUS = 8
QUOTA_NOTE_GPUS = 64
#: Launch tries the same VM shape in this many zones before other shapes (plan.planner.ZONES_PER_CONFIG).
ZONES_TRIED = 2


def _norm_ppf(p: float) -> float:
    """Standard normal quantile (Acklam's rational approximation, |relative error| < 1.2e-9; the
    stdlib's ``statistics`` costs milliseconds to import on the recommend path)."""
    a = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02,
         -3.066479806614716e+01, 2.506628277459239e+00)
    b = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01,
         -1.328068155288572e+01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00,
         4.374664141464968e+00, 2.938163982698783e+00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00)
    if p < 0.02425:
        q = math.sqrt(-2 * math.log(p))
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / \
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1)
    if p > 1 - 0.02425:
        return -_norm_ppf(1 - p)
    q = p - 0.5
    r = q * q
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q / \
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)


def _blom(n: np.ndarray) -> np.ndarray:
    """E[max of n standard normals] ≈ Φ⁻¹((n − 0.375)/(n + 0.25)) (Blom); 0 for n = 1."""
    n = np.asarray(n, dtype=np.int64)
    if n.size == 0:
        return np.zeros(0)
    top = int(n.max())
    table = np.array([0.0, 0.0] + [_norm_ppf((k - 0.375) / (k + 0.25)) for k in range(2, top + 1)])
    return table[n]


def startup_seconds(nodes, spot, vm_start_s: dict[bool, float]) -> np.ndarray:
    """Seconds from launch until every node trains (see the module docstring).

    ``vm_start_s``: mean start of one VM by spot flag (the preemption model's fitted overheads).
    """
    n = np.atleast_1d(np.asarray(nodes, dtype=np.int64))
    sp = np.broadcast_to(np.atleast_1d(np.asarray(spot, dtype=bool)), n.shape)
    mean = np.where(sp, vm_start_s[True], vm_start_s[False])
    sd = np.where(sp, START_SD_S[True], START_SD_S[False])
    first = np.where(n > 1, np.where(sp, FIRST_NODE_S[True], FIRST_NODE_S[False]), 0.0)
    return mean + sd * _blom(n) + first + INSERT_S_PER_NODE * (n - 1) + INSTALL_S


def p_obtainable(gpus, spot) -> np.ndarray:
    """Prior probability that ``gpus`` GPUs (one zone, one request) are obtainable at a random moment."""
    k = np.maximum(np.asarray(gpus, dtype=float), 1.0)
    p = np.minimum(1.0, (k / FREE_GPUS) ** -CAPACITY_EXPONENT)
    return np.broadcast_to(p, np.broadcast_shapes(p.shape, np.shape(spot))).copy()


def p_launch(gpus, spot, zones) -> np.ndarray:
    """P(the fleet is obtainable in one of the ``min(zones, ZONES_TRIED)`` zones launch tries first)."""
    z = np.clip(np.asarray(zones, dtype=float), 1.0, ZONES_TRIED)
    return 1.0 - (1.0 - p_obtainable(gpus, spot)) ** z


def wait_terms(gpus, spot, hours: np.ndarray, deadline_hours: float | None, zones=1):
    """(expected wait h, 90% quantile of the wait h, factor on P(on time)) per candidate;
    ``zones``: how many zones offer the candidate's VM shape (launch falls back between them)."""
    p = p_launch(gpus, spot, zones)
    q = 1.0 - p
    mean = q * UNAVAILABLE_MEAN_H
    # P(wait > w) = q·e^{−w/U}: the 90% point is U·ln(q/0.1) where q > 0.1, else 0
    with np.errstate(divide="ignore"):
        p90 = np.where(q > 0.1, UNAVAILABLE_MEAN_H * np.log(np.maximum(q, 1e-300) / 0.1), 0.0)
    if deadline_hours is None:
        return mean, p90, np.ones_like(p)
    slack = np.maximum(deadline_hours - np.asarray(hours, dtype=float), 0.0)
    factor = p + q * -np.expm1(-slack / UNAVAILABLE_MEAN_H)
    return mean, p90, factor


def capacity_note(gpus: int, spot: bool, accelerator: str, zone: str, zones: int = 1) -> str:
    """A sentence on obtainability for a chosen fleet ('' when small)."""
    p = float(p_launch(gpus, spot, zones))
    parts = []
    if p < 0.6:
        parts.append(f"{gpus} {accelerator} {'spot ' if spot else ''}GPUs are obtainable at a random moment "
                     f"with probability ~{p:.0%} (capacity prior, {min(zones, ZONES_TRIED)} zone(s) tried; the expected wait, "
                     f"{(1 - p) * UNAVAILABLE_MEAN_H * 60:.0f} min, is in the time)")
    if gpus > QUOTA_NOTE_GPUS:
        parts.append(f"it needs GPU quota for {gpus} {accelerator} in {zone.rsplit('-', 1)[0]}")
    if not parts:
        return ""
    return "Obtainability: " + "; ".join(parts) + ". --max-gpus caps the fleet."

