"""How much cloudfit's pick saves against picking by hand, judged by measured throughput.

    python bench/recommend_regret.py [--out bench/RESULTS_recommend.md]

Replay worlds (bench/worlds.py): one per workload of data/measurements.csv (model, batch, precision,
source) with ≥ 4 measured hardware points the catalog offers; configurations are those points'
catalog offerings × spot/on-demand, priced with cloudfit's preemption model. Each world is asked for
the cheapest plan under three deadlines (the median measured point needs 1×, 0.5× and 2× of it).
The *true* outcome of a pick uses the measured throughput. cloudfit predicts with a performance
model refit without the world's model family (it has never seen these measurements).

Methods
* oracle — the true optimum (exhaustive over the truth).
* cloudfit — `recommend` on predicted throughput (spot allowed, 90% confidence), the profile holding
  the world's one-GPU measurements (the same facts the hand-picking baselines use);
* cloudfit, stats only — the same with no measurement at all (model stats and GPU specs only).
* cheapest $/GPU-h — the accelerator with the lowest on-demand $/GPU-hour, the fewest GPUs that meet
  the deadline assuming linear scaling from its measured one-GPU speed (a spreadsheet), on-demand,
  cheapest zone.
* SkyPilot-style — the user names 8 GPUs of the fastest accelerator in the world (as one would ask
  for 8×A100); cheapest zone, on-demand.
* fastest GPU — the fastest accelerator per GPU, fewest GPUs meeting the deadline (linear scaling),
  on-demand, cheapest zone.

Regret = true expected cost / true optimum − 1, over the picks that truly meet the deadline;
a pick that truly misses it (or no pick) is a deadline miss.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("OMP_NUM_THREADS", "1")

import worlds as W  # noqa: E402

FACTORS = (1.0, 0.5, 2.0)


def _sized(world, truth, wl, acc: str):
    """Fewest GPUs of ``acc`` (among the world's points) whose linear-scaled one-GPU speed meets the deadline."""
    one = world["table"].get((acc, 1, 1, world["batch"], world["precision"]))
    pts = sorted((p for p in world["points"] if p[0] == acc), key=lambda p: (p[1] * p[2], p[2]))
    if not pts:
        return None
    if one is None:  # no one-GPU measurement: take the smallest point's per-GPU speed
        p0 = pts[0]
        one = world["table"][(p0[0], p0[1], p0[2], world["batch"], world["precision"])] / (p0[1] * p0[2])
    need = wl.samples / (one * 3600 * wl.deadline_hours)
    for p in pts:
        if p[1] * p[2] >= need:
            return W.cheapest_offering(truth, p)
    return W.cheapest_offering(truth, pts[-1])


def baselines(world, truth, wl) -> dict:
    accs = sorted({p[0] for p in world["points"]})
    per_gpu_price = {}
    for i in range(len(truth)):
        c = truth.config(i)
        if not c.spot:
            a = c.offering.accelerator
            v = c.offering.price_per_hour / c.offering.accelerators_per_node
            per_gpu_price[a] = min(per_gpu_price.get(a, math.inf), v)
    speed = {}
    for (a, c, n, b, p), v in world["table"].items():
        speed[a] = max(speed.get(a, 0), v / (c * n))
    cheapest = min(accs, key=lambda a: per_gpu_price.get(a, math.inf))
    fastest = max(accs, key=lambda a: speed.get(a, 0))
    eight = [p for p in world["points"] if p[0] == fastest and p[1] * p[2] == 8]
    sky = W.cheapest_offering(truth, sorted(eight, key=lambda p: p[2])[0]) if eight else None
    return {"cheapest $/GPU-h": _sized(world, truth, wl, cheapest), "SkyPilot-style 8×fastest": sky,
            "fastest GPU": _sized(world, truth, wl, fastest)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from cloudfit.errors import InfeasibleError
    from cloudfit.plan import recommend
    from cloudfit.search.problem import Problem

    t0 = time.time()
    records = []
    for w in W.worlds():
        fam = W.model_family(w["profile"].model)
        model_file = W.held_out_model(fam)
        for f, spot in [(f, s) for f in FACTORS for s in ("allow", "never")]:
            wl = W.workload_for(w, deadline_factor=f, spot=spot)
            problem = Problem.of(wl)
            pred, truth = W.spaces(w, wl, model_file=model_file)
            best, best_cfg = W.optimum(truth, problem)
            if best_cfg is None:
                continue  # nothing truly meets this deadline: no regret to measure
            picks = {}
            anchored, _ = W.spaces(w, wl, model_file=model_file, profile=W.anchored_profile(w))
            for name, sp in (("cloudfit", anchored), ("cloudfit, stats only", pred)):
                try:
                    with W.using_model(model_file):
                        picks[name] = recommend(wl, space=sp).chosen.config
                except InfeasibleError:
                    picks[name] = None
            picks.update(baselines(w, truth, wl))
            for m, cfg in picks.items():
                cost, ok = (math.inf, False) if cfg is None else W.true_outcome(truth, problem, cfg)
                records.append({"world": w["name"], "factor": f, "spot": spot, "method": m, "ok": ok,
                                "regret": cost / best - 1 if ok else math.nan, "cost": cost, "best": best})
    report = render(records, time.time() - t0)
    print(report)
    if args.out:
        Path(args.out).write_text(report)


def render(records, wall) -> str:
    cases = sorted({(r["world"], r["factor"]) for r in records})
    lines = [
        "## Recommender regret on replay worlds (issue 5)", "",
        f"Command: `python bench/recommend_regret.py`. Date: {dt.date.today()}. Machine: {platform.machine()}, "
        f"{os.cpu_count()} cores, no GPU, Python {platform.python_version()}. Wall time {wall:.0f} s.", "",
        f"{len(cases)} cases = {len({c[0] for c in cases})} replay worlds × deadlines (the median measured point needs "
        "1×, 0.5× or 2× of it; cases where nothing truly meets the deadline are dropped). True outcome = measured "
        "throughput, catalog prices, cloudfit's preemption model; cloudfit predicts with a model refit without the "
        "world's model family. Regret is over the picks that truly meet the deadline. The baselines pick on-demand "
        "VMs, so the first table (spot allowed for cloudfit and the oracle) mixes the value of spot with the value "
        "of the hardware choice; the second (on-demand only, for everyone) isolates the hardware choice.", "",
    ]
    for spot, title in (("allow", "Spot allowed (cloudfit, oracle); baselines on-demand"),
                        ("never", "On-demand only, for every method")):
        lines += [f"### {title}", "", _table([r for r in records if r["spot"] == spot]), ""]
    lines += ["'total true cost vs cloudfit': the method's summed true cost over the cases where both it and "
              "cloudfit truly meet the deadline, divided by cloudfit's.", ""]
    return "\n".join(lines) + "\n"


def _table(records) -> str:
    methods = ["cloudfit", "cloudfit, stats only", "cheapest $/GPU-h", "SkyPilot-style 8×fastest", "fastest GPU"]
    out = ["| method | truly meets deadline | median regret | mean regret | optimal (≤ 1%) | total true cost vs cloudfit |",
           "|---|---:|---:|---:|---:|---:|"]
    for m in methods:
        rs = [r for r in records if r["method"] == m]
        ok = [r for r in rs if r["ok"]]
        reg = np.array([r["regret"] for r in ok]) if ok else np.array([np.nan])
        cf = {(c["world"], c["factor"]): c for c in records if c["method"] == "cloudfit" and c["ok"]}
        both = [(r, cf[(r["world"], r["factor"])]) for r in ok if (r["world"], r["factor"]) in cf]
        ratio = sum(r["cost"] for r, _ in both) / max(sum(c["cost"] for _, c in both), 1e-9) if both else math.nan
        out.append(f"| {m} | {len(ok)}/{len(rs)} | {np.nanmedian(reg):.1%} | {np.nanmean(reg):.1%} | "
                   f"{int(np.sum(reg <= 0.01))}/{len(rs)} | {ratio:.2f}× |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
