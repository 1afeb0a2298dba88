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

"after" (``--after``), everything learned from the older rows only, through the code ``cloudfit model fit`` ships
(``fit.generation_fold``, ``fit.generation_band``):

- **the transition prior** (``fit.fit_transitions`` on the older rows, ``model._transition``'s arithmetic): on
  single-device pairs of the same (source, workload) on two (accelerator, precision) points (nearest batch;
  precision pairs on one GPU count), non-negative least squares of log(measured ratio) on
  ``features.TRANSITION_TERMS``, a pair weighing ``fit.TRANSITION_RECENCY`` per generation between its newer
  accelerator and the newest of the fit. A held-out row's one-device speed is the shipped prediction (stats-only or
  anchored) on the measured GPU nearest in spec × exp(c·x), the log jump clipped between 0 and the shipped
  model's own jump; times the shipped model's multi-device / one-device ratio, for anchored rows moved μ of the way
  to the full model's (prior × correction) where that is lower, μ chosen on the inner folds below
  (``fit.calibrate_scaling``, ``model._carry_scaling``).
- **the band by distance**: the same carried path's residuals on the *inner* leave-one-generation-out folds (for
  Hopper: Volta and Ampere from ≤ Pascal, Ampere from ≤ Volta; for Ampere: Volta from ≤ Pascal), their 10/90%
  quantiles per regime and distance (generation hops from the reference + 1 for a precision class never measured
  on its family), as ``model.predict_many`` applies the shipped one; an anchored band never narrower than the band
  a measured accelerator would get (the regime band × the anchor-jump scale), as ``predict_many`` gives it.

The band designs and transition designs tried against the shipped ones, nested: ``bench/generation_variants.py``.

A first try, a correction ∝ the calibrated prior's jump learned on the inner folds, is in commit d538758
(it made Ampere worse: older transitions realised *more* than the prior's jump, newer ones less).

Also printed: the realised fraction of spec per transition (same source, workload, precision, one GPU,
nearest batch): log(measured ratio) / log(spec ratio) for the tensor peak at the precision and for the
memory bandwidth, by the prior's dominant op class.

    PYTHONPATH=$PWD python bench/generation.py --after [--json out.json]   # ~3 min on 2 loaded cores
    PYTHONPATH=$PWD python bench/generation.py --llm [--json out.json]     # the LLM model, ~3 min
    PYTHONPATH=$PWD python bench/generation.py --moved                     # what the shipped prior moves, seconds
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import types
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


restricted = fit_mod.restricted
TRANSITION_TERMS = features.TRANSITION_TERMS  # the shipped design (cloudfit/perf/features.py)


@dataclasses.dataclass
class Fold:
    target: float
    train: np.ndarray
    held: np.ndarray
    gf: "fit_mod.GenerationFold"  # the fit on the older rows: shipped and carried predictions of ``held``
    lo: dict[str, np.ndarray]  # the shipped band (regime/novelty band widened to the unmeasured band)
    hi: dict[str, np.ndarray]
    #: kind → (low, high) log band a measured accelerator would get (regime/novelty band × the anchor-jump scale):
    #: ``predict_many``'s anchored band by distance is never narrower than it
    measured_q: dict[str, tuple[np.ndarray, np.ndarray]] = dataclasses.field(default_factory=dict)

    @property
    def ref(self):
        return self.gf.reference

    @property
    def stat(self):
        return self.gf.shipped["stats-only"]

    @property
    def anch(self):
        return self.gf.shipped["anchored"]

    @property
    def constants(self):
        return self.gf.fp.constants


def fold(prep, target: float, *, lam=None, cal=True, progress=None) -> tuple[Fold, "fit_mod.Calibration | None"]:
    """Fit on rows older than ``target``, predict the rows of ``target`` (newer rows never used): the shipped
    path with its band (λ and bands from ``fit.calibrate`` on the older rows when ``cal``) and the carried path."""
    g = np.array([gen_of(a) for a in prep.table["accelerator"]])
    train, held = np.flatnonzero(g < target), np.flatnonzero(g == target)
    c = None
    if cal:
        c = fit_mod.calibrate(fit_mod.prepare_for(restricted(prep, train), train), train, progress=progress)
        lam = c.anchor_lambda
    gf = fit_mod.generation_fold(prep, train, held, lam)
    fp, fm = gf.fp, gf.fm
    lo, hi, mq = {}, {}, {}
    if c is not None:
        new = fit_mod.novel(fp, train, held)
        scale = fit_mod.band_scale(fit_mod.anchor_jump(fp, fm, held), c.jump_slope)
        for kind, sc in (("anchored", scale), ("stats-only", np.ones(len(held)))):
            key = [f"{'multi' if m else 'single'}-{kind}" for m in prep.multi[held]]
            ql = np.array([c.log_quantiles[fit_mod.band_key(k, nv)][0] for k, nv in zip(key, new)])
            qh = np.array([c.log_quantiles[fit_mod.band_key(k, nv)][1] for k, nv in zip(key, new)])
            ul = np.array([c.unmeasured_quantiles[k][0] for k in key])
            uh = np.array([c.unmeasured_quantiles[k][1] for k in key])
            pred = gf.shipped[kind]
            lo[kind] = pred * np.exp(np.minimum(ql, ul) * sc)
            hi[kind] = pred * np.exp(np.maximum(qh, uh) * sc)
            mq[kind] = (ql * sc, qh * sc)
    return Fold(target, train, held, gf, lo, hi, mq), c


def nested(prep, target: float, lam: dict, progress=None) -> tuple[list, float]:
    """The inner leave-one-generation-out folds among the rows older than ``target`` (``fit.generation_folds``) with
    the carried scaling μ calibrated on them and applied (as ``cloudfit model fit`` does on every row): what a
    target's band and μ are learned from."""
    older = np.flatnonzero(np.array([gen_of(a) for a in prep.table["accelerator"]]) < target)
    inner = fit_mod.generation_folds(prep, older, lam, progress=progress)
    mu = fit_mod.calibrate_scaling(prep, inner)
    return [fit_mod.carried_scaling(fi, mu) for fi in inner], mu


def fit_transitions(prep, rows: np.ndarray, constants=None) -> dict:
    """The shipped fit (``fit.fit_transitions``: NNLS over single-device pairs of ``rows``) with a count of its
    pairs and the (accelerator, precision) points they span."""
    tr = fit_mod.fit_transitions(prep, rows, constants)
    hw = sorted({":".join(pt.split(":")[:2]) for p in tr["pairs"] for pt in p[2:]})
    return dict(tr, pairs=len(tr["pairs"]), pair_rows=tr["pairs"], hardware=hw, groups=tr.get("groups", 0))


def distance_band(band: dict, kind: str, multi: np.ndarray, distance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) log band per row from a ``fit.generation_band`` document, as ``model.predict_many`` reads it."""
    from cloudfit.perf import model as perf_model

    q = perf_model._generation_band(dict(band, measured_precisions={}))[0]
    return perf_model.generation_quantiles(types.SimpleNamespace(generation_quantiles=q), kind, multi, distance)


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


def moved(accs=("T4", "L4", "A10G", "L40S", "H200", "B200"), precision="fp16") -> str:
    """What the shipped transition prior and band by distance change on the catalog's unmeasured GPUs: for every
    shipped profile at one GPU, samples/s with model.json over the same without ``transition_prior`` and
    ``generation_band`` (main's behaviour), and the band (low–high as a fraction of the prediction), before → after."""
    import tempfile

    from cloudfit.perf import HardwareQuery, predict_many
    from cloudfit.perf import model as perf_model
    from cloudfit.profiling import io as pio

    doc = json.loads(perf_model.model_path().read_text())
    doc.pop("transition_prior", None)
    doc.pop("generation_band", None)
    m = perf_model.load_model()
    with tempfile.TemporaryDirectory() as tmp:
        old_path = str(Path(tmp) / "model.json")
        Path(old_path).write_text(json.dumps(doc))
        out = ["| profile | " + " | ".join(f"{a} (d={perf_model.extrapolation_distance(m, a, precision)})" for a in accs) + " |",
               "|---|" + "---|" * len(accs)]
        for name, path in sorted(pio.shipped_profiles().items()):
            prof = pio.load_profile(path)
            qs = [HardwareQuery(a, 1, 1, 0.0, precision) for a in accs]
            new, old = predict_many(prof, qs), predict_many(prof, qs, model_file=old_path)
            cells = []
            for k in range(len(accs)):
                if not new.fits[k]:
                    cells.append("—")
                    continue
                sn, so = new.samples_per_second[k], old.samples_per_second[k]
                cells.append(f"{sn / so:.2f}× {old.low[k] / so:.2f}–{old.high[k] / so:.2f} → {new.low[k] / sn:.2f}–{new.high[k] / sn:.2f}")
            out.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--after", action="store_true", help="also the transition prior and the distance band")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--llm", action="store_true", help="only the LLM model's leave-one-generation-out")
    ap.add_argument("--moved", action="store_true", help="only what the shipped prior changes on unmeasured GPUs")
    args = ap.parse_args(argv)
    if args.moved:
        print(moved())
        return 0
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
            inner, mu = nested(prep, target, cal.anchor_lambda, progress=lambda s_: log(f"{name}: inner fit {s_}"))
            f.gf = fit_mod.carried_scaling(f.gf, mu)
            rec["carried_scaling"] = mu
            band = fit_mod.generation_band(prep, inner)
            tr = fit_transitions(prep, f.train, f.constants)
            rec["transition_prior"] = dict(tr, terms=list(TRANSITION_TERMS))
            rec["distance_band"] = dict(band)
            rec["distance_band"]["inner"] = sorted({f"{GEN_NAME[int(gen_of(x))]} from ≤ {GEN_NAME[int(max(gen_of(y) for y in prep.table['accelerator'][fi.train]))]}"
                                                    for fi in inner for x in prep.table["accelerator"][fi.held]})
            dist = f.gf.distance
            rec["distance"] = {str(d): int((dist == d).sum()) for d in sorted(set(dist.tolist()))}
            for kind in ("stats-only", "anchored"):
                pred = f.gf.carried[kind]
                glo, ghi = distance_band(band, kind, prep.multi[f.held], np.maximum(dist, 1))
                if kind == "anchored":  # as predict_many: never narrower than a measured accelerator's anchored band
                    glo, ghi = np.minimum(glo, f.measured_q[kind][0]), np.maximum(ghi, f.measured_q[kind][1])
                lo_s, hi_s = pred * f.lo[kind] / f.gf.shipped[kind], pred * f.hi[kind] / f.gf.shipped[kind]
                far = dist > 0  # distance 0 (none here): the unmeasured band, as predict_many keeps it
                lo, hi = np.where(far, pred * np.exp(glo), lo_s), np.where(far, pred * np.exp(ghi), hi_s)
                for part, sel in (("all", np.ones(len(f.held), bool)), ("single", ~prep.multi[f.held]),
                                  ("multi", prep.multi[f.held])):
                    rec["after"][f"{kind}/{part}"] = summary(pred[sel], lo[sel], hi[sel], meas[f.held][sel])
                    rec.setdefault("after_shipped_band", {})[f"{kind}/{part}"] = summary(
                        pred[sel], lo_s[sel], hi_s[sel], meas[f.held][sel])
                for k in range(len(f.held)):
                    if kind == "stats-only":
                        rec["rows"].append({})
                    rec["rows"][k][f"{kind}_after"] = float(pred[k])
                    rec["rows"][k][f"{kind}_after_band"] = [float(lo[k]), float(hi[k])]
                    rec["rows"][k]["distance"] = int(dist[k])
        for k, i in enumerate(f.held):
            if not args.after:
                rec["rows"].append({"row": int(i)})
            rec["rows"][k].update({"acc": str(prep.table["accelerator"][i]), "workload": str(prep.table["workload"][i]),
                                   "source": str(prep.table["source"][i]), "precision": str(prep.table["precision"][i]),
                                   "devices": int(prep.setup.count[i] * prep.setup.nodes[i]),
                                   "batch": int(prep.setup.batch[i]), "measured": float(meas[i]),
                                   "stats-only": float(f.stat[k]), "anchored": float(f.anch[k]),
                                   "stats_band": [float(f.lo["stats-only"][k]), float(f.hi["stats-only"][k])],
                                   "anchored_band": [float(f.lo["anchored"][k]), float(f.hi["anchored"][k])],
                                   "reference": str(f.ref[k]), "share": float(f.gf.share[k])})
        report["targets"][name] = rec
        log(f"{name}: done")
    text = json.dumps(report, indent=1, sort_keys=True)
    if args.json:
        args.json.write_text(text + "\n")
    print(markdown(report))
    return 0


def markdown(report: dict) -> str:
    out = ["| target (fit on older rows) | kind | rows | before MAPE | before median | before coverage | before over-predicted"
           " | after MAPE | after median | after coverage (distance band) | over-predicted after"
           " | carried + the shipped unmeasured band, coverage |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, rec in report["targets"].items():
        for key, b in rec["before"].items():
            if not b.get("n"):
                continue
            a = rec["after"].get(key, {})
            out.append(f"| {name} | {key} | {b['n']} | {b['mape']:.1f}% | {b['median']:.1f}% | {b['coverage']:.0f}% "
                       f"| {b['over']}/{b['n']} | {a.get('mape', float('nan')):.1f}% | {a.get('median', float('nan')):.1f}% "
                       f"| {a.get('coverage', float('nan')):.0f}% | {a.get('over', 0)}/{a.get('n', 0)} "
                       f"| {rec.get('after_shipped_band', {}).get(key, {}).get('coverage', float('nan')):.0f}% |")
    for name, rec in report["targets"].items():
        b = rec.get("distance_band")
        if b:
            out.append(f"\n{name}: carried scaling μ = {rec.get('carried_scaling')} (inner folds)")
            out.append(f"\n{name}: held rows by distance {rec['distance']}; band (log 10/90% per regime and distance) "
                       f"{json.dumps(b['log_quantiles'])}, from {json.dumps(b['from'])}; inner folds {b['inner']}")
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
