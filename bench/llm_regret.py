"""Replay regret of the large-model planner on worlds built from vTrain's measured sweep.

    python bench/llm_regret.py [--out bench/RESULTS_llm_regret.md]

A world = one vTrain model (GPT 3.6B/18.4B/39.1B/175B) × a deadline. Its options are the configurations
vTrain measured for that model (GPU counts 64/256/512 × TP/DP/PP/micro-batch layouts, deliberately including
poor ones), priced at the shipped catalog's cheapest on-demand A100-80GB GPU-hour (vTrain ran A100-80GB;
a2-ultragpu-8g). Training 1e10 tokens, each option's measured time is tokens ÷ measured tokens/s and its
measured cost GPUs × $/GPU-h × hours. Deadlines: 1.05, 1.2, 1.5, 2, 3, 5 and 10 × the fastest measured option's
time, and none (cheapest overall).

The planner's rule, applied with predicted throughput: among options predicted to meet the deadline at the
band's 10% throughput quantile (the plan's P(on time) ≥ 90% without preemption), take the cheapest predicted
one. Regret = measured cost of the choice ÷ cheapest measured option that meets the deadline − 1; the deadline
holds when the choice's measured time is within it.

Predictors: ``shipped`` = ``cloudfit.llm.predict.constants()`` as shipped (says whether its calibration file
exists and whether vTrain rows were in it); ``leave-model-out`` = ``cloudfit.llm.fit.fit`` on every public row
except the world's model's vTrain rows (``data/llm/measurements.csv``), so the world is unseen; ``constant MFU``
= one MFU (the median of every other public row) × GPUs × peak, which cannot rank layouts of one GPU
count (a baseline). "planned" counts worlds where some option is predicted to meet the deadline at 90%; the
others get no plan (an infeasibility answer, not a missed deadline).
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import statistics
from collections import defaultdict

import numpy as np

TOKENS = 1e10
FACTORS = (1.05, 1.2, 1.5, 2.0, 3.0, 5.0, 10.0, None)


def a100_80_price() -> tuple[float, str]:
    from cloudfit import catalog

    offs = [o for o in catalog.load().offerings if o.accelerator == "A100-80GB"]
    o = min(offs, key=lambda o: o.price_per_hour / o.accelerators_per_node)
    return o.price_per_hour / o.accelerators_per_node, f"{o.machine_type} {o.zone} ${o.price_per_hour:,.2f}/h"


def _calib_rows() -> str:
    import json

    from cloudfit.llm import predict as pr

    doc = json.loads(pr.CALIBRATION_PATH.read_text(encoding="utf-8"))
    return str((doc.get("training") or {}).get("rows", "?"))


def choose(pred_tps, band_lo, gpus, price, deadline_h):
    hours_p = TOKENS / (pred_tps * np.exp(band_lo)) / 3600.0
    cost_p = gpus * price * TOKENS / pred_tps / 3600.0
    ok = np.ones(pred_tps.size, bool) if deadline_h is None else hours_p <= deadline_h
    if not ok.any():
        return None
    idx = np.flatnonzero(ok)
    return int(idx[np.lexsort((hours_p[idx], cost_p[idx]))[0]])


def run_worlds(groups, preds: dict, price: float, band_lo: float) -> dict:
    out = {}
    for name, pred_of in preds.items():
        regrets, held, no_plan, n = [], 0, 0, 0
        for model, (idx, meas, gpus) in groups.items():
            hours_m = TOKENS / meas / 3600.0
            cost_m = gpus * price * hours_m
            p = pred_of(model)
            for f in FACTORS:
                d = None if f is None else f * hours_m.min()
                n += 1
                i = choose(p, band_lo, gpus, price, d)
                if i is None:
                    no_plan += 1
                    continue
                feas = np.ones(meas.size, bool) if d is None else hours_m <= d
                regrets.append(cost_m[i] / cost_m[feas].min() - 1.0)
                held += int(d is None or hours_m[i] <= d)
        planned = len(regrets)
        out[name] = {"worlds": n, "planned": planned, "no_plan": no_plan,
                     "median_regret": statistics.median(regrets), "mean_regret": float(np.mean(regrets)),
                     "p90_regret": float(np.quantile(regrets, 0.9)), "max_regret": max(regrets),
                     "within_5pct": sum(r <= 0.05 for r in regrets) / planned, "deadline_held": held / planned}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ns = ap.parse_args()
    from cloudfit.llm import data, fit
    from cloudfit.llm import predict as pr

    rows = data.load_rows()
    vt = [r for r in rows if r["source"] == "vtrain-multi"]
    t = data.table(vt)
    groups = defaultdict(list)
    for i, r in enumerate(vt):
        groups[r["model"]].append(i)
    groups = {m: (np.array(ix), t.measured[ix], t.gpus[ix]) for m, ix in groups.items()}
    shipped = pr.constants()
    version = pr.calibration_version()
    calib = pr.CALIBRATION_PATH.is_file()
    pred_all = data.predict_table(t, shipped)["tokens_per_second"]
    lmo_cache = {}

    def lmo(model):
        if model not in lmo_cache:
            train = data.table([r for r in rows if not (r["source"].startswith("vtrain") and r["model"] == model)])
            c = fit.fit(train)
            lmo_cache[model] = data.predict_table(t, c)["tokens_per_second"][groups[model][0]]
        return lmo_cache[model]

    t_all = data.table(rows)
    mfu_all = t_all.measured * t_all.flops_per_token / (t_all.gpus * t_all.peak * 1e12)
    models_all = np.array([r["model"] for r in rows])

    def const_mfu(model):  # one MFU (median of every other public row): ranks GPU counts, not layouts
        idx = groups[model][0]
        mfu = float(np.median(mfu_all[models_all != model]))
        return mfu * t.gpus[idx] * t.peak[idx] * 1e12 / t.flops_per_token[idx]

    price, where = a100_80_price()
    band_lo = shipped.band[0]
    preds = {"shipped": lambda m: pred_all[groups[m][0]], "leave-model-out fit": lmo, "constant MFU": const_mfu}
    res = run_worlds(groups, preds, price, band_lo)
    spread = {m: float(v[1].max() / v[1].min()) for m, v in groups.items()}
    lines = [
        "## LLM planner: replay regret on vTrain's measured sweep (issue 17)",
        "",
        f"`python bench/llm_regret.py` — {dt.date.today().isoformat()}, {platform.machine()} 2-core VM "
        f"(shared), numpy only.",
        "",
        f"Worlds: {len(groups)} vTrain models × {len(FACTORS)} deadlines (1.05–10 × the fastest measured option, and "
        f"none); {len(vt)} measured configurations (64/256/512 A100-80GB; measured best/worst tokens/s per model: "
        + ", ".join(f"{m} {s:.2f}×" for m, s in sorted(spread.items())) + f"). Price: {where} → ${price:.3f}/GPU-h. "
        f"{TOKENS:.0e} tokens per world.",
        "",
        f"Shipped predictor: calibration `{version}` ("
        + (f"fitted on {_calib_rows()} rows of data/llm/measurements.csv, vTrain's among them: in-sample here, so the "
           "leave-model-out row is the fair one" if calib else
           "no calibration file on this branch: the step model's default constants, so vTrain rows were not in it")
        + "). The leave-model-out variant refits `cloudfit.llm.fit.fit` on every public row except the world's "
        "model's vTrain rows.",
        "",
        "| predictor | worlds | planned | median regret | mean | P90 | max | within 5% | deadline held |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in res.items():
        lines.append(f"| {name} | {r['worlds']} | {r['planned']} | {r['median_regret']:.1%} | {r['mean_regret']:.1%} | "
                     f"{r['p90_regret']:.1%} | {r['max_regret']:.1%} | {r['within_5pct']:.0%} | {r['deadline_held']:.0%} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if ns.out:
        with open(ns.out, "w", encoding="utf-8") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
