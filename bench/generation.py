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

"after" (``--after``), everything learned from the older rows only:

- **the transition prior**, as shipped (``fit.fit_transitions`` on the older rows, ``model._transition``'s
  arithmetic): on single-device pairs of the same (source, workload) on two (accelerator, precision) points
  (nearest batch; precision pairs on one GPU count), non-negative least squares of log(measured ratio) on
  ``features.TRANSITION_TERMS`` (log tensor-peak and bandwidth ratios and the prior's memory-bound speed
  ratio, split by the tensor-op share s; log batch ratio). A held-out row's one-device speed is the shipped
  prediction (stats-only or anchored) on the measured GPU nearest in spec × exp(c·x), the log jump clipped
  between 0 and the shipped model's own jump; times the shipped model's multi-device / one-device ratio.
- **the band by distance**: an inner leave-one-generation-out (each older generation predicted from the ones
  before it, the same way) gives residuals; the band is ±q·(1 + |predicted log jump|), q the conformal 80%
  quantile of |residual| / (1 + |jump|).

A first try, a correction ∝ the calibrated prior's jump learned on the inner folds, is in commit d538758
(it made Ampere worse: older transitions realised *more* than the prior's jump, newer ones less).

Also printed: the realised fraction of spec per transition (same source, workload, precision, one GPU,
nearest batch): log(measured ratio) / log(spec ratio) for the tensor peak at the precision and for the
memory bandwidth, by the prior's dominant op class.

    PYTHONPATH=$PWD python bench/generation.py --after [--json out.json]   # ~3 min on 2 loaded cores
    PYTHONPATH=$PWD python bench/generation.py --llm [--json out.json]     # the LLM model, ~3 min
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
    precision, single device, another accelerator, nearest batch) as if the other rows were not in the table —
    for the anchored predictions and for the prior's cross-accelerator calibration (``fit.calibrate_prior``
    pairs rows with these candidates; its other pairs are on one accelerator, unaffected)."""
    t = prep.table
    count = t["count"].copy()
    out = np.ones(len(count), bool)
    out[train] = False
    count[out] = 2.0  # not single-device: never a candidate (nothing else of the table is read from count here)
    cands = fit_mod.anchor_candidates(data_mod.Table(dict(t.columns, count=count), t.stats))
    W = fit_mod.anchor_weight_matrix(cands, np.log(prep.setup.batch), np.log(prep.setup.count))
    return dataclasses.replace(prep, anchor_weights=W, anchors=cands)


def prior_on(fp: fit_mod.Prepared, acc: np.ndarray, rows: np.ndarray) -> tuple[prior.PriorResult, prior.Setup]:
    """The calibrated prior of ``rows``' workloads, one device, on ``acc`` (per row) at the row's precision and batch."""
    n = len(rows)
    t = fp.table.take(rows)
    s = features.setup(list(acc), list(t["precision"]), batch=t["batch_per_device"], count=np.ones(n),
                       nodes=np.ones(n), intra_gbps=np.full(n, np.inf), network_gbps=np.full(n, features.NO_LINK_GBPS),
                       tables=fit_mod.kernel_tables())
    w = prior.Work(*(np.asarray(x)[rows] if np.ndim(x) else x for x in dataclasses.astuple(fp.work)))
    return prior.prior(w, s, fp.constants), s, w


def reference(prep: fit_mod.Prepared, train: np.ndarray, held: np.ndarray) -> np.ndarray:
    """Per held row, the measured accelerator of ``train`` nearest in spec at the row's precision
    (|log peak ratio| + |log bandwidth ratio|; ties by name)."""
    t = prep.table
    accs = sorted(set(t["accelerator"][train]))
    out = []
    for i in held:
        prec = t["precision"][i]
        lp, lb = spec_logs([t["accelerator"][i]] + accs, [prec] * (len(accs) + 1))
        d = np.abs(lp[1:] - lp[0]) + np.abs(lb[1:] - lb[0])
        out.append(sorted(zip(d, accs))[0][1])
    return np.array(out, dtype=object)


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
    anch1: np.ndarray = None  # the shipped anchored / stats-only prediction of each held row's one-device variant
    stat1: np.ndarray = None
    stat_ref: np.ndarray = None  # shipped stats-only prediction of the one-device variant on the reference GPU
    constants: dict = None
    share_ref: np.ndarray = None  # tensor-op share of the prior on the reference GPU
    anch_ref: np.ndarray = None  # shipped anchored prediction of the one-device variant on the reference GPU
    mem_t: np.ndarray = None  # the prior's memory-bound time of the one-device variant on the target / reference
    mem_ref: np.ndarray = None


def fold(prep, target: float, *, lam=None, cal=True, progress=None) -> tuple[Fold, "fit_mod.Calibration | None"]:
    """Fit on rows older than ``target``, predict the rows of ``target`` (newer rows never used)."""
    g = np.array([gen_of(a) for a in prep.table["accelerator"]])
    train, held = np.flatnonzero(g < target), np.flatnonzero(g == target)
    pr = restricted(prep, train)
    # fit.fold_model, keeping the forest to evaluate other hardware
    fp = fit_mod.prepare_for(pr, train)
    forest = fit_mod.fit_forest(fp.X[train], fp.y[train], fp.weight[train])
    v = fp.variants
    fm = fit_mod.FoldModel(fp.prior_sps, forest.predict(fp.X), v.prior_sps, forest.predict(v.X))
    c = fit_mod.calibrate(fp, train, progress=progress) if cal else None
    lam = c.anchor_lambda if c is not None else lam
    anch, stat = fit_mod.shipped_predictions(fp, fm, held, lam)
    n = len(prep.measured)
    p1 = np.where(prep.multi[held], fm.prior_v[n + held], fm.prior_sps[held])
    ref = reference(prep, train, held)
    pref, sref, wref = prior_on(fp, ref, held)
    W = fp.anchor_weights[held]
    J = {"stats-only": np.log(p1) - np.log(pref.samples_per_second),
         "anchored": (W * (np.log(p1)[:, None] - np.log(fm.prior_sps)[None, :])).sum(1)}
    own = prior.prior(fp.variants.work, fp.variants.setup, fp.constants)
    share = own.tensor_s[n + held] / own.compute_s[n + held]
    # one-device variants, as shipped_predictions builds them (single-device λ)
    idx = n + held
    lam1 = lam["single"]
    logm = np.log(prep.measured)
    base = W @ (logm - np.log(fm.prior_sps)) - lam1 * (W @ fm.f)
    anch1 = np.where(W.sum(1) > 0, np.exp(np.log(fm.prior_v[idx]) + lam1 * fm.f_v[idx] + base), np.nan)
    stat1 = fm.prior_v[idx] * np.exp(fm.f_v[idx])
    Xr = features.feature_matrix(wref, sref, pref, fp.framework_tf[held])
    f_ref = forest.predict(Xr)
    stat_ref = pref.samples_per_second * np.exp(f_ref)
    anch_ref = np.where(W.sum(1) > 0, pref.samples_per_second * np.exp(lam1 * f_ref + base), np.nan)
    s_ref = pref.tensor_s / pref.compute_s

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
    return Fold(target, train, held, anch, stat, lo, hi, J, share, ref, anch1, stat1, stat_ref, fp.constants, s_ref, anch_ref,
                own.memory_s[n + held], pref.memory_s), c


# --------------------------------------------------------------------------------------------
# The transition prior: realised fraction of each spec ratio, learned on pairs of older rows

TRANSITION_TERMS = features.TRANSITION_TERMS  # the shipped design (cloudfit/perf/features.py)


def spec_logs(accs, precs) -> tuple[np.ndarray, np.ndarray]:
    """log tensor peak at the precision, log memory bandwidth per fp32-equivalent byte."""
    L = features.transition_logs(list(accs), list(precs))
    return L[:, 0], L[:, 1]


def fit_transitions(prep, rows: np.ndarray, constants) -> dict:
    """The shipped fit (``fit.fit_transitions``: NNLS over single-device pairs of ``rows``) with a count of its
    pairs and the (accelerator, precision) points they span."""
    tr = fit_mod.fit_transitions(prep, rows, constants)
    hw = sorted({":".join(pt.split(":")[:2]) for p in tr["pairs"] for pt in p[2:]})
    return dict(tr, pairs=len(tr["pairs"]), pair_rows=tr["pairs"], hardware=hw, groups=tr.get("groups", 0))


def transition_predict(prep, f: Fold, tr: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(prediction, |realised log jump|) per kind for the fold's held rows, as ``model._transition`` ships it:
    the shipped one-device prediction on the reference GPU (anchored or stats-only) × exp(c · x), x the log
    spec ratios split by the tensor-op share (mean of target's and reference's), the jump clipped between 0 and the shipped model's
    own jump to the target; times the shipped model's multi-device / one-device ratio. (The catalog-wide
    dominance clamp of the product is not applied here: the held-out GPUs are the whole question.)"""
    t = prep.table
    c = np.array(tr["c"])
    held = f.held
    L = features.transition_logs(list(t["accelerator"][held]), list(t["precision"][held]))
    R = features.transition_logs(list(f.ref), list(t["precision"][held]))
    x = features.transition_design(L - R, np.log(f.mem_ref / f.mem_t), np.zeros(len(held)),
                                   0.5 * (f.share + f.share_ref)) @ c
    out = {}
    for kind, ref1, own1, full in (("stats-only", f.stat_ref, f.stat1, f.stat), ("anchored", f.anch_ref, f.anch1, f.anch)):
        own = np.log(own1 / ref1)
        j = np.clip(x, np.minimum(0.0, own), np.maximum(0.0, own))
        out[kind] = (full * ref1 * np.exp(j) / own1, np.abs(j))
    return out


def distance_band(prep, inner: list[tuple[Fold, dict]], kind: str) -> list[float]:
    """Symmetric split-conformal band: the 80% quantile q of the inner folds' |log residual| / (1 + |predicted
    jump|), as [−q, q] per unit of distance (the sign of a generation's miss does not carry to the next one:
    Ampere was predicted too fast from Volta, Hopper's multi-GPU rows too slow from Ampere)."""
    v = []
    for f, pred in inner:
        p, d = pred[kind]
        ok = np.isfinite(p) & (p > 0)
        v.append(np.log(prep.measured[f.held][ok] / p[ok]) / (1.0 + d[ok]))
    v = np.concatenate(v) if v else np.zeros(0)
    if len(v) < 10:
        return [float("nan"), float("nan")]
    q = fit_mod.conformal_quantile(np.abs(v), fit_mod.ALPHA_HIGH - fit_mod.ALPHA_LOW)
    return [-q, q]


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
    hop_res: list[float] = []  # log residuals of the earlier generation hops (the band by distance)
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
        rec = {"all": summary(pred, pred * np.exp(lo), pred * np.exp(hi), te.measured),
               "by_accelerator": by, "band_log": [lo, hi], "train_rows": int(train.sum())}
        if len(hop_res) >= 10:  # after: the band of the earlier hops' residuals (one generation from the fit)
            hl, hh = llm_fit.band_from_residuals(np.array(hop_res))
            rec["after"] = {"all": summary(pred, pred * np.exp(hl), pred * np.exp(hh), te.measured), "band_log": [hl, hh]}
            rec["after"]["by_accelerator"] = {
                a: summary(pred[accs[test] == a], pred[accs[test] == a] * np.exp(hl), pred[accs[test] == a] * np.exp(hh),
                           te.measured[accs[test] == a]) for a in sorted(set(accs[test]))}
        hop_res += list(np.log(te.measured / pred))
        out[GEN_NAME[int(target)]] = rec
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--after", action="store_true", help="also the transition prior and the distance band")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--llm", action="store_true", help="only the LLM model's leave-one-generation-out")
    args = ap.parse_args(argv)
    t0 = time.time()
    log = lambda s: print(f"[{time.time() - t0:6.0f}s] {s}", file=sys.stderr, flush=True)  # noqa: E731
    if args.llm:
        rep = llm_logo(log)
        if args.json:
            args.json.write_text(json.dumps(rep, indent=1, sort_keys=True) + "\n")
        print("| target (fit on older rows) | accelerator | rows | MAPE | median | band coverage (shipped way) "
              "| over-predicted | coverage, band of the earlier generation hop |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for name, r in rep.items():
            aft = r.get("after", {})
            for a, b in [("all", r["all"])] + sorted(r["by_accelerator"].items()):
                ab = aft.get("all") if a == "all" else aft.get("by_accelerator", {}).get(a)
                cov = f"{ab['coverage']:.0f}%" if ab else "—"
                print(f"| {name} | {a} | {b['n']} | {b['mape']:.1f}% | {b['median']:.1f}% | {b['coverage']:.0f}% "
                      f"| {b['over']}/{b['n']} | {cov} |")
            print(f"\n{name}: band (log 10/90%) shipped way {r['band_log']}, earlier hop {aft.get('band_log')}\n")
        return 0
    prep = fit_mod.prepare()
    meas = prep.measured
    report: dict = {"targets": {}, "transitions": transitions(fit_mod.prepare_for(prep, np.arange(len(meas))))}
    for target in TARGETS:
        name = GEN_NAME[target]
        log(f"{name}: outer fit + calibrate")
        f, cal = fold(prep, target)
        rec = {"train_rows": int(len(f.train)), "held_rows": int(len(f.held)),
               "reference": {str(a): int((f.ref == a).sum()) for a in sorted(set(f.ref))},
               "lambda": cal.anchor_lambda, "before": {}, "after": {}, "rows": []}
        for kind in ("stats-only", "anchored"):
            pred = f.stat if kind == "stats-only" else f.anch
            for part, sel in (("all", np.ones(len(f.held), bool)), ("single", ~prep.multi[f.held]),
                              ("multi", prep.multi[f.held])):
                rec["before"][f"{kind}/{part}"] = summary(pred[sel], f.lo[kind][sel], f.hi[kind][sel], meas[f.held][sel])
        if args.after:
            inner = []
            for g in sorted({gen_of(a) for a in prep.table["accelerator"][f.train]})[1:]:
                fi, _ = fold(prep, g, lam=cal.anchor_lambda, cal=False)
                tri = fit_transitions(prep, fi.train, fi.constants)
                log(f"{name}: inner fold {GEN_NAME[g]}: {tri['pairs']} transition pairs")
                if tri["pairs"] >= 5:
                    inner.append((fi, transition_predict(prep, fi, tri)))
            tr = fit_transitions(prep, f.train, f.constants)
            rec["transition_prior"] = dict(tr, terms=list(TRANSITION_TERMS))
            preds = transition_predict(prep, f, tr)
            rec["distance_band"] = {}
            for kind in ("stats-only", "anchored"):
                q = distance_band(prep, inner, kind)
                rec["distance_band"][kind] = {"log_quantiles_per_unit": q,
                                              "inner_targets": [GEN_NAME[fi.target] for fi, _ in inner],
                                              "inner": [[float(np.log(prep.measured[i] / pp)), float(dd), bool(prep.multi[i])]
                                                        for fi, pr_ in inner for i, pp, dd in zip(fi.held, *pr_[kind])
                                                        if np.isfinite(pp) and pp > 0]}
                pred, d = preds[kind]
                lo, hi = pred * np.exp(q[0] * (1 + d)), pred * np.exp(q[1] * (1 + d))
                pb0 = f.anch if kind == "anchored" else f.stat
                lo_s, hi_s = pred * f.lo[kind] / pb0, pred * f.hi[kind] / pb0  # the shipped band, as predict_many keeps it
                for part, sel in (("all", np.ones(len(f.held), bool)), ("single", ~prep.multi[f.held]),
                                  ("multi", prep.multi[f.held])):
                    rec["after"][f"{kind}/{part}"] = summary(pred[sel], lo[sel], hi[sel], meas[f.held][sel])
                    rec.setdefault("after_shipped_band", {})[f"{kind}/{part}"] = summary(
                        pred[sel], lo_s[sel], hi_s[sel], meas[f.held][sel])
                # the shipped prediction with a band from the inner folds' residuals of the shipped path (±80% |r|)
                pb = f.anch if kind == "anchored" else f.stat
                ib = distance_band(prep, [(fi, {kind: ((fi.anch if kind == "anchored" else fi.stat), 0 * fi.share)})
                                          for fi, _ in inner], kind)
                for part, sel in (("all", np.ones(len(f.held), bool)), ("single", ~prep.multi[f.held]),
                                  ("multi", prep.multi[f.held])):
                    rec.setdefault("bands_only", {})[f"{kind}/{part}"] = summary(
                        pb[sel], pb[sel] * np.exp(ib[0]), pb[sel] * np.exp(ib[1]), meas[f.held][sel])
                for k in range(len(f.held)):
                    if kind == "stats-only":
                        rec["rows"].append({})
                    rec["rows"][k][f"{kind}_after"] = float(pred[k])
                    rec["rows"][k][f"{kind}_after_band"] = [float(lo[k]), float(hi[k])]
                    rec["rows"][k][f"{kind}_distance"] = float(d[k])
        for k, i in enumerate(f.held):
            if not args.after:
                rec["rows"].append({"row": int(i)})
            rec["rows"][k].update({"acc": str(prep.table["accelerator"][i]), "workload": str(prep.table["workload"][i]),
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
           " | after: transition prior, MAPE | after median | coverage, distance band | coverage, shipped band"
           " | over-predicted after | shipped prediction + distance band, coverage |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, rec in report["targets"].items():
        for key, b in rec["before"].items():
            if not b.get("n"):
                continue
            a = rec["after"].get(key, {})
            out.append(f"| {name} | {key} | {b['n']} | {b['mape']:.1f}% | {b['median']:.1f}% | {b['coverage']:.0f}% "
                       f"| {b['over']}/{b['n']} | {a.get('mape', float('nan')):.1f}% | {a.get('median', float('nan')):.1f}% "
                       f"| {a.get('coverage', float('nan')):.0f}% "
                       f"| {rec.get('after_shipped_band', {}).get(key, {}).get('coverage', float('nan')):.0f}% "
                       f"| {a.get('over', 0)}/{a.get('n', 0)} "
                       f"| {rec.get('bands_only', {}).get(key, {}).get('coverage', float('nan')):.0f}% |")
    for name, rec in report["targets"].items():
        for kind, b in rec.get("distance_band", {}).items():
            out.append(f"\n{name} {kind}: distance band per unit (1 + |jump|) {b['log_quantiles_per_unit']}, "
                       f"from inner targets {b['inner_targets']}")
    out.append("\n| target | transition pairs (older rows only) | " + " | ".join(TRANSITION_TERMS) + " | rms log |")
    out.append("|---|---:|" + "---:|" * (len(TRANSITION_TERMS) + 1))
    for name, rec in report["targets"].items():
        tp = rec.get("transition_prior")
        if tp and "rms_log" in tp:
            out.append(f"| {name} | {tp['pairs']} ({tp['groups']} source/workload groups) | "
                       + " | ".join(f"{x:.3f}" for x in tp["c"]) + f" | {tp['rms_log']:.3f} |")
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
