"""Grouped cross-validation of cloudfit against three baselines, on the shipped measurements.

Schemes: leave-one-accelerator-out (LOAO) and leave-one-model-family-out (LOMO). For every held-out
group the learned correction, the band's conformal quantiles (from an inner grouped CV on the
training rows only) and every baseline are refit without the group. A held-out row is predicted

* anchored — from the same workload's single-device measurement(s) on *another* accelerator (same
  source, precision, nearest batch): what a profile measured elsewhere provides; and
* stats-only — from model stats and hardware specs alone; and, for multi-device rows only,
* anchored at the same scale (regime ``multi-anchored-same-scale``) — from the same workload's
  measurement at the row's own devices per node × nodes on another accelerator (same source,
  parallelism and parameter servers, nearest batch), where one exists: a profile that measured the
  query's scale elsewhere, whose measured scaling efficiency the anchor carries. An added report line;
  ``multi-anchored`` keeps the single-device anchors above.

cloudfit's predictions go through the path `predict_many` ships (``fit.shipped_predictions``: λ per
single/multi-device, then the linear-scaling cap against the same prediction on one node and on one
device), and its band is the one `predict_many` would give (per regime, per workload novelty).

Methods: (a) cloudfit (prior × learned correction), (b) TFLOPS-ratio scaling (anchored: measured ×
peak ratio × device-count ratio; stats-only: one median FLOP efficiency fitted on the training rows),
(c) a CM-DARE-style SVR (RBF) on GPU TFLOPS, model FLOPs, parameters, batch, devices and nodes
(anchored: as a ratio between query and anchor), (d) the physics prior alone with its datasheet
constants. Also reported, as an ablation: cloudfit's calibrated prior without the learned correction.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np

from cloudfit.perf import fit as fit_mod

#: GPU generations the end-to-end evaluation reports separately (by the held-out row's accelerator).
GENERATIONS = ("Kepler", "Pascal/Volta", "Turing", "Ampere", "Ada", "Hopper", "Blackwell")


def generation(accelerator: str) -> str:
    from cloudfit.catalog import hardware

    arch = hardware.get(accelerator).arch
    return {"Pascal": "Pascal/Volta", "Volta": "Pascal/Volta", "Ada Lovelace": "Ada"}.get(arch, arch)


METHODS = ("cloudfit", "tflops-ratio", "svr", "prior", "calibrated-prior")
#: Prediction kinds per row; "anchored-same-scale" is NaN for single-device rows and rows without such an anchor.
KINDS = ("anchored", "stats-only", "anchored-same-scale")
#: The calibrated band each kind is reported with: same-scale anchoring is a report line, not a product
#: path, so it has no band calibrated of its own and carries the anchored one (widened by its own jump).
BAND_OF_KIND = {"anchored": "anchored", "stats-only": "stats-only", "anchored-same-scale": "anchored"}
SCHEMES = {"accelerator": "leave-one-accelerator-out", "model": "leave-one-model-out"}


def _svr_inputs(prep: fit_mod.Prepared) -> np.ndarray:
    a = prep.aux
    return np.column_stack([np.log(a["peak_tflops"]), np.log(a["flops_per_sample"]), np.log(a["parameters"]),
                            np.log(a["batch"]), np.log(a["devices"]), np.log(a["nodes"])])


def baseline_svr(prep: fit_mod.Prepared, train: np.ndarray) -> np.ndarray:
    """CM-DARE-style support-vector regression of log samples/s; predicts every row."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVR

    Z = _svr_inputs(prep)
    model = make_pipeline(StandardScaler(), SVR(kernel="rbf", C=10.0, epsilon=0.05, gamma="scale"))
    model.fit(Z[train], np.log(prep.measured[train]))
    return np.exp(model.predict(Z))


def baseline_tflops(prep: fit_mod.Prepared, train: np.ndarray) -> np.ndarray:
    """samples/s = devices × peak × ē / FLOPs per sample, ē the training rows' median efficiency."""
    a = prep.aux
    eff = prep.measured * a["flops_per_sample"] / (a["devices"] * a["peak_tflops"] * 1e12)
    e = float(np.median(eff[train]))
    return a["devices"] * a["peak_tflops"] * 1e12 * e / a["flops_per_sample"]


def run(*, progress: Callable[[str], None] | None = None, inner: bool = True,
        schemes: tuple[str, ...] = ("accelerator", "model"), prep: fit_mod.Prepared | None = None,
        keep_records: bool = False) -> dict[str, Any]:
    """Run the evaluation; returns a JSON-able report (see :func:`summarize`).

    ``keep_records`` adds every held-out prediction under ``report["records"][scheme]`` (for
    :func:`to_frame`)."""
    prep = prep or fit_mod.prepare()
    rows = np.arange(len(prep.y))
    report: dict[str, Any] = {"rows": int(len(rows)), "schemes": {}}
    # anchors at the row's own scale (multi-device rows): the same weights, on other anchor rows
    w_same = fit_mod.anchor_weight_matrix(fit_mod.anchor_candidates(prep.table, same_scale=True),
                                          np.log(prep.setup.batch), np.log(prep.setup.count))
    prep_same = dataclasses.replace(prep, anchor_weights=w_same)
    for scheme in schemes:
        recs: list[dict[str, Any]] = []
        for g, held in fit_mod.group_folds(prep, rows, scheme):
            train = np.setdiff1d(rows, held)
            fp, fm = fit_mod.fold_model(prep, train)  # prior calibrated and correction fitted without the group
            cal = fit_mod.calibrate(fp, train) if inner else None
            lam = cal.shipped_lambda() if cal is not None else {"single": 1.0, "multi": 1.0}
            bases = {
                "tflops-ratio": baseline_tflops(prep, train),
                "svr": baseline_svr(prep, train),
                "prior": prep.prior_sps,
                "calibrated-prior": fm.prior_sps,
            }
            preds = {m: fit_mod.predictions(prep, b, held) + fit_mod.predictions(prep_same, b, held)[:1]
                     for m, b in bases.items()}
            # cloudfit exactly as `predict_many` ships it: λ per single/multi, then the linear-scaling cap
            fp_same = dataclasses.replace(fp, anchor_weights=w_same)
            preds["cloudfit"] = (fit_mod.shipped_predictions(fp, fm, held, lam)
                                 + fit_mod.shipped_predictions(fp_same, fm, held, lam)[:1])
            new = fit_mod.novel(prep, train, held)
            q = cal.log_quantiles if cal is not None else None
            slope = cal.jump_slope if cal is not None else 0.0
            scale = fit_mod.band_scale(fit_mod.anchor_jump(fp, fm, held), slope)
            scale_same = fit_mod.band_scale(fit_mod.anchor_jump(fp_same, fm, held), slope)
            for k, i in enumerate(held):
                rec = {"row": int(i), "group": g, "multi": bool(prep.multi[i]), "measured": float(prep.measured[i]),
                       "source": str(prep.table["source"][i]), "workload": str(prep.table["workload"][i]),
                       "new_workload": bool(new[k]),
                       "generation": generation(str(prep.table["accelerator"][i]))}
                for m in METHODS:
                    rec[m] = {kind: float(preds[m][j][k]) for j, kind in enumerate(KINDS)}
                if q is not None:
                    regime = "multi" if rec["multi"] else "single"
                    sc = {"anchored": scale[k], "stats-only": 1.0, "anchored-same-scale": scale_same[k]}
                    rec["band"] = {kind: [v * sc[kind] for v in
                                          q[fit_mod.band_key(f"{regime}-{BAND_OF_KIND[kind]}", new[k])]]
                                   for kind in KINDS}
                    if cal.source_quantiles:  # as predict_many ships it: the leave-one-source-out band
                        rec["band"]["stats-only"] = list(cal.source_quantiles[f"{regime}-stats-only"])
                recs.append(rec)
            if progress:
                progress(f"{SCHEMES[scheme]}: held out {g} ({len(held)} rows)")
        report["schemes"][scheme] = summarize(recs)
        if keep_records:
            report.setdefault("records", {})[scheme] = recs
    return report


def to_frame(report: dict[str, Any], scheme: str = "accelerator", kind: str = "anchored"):
    """Held-out predictions of one scheme as a DataFrame (needs ``run(keep_records=True)``).

    Columns: row, group (the held-out accelerator or model family), workload, source, multi,
    measured, predicted (cloudfit), low/high (its 10–90% band, where calibrated), ape, and one
    ``<method>`` column per baseline. Rows without a prediction of this ``kind`` are left out.
    """
    import pandas as pd

    recs = report.get("records", {}).get(scheme)
    if recs is None:
        raise ValueError(f"the report holds no records for {scheme!r}: run(keep_records=True, schemes=(…, {scheme!r}))")
    rows = []
    for r in recs:
        pred = r["cloudfit"].get(kind, math.nan)
        if math.isnan(pred):
            continue
        row = {k: r[k] for k in ("row", "group", "workload", "source", "multi", "measured")}
        row["predicted"] = pred
        if "band" in r:
            row["low"], row["high"] = pred * math.exp(r["band"][kind][0]), pred * math.exp(r["band"][kind][1])
        row["ape"] = abs(pred - r["measured"]) / r["measured"]
        row.update({m: r[m][kind] for m in METHODS if m != "cloudfit"})
        rows.append(row)
    return pd.DataFrame(rows)


def _ape(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return np.abs(pred - meas) / meas


def summarize(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per regime (single/multi × anchored/stats-only): MAPE, median APE and n per method, band
    coverage for cloudfit, and the same per held-out group."""
    out: dict[str, Any] = {}
    for multi in (False, True):
        for kind in KINDS:
            regime = f"{'multi' if multi else 'single'}-{kind}"
            sel = [r for r in recs if r["multi"] == multi and not math.isnan(r["cloudfit"].get(kind, math.nan))]
            if not sel:
                continue
            out[regime] = _block(sel, kind)
            groups = sorted({r["group"] for r in sel})
            out[regime]["groups"] = {g: _block([r for r in sel if r["group"] == g], kind) for g in groups}
            gens = sorted({r["generation"] for r in sel if "generation" in r}, key=GENERATIONS.index)
            if gens:
                out[regime]["generations"] = {g: _block([r for r in sel if r.get("generation") == g], kind) for g in gens}
            sources = sorted({r["source"] for r in sel})
            out[regime]["sources"] = {g: _block([r for r in sel if r["source"] == g], kind) for g in sources}
    return out


def _block(sel: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    meas = np.array([r["measured"] for r in sel])
    blk: dict[str, Any] = {"n": len(sel)}
    for m in METHODS:
        pred = np.array([r[m][kind] for r in sel])
        ape = _ape(pred, meas)
        blk[m] = {"mape": float(np.mean(ape)), "mdape": float(np.median(ape))}
    if "band" in sel[0]:
        pred = np.array([r["cloudfit"][kind] for r in sel])
        lo = np.array([r["band"][kind][0] for r in sel])
        hi = np.array([r["band"][kind][1] for r in sel])
        inside = (meas >= pred * np.exp(lo)) & (meas <= pred * np.exp(hi))
        blk["coverage"] = float(np.mean(inside))
    return blk
