"""Leave-one-generation-out: how well does the performance model predict a GPU generation it has never seen?

For each target generation (Ampere from ≤ Volta rows, Hopper from ≤ Ampere rows) every row of the target
generation *and newer* is removed from the fit, and the model is refitted on the older rows with the code
path ``cloudfit model fit`` uses (``fit.fold_model`` = prior calibration + xgboost correction,
``fit.calibrate`` = λ and the conformal bands, both on the older rows only; anchors restricted to older
rows). The held-out rows are then predicted as ``predict_many`` would for an accelerator with no measured
row (``fit.shipped_predictions``; band = the regime/novelty band widened to the unmeasured-accelerator
band, anchored bands × (1 + slope × jump)):

- **stats-only**: no measurement of the workload on any GPU of the fit;
- **anchored**: the same workload's single-device rows on older generations.

"after" (``--after``): a generation correction learned from *transitions inside the older rows only*
(an inner leave-one-generation-out: each older generation predicted from the ones before it), applied on
top of the shipped prediction: ``log(measured / predicted) ≈ c_t·J·s + c_m·J·(1 − s)``, with ``J`` the
calibrated prior's log jump from the newest GPU of the fit to the target (stats-only) or from the anchors
(anchored) and ``s`` the prior's tensor-op (matmul/conv/attention) share of the step on the target — so
``1 + c`` is the realised fraction of the prior's predicted jump, per op class; and bands by distance:
split-conformal 10/90% quantiles of the inner residuals after the correction, normalised by (1 + |J|).

Also printed: the realised fraction of spec per transition (same source, workload, precision, one GPU,
nearest batch): log(measured ratio) / log(spec ratio) for the tensor peak at the precision and for the
memory bandwidth, by the prior's dominant op class.

    PYTHONPATH=$PWD python bench/generation.py [--after] [--json out.json]    # ~10–20 min on 2 cores
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

from cloudfit.catalog import hardware
from cloudfit.perf import data as data_mod
from cloudfit.perf import features, prior
from cloudfit.perf import fit as fit_mod

GEN_ORDER = {"Kepler": 0, "Pascal": 1, "Volta": 2, "Turing": 2.5, "Ampere": 3, "Ada Lovelace": 3.5, "Hopper": 4,
             "Blackwell": 5}
GEN_NAME = {0: "Kepler", 1: "Pascal", 2: "Volta", 3: "Ampere", 4: "Hopper", 5: "Blackwell"}
TARGETS = (3, 4)  # Ampere from ≤ Volta, Hopper from ≤ Ampere


#: LLM-table boards the perf catalog does not list (their generation, by NVIDIA's naming)
_LLM_BOARDS = {"GB200": "Blackwell", "GB300": "Blackwell"}


def gen_of(acc: str) -> float:
    acc = str(acc)
    return GEN_ORDER[_LLM_BOARDS[acc] if acc in _LLM_BOARDS else hardware.get(acc).arch]


def restricted(prep: fit_mod.Prepared, train: np.ndarray) -> fit_mod.Prepared:
    """``prep`` whose anchors are only rows of ``train``: ``fit.anchor_candidates`` (same source, workload and
    precision, single device, another accelerator, nearest batch) as if the other rows were not in the table."""
    t = prep.table
    count = t["count"].copy()
    out = np.ones(len(count), bool)
    out[train] = False
    count[out] = 2.0  # not single-device: never a candidate (nothing else of the table is read from count here)
    cands = fit_mod.anchor_candidates(data_mod.Table(dict(t.columns, count=count), t.stats))
    W = fit_mod.anchor_weight_matrix(cands, np.log(prep.setup.batch), np.log(prep.setup.count))
    return dataclasses.replace(prep, anchor_weights=W)


def prior_on(fp: fit_mod.Prepared, acc: str) -> prior.PriorResult:
    """The calibrated prior of every row's workload, one device, on ``acc`` at the row's precision and batch."""
    n = len(fp.measured)
    t = fp.table
    s = features.setup([acc] * n, list(t["precision"]), batch=t["batch_per_device"], count=np.ones(n),
                       nodes=np.ones(n), intra_gbps=np.full(n, np.inf), network_gbps=np.full(n, features.NO_LINK_GBPS),
                       tables=fit_mod.kernel_tables())
    return prior.prior(fp.work, s, fp.constants)


def reference(prep: fit_mod.Prepared, train: np.ndarray) -> str:
    """The newest generation's most measured accelerator in ``train`` (ties by name)."""
    acc = prep.table["accelerator"][train]
    g = np.array([gen_of(a) for a in acc])
    newest = acc[g == g.max()]
    names, counts = np.unique(newest, return_counts=True)
    return str(sorted(zip(-counts, names))[0][1])


@dataclasses.dataclass
class Fold:
    target: int
    train: np.ndarray
    held: np.ndarray
    anch: np.ndarray
    stat: np.ndarray
    lo: dict[str, np.ndarray]
    hi: dict[str, np.ndarray]
    J: dict[str, np.ndarray]  # signed log jump of the calibrated prior: stats-only (from the reference), anchored
    share: np.ndarray  # tensor-op share of the prior's one-device step on the target
    ref: str


def fold(prep, target: float, *, lam=None, cal=True, progress=None) -> tuple[Fold, "fit_mod.Calibration | None"]:
    """Fit on rows older than ``target``, predict the rows of ``target`` (newer rows never used)."""
    g = np.array([gen_of(a) for a in prep.table["accelerator"]])
    train, held = np.flatnonzero(g < target), np.flatnonzero(g == target)
    pr = restricted(prep, train)
    fp, fm = fit_mod.fold_model(pr, train)
    c = fit_mod.calibrate(fp, train, progress=progress) if cal else None
    lam = c.anchor_lambda if c is not None else lam
    anch, stat = fit_mod.shipped_predictions(fp, fm, held, lam)
    n = len(prep.measured)
    p1 = np.where(prep.multi[held], fm.prior_v[n + held], fm.prior_sps[held])
    ref = reference(prep, train)
    pref = prior_on(fp, ref)
    W = fp.anchor_weights[held]
    J = {"stats-only": np.log(p1) - np.log(pref.samples_per_second[held]),
         "anchored": (W * (np.log(p1)[:, None] - np.log(fm.prior_sps)[None, :])).sum(1)}
    own = prior.prior(fp.variants.work, fp.variants.setup, fp.constants)
    share = own.tensor_s[n + held] / own.compute_s[n + held]
    lo, hi = {}, {}
    if c is not None:
        new = fit_mod.novel(fp, train, held)
        scale = fit_mod.band_scale(fit_mod.anchor_jump(fp, fm, held), c.jump_slope)
        for kind, sc in (("anchored", scale), ("stats-only", np.ones(len(held)))):
            ql = np.array([c.log_quantiles[fit_mod.band_key(f"{'multi' if m else 'single'}-{kind}", nv)][0]
                           for m, nv in zip(prep.multi[held], new)])
            qh = np.array([c.log_quantiles[fit_mod.band_key(f"{'multi' if m else 'single'}-{kind}", nv)][1]
                           for m, nv in zip(prep.multi[held], new)])
            ul = np.array([c.unmeasured_quantiles[f"{'multi' if m else 'single'}-{kind}"][0] for m in prep.multi[held]])
            uh = np.array([c.unmeasured_quantiles[f"{'multi' if m else 'single'}-{kind}"][1] for m in prep.multi[held]])
            pred = anch if kind == "anchored" else stat
            lo[kind] = pred * np.exp(np.minimum(ql, ul) * sc)
            hi[kind] = pred * np.exp(np.maximum(qh, uh) * sc)
    return Fold(target, train, held, anch, stat, lo, hi, J, share, ref), c


# --------------------------------------------------------------------------------------------
# The generation correction, learned on inner transitions


def design(J: np.ndarray, share: np.ndarray) -> np.ndarray:
    return np.column_stack([J * share, J * (1 - share)])


def learn_correction(prep, inner: list[Fold], kind: str, *, fit_c: bool = True) -> dict:
    """c (2,) by least squares of the inner folds' log residuals on the op-class-split jump, clipped to
    [−1, 1] (1 + c: the realised share of the prior's jump); and the normalised conformal band."""
    X, r, J = [], [], []
    for f in inner:
        pred = f.anch if kind == "anchored" else f.stat
        ok = np.isfinite(pred) & (pred > 0)
        X.append(design(f.J[kind][ok], f.share[ok]))
        r.append(np.log(prep.measured[f.held][ok] / pred[ok]))
        J.append(f.J[kind][ok])
    X, r, J = np.concatenate(X), np.concatenate(r), np.concatenate(J)
    if len(r) < 10:
        return {"c": [0.0, 0.0], "q": [-0.3, 0.3], "n": int(len(r))}
    c = np.linalg.lstsq(X, r, rcond=None)[0] if fit_c else np.zeros(2)
    c = np.clip(np.round(c, 3), -1.0, 1.0)
    after = (r - X @ c) / (1.0 + np.abs(J))
    q = [fit_mod.conformal_quantile(after, fit_mod.ALPHA_LOW), fit_mod.conformal_quantile(after, fit_mod.ALPHA_HIGH)]
    return {"c": [float(x) for x in c], "q": q, "n": int(len(r))}


def apply(f: Fold, corr: dict, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    pred = f.anch if kind == "anchored" else f.stat
    X = design(f.J[kind], f.share)
    out = pred * np.exp(X @ np.array(corr["c"]))
    sc = 1.0 + np.abs(f.J[kind])
    return out, out * np.exp(corr["q"][0] * sc), out * np.exp(corr["q"][1] * sc)


# --------------------------------------------------------------------------------------------
# Realised fraction of spec per transition


def transitions(prep) -> list[dict]:
    """Single-device pairs (same source, workload, precision; nearest batch) on two generations."""
    t = prep.table
    one = np.flatnonzero((t["count"] == 1) & (t["nodes"] == 1))
    hw_peak = features.hardware_arrays(list(t["accelerator"]), list(t["precision"]))
    peak, bw = hw_peak.peak_tflops, hw_peak.mem_bw_gbps
    pr = prior.prior(prep.work, prep.setup, prep.constants)
    share = pr.tensor_s / pr.compute_s
    groups: dict = {}
    for i in one:
        groups.setdefault((t["source"][i], t["workload"][i], t["precision"][i]), []).append(i)
    out = []
    for rows in groups.values():
        for i in rows:
            accs = sorted({t["accelerator"][k] for k in rows if gen_of(t["accelerator"][k]) > gen_of(t["accelerator"][i])})
            for acc in accs:  # nearest batch on the newer accelerator
                same = [k for k in rows if t["accelerator"][k] == acc]
                j = min(same, key=lambda k: (abs(np.log(t["batch_per_device"][k] / t["batch_per_device"][i])), k))
                out.append({"from": str(t["accelerator"][i]), "to": str(acc), "source": str(t["source"][i]),
                            "workload": str(t["workload"][i]), "precision": str(t["precision"][i]),
                            "batch": [int(t["batch_per_device"][i]), int(t["batch_per_device"][j])],
                            "rows": [int(i), int(j)],
                            "measured": float(prep.measured[j] / prep.measured[i]), "peak": float(peak[j] / peak[i]),
                            "bw": float(bw[j] / bw[i]), "tensor_share": float(share[i]),
                            "prior": float(pr.samples_per_second[j] / pr.samples_per_second[i])})
    return out


# --------------------------------------------------------------------------------------------


def summary(pred, lo, hi, meas) -> dict:
    ok = np.isfinite(pred)
    if not ok.any():
        return {"n": 0}
    ape = np.abs(pred[ok] / meas[ok] - 1)
    inside = (lo[ok] <= meas[ok]) & (meas[ok] <= hi[ok])
    return {"n": int(ok.sum()), "mape": float(100 * ape.mean()), "median": float(100 * np.median(ape)),
            "coverage": float(100 * inside.mean()), "over": int((pred[ok] > meas[ok]).sum()),
            "ratio_median": float(np.median(pred[ok] / meas[ok]))}


def llm_logo(progress=None) -> dict:
    """The LLM model (``cloudfit.llm``: its own least-squares fit, calibration.json) by generation: every
    public row (Megatron-Bridge, llm-foundry) of the target generation predicted from a fit on the older
    generations' rows only (vTrain included, all A100); band = 10/90% quantiles (``llm.fit.band_from_residuals``)
    of leave-one-accelerator-out residuals among the older rows, as the shipped band pools grouped-CV residuals."""
    from cloudfit.llm import data as llm_data
    from cloudfit.llm import fit as llm_fit

    t = llm_data.table()
    src = t.column("source")
    accs = np.array([k.split("/")[0] for k in t.keys])
    g = np.array([gen_of(a) for a in accs])
    pub = (src == "megatron-bridge") | (src == "llm-foundry")
    out = {}
    for target in sorted({x for x in g[pub] if x > min(g)}):
        train = g < target
        test = pub & (g == target)
        if progress:
            progress(f"LLM: {GEN_NAME[int(target)]} from older rows")
        c = llm_fit.fit(t.subset(train))
        te = t.subset(test)
        pred = llm_data.predict_table(te, c)["tokens_per_second"]
        res = []
        for a in sorted(set(accs[train & pub])):  # inner leave-one-accelerator-out on the older rows
            tr = train & (accs != a)
            if not (train & pub & (accs == a)).any() or tr.sum() < 10:
                continue
            inner = t.subset(train & pub & (accs == a))
            ci = llm_fit.fit(t.subset(tr))
            res += list(np.log(inner.measured / llm_data.predict_table(inner, ci)["tokens_per_second"]))
        lo, hi = llm_fit.band_from_residuals(np.array(res)) if len(res) >= 5 else (float("nan"), float("nan"))
        by = {}
        for a in sorted(set(accs[test])):
            sel = accs[test] == a
            by[a] = summary(pred[sel], pred[sel] * np.exp(lo), pred[sel] * np.exp(hi), te.measured[sel])
        out[GEN_NAME[int(target)]] = {"all": summary(pred, pred * np.exp(lo), pred * np.exp(hi), te.measured),
                                      "by_accelerator": by, "band_log": [lo, hi], "train_rows": int(train.sum())}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--after", action="store_true", help="also learn and apply the generation correction")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--llm", action="store_true", help="only the LLM model's leave-one-generation-out")
    args = ap.parse_args(argv)
    t0 = time.time()
    log = lambda s: print(f"[{time.time() - t0:6.0f}s] {s}", file=sys.stderr, flush=True)  # noqa: E731
    if args.llm:
        rep = llm_logo(log)
        if args.json:
            args.json.write_text(json.dumps(rep, indent=1, sort_keys=True) + "\n")
        print("| target (fit on older rows) | accelerator | rows | MAPE | median | band coverage | over-predicted |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for name, r in rep.items():
            for a, b in [("all", r["all"])] + sorted(r["by_accelerator"].items()):
                print(f"| {name} | {a} | {b['n']} | {b['mape']:.1f}% | {b['median']:.1f}% | {b['coverage']:.0f}% | {b['over']}/{b['n']} |")
        return 0
    prep = fit_mod.prepare()
    meas = prep.measured
    report: dict = {"targets": {}, "transitions": transitions(fit_mod.prepare_for(prep, np.arange(len(meas))))}
    for target in TARGETS:
        name = GEN_NAME[target]
        log(f"{name}: outer fit + calibrate")
        f, cal = fold(prep, target)
        rec = {"train_rows": int(len(f.train)), "held_rows": int(len(f.held)), "reference": f.ref,
               "lambda": cal.anchor_lambda, "before": {}, "after": {}, "rows": []}
        held_acc = prep.table["accelerator"][f.held]
        for kind in ("stats-only", "anchored"):
            pred = f.stat if kind == "stats-only" else f.anch
            for part, sel in (("all", np.ones(len(f.held), bool)), ("single", ~prep.multi[f.held]),
                              ("multi", prep.multi[f.held])):
                rec["before"][f"{kind}/{part}"] = summary(pred[sel], f.lo[kind][sel], f.hi[kind][sel], meas[f.held][sel])
        if args.after:
            inner = []
            for g in sorted({gen_of(a) for a in prep.table["accelerator"][f.train]}):
                if g == 0:
                    continue
                log(f"{name}: inner fold {GEN_NAME[g]}")
                fi, _ = fold(prep, g, lam=cal.anchor_lambda, cal=False)
                inner.append(fi)
            rec["correction"] = {}
            for kind in ("stats-only", "anchored"):
                corr = learn_correction(prep, inner, kind)
                rec["correction"][kind] = dict(corr, inner_targets=[GEN_NAME[fi.target] for fi in inner])
                band_only = learn_correction(prep, inner, kind, fit_c=False)
                rec["correction"][kind + " bands only"] = band_only
                pb, lb, hb = apply(f, band_only, kind)
                for part, sel in (("all", np.ones(len(f.held), bool)), ("single", ~prep.multi[f.held]),
                                  ("multi", prep.multi[f.held])):
                    rec.setdefault("bands_only", {})[f"{kind}/{part}"] = summary(pb[sel], lb[sel], hb[sel], meas[f.held][sel])
                pred, lo, hi = apply(f, corr, kind)
                for part, sel in (("all", np.ones(len(f.held), bool)), ("single", ~prep.multi[f.held]),
                                  ("multi", prep.multi[f.held])):
                    rec["after"][f"{kind}/{part}"] = summary(pred[sel], lo[sel], hi[sel], meas[f.held][sel])
                for k, i in enumerate(f.held):
                    if kind == "stats-only":
                        rec["rows"].append({"row": int(i)})
                    rec["rows"][k][f"{kind}_after"] = float(pred[k])
        for k, i in enumerate(f.held):
            if not args.after:
                rec["rows"].append({"row": int(i)})
            rec["rows"][k].update({"acc": str(held_acc[k]), "workload": str(prep.table["workload"][i]),
                                   "source": str(prep.table["source"][i]), "precision": str(prep.table["precision"][i]),
                                   "devices": int(prep.setup.count[i] * prep.setup.nodes[i]),
                                   "batch": int(prep.setup.batch[i]), "measured": float(meas[i]),
                                   "stats-only": float(f.stat[k]), "anchored": float(f.anch[k]),
                                   "stats_band": [float(f.lo["stats-only"][k]), float(f.hi["stats-only"][k])],
                                   "J_stats": float(f.J["stats-only"][k]), "share": float(f.share[k])})
        report["targets"][name] = rec
        log(f"{name}: done")
    text = json.dumps(report, indent=1, sort_keys=True)
    if args.json:
        args.json.write_text(text + "\n")
    print(markdown(report))
    return 0


def markdown(report: dict) -> str:
    out = ["| target (fit on older rows) | kind | rows | before MAPE | before median | before coverage | over-predicted"
           " | after: correction + distance bands, MAPE | coverage | after: distance bands only, coverage |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, rec in report["targets"].items():
        for key, b in rec["before"].items():
            if not b.get("n"):
                continue
            a = rec["after"].get(key, {})
            out.append(f"| {name} | {key} | {b['n']} | {b['mape']:.1f}% | {b['median']:.1f}% | {b['coverage']:.0f}% "
                       f"| {b['over']}/{b['n']} | {a.get('mape', float('nan')):.1f}% | {a.get('coverage', float('nan')):.0f}% "
                       f"| {rec.get('bands_only', {}).get(key, {}).get('coverage', float('nan')):.0f}% |")
    for name, rec in report["targets"].items():
        if "correction" in rec:
            out.append(f"\n{name}: correction {json.dumps(rec['correction'])}")
    out.append("\n| transition | op mix (prior tensor share) | pairs | measured ratio (median) | realised / peak "
               "| realised / bandwidth | realised / prior jump |")
    out.append("|---|---|---:|---:|---:|---:|---:|")
    agg: dict = {}
    for p in report["transitions"]:
        key = (gen_of(p["from"]), gen_of(p["to"]), "tensor ≥ 0.5" if p["tensor_share"] >= 0.5 else "memory/other > 0.5")
        agg.setdefault(key, []).append(p)
    for (a, b, mix), ps in sorted(agg.items()):
        def med(f):
            v = [f(p) for p in ps]
            v = [x for x in v if np.isfinite(x)]
            return float(np.median(v)) if v else float("nan")
        fr = lambda num, den: num / den if abs(den) > 0.05 else float("nan")  # noqa: E731
        out.append(f"| {GEN_NAME[a]}→{GEN_NAME[b]} | {mix} | {len(ps)} | {med(lambda p: p['measured']):.2f} "
                   f"| {med(lambda p: fr(np.log(p['measured']), np.log(p['peak']))):.2f} "
                   f"| {med(lambda p: fr(np.log(p['measured']), np.log(p['bw']))):.2f} "
                   f"| {med(lambda p: fr(np.log(p['measured']), np.log(p['prior']))):.2f} |")
    out.append("\n| transition | source | workload | precision | batch | measured ratio | peak ratio | bw ratio "
               "| realised / peak | realised / bw | prior ratio | tensor share |")
    out.append("|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for p in sorted(report["transitions"], key=lambda p: (gen_of(p["to"]), p["from"], p["to"], p["source"], p["workload"])):
        lp, lb = np.log(p["peak"]), np.log(p["bw"])
        rp = np.log(p["measured"]) / lp if abs(lp) > 1e-6 else float("nan")
        rb = np.log(p["measured"]) / lb if abs(lb) > 1e-6 else float("nan")
        out.append(f"| {p['from']}→{p['to']} | {p['source']} | {p['workload']} | {p['precision']} | {p['batch'][0]}/{p['batch'][1]} "
                   f"| {p['measured']:.2f} | {p['peak']:.2f} | {p['bw']:.2f} | {rp:.2f} | {rb:.2f} | {p['prior']:.2f} "
                   f"| {p['tensor_share']:.2f} |")
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
