"""Fit the performance model and its calibrated band; write the shipped model file.

Three fitted pieces, all refitted without the held-out group inside ``cloudfit model eval``:

1. **Prior calibration** (:func:`calibrate_prior`): the prior's tensor-core share κ and memory efficiency
   are chosen on a grid to best explain how throughput moves *between accelerators* (anchor pairs).
2. **Learned correction** ``f``: xgboost on ``log(measured / prior)`` over spec, stats and configuration
   features (``cloudfit.perf.features``), monotone in every hardware feature.
3. **Calibration** (:func:`calibrate`), from grouped out-of-fold predictions (leave-one-accelerator-out
   and leave-one-model-family-out): λ, the share of ``f`` anchored predictions keep, and the conformal
   10–90% quantiles per regime (raw quantile models under-cover on unseen models and accelerators —
   DESIGN.md, known traps).

Predictions (``cloudfit.perf.model``): stats-only ``prior(q)·exp(f(q))``; anchored on a profile's
measurements ``a``: ``prior(q)·exp(λf(q))`` × mean over anchors of ``measured(a) / (prior(a)·exp(λf(a)))``
— the profile's own efficiency carried across hardware op-class by op-class through the roofline
(Habitat's idea).

Determinism: rows in file order, ``nthread=1``, fixed seeds, grids instead of random search, floats
written with ``repr``; two fits produce byte-identical files (tested).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from cloudfit.errors import ModelError
from cloudfit.perf import data as data_mod
from cloudfit.perf import features, prior
from cloudfit.perf.trees import Forest, export_booster
from cloudfit.types import OP_CLASSES

SCHEMA_VERSION = 1
REGIMES = ("single-anchored", "single-stats-only", "multi-anchored", "multi-stats-only")
ALPHA_LOW, ALPHA_HIGH = 0.10, 0.90

XGB_PARAMS: dict[str, Any] = {
    "objective": "reg:pseudohubererror",
    "huber_slope": 0.5,
    "eta": 0.05,
    "max_depth": 4,
    "min_child_weight": 3.0,
    "subsample": 0.8,
    "colsample_bynode": 0.8,
    "lambda": 1.0,
    "tree_method": "hist",
    "nthread": 1,
    "seed": 20261122,
    "base_score": 0.0,
}
N_ROUNDS = 300


# --------------------------------------------------------------------------------------------
# The training set, prepared once


@dataclass(frozen=True)
class Prepared:
    table: data_mod.Table
    work: prior.Work
    setup: prior.Setup
    framework_tf: np.ndarray
    constants: dict[str, float]  # prior constants the arrays below were computed with
    X: np.ndarray
    y: np.ndarray  # log(measured / prior)
    prior_sps: np.ndarray
    measured: np.ndarray
    multi: np.ndarray  # bool: more than one device
    anchors: list[np.ndarray]  # per row: indices of anchor rows (other accelerators)
    weight: np.ndarray
    aux: dict[str, np.ndarray]  # raw quantities the baselines use (peak, flops, params, batch, devices, nodes)


def prepare(table: data_mod.Table | None = None, constants: dict[str, float] | None = None) -> Prepared:
    t = table or data_mod.load_table()
    work, setup, tf = data_mod.table_inputs(t)
    measured = t["samples_per_second"]
    multi = (t["count"] * t["nodes"]) > 1
    tensor = [i for i, c in enumerate(OP_CLASSES) if c in prior.TENSOR]
    aux = {"peak_tflops": setup.peak_tflops, "mem_bw_gbps": setup.mem_bw_gbps, "flops_per_sample": work.flops[:, tensor].sum(1),
           "parameters": work.parameters, "batch": setup.batch, "devices": setup.count * setup.nodes,
           "nodes": setup.nodes}
    base = Prepared(t, work, setup, tf, {}, np.zeros((0, 0)), np.zeros(0), np.zeros(0), measured, multi,
                    anchor_candidates(t), row_weights(t), aux)
    return with_constants(base, constants or dict(prior.CONSTANTS))


def with_constants(prep: Prepared, constants: dict[str, float]) -> Prepared:
    """The same rows with the prior (and so the target and features) recomputed under ``constants``."""
    p = prior.prior(prep.work, prep.setup, constants)
    X = features.feature_matrix(prep.work, prep.setup, p, prep.framework_tf)
    y = np.log(prep.measured / p.samples_per_second)
    return dataclasses.replace(prep, constants=dict(constants), X=X, y=y, prior_sps=p.samples_per_second)


#: Prior constants calibrated on the training rows, and the values searched (deterministic).
CALIBRATED = {
    "tensor_core_share": (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    "eta_mem": (0.1, 0.15, 0.2, 0.3, 0.4, 0.6, 0.8, 1.2, 1.6, 2.4),
}


def calibrate_prior(prep: Prepared, rows: np.ndarray) -> dict[str, float]:
    """Prior constants that best explain how throughput moves between accelerators on ``rows``:
    grid search over :data:`CALIBRATED` minimising the mean |log error| of prior ratios over
    anchor pairs (same source, workload, precision and batch on two accelerators). Only relative
    hardware scaling enters, so the workloads' absolute efficiencies (left to the learned correction)
    cannot bias it."""
    inside = np.zeros(len(prep.measured), bool)
    inside[rows] = True
    q_idx, a_idx = [], []
    for i in rows:
        for j in prep.anchors[i]:
            if inside[j]:
                q_idx.append(i)
                a_idx.append(j)
    c = dict(prior.CONSTANTS)
    if not q_idx:
        return c
    used = np.unique(np.concatenate([q_idx, a_idx]))
    pos = np.full(len(prep.measured), -1)
    pos[used] = np.arange(len(used))
    q, a = pos[np.array(q_idx)], pos[np.array(a_idx)]
    work = prior.Work(prep.work.flops[used], prep.work.bytes[used], prep.work.parameters[used],
                      prep.work.gradient_bytes[used], prep.work.activation_bytes[used])
    setup = prior.Setup(*(np.asarray(getattr(prep.setup, f.name))[used] for f in dataclasses.fields(prior.Setup)))
    target = np.log(prep.measured[used][q] / prep.measured[used][a])

    def error(cc: dict[str, float]) -> float:
        sps = prior.prior(work, setup, cc).samples_per_second
        return float(np.mean(np.abs(target - np.log(sps[q] / sps[a]))))

    best = (error(c), c)
    keys = sorted(CALIBRATED)
    for values in itertools.product(*(CALIBRATED[k] for k in keys)):
        trial = dict(c, **dict(zip(keys, values)))
        e = error(trial)
        if e < best[0] - 1e-12:
            best = (e, trial)
    return best[1]


def prepare_for(prep: Prepared, rows: np.ndarray) -> Prepared:
    """``prep`` with the prior calibrated on ``rows`` only (what a fold may learn from)."""
    return with_constants(prep, calibrate_prior(prep, rows))


def row_weights(t: data_mod.Table) -> np.ndarray:
    """Each (source, workload) group weighs about the same whatever its row count (√ damping)."""
    keys = [f"{s}|{w}" for s, w in zip(t["source"], t["workload"])]
    counts: dict[str, int] = {}
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
    w = np.array([1.0 / math.sqrt(counts[k]) for k in keys])
    return w / w.mean()


def anchor_candidates(t: data_mod.Table) -> list[np.ndarray]:
    """For each row, the single-device rows of the same source, workload and precision on *another*
    accelerator, at the nearest batch size: what a profile measured elsewhere would hold."""
    n = len(t)
    single = (t["count"] * t["nodes"]) == 1
    key = [f"{s}|{w}|{p}" for s, w, p in zip(t["source"], t["workload"], t["precision"])]
    by_key: dict[str, list[int]] = {}
    for i in range(n):
        if single[i]:
            by_key.setdefault(key[i], []).append(i)
    lb = np.log(t["batch_per_device"])
    out = []
    for i in range(n):
        cand = [j for j in by_key.get(key[i], []) if t["accelerator"][j] != t["accelerator"][i]]
        if cand:
            d = np.abs(lb[cand] - lb[i])
            cand = [c for c, dd in zip(cand, d) if dd <= d.min() + 1e-9]
        out.append(np.array(sorted(cand), dtype=int))
    return out


# --------------------------------------------------------------------------------------------
# Fitting


def fit_forest(X: np.ndarray, y: np.ndarray, w: np.ndarray, *, params: dict[str, Any] | None = None,
               rounds: int = N_ROUNDS) -> Forest:
    """Train the xgboost correction and export it as a numpy :class:`Forest`."""
    return Forest.from_dict(fit_forest_dict(X, y, w, params=params, rounds=rounds))


def fit_forest_dict(X, y, w, *, params=None, rounds: int = N_ROUNDS) -> dict[str, Any]:
    try:
        import xgboost as xgb
    except ImportError as e:  # pragma: no cover - xgboost is a dependency
        raise ModelError("fitting needs xgboost (pip install xgboost-cpu)") from e
    prm = dict(XGB_PARAMS if params is None else params)
    prm["monotone_constraints"] = "(" + ",".join(str(m) for m in features.MONOTONE) + ")"
    dtrain = xgb.DMatrix(np.asarray(X, dtype=np.float32), label=np.asarray(y, dtype=np.float32),
                         weight=np.asarray(w, dtype=np.float32), feature_names=list(features.FEATURE_NAMES))
    booster = xgb.train(prm, dtrain, num_boost_round=rounds)
    return export_booster(booster)


def predictions(prep: Prepared, base: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(anchored, stats-only) predicted samples/s for ``rows`` from a model's stats-only prediction
    ``base`` for every row of the table. Anchored combines the row's anchors exactly as prediction
    does (:func:`cloudfit.perf.model.combine_anchors`); it is NaN where a row has no anchor."""
    from cloudfit.perf.model import combine_anchors

    stats_only = base[rows]
    anchored = np.full(len(rows), np.nan)
    lbt = np.log(prep.aux["batch"])
    for k, i in enumerate(rows):
        a = prep.anchors[i]
        if len(a):
            pred, _ = combine_anchors(base[i:i + 1], lbt[i:i + 1], np.log(prep.measured[a] / base[a]), lbt[a])
            anchored[k] = pred[0]
    return anchored, stats_only


# --------------------------------------------------------------------------------------------
# Grouped cross-validation splits


def group_folds(prep: Prepared, rows: np.ndarray, scheme: str) -> list[tuple[str, np.ndarray]]:
    """(group name, held-out rows) for leave-one-accelerator-out or leave-one-model-family-out."""
    col = {"accelerator": "accelerator", "model": "model_group"}[scheme]
    vals = prep.table[col][rows]
    return [(g, rows[vals == g]) for g in sorted(set(vals))]


LAMBDA_GRID = tuple(round(0.1 * i, 1) for i in range(11))
LAMBDA_MARGIN = 0.01  # absolute MAPE a λ > 0 must win by, in each scheme


@dataclass(frozen=True)
class Calibration:
    """What the inner grouped CV decides: how much of the learned correction anchored predictions
    keep (λ per single/multi-device), and the band's conformal log-quantiles per regime."""

    anchor_lambda: dict[str, float]  # "single" / "multi" → λ
    log_quantiles: dict[str, list[float]]
    residual_counts: dict[str, int]


def calibrate(prep: Prepared, rows: np.ndarray, *, params=None, rounds: int = N_ROUNDS,
              progress: Callable[[str], None] | None = None) -> Calibration:
    """Grouped out-of-fold predictions over ``rows`` (leave-one-accelerator-out and leave-one-model-
    family-out): choose λ, the share of the correction that anchored predictions keep
    (``prior·exp(λ·f)`` as the base on both ends), by out-of-fold MAPE; then take the conformal
    quantiles of the out-of-fold log residuals per regime."""
    # (scheme, held-out rows, stats-only prediction and prior for every row); each fold calibrates its prior
    folds: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] = []
    for scheme in ("accelerator", "model"):
        for g, held in group_folds(prep, rows, scheme):
            train = np.setdiff1d(rows, held)
            if len(train) < 20:
                continue
            fp = prepare_for(prep, train)
            forest = fit_forest(fp.X[train], fp.y[train], fp.weight[train], params=params, rounds=rounds)
            folds.append((scheme, held, fp.prior_sps * np.exp(forest.predict(fp.X)), fp.prior_sps))
            if progress:
                progress(f"{scheme}:{g}")
    # λ: minimise the worse of the two schemes' out-of-fold MAPE, and keep λ > 0 only if it beats λ = 0
    # by LAMBDA_MARGIN in *both* schemes (the correction must earn its place in anchored predictions).
    lam: dict[str, float] = {}
    for multi, key in ((False, "single"), (True, "multi")):
        scores: dict[float, dict[str, float]] = {}
        for la in LAMBDA_GRID:
            ape: dict[str, list[float]] = {"accelerator": [], "model": []}
            for scheme, held, full, pri in folds:
                anch, _ = predictions(prep, pri * (full / pri) ** la, held)
                sel = ~np.isnan(anch) & (prep.multi[held] == multi)
                ape[scheme].extend(np.abs(anch[sel] / prep.measured[held][sel] - 1).tolist())
            scores[la] = {k: float(np.mean(v)) for k, v in ape.items() if v}
        zero = scores[0.0]
        best = 0.0
        for la in LAMBDA_GRID[1:]:
            sc = scores[la]
            if sc and all(sc[k] <= zero[k] - LAMBDA_MARGIN for k in sc) and max(sc.values()) < max(scores[best].values()) - 1e-12:
                best = la
        lam[key] = best
    res: dict[str, list[float]] = {r: [] for r in REGIMES}
    for _, held, full, pri in folds:
        meas = prep.measured[held]
        stat = full[held]
        for multi in (False, True):
            key = "multi" if multi else "single"
            anch, _ = predictions(prep, pri * (full / pri) ** lam[key], held)
            sel = prep.multi[held] == multi
            ok = sel & ~np.isnan(anch)
            res[f"{key}-anchored"].extend(np.log(meas[ok] / anch[ok]).tolist())
            res[f"{key}-stats-only"].extend(np.log(meas[sel] / stat[sel]).tolist())
    arr = {k: np.array(v) for k, v in res.items()}
    return Calibration(lam, conformal_quantiles(arr), {k: int(len(v)) for k, v in arr.items()})


def conformal_quantiles(res: dict[str, np.ndarray]) -> dict[str, list[float]]:
    """Finite-sample split-conformal 10% and 90% quantiles of each regime's residuals; a regime with
    few residuals borrows the pooled ones of its kind."""
    out = {}
    for r in REGIMES:
        v = res.get(r, np.array([]))
        if len(v) < 10:
            kind = r.split("-", 1)[1]
            v = np.concatenate([res[k] for k in REGIMES if k.endswith(kind)] + [np.array([])])
        if len(v) == 0:
            v = np.concatenate(list(res.values()))
        out[r] = [conformal_quantile(v, ALPHA_LOW), conformal_quantile(v, ALPHA_HIGH)]
    return out


def conformal_quantile(v: np.ndarray, level: float) -> float:
    v = np.sort(np.asarray(v, dtype=float))
    n = len(v)
    if level >= 0.5:
        k = min(n - 1, math.ceil((n + 1) * level) - 1)
    else:
        k = max(0, math.floor((n + 1) * level) - 1)
    return float(v[k])


# --------------------------------------------------------------------------------------------
# The shipped model file


def default_model_path() -> Path:
    return Path(__file__).resolve().parent / "model.json"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fit_model(*, measurements: Path | None = None, stats: Path | None = None,
              progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Fit on every shipped measurement; return the model document (see :func:`write_model`)."""
    from cloudfit.resources import shipped

    mpath = measurements or shipped("data/measurements.csv")
    spath = stats or shipped("data/workload_stats.json")
    prep = prepare(data_mod.load_table(mpath, spath))
    rows = np.arange(len(prep.y))
    prep = prepare_for(prep, rows)
    booster = fit_forest_dict(prep.X[rows], prep.y[rows], prep.weight[rows])
    cal = calibrate(prep, rows, progress=progress)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "cloudfit performance model: roofline + communication prior × xgboost correction",
        "features": [{"name": n, "monotone": m} for n, m in features.FEATURES],
        "prior_constants": {k: prep.constants[k] for k in sorted(prep.constants)},
        "xgboost_params": {k: XGB_PARAMS[k] for k in sorted(XGB_PARAMS)},
        "rounds": N_ROUNDS,
        "anchor_lambda": cal.anchor_lambda,
        "band": {"levels": [ALPHA_LOW, ALPHA_HIGH], "log_quantiles": cal.log_quantiles,
                 "residuals": cal.residual_counts,
                 "method": "split-conformal on grouped out-of-fold residuals (leave-one-accelerator-out + "
                           "leave-one-model-family-out)"},
        "training": {"rows": int(len(rows)), "measurements_sha256": digest(mpath), "stats_sha256": digest(spath)},
        "forest": booster,
    }


def dumps(doc: dict[str, Any]) -> str:
    """Stable text: sorted keys, repr floats (shortest round-trip), no whitespace variation."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n"


def write_model(doc: dict[str, Any], path: Path | None = None) -> Path:
    """Atomically write the model document (tempfile + os.replace)."""
    path = path or default_model_path()
    text = dumps(doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path
