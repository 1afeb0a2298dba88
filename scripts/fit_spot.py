"""Rebuild cloudfit/data/spot_hazards.json from data/raw (deterministic; no network).

    python scripts/fit_spot.py [--out cloudfit/data/spot_hazards.json] [--check]

Inputs (see the PROVENANCE.md next to each):
- data/raw/spot/cmdare_transient_lifetime_gcp/data/lifetime/lifetime.csv — GCP preemptible GPU VM
  lifetimes (Feb 2019, K80/P100/V100, 24 h cap).
- data/raw/spot/cant_be_late_spot_traces/preemption/** — GCP Spot c3 CPU VMs (2023, no cap) and AWS
  V100 spot VMs (2023, 1 and 4 nodes).
- data/raw/cmdare_overheads/{startup_time,checkpoint} — GCE VM start-up seconds (on-demand vs
  preemptible) and checkpoint seconds vs checkpoint MB.

Method (the module docstring of cloudfit/spot restates it for users):
1. Lifetimes → revocations: a VM that ended ≥ 23.9 h after its start reached the 24 h cap of the
   2019 preemptible VMs and is *right-censored* at its lifetime (today's Spot VMs have no cap);
   shorter lifetimes are revocations. A 0-minute lifetime (minute-resolution timestamps) counts as
   half a minute.
2. Per accelerator: exponential MLE with censoring, λ = revocations / node-hours of exposure, with a
   Jeffreys 90% interval (Gamma(d + ½, T)); a censored Weibull MLE is reported as a diagnostic of
   how far the hazard is from constant (shape < 1: early revocations are more likely).
3. Per (accelerator, region): Gamma–Poisson empirical Bayes. Each region's rate has a Gamma prior
   with the accelerator's rate as mean and a prior weight of b node-hours; b maximises the
   negative-binomial marginal likelihood of all (accelerator, region) counts (grid search), and the
   posterior mean (d + b·λ_acc) / (T + b) is shipped.
4. Fallback for accelerators without data: the pooled GPU rate (all GCP GPU revocations / all GCP
   GPU exposure), with the range of the per-accelerator rates as its spread.
5. Trace files (Can't Be Late): revocations = drops in the number of running VMs, exposure = running
   VM-ticks × tick length. GCP c3 gives a `CPU` entry; AWS V100 is shipped under `aws` for reference
   and used for the event-clustering statistic below. The mean outage after a GCP Spot revocation
   (time until the relaunched VM runs again) is the replacement time in the overheads.
6. Overheads: mean VM start (provisioning + staging + booting) on-demand and preemptible; checkpoint
   seconds = a + b·MB by least squares.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import json
import math
import os
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "data" / "raw"
LIFETIME = RAW / "spot" / "cmdare_transient_lifetime_gcp" / "data" / "lifetime" / "lifetime.csv"
TRACES = RAW / "spot" / "cant_be_late_spot_traces" / "preemption"
STARTUP = RAW / "cmdare_overheads" / "startup_time"
CHECKPOINT = RAW / "cmdare_overheads" / "checkpoint" / "whole_data.csv"
OUT = ROOT / "cloudfit" / "data" / "spot_hazards.json"

SCHEMA_VERSION = 1
CAP_H = 24.0
CENSOR_AT_H = 23.9  # lifetimes at or beyond this reached the 24 h cap
MIN_LIFETIME_H = 0.5 / 60  # a VM that ended in the minute it started


def _sig(x: float, digits: int = 6) -> float:
    """Round to ``digits`` significant digits so the JSON is stable and readable."""
    if x == 0 or not math.isfinite(x):
        return float(x)
    return float(f"{x:.{digits}g}")


# --------------------------------------------------------------------------------------------
# Inputs


def read_lifetimes(path: Path = LIFETIME) -> list[dict]:
    """The Feb 2019 rows of lifetime.csv: accelerator, zone, region, stressed, hours, end stamp."""
    text = path.read_bytes().decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    rows, section = [], None
    name_re = re.compile(r"a-(?:(?:p100|v100)-)?((?:[a-z]+)-(?:[a-z]+\d))-([a-z])-(\d+)(less)?$")
    for parts in csv.reader(io.StringIO(text)):
        if not parts or not parts[0]:
            continue
        if parts[0] in ("K80", "P100", "V100"):
            section = parts[0]
            continue
        if parts[0] == "Previous experiments":
            break  # 2018 rows: not used (see data/raw/spot/PROVENANCE.md)
        if parts[0] == "VM name":
            continue
        name, start, end = parts[:3]
        m = name_re.match(name)
        if not m or section is None:
            raise ValueError(f"unexpected lifetime row {parts!r}")
        fmt = "%m/%d/%y %H:%M"
        hours = (dt.datetime.strptime(end, fmt) - dt.datetime.strptime(start, fmt)).total_seconds() / 3600
        rows.append({
            "accelerator": section, "region": m.group(1), "zone": f"{m.group(1)}-{m.group(2)}",
            "stressed": m.group(4) is None, "hours": max(hours, MIN_LIFETIME_H), "end": end,
            "revoked": hours < CENSOR_AT_H,
        })
    return rows


def read_trace(path: Path) -> tuple[np.ndarray, float]:
    d = json.loads(path.read_text())
    return np.asarray(d["data"], dtype=np.int64), float(d["metadata"]["gap_seconds"])


def trace_stats(x: np.ndarray, gap_s: float) -> dict:
    """Revocations (drops in running VMs), exposure (running VM-hours), drop events and outages."""
    drops = np.maximum(x[:-1] - x[1:], 0)
    # outages after a revocation: zero-runs that start after a running tick and end before the trace does
    outages = []
    i, n = 0, len(x)
    while i < n:
        if x[i] == 0:
            j = i
            while j < n and x[j] == 0:
                j += 1
            if i > 0 and j < n:
                outages.append((j - i) * gap_s)
            i = j
        else:
            i += 1
    return {
        "revocations": int(drops.sum()),
        "drop_events": int((drops > 0).sum()),
        "exposure_h": float(x.sum() * gap_s / 3600),
        "outages_s": outages,
    }


def read_startup(folder: Path = STARTUP) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"on_demand": [], "preemptible": []}
    for f in sorted(folder.glob("*/*.csv")):
        kind = "preemptible" if f.parent.name.startswith("pre_") else "on_demand"
        with f.open() as fh:
            for r in csv.DictReader(fh):
                out[kind].append(float(r["Provisioning"]) + float(r["Staging"]) + float(r["Booting"]))
    return out


def read_checkpoints(path: Path = CHECKPOINT) -> tuple[np.ndarray, np.ndarray]:
    mb, secs = [], []
    with path.open() as fh:
        for r in csv.DictReader(fh):
            mb.append(float(r["Checkpoint Size (MB)"]))
            secs.append(float(r["Duration"]))
    return np.asarray(mb), np.asarray(secs)


# --------------------------------------------------------------------------------------------
# Estimators


def gamma_ppf(q: float, shape: float, rate: float) -> float:
    """Gamma quantile by bisection on the regularised incomplete gamma (series; small shapes only)."""

    def cdf(x: float) -> float:
        if x <= 0:
            return 0.0
        # series for P(a, x); converges for all x, fine for the small counts here
        term = 1.0 / shape
        total = term
        k = 0
        while abs(term) > 1e-15 * abs(total) and k < 10_000:
            k += 1
            term *= x / (shape + k)
            total += term
        return min(1.0, math.exp(-x + shape * math.log(x) - math.lgamma(shape)) * total)

    lo, hi = 0.0, max(10.0, 10 * shape)
    while cdf(hi) < q:
        hi *= 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if cdf(mid) < q else (lo, mid)
    return 0.5 * (lo + hi) / rate


def exp_fit(events: int, exposure_h: float) -> dict:
    lo = gamma_ppf(0.05, events + 0.5, exposure_h)
    hi = gamma_ppf(0.95, events + 0.5, exposure_h)
    return {"rate_per_node_hour": _sig(events / exposure_h), "revocations": events,
            "exposure_node_hours": _sig(exposure_h), "interval_90": [_sig(lo), _sig(hi)]}


def weibull_fit(t: np.ndarray, revoked: np.ndarray) -> dict:
    """Censored Weibull MLE (shape k, scale in hours) by bisection on the profile score."""
    d = int(revoked.sum())
    lt = np.log(t)
    sum_ln_ev = float(lt[revoked].sum())

    def score(k: float) -> float:
        tk = t ** k
        return d / k + sum_ln_ev - d * float((tk * lt).sum() / tk.sum())

    lo, hi = 0.01, 20.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if score(mid) > 0 else (lo, mid)
    k = 0.5 * (lo + hi)
    scale = float(((t ** k).sum() / d) ** (1 / k))
    return {"shape": _sig(k, 4), "scale_hours": _sig(scale, 4)}


def fit_prior_weight(groups: list[tuple[int, float, float]]) -> float:
    """Gamma prior weight b (node-hours) maximising the negative-binomial marginal likelihood.

    ``groups``: (revocations d, exposure T, accelerator rate λ) per (accelerator, region).
    """
    def loglik(b: float) -> float:
        s = 0.0
        for d, T, lam in groups:
            a = lam * b
            s += math.lgamma(d + a) - math.lgamma(a) + a * math.log(b / (b + T)) + d * math.log(T / (b + T))
        return s

    grid = np.exp(np.linspace(np.log(1.0), np.log(1e5), 401))
    ll = [loglik(float(b)) for b in grid]
    return float(grid[int(np.argmax(ll))])


# --------------------------------------------------------------------------------------------
# Assembly


def fit() -> dict:
    rows = read_lifetimes()
    by_acc: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_acc[r["accelerator"]].append(r)

    accel: dict[str, dict] = {}
    groups = []
    for acc in sorted(by_acc):
        rs = by_acc[acc]
        t = np.array([min(r["hours"], CAP_H) for r in rs])
        rev = np.array([r["revoked"] for r in rs])
        e = exp_fit(int(rev.sum()), float(t.sum()))
        e.update({"vms": len(rs), "revoked_before_cap": _sig(rev.mean(), 4), "weibull": weibull_fit(t, rev),
                  "zones": sorted({r["zone"] for r in rs})})
        stressed = np.array([r["stressed"] for r in rs])
        e["stressed_vs_idle_rate"] = [_sig(rev[stressed].sum() / t[stressed].sum()), _sig(rev[~stressed].sum() / t[~stressed].sum())]
        regions: dict[str, dict] = {}
        for reg in sorted({r["region"] for r in rs}):
            sel = np.array([r["region"] == reg for r in rs])
            regions[reg] = {"revocations": int(rev[sel].sum()), "exposure_node_hours": _sig(float(t[sel].sum())),
                            "mle": _sig(float(rev[sel].sum() / t[sel].sum()))}
            groups.append((int(rev[sel].sum()), float(t[sel].sum()), int(rev.sum()) / float(t.sum())))
        e["regions"] = regions
        accel[acc] = e

    b = fit_prior_weight(groups)
    for acc, e in accel.items():
        lam = e["revocations"] / e["exposure_node_hours"]
        for reg in e["regions"].values():
            reg["rate_per_node_hour"] = _sig((reg["revocations"] + b * lam) / (reg["exposure_node_hours"] + b))

    # clustering in the 2019 lifetimes: node revocations per distinct (zone, end minute) event
    ends = defaultdict(int)
    for r in rows:
        if r["revoked"]:
            ends[(r["accelerator"], r["zone"], r["end"])] += 1
    gpu_rev = sum(ends.values())

    pooled_d = sum(e["revocations"] for e in accel.values())
    pooled_T = sum(e["exposure_node_hours"] for e in accel.values())
    rates = [e["rate_per_node_hour"] for e in accel.values()]
    fallback = exp_fit(pooled_d, pooled_T)
    fallback["range_of_accelerator_rates"] = [min(rates), max(rates)]

    # Can't Be Late traces
    cpu_regions: dict[str, list] = defaultdict(lambda: [0, 0.0])
    gcp_outages: list[float] = []
    for f in sorted((TRACES / "1-node" / "gcp-04-30-2023").glob("*.json")):
        zone = f.name.split("_")[0]
        s = trace_stats(*read_trace(f))
        reg = zone.rsplit("-", 1)[0]
        cpu_regions[reg][0] += s["revocations"]
        cpu_regions[reg][1] += s["exposure_h"]
        gcp_outages += s["outages_s"]
    cpu_d = sum(v[0] for v in cpu_regions.values())
    cpu_T = sum(v[1] for v in cpu_regions.values())
    cpu = exp_fit(cpu_d, cpu_T)
    cpu["machine_type"] = "c3-highcpu-88"
    cpu["regions"] = {}
    for reg, (d, T) in sorted(cpu_regions.items()):
        cpu["regions"][reg] = {"revocations": d, "exposure_node_hours": _sig(T), "mle": _sig(d / T),
                               "rate_per_node_hour": _sig((d + b * cpu_d / cpu_T) / (T + b))}

    aws_regions: dict[str, list] = defaultdict(lambda: [0, 0.0])
    node4 = {"revocations": 0, "drop_events": 0}
    for sub in ("1-node/aws-04-22-2023", "4-node/aws-08-03-2023"):
        for f in sorted((TRACES / sub).glob("*.json")):
            s = trace_stats(*read_trace(f))
            reg = f.name.split("_")[0][:-1]
            aws_regions[reg][0] += s["revocations"]
            aws_regions[reg][1] += s["exposure_h"]
            if sub.startswith("4-node"):
                node4["revocations"] += s["revocations"]
                node4["drop_events"] += s["drop_events"]
    aws_d = sum(v[0] for v in aws_regions.values())
    aws_T = sum(v[1] for v in aws_regions.values())
    aws_v100 = exp_fit(aws_d, aws_T)
    aws_v100["machine_type"] = "p3.2xlarge"
    aws_v100["regions"] = {reg: {"revocations": d, "exposure_node_hours": _sig(T), "mle": _sig(d / T),
                                 "rate_per_node_hour": _sig((d + b * aws_d / aws_T) / (T + b))}
                           for reg, (d, T) in sorted(aws_regions.items())}

    start = read_startup()
    mb, secs = read_checkpoints()
    slope, intercept = np.polyfit(mb, secs, 1)
    resid = secs - (intercept + slope * mb)

    return {
        "schema_version": SCHEMA_VERSION,
        "generated_by": "python scripts/fit_spot.py",
        "units": {"rate_per_node_hour": "revocations per node per hour", "times": "seconds"},
        "sources": {
            "gcp_gpu_lifetimes": "data/raw/spot/cmdare_transient_lifetime_gcp/data/lifetime/lifetime.csv "
                                 "(cake-lab/transient-deep-learning@87c6717, Feb 2019 preemptible VMs)",
            "gcp_cpu_spot": "data/raw/spot/cant_be_late_spot_traces/preemption/1-node/gcp-04-30-2023 "
                            "(skypilot-org/spot-traces@221da1a, c3-highcpu-88 Spot, 2023)",
            "aws_v100_spot": "data/raw/spot/cant_be_late_spot_traces/preemption/{1-node/aws-04-22-2023,4-node/aws-08-03-2023}",
            "vm_start": "data/raw/cmdare_overheads/startup_time (cake-lab/CM-DARE@263b7f1)",
            "checkpoint": "data/raw/cmdare_overheads/checkpoint/whole_data.csv (cake-lab/CM-DARE@263b7f1)",
        },
        "method": {
            "censoring": f"lifetimes >= {CENSOR_AT_H} h reached the 24 h cap of 2019 preemptible VMs: "
                         "right-censored (Spot VMs have no cap); shorter ones are revocations",
            "rate": "exponential MLE with right-censoring: revocations / node-hours; interval_90 = Jeffreys Gamma(d+1/2, T)",
            "region_rate": "Gamma-Poisson empirical Bayes toward the accelerator rate; prior weight fitted by "
                           "marginal likelihood: (d + prior_weight_node_hours * rate_acc) / (T + prior_weight_node_hours)",
            "fallback": "accelerators without data: pooled GPU rate over all GCP GPU lifetimes; regions without "
                        "data: the accelerator's own rate",
        },
        "gcp": {
            "prior_weight_node_hours": _sig(b, 4),
            "accelerators": accel,
            "CPU": cpu,
            "fallback": fallback,
        },
        "aws": {"V100": aws_v100},
        "clustering": {
            "note": "node revocations per revocation event; 1 = independent nodes. The model charges n x rate "
                    "cluster interruptions (an upper bound when revocations come in batches).",
            "gcp_2019_same_zone_same_minute": _sig(gpu_rev / len(ends), 4),
            "aws_v100_4_node": _sig(node4["revocations"] / node4["drop_events"], 4),
        },
        "overheads": {
            "vm_start_on_demand_s": _sig(float(np.mean(start["on_demand"])), 4),
            "vm_start_spot_s": _sig(float(np.mean(start["preemptible"])), 4),
            "vm_start_launches": {k: len(v) for k, v in start.items()},
            "replacement_s": _sig(float(np.mean(gcp_outages)), 4),
            "replacement_outages_s": [_sig(x, 4) for x in gcp_outages],
            "checkpoint_intercept_s": _sig(float(intercept), 4),
            "checkpoint_s_per_mb": _sig(float(slope), 4),
            "checkpoint_fit": {"points": int(mb.size), "mb_range": [_sig(float(mb.min()), 4), _sig(float(mb.max()), 4)],
                               "residual_sd_s": _sig(float(resid.std(ddof=2)), 3)},
        },
    }


def render(params: dict) -> str:
    return json.dumps(params, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="exit 1 if the file on disk differs from a fresh fit")
    args = ap.parse_args(argv)
    text = render(fit())
    if args.check:
        same = args.out.exists() and args.out.read_text() == text
        print("up to date" if same else f"{args.out} differs from a fresh fit")
        return 0 if same else 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=args.out.parent, prefix=".spot_hazards.", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
