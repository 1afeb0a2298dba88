"""Anchored LLM prediction on the public runs: anchor on one run of the same model and stack, predict another.

    python bench/llm_anchor.py                 # prints the markdown tables of bench/RESULTS_llm_anchor.md
    python bench/llm_anchor.py --write         # also writes cloudfit/llm/anchor_bands.json (the shipped bands)

For every held-out run of ``data/llm/measurements.csv`` (newest Megatron-Bridge container per configuration,
as the fit uses) and every other run of the same model and stack (source, model, fine-tuning, framework,
precision), the anchor's measured tokens/s sets the stack speed (``cloudfit.llm.anchor``) and the held-out run is predicted
from it. Methods: ``whole`` (shipped for whole-run measurements: compute, collective bandwidth and host overheads
× s), ``speed`` (compute rates only × s: what a per-layer profile sets), ``ratio`` (the plain ratio measured ÷
modelled at the anchor, applied to the query); ``shipped`` = ``whole`` to the same GPU, ``speed`` to another
(what ``cloudfit.llm.anchor.carried`` does). Pairs are classed by
their hops (``scale``: nodes, GPUs per node, layout, batch, sequence length; ``gpu``: another accelerator).
Headline: per held-out run and class, the *nearest* anchor (``cloudfit.llm.anchor.distance``; ties: geometric mean of their speeds),
as ``cloudfit predict --profile`` picks it. Every source counts equally in the pooled numbers (vTrain's 1,440
single-node rows would otherwise drown the rest). Bands: 10/90% quantiles of log(measured ÷ anchored) per
class, calibrated leaving the evaluated source out (coverage is out-of-source); the shipped bands use all.
Unanchored = the fitted step model with no anchor (in-sample: it was fitted on these rows).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cloudfit.llm import anchor as A  # noqa: E402
from cloudfit.llm.data import MEASUREMENTS, load_rows, predict_table, row_layout, table  # noqa: E402
from cloudfit.llm.predict import calibration_version, constants  # noqa: E402

GRID = np.exp(np.linspace(math.log(A.SCALE_LIMITS[0]), math.log(A.SCALE_LIMITS[1]), 161))


def setups(rows) -> list[A.Setup]:
    out = []
    for r in rows:
        lay = row_layout(r)
        gpn = int(r["gpus_per_node"])
        out.append(A.Setup(r["accelerator"], min(gpn, int(r["gpus"])), max(1, int(r["gpus"]) // gpn),
                           r["precision"], int(r["seq_len"]), lay.sequences_per_replica, lay.describe(),
                           r["framework"]))
    return out


def speed_table(t, c, whole_step: bool = False) -> np.ndarray:
    """log tokens/s of every row at every grid speed (rows × grid), increasing along the grid."""
    return np.log(np.stack([predict_table(t, A.with_speed(c, float(g), whole_step=whole_step))["tokens_per_second"]
                            for g in GRID], 1))


def interp_rows(logp: np.ndarray, idx: np.ndarray, log_speed: np.ndarray) -> np.ndarray:
    lg = np.log(GRID)
    return np.array([np.interp(s, lg, logp[i]) for i, s in zip(idx, log_speed)])


def anchor_speeds(logp: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """log stack speed reproducing each row's measurement (clipped to the grid)."""
    lg = np.log(GRID)
    return np.array([np.interp(math.log(m), row, lg) for row, m in zip(logp, measured)])


def pairs(rows, st):
    """(query, anchor, trust class, hop count, distance) for same model and stack pairs (no stack hops)."""
    groups = defaultdict(list)
    for i, r in enumerate(rows):
        groups[(r["source"], r["model"], r["finetune"], r["framework"], r["precision"])].append(i)
    out = []
    for idx in groups.values():
        for j in idx:
            for i in idx:
                if i == j:
                    continue
                h = A.hops(st[i], st[j])
                if not h:
                    continue  # the same setup twice (two container versions): not a transfer
                out.append((j, i, A.trust(h), len(h), A.distance(st[i], st[j])))
    return out


def evaluate(rows, st, logp, measured, logp0, logw=None):
    s_log = anchor_speeds(logp, measured)
    P = pairs(rows, st)
    q = np.array([p[0] for p in P])
    a = np.array([p[1] for p in P])
    cls = np.array([p[2] for p in P])
    dist = np.array([p[4] for p in P])
    pred_speed = interp_rows(logp, q, s_log[a])
    pred_ratio = logp0[q] + np.log(measured[a]) - logp0[a]
    extra = {}
    if logw is not None:
        extra["whole"] = np.log(measured[q]) - interp_rows(logw, q, anchor_speeds(logw, measured)[a])
    return {**extra, "q": q, "a": a, "cls": cls, "dist": dist, "speed": np.log(measured[q]) - pred_speed,
            "ratio": np.log(measured[q]) - pred_ratio, "blend": np.log(measured[q]) - 0.5 * (pred_speed + pred_ratio),
            "s_log": s_log}


def nearest(ev, method: str):
    """Per (query, class): residual of the nearest anchors (their geometric-mean speed ≈ mean log residual)."""
    best: dict = {}
    for k in range(len(ev["q"])):
        key = (int(ev["q"][k]), str(ev["cls"][k]))
        d = ev["dist"][k]
        if key not in best or d < best[key][0]:
            best[key] = (d, [ev[method][k]])
        elif d == best[key][0]:
            best[key][1].append(ev[method][k])
    return {key: float(np.mean(v[1])) for key, v in best.items()}


def source_weighted(res: dict, rows, cls: str):
    """(MAPE, median APE, n, per-source MAPE) of log residuals of class ``cls`` (each source counts equally)."""
    by_src = defaultdict(list)
    for (j, c), r in res.items():
        if c == cls:
            by_src[rows[j]["source"]].append(r)
    if not by_src:
        return None
    ape = {s: np.abs(np.exp(-np.array(v)) - 1.0) for s, v in by_src.items()}  # |pred − meas| / meas
    mape = float(np.mean([v.mean() for v in ape.values()]))
    med = float(np.median(np.concatenate(list(ape.values()))))
    return mape, med, sum(len(v) for v in ape.values()), {s: (float(v.mean()), len(v)) for s, v in ape.items()}


def bands_and_coverage(res: dict, rows, cls: str):
    """Shipped band (all sources, source-weighted quantiles) and out-of-source coverage."""
    by_src = defaultdict(list)
    for (j, c), r in res.items():
        if c == cls:
            by_src[rows[j]["source"]].append(r)

    def q(srcs):
        vals = np.concatenate([np.array(by_src[s]) for s in srcs])
        w = np.concatenate([np.full(len(by_src[s]), 1.0 / len(by_src[s])) for s in srcs])
        o = np.argsort(vals)
        cw = np.cumsum(w[o]) / w.sum()
        return float(vals[o][np.searchsorted(cw, 0.1)]), float(vals[o][min(np.searchsorted(cw, 0.9), len(o) - 1)])

    band = q(list(by_src))
    cov = {}
    for s in by_src:
        others = [o for o in by_src if o != s]
        lo, hi = q(others) if others else band
        v = np.array(by_src[s])
        cov[s] = float(np.mean((v >= lo) & (v <= hi)))
    return band, float(np.mean(list(cov.values()))), cov


def unanchored(rows, measured, logp0, c):
    """MAPE of the unanchored prediction and coverage of the fitted band and of the stack-generic band."""
    by_src = defaultdict(list)
    for j, r in enumerate(rows):
        by_src[r["source"]].append(float(np.log(measured[j]) - logp0[j]))
    ape = {s: float(np.mean(np.abs(np.exp(-np.array(v)) - 1.0))) for s, v in by_src.items()}
    lo, hi = c.band
    cov = {s: float(np.mean((np.array(v) >= lo) & (np.array(v) <= hi))) for s, v in by_src.items()}
    return ape, cov, by_src


def envelope(rows, c):
    """log tokens/s of the stack-generic band's edges before widening: the lowest and highest prediction over the
    frameworks the step model has constants for (and the row's own), × the fitted CV band."""
    env = [np.log(predict_table(table([dict(r, framework=fw) for r in rows]), c)["tokens_per_second"])
           for fw in ("fsdp", "megatron", "megatron-deepspeed")]
    return np.min(env, 0) + c.band[0], np.max(env, 0) + c.band[1]


def generic_widen(held_out):
    """Smallest extra half-width w so that the stack-generic band covers ≥ 80% of each source's runs on average
    (source-weighted) when that source's stack is unseen (``held_out``: source → (rows, measured, constants
    fitted without it))."""
    edges = {s: envelope(rs, c_s) + (np.log(m),) for s, (rs, m, c_s) in held_out.items()}
    cov = 0.0
    for w in np.arange(0.0, 1.5, 0.01):
        per = {s: float(np.mean((y >= lo - w) & (y <= hi + w))) for s, (lo, hi, y) in edges.items()}
        cov = float(np.mean(list(per.values())))
        if cov >= 0.8:
            return float(w), cov, per
    return 1.5, cov, per


def loso(rows, t, measured):
    """Leave-source-out: for each source, constants fitted without it (the step model has never seen that
    stack — the case of a new user), its unanchored and anchored residuals."""
    from cloudfit.llm.fit import band_from_residuals, fit

    src = np.array([r["source"] for r in rows])
    out = {}
    for s in sorted(set(src)):
        keep = src != s
        c_s = fit(t.subset(keep))
        train_res = np.log(measured[keep]) - np.log(predict_table(t.subset(keep), c_s)["tokens_per_second"])
        c_s = c_s.__class__(**{**{k: getattr(c_s, k) for k in c_s.__dataclass_fields__},
                               "band": band_from_residuals(train_res)})
        idx = np.flatnonzero(~keep)
        sub = t.subset(~keep)
        out[s] = (idx, c_s, speed_table(sub, c_s), np.log(predict_table(sub, c_s)["tokens_per_second"]),
                  speed_table(sub, c_s, whole_step=True))
    return out


def anchored_results(rows, st, logp, measured, logp0, logw):
    ev = evaluate(rows, st, logp, measured, logp0, logw)
    res = {m: nearest(ev, m) for m in ("speed", "whole", "ratio")}
    # shipped: the whole step to the same GPU, compute alone to another (cloudfit.llm.anchor.carried)
    res["shipped"] = {k: (res["speed"] if k[1] == "gpu" else res["whole"])[k] for k in res["whole"]}
    return res, len(ev["q"])


def table_lines(title, res_by_method, rows, un_ape, n_by_src):
    lines = [f"**{title}**", "",
             "| anchored on | method | held-out runs | MAPE (source-weighted) | median APE | per source (MAPE, runs) |",
             "|---|---|---:|---:|---:|---|"]
    for cls in ("scale", "layout", "gpu"):
        for method, res in res_by_method.items():
            r = source_weighted(res, rows, cls)
            if r is None:
                continue
            per = "; ".join(f"{s} {m * 100:.1f}% ({n})" for s, (m, n) in sorted(r[3].items()))
            lines.append(f"| nearest other run, {cls} hops | {method} | {r[2]} | {r[0] * 100:.1f}% | "
                         f"{r[1] * 100:.1f}% | {per} |")
    lines.append(f"| none (unanchored) | — | {sum(n_by_src.values())} | {np.mean(list(un_ape.values())) * 100:.1f}% | — | "
                 + "; ".join(f"{s} {v * 100:.1f}% ({n_by_src[s]})" for s, v in sorted(un_ape.items())) + " |")
    return lines + [""]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", action="store_true", help="write cloudfit/llm/anchor_bands.json")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = load_rows()
    t = table(rows)
    c = constants()
    st = setups(rows)
    measured = t.measured
    head = [f"Date {time.strftime('%Y-%m-%d')}. Machine: {platform.machine()} {platform.system()}, 2-core shared VM, "
            f"no GPU. Command: `python bench/llm_anchor.py{' --write' if args.write else ''}`. Rows: {len(rows)}.", ""]
    # (1) a stack the step model has never seen: constants fitted without the held-out run's source
    new_stack: dict = {"speed": {}, "whole": {}, "ratio": {}, "shipped": {}}
    un_ape, un_cov, n_by_src, gen_cov = {}, {}, {}, {}
    for s, (idx, c_s, logp_s, logp0_s, logw_s) in loso(rows, t, measured).items():
        rs = [rows[i] for i in idx]
        res, _ = anchored_results(rs, [st[i] for i in idx], logp_s, measured[idx], logp0_s, logw_s)
        for m in res:
            new_stack[m].update({(int(idx[j]), cls): v for (j, cls), v in res[m].items()})
        r0 = np.log(measured[idx]) - logp0_s
        un_ape[s] = float(np.mean(np.abs(np.exp(-r0) - 1.0)))
        un_cov[s] = float(np.mean((r0 >= c_s.band[0]) & (r0 <= c_s.band[1])))
        n_by_src[s] = len(idx)
        gen_cov[s] = (rs, measured[idx], c_s)
    lines = head + table_lines("A stack the step model has never seen (constants fitted without the held-out "
                               "run's source)", new_stack, rows, un_ape, n_by_src)
    # (2) in-sample: the shipped constants (fitted on every source, the held-out run's included)
    logp = speed_table(t, c)
    logp0 = np.log(predict_table(t, c)["tokens_per_second"])
    res_in, npairs = anchored_results(rows, st, logp, measured, logp0, speed_table(t, c, whole_step=True))
    ape_in, cov_in, by_src = unanchored(rows, measured, logp0, c)
    lines += table_lines(f"Shipped constants (in-sample: fitted on every source); {npairs} pairs", res_in, rows,
                         ape_in, {k: len(v) for k, v in by_src.items()})
    lines += ["| class | band (10%, 90% of log measured ÷ anchored) | out-of-source coverage | per source |",
              "|---|---|---:|---|"]
    bands = {}
    for cls in ("scale", "layout", "gpu"):
        band, cov, covs = bands_and_coverage(new_stack["shipped"], rows, cls)
        bands[cls] = band
        lines.append(f"| anchored, {cls} hops | {math.exp(band[0]) - 1:+.1%} … {math.exp(band[1]) - 1:+.1%} | "
                     f"{cov * 100:.0f}% | " + "; ".join(f"{s} {v * 100:.0f}%" for s, v in sorted(covs.items())) + " |")
    lines.append("| unanchored, fitted CV band of the constants without the source | — | "
                 f"{np.mean(list(un_cov.values())) * 100:.0f}% | "
                 + "; ".join(f"{s} {v * 100:.0f}%" for s, v in sorted(un_cov.items())) + " |")
    w, wcov, wcovs = generic_widen(gen_cov)
    lines.append(f"| stack-generic (framework envelope × fitted band, widened ±{w:.2f} in log; constants without "
                 "the source) | — | "
                 f"{wcov * 100:.0f}% | " + "; ".join(f"{s} {v * 100:.0f}%" for s, v in sorted(wcovs.items())) + " |")
    lines += ["", f"({time.perf_counter() - t0:.0f} s)"]
    sys.stdout.write("\n".join(lines) + "\n")
    if args.write:
        digest = hashlib.sha256(MEASUREMENTS.read_bytes()).hexdigest()
        doc = {"schema_version": 1, "bands": {"same": list(A.DEFAULT_BANDS["same"]), **{k: list(v) for k, v in bands.items()},
                                              "stack": [2 * x for x in bands.get("gpu", A.DEFAULT_BANDS["gpu"])]},
               "stack_generic_widen": w, "measurements_sha256": digest, "calibration_version": calibration_version()}
        text = json.dumps(doc, indent=1, sort_keys=True)
        doc["version"] = "anchor-" + hashlib.sha256(text.encode()).hexdigest()[:10]
        A.BANDS_PATH.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
