#!/usr/bin/env python
"""What the training table lets any physically sensible model reach, and where the multi-device error is.

    python bench/data_floor.py [--eval eval.json] [--out F]

Part 1, the **physics floor** (needs only ``data/measurements.csv``): the predictor that knows every
measurement and obeys the rules issue 15 makes tests of — per-GPU throughput never rises with more GPUs
in one VM (R1) or with more VMs of the same shape (R2), N one-GPU VMs never beat one N-GPU VM (R3), a
faster GPU (at least another's peaks and bandwidth, ``kernels._dominates``) is never slower on the same
run (R5) — and the one rule of step time, a step never gets shorter with a bigger batch, so throughput
grows at most in proportion to the batch (R4). It is the least-absolute-log-error fit to the
measurements under those constraints (a linear programme in log throughput, solved by HiGHS), compared
run by run (same source, workload, precision, parallelism, parameter servers; same network for R2, R4).
Its MAPE is a lower bound for any model that passes the physics tests, whatever its features; the rows
it must move are the table's self-contradictions.

Part 3 compares the table's GH200 rows (Sailor's per-layer profile sums) with Sailor's own end-to-end runs
of the same model on the same GPUs.

Part 2, the **multi-device decomposition** (``--eval``: JSON of ``bench/perf_eval.py --save``): each
leave-one-accelerator-out multi-device anchored prediction = the single-device prediction of the same
run at its batch (the cross-accelerator part) × the predicted scaling. Counterfactuals: the measured
single-device throughput in place of the predicted one (perfect cross-accelerator transfer, only the
scaling error left) and the measured scaling in place of the predicted one (only the transfer error left).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RULES = {"R1": "per-GPU throughput non-increasing in GPUs per VM (one VM)",
         "R2": "per-GPU throughput non-increasing in VMs (same shape, same network)",
         "R3": "N one-GPU VMs no faster than one N-GPU VM",
         "R4": "throughput at most proportional to the batch (a step never shortens with more batch)",
         "R5": "a GPU with at least another's peaks and bandwidth is not slower on the same run"}


def load_rows() -> list[dict]:
    with open(ROOT / "data" / "measurements.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k in ("count", "nodes"):
            r[k] = int(r[k])
        r["batch"] = float(r["batch_per_device"])
        r["sps"] = float(r["samples_per_second"])
    return rows


def constraints(rows: list[dict]) -> list[tuple[str, int, int, float]]:
    """(rule, i, j, c): log P_i − log P_j ≤ c."""
    from cloudfit.perf.kernels import _dominates

    run = [(r["source"], r["workload"], r["precision"], r["parallelism"], r["ps_count"], r["framework"]) for r in rows]
    out = []
    by = defaultdict(list)
    for i, r in enumerate(rows):
        by[run[i] + (r["accelerator"], r["batch"])].append(i)
    for idx in by.values():  # R1–R3: one run, one accelerator, one batch
        for i in idx:
            for j in idx:
                a, b = rows[i], rows[j]
                if a["nodes"] == b["nodes"] == 1 and a["count"] > b["count"]:
                    out.append(("R1", i, j, math.log(a["count"] / b["count"])))
                if (a["count"] == b["count"] and a["nodes"] > b["nodes"]
                        and (b["nodes"] == 1 or a["network_gbps"] == b["network_gbps"])):
                    out.append(("R2", i, j, math.log(a["nodes"] / b["nodes"])))
                if a["count"] == 1 and a["nodes"] > 1 and b["nodes"] == 1 and b["count"] == a["nodes"]:
                    out.append(("R3", i, j, 0.0))
    by = defaultdict(list)
    for i, r in enumerate(rows):
        by[run[i] + (r["accelerator"], r["count"], r["nodes"], r["network_gbps"])].append(i)
    for idx in by.values():  # R4: one run at one scale, two batches
        for i in idx:
            for j in idx:
                if rows[i]["batch"] > rows[j]["batch"]:
                    out.append(("R4", i, j, math.log(rows[i]["batch"] / rows[j]["batch"])))
    by = defaultdict(list)
    for i, r in enumerate(rows):
        by[run[i] + (r["batch"], r["count"], r["nodes"], r["network_gbps"])].append(i)
    for idx in by.values():  # R5: the same run on two accelerators, one dominating the other
        for i in idx:
            for j in idx:
                ai, aj = rows[i]["accelerator"], rows[j]["accelerator"]
                if ai != aj and _dominates(ai, aj) and not _dominates(aj, ai):
                    out.append(("R5", j, i, 0.0))  # P_slow ≤ P_fast
    return out


def floor_fit(rows: list[dict], cons: list[tuple[str, int, int, float]]) -> np.ndarray:
    """argmin Σ |z − log T| subject to the constraints (z = log predicted throughput)."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    n = len(rows)
    y = np.log([r["sps"] for r in rows])
    # variables: z (n), u (n) with u ≥ |z − y|
    ri, ci, v, b = [], [], [], []
    k = 0
    for i in range(n):  # z − u ≤ y ; −z − u ≤ −y
        ri += [k, k, k + 1, k + 1]
        ci += [i, n + i, i, n + i]
        v += [1.0, -1.0, -1.0, -1.0]
        b += [y[i], -y[i]]
        k += 2
    for _, i, j, c in cons:  # z_i − z_j ≤ c
        ri += [k, k]
        ci += [i, j]
        v += [1.0, -1.0]
        b.append(c)
        k += 1
    A = coo_matrix((v, (ri, ci)), shape=(k, 2 * n)).tocsr()
    cost = np.concatenate([np.zeros(n), np.ones(n)])
    res = linprog(cost, A_ub=A, b_ub=np.array(b), bounds=[(None, None)] * n + [(0, None)] * n, method="highs")
    if res.status != 0:
        raise RuntimeError(res.message)
    return np.exp(res.x[:n])


def decomposition(rows: list[dict], report: dict) -> dict:
    recs = report["records"]["accelerator"]
    pred = {x["row"]: x["cloudfit"]["anchored"] for x in recs}
    key = lambda r: (r["source"], r["workload"], r["accelerator"], r["precision"], r["batch"])  # noqa: E731
    single = {}
    for i, r in enumerate(rows):
        if r["count"] == 1 and r["nodes"] == 1 and i in pred:
            single.setdefault(key(r), i)
    out: dict[str, list] = defaultdict(list)
    for x in recs:
        i = x["row"]
        r = rows[i]
        j = single.get(key(r))
        if not x["multi"] or j is None:
            continue
        p, m, p1, m1 = pred[i], r["sps"], pred[j], rows[j]["sps"]
        for name, v in (("as shipped", p), ("perfect transfer", p * m1 / p1), ("perfect scaling", p1 * m / m1)):
            out[(r["source"], name)].append(abs(v / m - 1))
            out[("all", name)].append(abs(v / m - 1))
    return {k: (len(v), 100 * float(np.mean(v))) for k, v in out.items()}


def sailor_profiles_vs_runs() -> list[str]:
    """Sailor's per-layer GH200 profile of OPT-350M (the table's GH200 rows) against Sailor's own end-to-end
    GH200 runs of the same model without pipeline stages (``data/raw/sailor/validation_summary.csv``)."""
    raw = ROOT / "data" / "raw" / "sailor"
    prof = json.loads((raw / "profiles" / "OPT-350" / "GH-96" / "profile.json").read_text())

    def profile_sps(mbs: int) -> float:
        return mbs / sum(sum(v[:3]) for v in prof[str(mbs)]["1"].values())

    out = ["| run | GPUs | micro-batch | global batch | measured samples/s per GPU | profile (table row) | ratio |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    with open(raw / "validation_summary.csv", newline="") as f:
        for r in csv.DictReader(f):
            if r["cluster"] != "clariden" or "/OPT-350/" not in r["file"] or r["num_stages"] != "[1]":
                continue
            n, mbs, gbs = int(r["N"]), int(r["mbs"]), int(r["gbs"])
            run = gbs / float(r["real_iter_time_s"]) / n
            p = profile_sps(mbs)
            out.append(f"| {r['file'].split('/')[-1]} | {n} | {mbs} | {gbs} | {run:.1f} | {p:.1f} | {run / p:.2f}× |")
    return out


def emit(lines: list[str], t0: float, out: str | None) -> None:
    """The report, with its wall time, to ``out`` (Markdown) or standard output (shared by bench/sailor_gh200.py)."""
    text = "\n".join(lines + ["", f"Wall time: {time.perf_counter() - t0:.1f} s."]) + "\n"
    if out:
        Path(out).write_text(text)
    else:
        sys.stdout.write(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--eval", help="saved evaluation (bench/perf_eval.py --save) for the decomposition")
    ap.add_argument("--out", help="write the Markdown here (default: print)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = load_rows()
    cons = constraints(rows)
    fit = floor_fit(rows, cons)
    meas = np.array([r["sps"] for r in rows])
    ape = np.abs(fit / meas - 1)
    multi = np.array([r["count"] * r["nodes"] > 1 for r in rows])
    lines = ["## What the data allows (issue 15)", "",
             f"Command: `python bench/data_floor.py{' --eval ' + Path(args.eval).name if args.eval else ''}`"
             f"{' (the JSON of `python bench/perf_eval.py --save`)' if args.eval else ''}. Date: "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC. Machine: {platform.machine()}, "
             f"Python {platform.python_version()}. {len(rows)} measurements.", "",
             "### The physics floor", "",
             "The least-absolute-log-error fit to the measurements themselves under the physical rules, run by "
             "run: a lower bound on the error of *any* model that passes the physics tests.", ""]
    lines += ["| rule | constraints | violated by the measurements |", "|---|---:|---:|"]
    y = np.log(meas)
    for rule, text in RULES.items():
        cs = [(i, j, c) for r, i, j, c in cons if r == rule]
        bad = sum(1 for i, j, c in cs if y[i] - y[j] > c + 1e-9)
        lines.append(f"| {rule}: {text} | {len(cs)} | {bad} |")
    lines += ["", "| rows | n | floor MAPE % | rows moved > 5% | rows moved > 15% |", "|---|---:|---:|---:|---:|"]
    src = np.array([r["source"] for r in rows])
    for name, sel in [("all", np.ones(len(rows), bool)), ("single-device", ~multi), ("multi-device", multi)] + [
            (f"multi-device, {s}", multi & (src == s)) for s in sorted(set(src[multi]))]:
        lines.append(f"| {name} | {int(sel.sum())} | {100 * ape[sel].mean():.1f} | {int((ape[sel] > .05).sum())} | "
                     f"{int((ape[sel] > .15).sum())} |")
    worst = np.argsort(-ape)[:12]
    lines += ["", "Rows the floor moves most (measured → nearest physically consistent value):", "",
              "| source | workload | accelerator | GPUs × VMs | batch | precision | measured | floor | |",
              "|---|---|---|---|---:|---|---:|---:|---:|"]
    for i in worst:
        r = rows[i]
        lines.append(f"| {r['source']} | {r['workload']} | {r['accelerator']} | {r['count']} × {r['nodes']} | "
                     f"{r['batch']:g} | {r['precision']} | {meas[i]:,.4g} | {fit[i]:,.4g} | {fit[i] / meas[i]:.2f}× |")
    if args.eval:
        report = json.loads(Path(args.eval).read_text())
        dec = decomposition(rows, report)
        lines += ["", "### Where the multi-device error is (leave-one-accelerator-out, anchored)", "",
                  "cloudfit MAPE % on the multi-device rows, as shipped and with one part made perfect: *perfect "
                  "transfer* uses the measured single-device throughput of the same run on the held-out accelerator "
                  "(only the scaling error left), *perfect scaling* the measured multi/single ratio (only the "
                  "cross-accelerator transfer error left).", "",
                  "| source | n | as shipped | perfect transfer | perfect scaling |", "|---|---:|---:|---:|---:|"]
        for s in ["all"] + sorted({k[0] for k in dec} - {"all"}):
            n = dec[(s, "as shipped")][0]
            lines.append(f"| {s} | {n} | " + " | ".join(f"{dec[(s, k)][1]:.1f}" for k in
                                                       ("as shipped", "perfect transfer", "perfect scaling")) + " |")
        over = [(x["cloudfit"]["anchored"] / x["measured"], x["row"]) for x in report["records"]["accelerator"]
                if not x["multi"] and x["cloudfit"]["anchored"] > 1.5 * x["measured"]]
        lines += ["", "Single-device rows predicted above 1.5× their measurement (leave-one-accelerator-out, "
                  "anchored), with the physics floor's value for the same row (a floor above 1 means the source's "
                  "own runs, at other batches or GPU counts, say the row is too low):", "",
                  "| source | workload | accelerator | batch | measured | predicted | floor |",
                  "|---|---|---|---:|---:|---:|---:|"]
        for ratio, i in sorted(over, reverse=True):
            r = rows[i]
            lines.append(f"| {r['source']} | {r['workload']} | {r['accelerator']} | {r['batch']:g} | {meas[i]:,.4g} | "
                         f"{ratio:.2f}× | {fit[i] / meas[i]:.2f}× |")
    lines += ["", "### The GH200 rows against their source's own training runs", "",
              "The table's six GH200 rows (the whole GH200 group of leave-one-accelerator-out) are Sailor's per-layer "
              "profile of OPT-350M summed into a step. Sailor also ran the model end to end on the same GPUs "
              "(CSCS GH200, 4 per node); its runs without pipeline stages are faster per GPU than the profile at the "
              "same micro-batch, even with data-parallel gradient traffic (and gradient accumulation, global batch > "
              "GPUs × micro-batch). Precision is stated for neither (data/raw/sailor/PROVENANCE.md).", ""]
    lines += sailor_profiles_vs_runs()
    emit(lines, t0, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
