"""How much cloudfit's pick saves against picking by hand, judged by measured throughput.

    python bench/recommend_regret.py [--out bench/RESULTS_recommend.md] [--details cases.csv]

Replay worlds (bench/worlds.py, cloudfit.executors.replay.worlds_from_measurements): one per workload
of data/measurements.csv (model, batch, precision, source; data-parallel rows) with ≥ 4 measured
hardware points — (accelerator, GPUs per node, nodes) — that the GCP catalog offers. A world's
candidates are exactly those points × every catalog zone offering them × spot/on-demand (an
unmeasured point has no truth, so it is not a candidate for anyone). Truth = the measured
throughput, the catalog prices and cloudfit's own preemption/teardown model (Space.assess) with no
throughput uncertainty. Each world is asked for the cheapest plan (90% confidence) under three
deadlines: the work is sized so that the world's median measured point needs 10 h, against a 10 h, 5 h or 20 h
deadline, i.e. deadlines of 10 h, 5 h and 20 h; at most 8 nodes).

cloudfit predicts with a performance model refit without the world's model family
(leave-one-family-out, `model_group` of data/measurements.csv: none of the world's measurements, nor
any other batch size or source of the same model, is in its training data).

Methods
* oracle — the true optimum (exhaustive over the truth).
* cloudfit — `recommend` on predicted throughput, the profile holding the world's one-GPU
  measurements (the facts the hand-picking baselines use);
* cloudfit, stats only — the same with no measurement at all (model stats and GPU specs only).
* cheapest $/GPU-h — the accelerator with the lowest on-demand $/GPU-hour, the fewest GPUs that meet
  the deadline assuming linear scaling from its measured one-GPU speed (a spreadsheet), on-demand,
  cheapest zone.
* SkyPilot-style — the user names 8×A100 (`--gpus A100:8`: the world's 8-GPU A100 VM; in a world
  without A100s the fastest measured 8-GPU VM); cheapest zone, on-demand, as `sky launch` would.
* fastest GPU — the fastest accelerator per GPU, fewest GPUs meeting the deadline (linear scaling),
  on-demand, cheapest zone.

Regret = true expected cost / true optimum − 1, over the picks that truly meet the deadline (at the
90% confidence, under the measured throughput); a pick that truly misses it is a deadline miss.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import math
import os
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("OMP_NUM_THREADS", "1")

import worlds as W  # noqa: E402

FACTORS = (1.0, 0.5, 2.0)
HOURS = 10.0
MAX_NODES = 8
CLOUDFIT = ("cloudfit", "cloudfit, stats only")
BASELINES = ("cheapest $/GPU-h", "SkyPilot-style 8×A100", "fastest GPU")
METHODS = ("oracle",) + CLOUDFIT + BASELINES


def describe(cfg) -> str:
    if cfg is None:
        return "—"
    o = cfg.offering
    nodes = f" ×{cfg.nodes} nodes" if cfg.nodes > 1 else ""
    return f"{o.accelerators_per_node}×{o.accelerator}{nodes}{' spot' if cfg.spot else ''}"


def _one_gpu_speed(world, acc: str) -> float | None:
    """Measured samples/s of one ``acc`` (else the per-GPU speed of its smallest measured point)."""
    one = world["table"].get((acc, 1, 1, world["batch"], world["precision"]))
    if one is not None:
        return one
    pts = sorted((p for p in world["points"] if p[0] == acc), key=lambda p: (p[1] * p[2], p[2]))
    if not pts:
        return None
    p0 = pts[0]
    return world["table"][(p0[0], p0[1], p0[2], world["batch"], world["precision"])] / (p0[1] * p0[2])


def _sized(world, truth, wl, acc: str):
    """Fewest GPUs of ``acc`` (among the world's points) whose linear-scaled one-GPU speed meets the deadline."""
    pts = sorted((p for p in world["points"] if p[0] == acc), key=lambda p: (p[1] * p[2], p[2]))
    one = _one_gpu_speed(world, acc)
    if not pts or one is None:
        return None
    need = wl.samples / (one * 3600 * wl.deadline_hours)
    for p in pts:
        if p[1] * p[2] >= need:
            return W.cheapest_offering(truth, p)
    return W.cheapest_offering(truth, pts[-1])  # even the largest is not enough: the user takes the largest


def baselines(world, truth, wl) -> dict:
    accs = sorted({p[0] for p in world["points"]})
    per_gpu_price: dict[str, float] = {}
    for i in np.flatnonzero(~truth.spot):
        c = truth.config(int(i))
        a = c.offering.accelerator
        per_gpu_price[a] = min(per_gpu_price.get(a, math.inf), c.offering.price_per_hour / c.offering.accelerators_per_node)
    speed = {a: _one_gpu_speed(world, a) or 0.0 for a in accs}
    cheapest = min(accs, key=lambda a: per_gpu_price.get(a, math.inf))
    fastest = max(accs, key=lambda a: speed[a])
    sps = {(a, c, n): v for (a, c, n, b, p), v in world["table"].items()}
    # `sky launch --gpus A100:8`: 8 GPUs in one VM; else 8 GPUs however measured
    eight = [p for p in world["points"] if p[1] == 8 and p[2] == 1] or [p for p in world["points"] if p[1] * p[2] == 8]
    a100 = [p for p in eight if p[0].startswith("A100")]
    pool = a100 or eight
    sky = W.cheapest_offering(truth, max(pool, key=lambda p: (sps[p], -p[2]))) if pool else None
    return {"cheapest $/GPU-h": _sized(world, truth, wl, cheapest), "SkyPilot-style 8×A100": sky,
            "fastest GPU": _sized(world, truth, wl, fastest)}


#: The worlds keep every catalog price, as before outlier spot prices were left out by default
#: (cloudfit.catalog.outliers): regret measures the recommender on a fixed world; --exclude-outlier-prices
#: measures it on the world a default `recommend` sees (without the 20 outlier offerings).
ALLOW_OUTLIER_PRICES = True


def run_cases() -> tuple[list[dict], list[dict]]:
    from cloudfit.errors import InfeasibleError
    from cloudfit.plan import recommend
    from cloudfit.search.problem import Problem, score

    records, cases = [], []
    for w in W.worlds():
        fam = W.model_family(w["profile"].model)
        model_file = W.held_out_model(fam)
        for f in FACTORS:
            for spot in ("allow", "never"):
                wl = W.workload_for(w, hours=HOURS, deadline_factor=f, spot=spot, max_nodes=MAX_NODES,
                                    allow_outlier_prices=ALLOW_OUTLIER_PRICES)
                problem = Problem.of(wl)
                pred, truth = W.spaces(w, wl, model_file=model_file)
                best, best_cfg = W.optimum(truth, problem)
                feasible_share = float(score(truth.assess(problem), problem)[0].mean())
                cases.append({"world": w["name"], "factor": f, "spot": spot, "candidates": len(truth),
                              "truly_feasible": feasible_share, "points": len(w["points"]),
                              "accelerators": len({p[0] for p in w["points"]})})
                if best_cfg is None:
                    continue  # nothing truly meets this deadline: no regret to measure
                picks, predicted = {"oracle": best_cfg}, {}
                anchored, _ = W.spaces(w, wl, model_file=model_file, profile=W.anchored_profile(w))
                for name, sp in (("cloudfit", anchored), ("cloudfit, stats only", pred)):
                    try:
                        with W.using_model(model_file):
                            plan = recommend(wl, space=sp)
                        picks[name], predicted[name] = plan.chosen.config, plan.chosen.cost_usd
                    except InfeasibleError:
                        picks[name] = None
                picks.update(baselines(w, truth, wl))
                for m, cfg in picks.items():
                    cost, ok = (math.inf, False) if cfg is None else W.true_outcome(truth, problem, cfg)
                    records.append({"world": w["name"], "factor": f, "spot": spot, "method": m, "ok": ok,
                                    "pick": describe(cfg), "accelerator": None if cfg is None else cfg.offering.accelerator,
                                    "gpus": None if cfg is None else cfg.accelerators,
                                    "is_spot": None if cfg is None else cfg.spot,
                                    "regret": cost / best - 1 if ok else math.nan, "cost": cost, "best": best,
                                    "predicted_cost": predicted.get(m, math.nan)})
    return records, cases


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="write the report's section into this Markdown file")
    ap.add_argument("--details", default=None, help="write one CSV row per case and method here")
    ap.add_argument("--exclude-outlier-prices", action="store_true",
                    help="leave outlier spot prices out of the worlds, as a default `recommend` does")
    args = ap.parse_args()
    global ALLOW_OUTLIER_PRICES
    ALLOW_OUTLIER_PRICES = not args.exclude_outlier_prices
    t0 = time.time()
    records, cases = run_cases()
    report = render(records, cases, time.time() - t0)
    print(report)
    if args.out:
        write_section(Path(args.out), "regret", report)
    if args.details:
        with open(args.details, "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=list(records[0]))
            wr.writeheader()
            wr.writerows(records)


def write_section(path: Path, name: str, text: str) -> None:
    """Replace the section between ``<!-- begin NAME -->`` and ``<!-- end NAME -->`` (append if absent)."""
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    block = f"{begin}\n{text.strip()}\n{end}\n"
    old = path.read_text() if path.exists() else ""
    if begin in old and end in old:
        head, rest = old.split(begin, 1)
        new = head + block + rest.split(end, 1)[1].lstrip("\n")
    else:
        new = (old.rstrip() + "\n\n" if old.strip() else "") + block
    path.write_text(new)


def _pct(x: float) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.1%}"


def render(records, cases, wall) -> str:
    n_worlds = len({c["world"] for c in cases})
    lines = [
        "## Recommender regret on replay worlds", "",
        f"Command: `python bench/recommend_regret.py --out bench/RESULTS_recommend.md`. Date: {dt.date.today()}. "
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, no GPU, 24 GiB, Python {platform.python_version()}. "
        f"Wall time {wall:.0f} s.", "",
        f"{n_worlds} replay worlds from data/measurements.csv (one per model × batch × precision × source with ≥ 4 "
        "measured (accelerator, GPUs/node, nodes) points the GCP catalog offers) × 3 deadlines (the work is sized so "
        "that the world's median measured point needs 10 h; deadlines 10 h, 5 h and 20 h; ≤ 8 nodes; 90% confidence). Candidates = the measured points "
        "× every catalog zone × spot/on-demand; truth = measured throughput + catalog prices + cloudfit's preemption "
        "and teardown model. cloudfit predicts with a performance model refit without the world's model family "
        "(leave-one-family-out: it has not seen the world's measurements). Cases where nothing truly meets the "
        "deadline are dropped. Regret is over the picks that truly meet the deadline; the rest are misses. "
        + ("Every catalog price is in the worlds, including the 20 outlier spot prices a default `recommend` leaves out "
           "(`--exclude-outlier-prices` runs without them)." if ALLOW_OUTLIER_PRICES else
           "The 20 outlier spot prices a default `recommend` leaves out are not in the worlds."), "",
    ]
    by_f = {}
    for c in cases:
        if c["spot"] == "allow":
            by_f.setdefault(c["factor"], []).append(c["truly_feasible"])
    lines.append("Share of candidates that truly meet the deadline (median over worlds): " + ", ".join(
        f"deadline {HOURS * f:g} h → {statistics.median(v):.0%}" for f, v in sorted(by_f.items(), reverse=True)) + ".")
    lines.append("")
    for spot, title, note in (
            ("allow", "Spot allowed for cloudfit and the oracle; the baselines pick on-demand",
             "This mixes the value of spot with the value of the hardware choice."),
            ("never", "On-demand only, for every method", "This isolates the hardware (and zone) choice.")):
        recs = [r for r in records if r["spot"] == spot]
        n = len({(r["world"], r["factor"]) for r in recs})
        lines += [f"### {title} ({n} cases)", "", note, "", _table(recs), "", _oracle_choice(recs), ""]
    lines += [
        "Columns: 'meets deadline' = picks that truly meet it (90% confidence under the measured throughput); 'late "
        "pick' = picks that truly miss it; 'no pick' = cloudfit found nothing it predicts to meet the limits "
        "(InfeasibleError: the user is told to relax them, nothing is spent); "
        "'saving' = the method's summed true cost ÷ cloudfit's − 1 over the cases both truly meet (positive: "
        "cloudfit is cheaper), with the per-case median in brackets; 'same hardware' = the oracle's (accelerator, "
        "GPUs/node, nodes, spot).", "",
        _misses(records), "",
        _details([r for r in records if r["spot"] == "allow" and r["factor"] == 1.0]), "",
    ]
    return "\n".join(lines) + "\n"


def _table(records) -> str:
    out = ["| method | meets deadline | late pick | no pick | median regret | mean regret | P90 regret | "
           "≤ 1% of optimum | same hardware as oracle | saving of cloudfit vs method |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    cf = {(r["world"], r["factor"]): r for r in records if r["method"] == "cloudfit" and r["ok"]}
    orc = {(r["world"], r["factor"]): r for r in records if r["method"] == "oracle"}
    for m in METHODS:
        rs = [r for r in records if r["method"] == m]
        ok = [r for r in rs if r["ok"]]
        reg = np.array([r["regret"] for r in ok]) if ok else np.array([np.nan])
        same = sum(1 for r in rs if r["pick"] == orc[(r["world"], r["factor"])]["pick"])
        both = [(r, cf[(r["world"], r["factor"])]) for r in ok if (r["world"], r["factor"]) in cf]
        if m == "cloudfit" or not both:
            saving = "—"
        else:
            tot = sum(r["cost"] for r, _ in both) / sum(c["cost"] for _, c in both) - 1
            med = statistics.median(r["cost"] / c["cost"] - 1 for r, c in both)
            saving = f"{tot:+.0%} ({med:+.0%})"
        late = sum(1 for r in rs if not r["ok"] and r["accelerator"] is not None)
        none = sum(1 for r in rs if r["accelerator"] is None)
        out.append(f"| {m} | {len(ok)}/{len(rs)} | {late} | {none} | {_pct(np.nanmedian(reg))} | {_pct(np.nanmean(reg))} | "
                   f"{_pct(np.nanpercentile(reg, 90))} | {int(np.sum(reg <= 0.01))}/{len(rs)} | {same}/{len(rs)} | {saving} |")
    return "\n".join(out)


def _oracle_choice(records) -> str:
    parts = []
    for m in ("oracle", "cloudfit"):
        rs = [r for r in records if r["method"] == m and r["accelerator"] is not None]
        accs = Counter(r["accelerator"] for r in rs)
        gpus = Counter(r["gpus"] for r in rs)
        spot = sum(1 for r in rs if r["is_spot"])
        parts.append(f"{m} picks: " + ", ".join(f"{a} {k}" for a, k in accs.most_common()) + "; GPUs " +
                     ", ".join(f"{g}: {k}" for g, k in sorted(gpus.items())) + f"; spot {spot}/{len(rs)}")
    return "Choices — " + ". ".join(parts) + "."


def _misses(records) -> str:
    out = ["### Deadline misses (late picks + no pick) by deadline", "", "Each cell: spot allowed; on-demand only.", "",
           "| method | " + " | ".join(f"deadline {HOURS * f:g} h" for f in sorted(FACTORS)) + " |",
           "|---|" + "---:|" * len(FACTORS)]
    for m in METHODS[1:]:
        cells = []
        for f in sorted(FACTORS):
            c = []
            for spot in ("allow", "never"):
                rs = [r for r in records if r["method"] == m and r["factor"] == f and r["spot"] == spot]
                c.append(f"{sum(not r['ok'] for r in rs)}/{len(rs)}")
            cells.append("; ".join(c))
        out.append(f"| {m} | " + " | ".join(cells) + " |")
    cf = [r for r in records if r["method"] == "cloudfit" and math.isfinite(r["predicted_cost"]) and math.isfinite(r["cost"])]
    if cf:
        ratio = [r["cost"] / r["predicted_cost"] for r in cf]
        out += ["", f"cloudfit's own cost estimate vs the true cost of its pick: median true/predicted "
                f"{statistics.median(ratio):.2f}, {sum(x > 1.1 for x in ratio)}/{len(ratio)} picks cost > 10% more "
                f"than predicted, {sum(x < 1 / 1.1 for x in ratio)}/{len(ratio)} > 10% less."]
    out += ["", "### Where cloudfit's regret comes from (both spot settings)", "",
            "| cloudfit picks in | picks | meets deadline | median regret | mean regret | true ÷ predicted cost (median) |",
            "|---|---:|---:|---:|---:|---:|"]
    source = lambda r: r["world"].rsplit("(", 1)[-1].rstrip(")")  # noqa: E731
    groups = [(f"{s} worlds", lambda r, s=s: source(r) == s) for s in sorted({source(r) for r in cf})]
    groups += [("1-node picks", lambda r: "nodes" not in r["pick"]), ("multi-node picks", lambda r: "nodes" in r["pick"])]
    for label, sel in groups:
        rs = [r for r in cf if sel(r)]
        reg = [r["regret"] for r in rs if r["ok"]]
        if rs:
            out.append(f"| {label} | {len(rs)} | {len(reg)} | {_pct(statistics.median(reg)) if reg else '—'} | "
                       f"{_pct(statistics.mean(reg)) if reg else '—'} | "
                       f"{statistics.median(r['cost'] / r['predicted_cost'] for r in rs):.2f} |")
    return "\n".join(out)


def _details(records) -> str:
    """Per-world table at the 1× deadline (spot allowed): what each method picked and its regret."""
    worlds = list(dict.fromkeys(r["world"] for r in records))
    out = ["<details><summary>Per world, 10 h deadline (the median point needs 10 h), spot allowed: picks and regret "
           "(LATE = truly misses the deadline; no plan = cloudfit predicts nothing meets it)</summary>", "",
           "| world | " + " | ".join(METHODS) + " |", "|---|" + "---|" * len(METHODS)]
    for w in worlds:
        cells = []
        for m in METHODS:
            r = next((x for x in records if x["world"] == w and x["method"] == m), None)
            if r is None:
                cells.append("")
            elif m == "oracle":
                cells.append(f"{r['pick']} ${r['cost']:,.0f}")
            else:
                cells.append("no plan" if r["accelerator"] is None else
                             f"{r['pick']} {'+' + format(r['regret'], '.0%') if r['ok'] else 'LATE'}")
        out.append(f"| {w} | " + " | ".join(cells) + " |")
    out += ["", "</details>"]
    return "\n".join(out)


if __name__ == "__main__":
    main()
