"""Fit the performance model and its calibrated band; write the shipped model file.

Three fitted pieces, all refitted without the held-out group inside ``cloudfit model eval``:

1. **Prior calibration** (:func:`calibrate_prior`): the prior's tensor-core share κ and memory efficiency
   are chosen on a grid to best explain how throughput moves *between accelerators* (anchor pairs), its
   parameter-server per-step overhead how it moves *with the batch and the model's size* (overhead
   pairs), then its
   communication constants (overlap, tail, network efficiency, server CPU time) how it moves *with devices*.
2. **Learned correction** ``f``: xgboost on ``log(measured / prior)`` over spec, stats and configuration
   features (``cloudfit.perf.features``), monotone in every hardware feature.
3. **Calibration** (:func:`calibrate`), from grouped out-of-fold predictions (leave-one-accelerator-out
   and leave-one-model-family-out) made through the shipped predict path (:func:`shipped_predictions`:
   anchors, λ, linear-scaling cap): λ, the share of ``f`` anchored predictions keep, and the conformal
   10–90% quantiles per regime and per workload novelty (a workload whose stats signature is in the
   training set, or a new one), anchored bands normalised by the hardware jump from the anchors (raw
   quantile models under-cover on unseen models and accelerators — DESIGN.md, known traps).

Predictions (``cloudfit.perf.model``): stats-only ``prior(q)·exp(f(q))``; anchored on a profile's
measurements ``a``: ``prior(q)·exp(λf(q))`` × mean over anchors of ``measured(a) / (prior(a)·exp(λf(a)))``
— the profile's own efficiency carried across hardware op-class by op-class through the roofline
(Habitat's idea).

Determinism: rows in file order, ``nthread=1``, fixed seeds, grids instead of random search, floats
written with ``repr``; two fits produce byte-identical files (tested).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from cloudfit.catalog import hardware, network
from cloudfit.errors import ModelError
from cloudfit.perf import data as data_mod
from cloudfit.perf import features, prior
from cloudfit.perf.trees import Forest, export_booster
from cloudfit.types import OP_CLASSES

SCHEMA_VERSION = 3
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
    anchor_weights: np.ndarray  # (n, n): row i's normalised weights over its anchors (all zero: no anchor)
    signature: np.ndarray  # (n, k): batch-free workload signature (features.signature) per row
    #: The one-node (rows 0..n-1) and one-device (rows n..2n-1) versions of every row, as the shipped
    #: predict path builds them for its linear-scaling cap (``model._cap_scaling``); None inside itself.
    variants: "Prepared | None" = None
    #: per multi-device row: the same workload's single-device rows on the *same* accelerator (nearest batch)
    scaling_pairs: list[np.ndarray] = dataclasses.field(default_factory=list)
    #: per row: rows of the same setup at another batch size, and (single device) of another workload
    #: on the same accelerator in the same source — what the per-step overhead is calibrated on
    overhead_pairs: list[np.ndarray] = dataclasses.field(default_factory=list)


def prepare(table: data_mod.Table | None = None, constants: dict[str, float] | None = None, *,
            with_variants: bool = True) -> Prepared:
    t = table or data_mod.load_table()
    work, setup, tf = data_mod.table_inputs(t, kernel_tables())
    measured = t["samples_per_second"]
    multi = (t["count"] * t["nodes"]) > 1
    tensor = [i for i, c in enumerate(OP_CLASSES) if c in prior.TENSOR]
    aux = {"peak_tflops": setup.peak_tflops, "mem_bw_gbps": setup.mem_bw_gbps, "flops_per_sample": work.flops[:, tensor].sum(1),
           "parameters": work.parameters, "batch": setup.batch, "devices": setup.count * setup.nodes,
           "nodes": setup.nodes}
    if with_variants:
        anchors = anchor_candidates(t)
        W, variants = anchor_weight_matrix(anchors, np.log(setup.batch), np.log(setup.count)), _prepare_variants(t)
    else:  # the variants themselves: predicted from their row's anchors, never anchors themselves
        anchors, W, variants = [np.zeros(0, dtype=int)] * len(t), np.zeros((0, 0)), None
    base = Prepared(t, work, setup, tf, {}, np.zeros((0, 0)), np.zeros(0), np.zeros(0), measured, multi,
                    anchors, row_weights(t), aux, W, features.signature(work), variants,
                    anchor_candidates(t, same_accelerator=True) if with_variants else [],
                    overhead_pairs(t) if with_variants else [])
    return with_constants(base, constants or dict(prior.CONSTANTS))


@functools.lru_cache(maxsize=1)
def kernel_tables():
    """The kernel-efficiency tables (``cloudfit.perf.kernels.shipped_tables``), computed once per process:
    a separate data set, so every fold of the evaluation uses the same tables."""
    from cloudfit.perf import kernels

    return kernels.shipped_tables()


def _prepare_variants(t: data_mod.Table) -> Prepared:
    """Rows 0..n-1: every row on one node (same devices per node); rows n..2n-1: on one device. Like
    ``model._variant``: the same accelerator, batch, precision and parallelism, no inter-node link."""
    n = len(t)
    v = t.take(np.concatenate([np.arange(n), np.arange(n)]))
    cols = dict(v.columns)
    one_dev = np.arange(2 * n) >= n
    cols["count"] = np.where(one_dev, 1.0, v["count"])
    cols["nodes"] = np.ones(2 * n)
    cols["network_gbps"] = np.full(2 * n, np.nan)
    cols["intra_gbps"] = np.where(one_dev, np.nan, v["intra_gbps"])
    return prepare(data_mod.Table(cols, t.stats), with_variants=False)


def anchor_weight_matrix(anchors: list[np.ndarray], log_batch: np.ndarray,
                         log_count: np.ndarray | None = None) -> np.ndarray:
    """Dense (n, n) matrix W with W[i, a] = the weight of anchor a in row i's anchored prediction,
    exactly as ``predict_many`` weighs them (:func:`cloudfit.perf.model.anchor_weights`, by batch and by
    devices per node); so an anchored prediction is ``base_i · exp(W[i] @ log(measured / base))``.

    Exact for the regimes evaluated, where each row's anchors share one device count (single-device runs,
    or runs at the row's own devices × nodes): then the device term and the multi-node envelope of
    ``model.anchor_shift`` change nothing, and the row's one-node and one-device variants weigh its
    anchors as the row does."""
    from cloudfit.perf.model import anchor_weights

    n = len(anchors)
    W = np.zeros((n, n))
    for i, a in enumerate(anchors):
        if len(a):
            counts = (None, None) if log_count is None else (log_count[i:i + 1], log_count[a])
            W[i, a] = anchor_weights(log_batch[i:i + 1], log_batch[a], *counts)[0]
    return W


def with_constants(prep: Prepared, constants: dict[str, float]) -> Prepared:
    """The same rows with the prior (and so the target and features) recomputed under ``constants``."""
    p = prior.prior(prep.work, prep.setup, constants)
    X = features.feature_matrix(prep.work, prep.setup, p, prep.framework_tf)
    y = np.log(prep.measured / p.samples_per_second)
    v = with_constants(prep.variants, constants) if prep.variants is not None else None
    return dataclasses.replace(prep, constants=dict(constants), X=X, y=y, prior_sps=p.samples_per_second, variants=v)


#: Prior constants calibrated on the training rows, and the values searched (deterministic).
CALIBRATED = {
    "tensor_core_share": (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    "eta_mem": (0.1, 0.15, 0.2, 0.3, 0.4, 0.6, 0.8, 1.2, 1.6, 2.4),
}
#: Per-step overhead under parameter servers (seconds at 1000 GB/s; see ``prior``), calibrated second on
#: :func:`overhead_pairs`. The general ``step_overhead_s`` stays 0: calibrated the same way it came out
#: at 10 ms, made every held-out regime worse (bench/RESULTS_perf.md) and predicted a tiny MLP slower on
#: a T4 than on this machine's CPU — a real per-step cost grows with the number of kernels, which the
#: model stats do not count.
CALIBRATED_OVERHEAD = {
    "ps_overhead_s": (0.0, 0.005, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12),
}
#: Communication constants, calibrated last on data-parallel scaling (see :func:`calibrate_prior`).
CALIBRATED_COMM = {
    "backward_share": (0.0, 1.0 / 3.0, 2.0 / 3.0),
    "tail": (0.1, 0.2, 0.4, 1.0),
    "eta_net": (0.5, 0.85),
    "ps_server_overhead_s": (0.0, 0.002, 0.005, 0.01, 0.02, 0.04),
}


def calibrate_prior(prep: Prepared, rows: np.ndarray) -> dict[str, float]:
    """Prior constants that best explain how throughput moves on ``rows``, by grid search (mean |log
    error| of prior *ratios*, so the workloads' absolute efficiencies — left to the learned correction —
    cannot bias them):

    1. :data:`CALIBRATED` (κ, η_mem) on how throughput moves *between accelerators*: anchor pairs (same
       source, workload, precision and batch, single device, two accelerators);
    2. then :data:`CALIBRATED_OVERHEAD` (the per-step overhead of parameter-server training) on how it
       moves *with the batch and the model size*: :func:`overhead_pairs` (the same setup at two batch
       sizes; two workloads of one source on one accelerator). The grid holds 0, so the data may
       choose no overhead;
    3. then :data:`CALIBRATED_COMM` (overlap, tail, network efficiency, parameter-server CPU time) on how
       it moves *with devices*: scaling pairs (a multi-device row and the same workload's single-device
       row on the same accelerator, same source and precision, nearest batch).
    """
    c = dict(prior.CONSTANTS)
    pairs = _pairs(prep.anchors, rows)
    c = _grid_search(prep, pairs, c, CALIBRATED, weights=per_accelerator_weights(prep.table["accelerator"][pairs[0]]))
    c = _grid_search(prep, _pairs(prep.overhead_pairs, rows), c, CALIBRATED_OVERHEAD)
    return _grid_search(prep, _pairs(prep.scaling_pairs, rows), c, CALIBRATED_COMM)


def per_accelerator_weights(accelerators: np.ndarray) -> np.ndarray:
    """Pair weights under which every query accelerator counts the same in the cross-accelerator
    calibration, however many pairs its rows make: the data hold ~1,000 K80 pairs (three TensorFlow-era
    sources) against ~100 per Ampere/Hopper GPU, and an unweighted mean let the K80's rows set the
    memory efficiency that decides how Ampere and Hopper compare (bench/RESULTS_perf.md, "This round")."""
    acc = np.asarray([hardware.accelerator_of(a) for a in accelerators], dtype=object)  # boards count as their GPU
    if not len(acc):
        return np.ones(0)
    names, inverse, counts = np.unique(acc.astype(str), return_inverse=True, return_counts=True)
    w = 1.0 / counts[inverse]
    return w / w.mean()


def _pairs(partners: list[np.ndarray], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(query, partner) index pairs with both ends inside ``rows``."""
    inside = np.zeros(len(partners), bool)
    inside[rows] = True
    q_idx, a_idx = [], []
    for i in rows:
        for j in partners[i]:
            if inside[j]:
                q_idx.append(i)
                a_idx.append(j)
    return np.array(q_idx, dtype=int), np.array(a_idx, dtype=int)


def _grid_search(prep: Prepared, pairs: tuple[np.ndarray, np.ndarray], c: dict[str, float],
                 grid: dict[str, tuple[float, ...]], weights: np.ndarray | None = None) -> dict[str, float]:
    """The grid point with the least (weighted) mean |log error| of the prior's ratios over ``pairs``."""
    q_idx, a_idx = pairs
    if not len(q_idx):
        return c
    used = np.unique(np.concatenate([q_idx, a_idx]))
    pos = np.full(len(prep.measured), -1)
    pos[used] = np.arange(len(used))
    q, a = pos[q_idx], pos[a_idx]
    work = prior.Work(prep.work.flops[used], prep.work.bytes[used], prep.work.parameters[used],
                      prep.work.gradient_bytes[used], prep.work.activation_bytes[used], prep.work.kernels[used])
    setup = prior.Setup(*(None if getattr(prep.setup, f.name) is None else np.asarray(getattr(prep.setup, f.name))[used]
                          for f in dataclasses.fields(prior.Setup)))
    target = np.log(prep.measured[used][q] / prep.measured[used][a])

    def error(cc: dict[str, float]) -> float:
        sps = prior.prior(work, setup, cc).samples_per_second
        return float(np.average(np.abs(target - np.log(sps[q] / sps[a])), weights=weights))

    best = (error(c), c)
    keys = sorted(grid)
    for values in itertools.product(*(grid[k] for k in keys)):
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


def anchor_candidates(t: data_mod.Table, *, same_accelerator: bool = False,
                      same_scale: bool = False) -> list[np.ndarray]:
    """For each row, the single-device rows of the same source, workload and precision on *another*
    accelerator, at the nearest batch size: what a profile measured elsewhere would hold.

    ``same_accelerator``: instead, for each multi-device row, those on its *own* accelerator (the
    scaling pairs the communication constants are calibrated on); none for single-device rows.

    ``same_scale``: instead, for each multi-device row, the rows on another accelerator at the *same*
    devices per node, nodes, parallelism and parameter servers (same source, workload and precision;
    nearest batch): a profile that measured the query's scale elsewhere, whose measured scaling the
    anchor then carries (multi-node ones with their own network, which the table holds); none for
    single-device rows."""
    n = len(t)
    single = (t["count"] * t["nodes"]) == 1
    key = [f"{s}|{w}|{p}" for s, w, p in zip(t["source"], t["workload"], t["precision"])]
    if same_scale:
        key = [f"{k}|{t['count'][i]:g}|{t['nodes'][i]:g}|{t['parallelism'][i]}|{t['ps_count'][i]}"
               for i, k in enumerate(key)]
    by_key: dict[str, list[int]] = {}
    for i in range(n):
        if single[i] != same_scale:
            by_key.setdefault(key[i], []).append(i)
    lb = np.log(t["batch_per_device"])
    gpu = [hardware.accelerator_of(a) for a in t["accelerator"]]  # another *accelerator*: never a twin board
    out = []
    for i in range(n):
        if same_accelerator:
            cand = [j for j in by_key.get(key[i], []) if t["accelerator"][j] == t["accelerator"][i] and not single[i]]
        elif same_scale:
            cand = [j for j in by_key.get(key[i], []) if gpu[j] != gpu[i] and not single[i]]
        else:
            cand = [j for j in by_key.get(key[i], []) if gpu[j] != gpu[i]]
        if cand:
            d = np.abs(lb[cand] - lb[i])
            cand = [c for c, dd in zip(cand, d) if dd <= d.min() + 1e-9]
        out.append(np.array(sorted(cand), dtype=int))
    return out


def overhead_pairs(t: data_mod.Table) -> list[np.ndarray]:
    """For each row, the partners (later rows only, so each pair counts once) that show the per-step
    overhead: the same source, workload, accelerator, precision and parallel setup at another batch
    size (a fixed cost per step makes throughput saturate with the batch), and — single device — another
    workload in the same source on the same accelerator at the same precision (a fixed cost per step
    makes small models run far below their roofline, large ones close to it)."""
    n = len(t)
    single = (t["count"] * t["nodes"]) == 1
    cols = [t[c] for c in ("source", "accelerator", "precision", "parallelism")]
    setup_key = ["|".join(str(c[i]) for c in cols) for i in range(n)]
    config = [f"{setup_key[i]}|{t['workload'][i]}|{t['count'][i]:g}|{t['nodes'][i]:g}|{t['ps_count'][i]}|"
              f"{t['network_gbps'][i]}|{t['ps_network_gbps'][i]}" for i in range(n)]
    by_config: dict[str, list[int]] = {}
    by_setup: dict[str, list[int]] = {}
    for i in range(n):
        by_config.setdefault(config[i], []).append(i)
        if single[i]:
            by_setup.setdefault(setup_key[i], []).append(i)
    out = []
    for i in range(n):
        batch = [j for j in by_config[config[i]] if j > i and t["batch_per_device"][j] != t["batch_per_device"][i]]
        other = [j for j in by_setup.get(setup_key[i], []) if single[i] and j > i and t["workload"][j] != t["workload"][i]]
        out.append(np.array(sorted(set(batch) | set(other)), dtype=int))
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
    does (``base × exp(Σ wₐ·log(measuredₐ / baseₐ))``, :func:`cloudfit.perf.model.anchor_weights`); it is NaN where a row has no anchor."""
    stats_only = base[rows]
    W = prep.anchor_weights[rows]
    has = W.sum(1) > 0
    anchored = np.where(has, stats_only * np.exp(W @ np.log(prep.measured / base)), np.nan)
    return anchored, stats_only


@dataclass(frozen=True)
class FoldModel:
    """What one fold's fitted model says about every row and its cap variants: the calibrated prior
    and the learned correction ``f`` (log), as arrays over the table."""

    prior_sps: np.ndarray
    f: np.ndarray
    prior_v: np.ndarray  # over prep.variants: one node (first n), one device (last n)
    f_v: np.ndarray


def fold_model(prep: Prepared, train: np.ndarray, *, params=None, rounds: int = N_ROUNDS) -> tuple[Prepared, FoldModel]:
    """Calibrate the prior and fit the correction on ``train`` only; evaluate both on every row."""
    fp = prepare_for(prep, train)
    forest = fit_forest(fp.X[train], fp.y[train], fp.weight[train], params=params, rounds=rounds)
    v = fp.variants
    return fp, FoldModel(fp.prior_sps, forest.predict(fp.X), v.prior_sps, forest.predict(v.X))


def shipped_predictions(prep: Prepared, fm: FoldModel, rows: np.ndarray, lam: dict[str, float],
                        *, cap: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(anchored, stats-only) samples/s for ``rows`` exactly as ``model.predict_many`` computes them:
    stats-only ``prior·exp(λ_s·f)`` (λ_s = ``lam["stats"]``, 1 where absent); anchored ``prior·exp(λf)`` × the anchors' weighted ``measured /
    (prior·exp(λf))``, λ by single/multi-device; then the linear-scaling cap against the same
    prediction on one node and on one device."""
    n = len(prep.measured)
    v = prep.variants
    dev = prep.setup.count * prep.setup.nodes
    dev_v = v.setup.count * v.setup.nodes
    lam_q = np.where(dev > 1, lam["multi"], lam["single"])
    lam_v = np.where(dev_v > 1, lam["multi"], lam["single"])
    logm = np.log(prep.measured)
    W = prep.anchor_weights[rows]
    has = W.sum(1) > 0

    # Σ_a W[i,a]·(log measured_a − log prior_a − λ_i f_a), λ_i the query's λ: the same two sums for
    # the row and for its one-node and one-device variants
    w_over_prior, w_f = W @ (logm - np.log(fm.prior_sps)), W @ fm.f

    def anchored(log_prior_q, f_q, lam_rows):
        return np.where(has, np.exp(log_prior_q + lam_rows * f_q + (w_over_prior - lam_rows * w_f)), np.nan)

    launch = prior.launch_bound_sps(prep.work.kernels[rows], prep.setup.batch[rows], dev[rows])
    st = prep.setup  # the wire bound model.predict_many applies (issue 33; cloudfit/catalog/network.py)
    launch = np.minimum(launch, network.wire_bound_sps(prep.work.gradient_bytes[rows], st.count[rows], st.nodes[rows],
                                                       st.batch[rows], st.network_gbps[rows], st.intra_gbps[rows],
                                                       st.ps[rows]))
    anch = np.minimum(anchored(np.log(fm.prior_sps[rows]), fm.f[rows], lam_q[rows]), launch)
    lam_s = float(lam.get("stats", 1.0))
    stat = np.minimum(fm.prior_sps[rows] * np.exp(lam_s * fm.f[rows]), launch)
    if not cap:
        return anch, stat
    nodes = prep.setup.nodes[rows]
    devices = dev[rows]
    out = []
    for pred, kind in ((anch, "anchored"), (stat, "stats-only")):
        lim = []
        for off, mult in ((0, nodes), (n, devices)):
            idx = rows + off
            if kind == "anchored":
                base = anchored(np.log(fm.prior_v[idx]), fm.f_v[idx], lam_v[idx])
            else:
                base = fm.prior_v[idx] * np.exp(lam_s * fm.f_v[idx])
            lim.append(mult * base)
        capped = np.minimum(pred, np.minimum(lim[0], lim[1]))  # pred already within the launch bound
        out.append(np.where(devices > 1, capped, pred))
    return out[0], out[1]


def anchor_jump(prep: Prepared, fm: FoldModel, rows: np.ndarray) -> np.ndarray:
    """How far each row's hardware is from its anchors': Σₐ W[i,a]·|log(prior₁(i) / prior(a))|, with
    prior₁ the row's one-device prior (so device counts do not count as a jump); 0 without anchors.
    The anchored band widens with it (:func:`band_scale`), as ``model.predict_many`` does."""
    n = len(prep.measured)
    p1 = np.where(prep.multi[rows], fm.prior_v[n + rows], fm.prior_sps[rows])
    W = prep.anchor_weights[rows]
    return (W * np.abs(np.log(p1)[:, None] - np.log(fm.prior_sps)[None, :])).sum(1)


def band_scale(jump: np.ndarray, slope: float) -> np.ndarray:
    """Normalised-conformal scale of an anchored prediction's band: 1 + slope × jump."""
    return 1.0 + slope * np.asarray(jump, dtype=float)


JUMP_SLOPE_MAX = 2.0


def fit_jump_slope(abs_res: np.ndarray, jump: np.ndarray) -> float:
    """``slope`` in |log residual| ≈ a·(1 + slope·jump), by least squares on out-of-fold anchored
    residuals, clipped to [0, JUMP_SLOPE_MAX] (rounded: the model file must rebuild bit-for-bit)."""
    if len(abs_res) < 10 or np.ptp(jump) <= 0:
        return 0.0
    b, a = np.polyfit(jump, abs_res, 1)
    if a <= 0:
        return JUMP_SLOPE_MAX if b > 0 else 0.0
    return float(round(min(max(b / a, 0.0), JUMP_SLOPE_MAX), 3))


def novel(prep: Prepared, train: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Whether each of ``rows`` has a workload unlike every workload in ``train`` (by signature)."""
    return ~features.seen(prep.signature[rows], np.unique(prep.signature[train], axis=0))


# --------------------------------------------------------------------------------------------
# Grouped cross-validation splits


def group_folds(prep: Prepared, rows: np.ndarray, scheme: str) -> list[tuple[str, np.ndarray]]:
    """(group name, held-out rows) for leave-one-accelerator-out, leave-one-model-family-out or
    leave-one-source-out (a source is one stack: its framework, its kernels, its input pipeline)."""
    col = {"accelerator": "accelerator", "model": "model_group", "source": "source"}[scheme]
    vals = prep.table[col][rows]
    if scheme == "accelerator":  # a board variant is held out with its accelerator (hardware.BOARD_OF)
        vals = np.array([hardware.accelerator_of(a) for a in vals], dtype=object)
    return [(g, rows[vals == g]) for g in sorted(set(vals))]


LAMBDA_GRID = tuple(round(0.1 * i, 1) for i in range(11))
LAMBDA_MARGIN = 0.01  # absolute MAPE a λ > 0 must win by, in each scheme


@dataclass(frozen=True)
class Calibration:
    """What the inner grouped CV decides: how much of the learned correction anchored predictions
    keep (λ per single/multi-device), and the band's conformal log-quantiles per regime."""

    anchor_lambda: dict[str, float]  # "single" / "multi" → λ
    log_quantiles: dict[str, list[float]]  # anchored bands: of residual / band_scale (normalised)
    residual_counts: dict[str, int]
    jump_slope: float = 0.0
    #: per regime: 10/90% log quantiles of leave-one-accelerator-out residuals alone — the band of a prediction
    #: for an accelerator with no measured row (``model.predict_many`` widens to it)
    unmeasured_quantiles: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    #: the share of the learned correction a stats-only prediction keeps, chosen by leave-one-source-out: every
    #: profile cloudfit predicts comes from a stack (its own trainer, the user's code) that no training source is
    stats_lambda: float = 1.0
    #: "single-stats-only" / "multi-stats-only" → 10/90% log quantiles of the leave-one-source-out residuals at
    #: ``stats_lambda``: the band of a stats-only prediction for a stack the training table has never seen
    source_quantiles: dict[str, list[float]] = dataclasses.field(default_factory=dict)

    def shipped_lambda(self) -> dict[str, float]:
        """The λ dict :func:`shipped_predictions` takes: anchored single/multi, and stats-only."""
        return dict(self.anchor_lambda, stats=self.stats_lambda)


def calibrate_stats_lambda(prep: Prepared, rows: np.ndarray, *, params=None, rounds: int = N_ROUNDS,
                           progress: Callable[[str], None] | None = None) -> tuple[float, dict[str, list[float]]]:
    """(λ_s, band) of stats-only predictions for a stack the training table has never seen, by
    leave-one-source-out over ``rows``: each source's rows predicted by a model (prior calibration and
    correction) fitted on the other sources only — how a profile recorded by cloudfit's own trainer stands
    to the table. λ_s is the share of the correction kept (out-of-fold MAPE over :data:`LAMBDA_GRID`;
    λ_s > 0 must beat λ_s = 0 by :data:`LAMBDA_MARGIN`, as for anchored λ); the band is the split-conformal
    10/90% quantiles of those residuals at λ_s, single and multi-device apart. Not split by workload novelty
    as the in-distribution bands are: with five sources the residuals cluster by source, and a workload
    another source ran says little about this stack's speed (split so, the "seen" band held 12 of the 17
    H100 zoo truths, pooled 16; ``bench/RESULTS_zoo.md``). (1.0, {}) with fewer than two sources."""
    folds = []
    for g, held in group_folds(prep, rows, "source"):
        train = np.setdiff1d(rows, held)
        if len(train) < 20 or not len(held):
            continue
        _, fm = fold_model(prep, train, params=params, rounds=rounds)
        folds.append((held, fm, novel(prep, train, held)))
        if progress:
            progress(f"source:{g}")
    if len(folds) < 2:
        return 1.0, {}

    def residuals(la: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        res, multi, new = [], [], []
        for held, fm, nv in folds:
            _, stat = shipped_predictions(prep, fm, held, {"single": 0.0, "multi": 0.0, "stats": la})
            res.append(np.log(prep.measured[held] / stat))
            multi.append(prep.multi[held])
            new.append(nv)
        return np.concatenate(res), np.concatenate(multi), np.concatenate(new)

    mape = {la: float(np.mean(np.abs(np.exp(-residuals(la)[0]) - 1))) for la in LAMBDA_GRID}
    best = 0.0
    for la in LAMBDA_GRID[1:]:
        if mape[la] <= mape[0.0] - LAMBDA_MARGIN and mape[la] < mape[best] - 1e-12:
            best = la
    res, multi, _ = residuals(best)
    band = {}
    for key, sel in (("single-stats-only", ~multi), ("multi-stats-only", multi)):
        v = res[sel] if sel.sum() >= 10 else res
        band[key] = [conformal_quantile(v, ALPHA_LOW), conformal_quantile(v, ALPHA_HIGH)]
    return best, band


def calibrate(prep: Prepared, rows: np.ndarray, *, params=None, rounds: int = N_ROUNDS,
              progress: Callable[[str], None] | None = None) -> Calibration:
    """Grouped out-of-fold predictions over ``rows`` (leave-one-accelerator-out and leave-one-model-
    family-out), through the shipped path (:func:`shipped_predictions`, capped): choose λ, the share of
    the correction that anchored predictions keep, by out-of-fold MAPE — single-device first, then
    multi-device (whose cap uses the single-device λ); then the conformal quantiles of the out-of-fold
    log residuals per regime and per novelty (workload seen in the fold's training rows or new)."""
    folds: list[tuple[np.ndarray, np.ndarray, FoldModel, str]] = []
    for scheme in ("accelerator", "model"):
        for g, held in group_folds(prep, rows, scheme):
            train = np.setdiff1d(rows, held)
            if len(train) < 20:
                continue
            _, fm = fold_model(prep, train, params=params, rounds=rounds)
            folds.append((held, novel(prep, train, held), fm, scheme))
            if progress:
                progress(f"{scheme}:{g}")
    # λ: minimise the worse of the two schemes' out-of-fold MAPE, and keep λ > 0 only if it beats λ = 0
    # by LAMBDA_MARGIN in *both* schemes (the correction must earn its place in anchored predictions).
    lam = {"single": 0.0, "multi": 0.0}
    for multi, key in ((False, "single"), (True, "multi")):
        scores: dict[float, dict[str, float]] = {}
        for la in LAMBDA_GRID:
            trial = dict(lam, **{key: la})
            ape: dict[str, list[float]] = {"accelerator": [], "model": []}
            for held, _, fm, scheme in folds:
                anch, _ = shipped_predictions(prep, fm, held, trial, cap=multi)
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
    out = []
    for held, new, fm, scheme in folds:
        anch, stat = shipped_predictions(prep, fm, held, lam)
        out.append((held, new, anch, stat, anchor_jump(prep, fm, held), scheme))
    # The anchored band widens with the hardware jump from the anchors (normalised conformal).
    ok_all = [~np.isnan(a) for _, _, a, _, _, _ in out]
    slope = fit_jump_slope(np.concatenate([np.abs(np.log(prep.measured[h][ok] / a[ok]))
                                           for (h, _, a, _, _, _), ok in zip(out, ok_all)]),
                           np.concatenate([j[ok] for (_, _, _, _, j, _), ok in zip(out, ok_all)]))
    res: dict[str, list[float]] = {band_key(r, nv): [] for r in REGIMES for nv in (False, True)}
    unmeasured: dict[str, list[float]] = {r: [] for r in REGIMES}  # leave-one-accelerator-out residuals only
    for held, new, anch, stat, jump, scheme in out:
        meas = prep.measured[held]
        scale = band_scale(jump, slope)
        for multi in (False, True):
            key = "multi" if multi else "single"
            for nv in (False, True):
                sel = (prep.multi[held] == multi) & (new == nv)
                ok = sel & ~np.isnan(anch)
                res[band_key(f"{key}-anchored", nv)].extend((np.log(meas[ok] / anch[ok]) / scale[ok]).tolist())
                res[band_key(f"{key}-stats-only", nv)].extend(np.log(meas[sel] / stat[sel]).tolist())
                if scheme == "accelerator":
                    unmeasured[f"{key}-anchored"].extend((np.log(meas[ok] / anch[ok]) / scale[ok]).tolist())
                    unmeasured[f"{key}-stats-only"].extend(np.log(meas[sel] / stat[sel]).tolist())
    arr = {k: np.array(v) for k, v in res.items()}
    un = {k: [conformal_quantile(np.array(v), ALPHA_LOW), conformal_quantile(np.array(v), ALPHA_HIGH)]
          for k, v in unmeasured.items() if len(v)}
    stats_lam, source_q = calibrate_stats_lambda(prep, rows, params=params, rounds=rounds, progress=progress)
    return Calibration(lam, conformal_quantiles(arr), {k: int(len(v)) for k, v in arr.items()}, slope, un,
                       stats_lam, source_q)


def band_key(regime: str, new: bool) -> str:
    """Key of a band: regime (single/multi × anchored/stats-only) and whether the workload is new."""
    return f"{regime}|{'new' if new else 'seen'}"


def conformal_quantiles(res: dict[str, np.ndarray]) -> dict[str, list[float]]:
    """Finite-sample split-conformal 10% and 90% quantiles of each band's residuals (keys
    ``regime|seen`` / ``regime|new``); a band with few residuals borrows the pooled ones of its regime,
    then of its kind (anchored / stats-only)."""
    out = {}
    for key in sorted(res):
        regime = key.split("|")[0]
        v = res[key]
        if len(v) < 10:
            v = np.concatenate([res[k] for k in res if k.split("|")[0] == regime])
        if len(v) < 10:
            kind = regime.split("-", 1)[1]
            v = np.concatenate([res[k] for k in res if k.split("|")[0].endswith(kind)])
        if len(v) == 0:
            v = np.concatenate(list(res.values()))
        out[key] = [conformal_quantile(v, ALPHA_LOW), conformal_quantile(v, ALPHA_HIGH)]
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


# --------------------------------------------------------------------------------------------
# The transition prior (issue 33): how much of each spec ratio a move to other hardware realised


def transition_pairs(prep: Prepared, rows: np.ndarray) -> list[tuple[int, int]]:
    """Single-device pairs among ``rows``: same source and workload, another (accelerator, precision) point;
    for each row and each other point of its group, the row there at the nearest batch (a precision pair on
    one GPU counts: V100 fp32 → fp16 is where tensor cores show)."""
    t = prep.table
    groups: dict = {}
    for i in rows:
        if t["count"][i] == 1 and t["nodes"][i] == 1:
            groups.setdefault((t["source"][i], t["workload"][i]), []).append(int(i))
    out = set()
    for grp in groups.values():
        hwp: dict = {}
        for k in grp:
            hwp.setdefault((t["accelerator"][k], t["precision"][k]), []).append(k)
        for i in grp:
            for key, ks in sorted(hwp.items()):
                if key == (t["accelerator"][i], t["precision"][i]):
                    continue
                j = min(ks, key=lambda k: (abs(np.log(t["batch_per_device"][k] / t["batch_per_device"][i])), k))
                out.add((min(i, j), max(i, j)))
    return sorted(out)


#: The weight of a transition pair per generation between its newer row and the newest generation of the fit
#: (``fit_transitions``): the tensor-core era's steps realised less of their spec ratios than the FP32 era's, and
#: the next step is taught more by the last ones (issue 33; ``bench/RESULTS_generation.md``, "Bands by distance,
#: nested: what was tried"). 1.0: every pair the same (the design before branch `anchor`).
TRANSITION_RECENCY = 0.5


def fit_transitions(prep: Prepared, rows: np.ndarray, constants: dict[str, float] | None = None, *,
                    recency: float = TRANSITION_RECENCY) -> dict[str, Any]:
    """Non-negative least squares of log(measured_j / measured_i) over :func:`transition_pairs` of ``rows`` on
    ``features.TRANSITION_TERMS`` (s = the calibrated prior's tensor-op share, mean of the two rows), each
    (source, workload) group weighing about the same, times ``recency`` per generation between the pair's newer row
    and the newest generation of ``rows`` (:data:`TRANSITION_RECENCY`). Non-negative: more peak, bandwidth,
    memory-bound speed or batch never predicts a slower step. Returns the coefficients and their provenance (every
    pair)."""
    from scipy.optimize import nnls

    pairs = transition_pairs(prep, rows)
    terms = list(features.TRANSITION_TERMS)
    if len(pairs) < 5:
        return {"terms": terms, "c": [0.0] * len(terms), "pairs": []}
    t = prep.table
    i, j = np.array(pairs).T
    logs = features.transition_logs(t["accelerator"], t["precision"])
    p = prior.prior(prep.work, prep.setup, constants or prep.constants)
    sh = p.tensor_s / p.compute_s
    mem = np.log(t["batch_per_device"] / p.memory_s)  # log per-sample speed on the memory-bound work
    X = features.transition_design(logs[j] - logs[i], mem[j] - mem[i],
                                   np.log(t["batch_per_device"][j] / t["batch_per_device"][i]), 0.5 * (sh[i] + sh[j]))
    y = np.log(prep.measured[j] / prep.measured[i])
    keys = [f"{t['source'][a]}|{t['workload'][a]}" for a in i]
    cnt = {k: keys.count(k) for k in set(keys)}
    gen = {a: features.generation(a) for a in set(t["accelerator"][rows])}
    age = max(gen.values()) - np.array([max(gen[t["accelerator"][a]], gen[t["accelerator"][b]]) for a, b in pairs])
    w = np.sqrt(np.array([1.0 / np.sqrt(cnt[k]) for k in keys]) * recency ** age)
    c = nnls(X * w[:, None], y * w)[0]
    c = [float(round(x, 4)) for x in c]
    point = lambda a: f"{t['accelerator'][a]}:{t['precision'][a]}:bs{int(t['batch_per_device'][a])}"  # noqa: E731
    return {"terms": terms, "c": c, "groups": len(cnt), "recency": recency,
            "rms_log": float(round(np.sqrt(np.mean((y - X @ np.array(c)) ** 2)), 4)),
            "pairs": [[str(t["source"][a]), str(t["workload"][a]), point(a), point(b)] for a, b in zip(i, j)]}


# --------------------------------------------------------------------------------------------
# Leave-one-generation-out (issue 33): predictions carried to a generation the fit never saw, and the band by
# distance that ``model.predict_many`` gives an accelerator with no measured row


def restricted(prep: Prepared, train: np.ndarray) -> Prepared:
    """``prep`` whose anchors are only rows of ``train``: :func:`anchor_candidates` as if the other rows were
    not in the table — for anchored predictions and for the prior's cross-accelerator calibration
    (:func:`calibrate_prior` pairs rows with these candidates; its other pairs are on one accelerator)."""
    t = prep.table
    count = t["count"].copy()
    out = np.ones(len(count), bool)
    out[train] = False
    count[out] = 2.0  # not single-device: never a candidate (nothing else of the table is read from count here)
    cands = anchor_candidates(data_mod.Table(dict(t.columns, count=count), t.stats))
    W = anchor_weight_matrix(cands, np.log(prep.setup.batch), np.log(prep.setup.count))
    return dataclasses.replace(prep, anchor_weights=W, anchors=cands)


def measured_precisions(prep: Prepared, rows: np.ndarray) -> dict[str, list[str]]:
    """Per accelerator of ``rows``, the precision classes (``features.precision_class``) its rows hold."""
    out: dict[str, set] = {}
    for a, p in zip(prep.table["accelerator"][rows], prep.table["precision"][rows]):
        out.setdefault(str(a), set()).add(features.precision_class(str(p)))
    return {a: sorted(v) for a, v in sorted(out.items())}


@dataclass(frozen=True)
class GenerationFold:
    """A fit on ``train`` (older generations) predicting ``held`` (a newer one): the shipped path and the path
    ``model.predict_many`` ships for an accelerator with no measured row (carried by the transition prior)."""

    train: np.ndarray
    held: np.ndarray
    fp: Prepared  # anchors restricted to ``train``, prior calibrated on it
    fm: FoldModel
    transition: dict[str, Any]  # fit_transitions on ``train``
    reference: np.ndarray  # per held row: the measured accelerator of ``train`` it is carried from
    distance: np.ndarray  # per held row: features.distance from the reference
    shipped: dict[str, np.ndarray]  # kind → the shipped prediction (no transition prior)
    carried: dict[str, np.ndarray]  # kind → the prediction carried by the transition prior
    jump: dict[str, np.ndarray]  # kind → |log jump| the transition kept, reference → target
    share: np.ndarray  # the prior's tensor-op share of each held row's one-device step
    #: kind → per held row, log(the full model's multi-device / one-device ratio ÷ the shipped one's), ≤ 0; 0 on
    #: one device and for stats-only (:func:`carried_scaling` applies μ of it to the anchored multi-device rows)
    scaling: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    scaling_mu: float = 0.0  # the share of ``scaling`` already in ``carried``


def generation_fold(prep: Prepared, train: np.ndarray, held: np.ndarray, lam: dict[str, float]) -> GenerationFold:
    """Fit on ``train`` only (prior calibration, correction, transition prior; anchors among ``train``) and
    predict ``held`` as ``predict_many`` does for an accelerator with no measured row: the one-device shipped
    prediction (stats-only or anchored, λ = ``lam``) on the measured accelerator nearest in spec × exp(c·x), x
    the log spec ratios of ``features.TRANSITION_TERMS``, the log jump clipped between 0 and the shipped model's
    own; times the shipped model's multi-device / one-device ratio (``carried`` at μ = 0 of ``scaling``: see
    :func:`carried_scaling`). (``model._transition``'s clamp to spec order over the catalog is not applied: the
    held-out accelerators are the question.)"""
    fp = prepare_for(restricted(prep, train), train)
    forest = fit_forest(fp.X[train], fp.y[train], fp.weight[train])
    v = fp.variants
    fm = FoldModel(fp.prior_sps, forest.predict(fp.X), v.prior_sps, forest.predict(v.X))
    anch, stat = shipped_predictions(fp, fm, held, lam)
    t = fp.table
    n = len(prep.measured)
    trained = sorted(set(t["accelerator"][train]))
    classes = measured_precisions(fp, train)
    ref = np.array([features.nearest_measured(trained, a, p) for a, p in zip(t["accelerator"][held], t["precision"][held])],
                   dtype=object)
    dist = np.array([features.distance(a, r, p, classes)
                     for a, r, p in zip(t["accelerator"][held], ref, t["precision"][held])], dtype=int)
    # the reference's one-device prediction, at each held row's workload, precision and batch
    k = len(held)
    s_ref = features.setup(list(ref), list(t["precision"][held]), batch=t["batch_per_device"][held], count=np.ones(k),
                           nodes=np.ones(k), intra_gbps=np.full(k, np.inf),
                           network_gbps=np.full(k, features.NO_LINK_GBPS), tables=kernel_tables())
    w_ref = prior.Work(*(np.asarray(x)[held] if np.ndim(x) else x for x in dataclasses.astuple(fp.work)))
    p_ref = prior.prior(w_ref, s_ref, fp.constants)
    f_ref = forest.predict(features.feature_matrix(w_ref, s_ref, p_ref, fp.framework_tf[held]))
    own = prior.prior(v.work, v.setup, fp.constants)  # the held rows' one-device variants: rows n + held
    idx = n + held
    W = fp.anchor_weights[held]
    lam1 = lam["single"]
    base = W @ (np.log(prep.measured) - np.log(fm.prior_sps)) - lam1 * (W @ fm.f)
    has = W.sum(1) > 0
    one = {"stats-only": (fm.prior_v[idx] * np.exp(fm.f_v[idx]), p_ref.samples_per_second * np.exp(f_ref)),
           "anchored": (np.where(has, np.exp(np.log(fm.prior_v[idx]) + lam1 * fm.f_v[idx] + base), np.nan),
                        np.where(has, p_ref.samples_per_second * np.exp(lam1 * f_ref + base), np.nan))}
    share_t = own.tensor_s[idx] / own.compute_s[idx]
    share_r = p_ref.tensor_s / p_ref.compute_s
    tr = fit_transitions(fp, train)  # fewer than 5 pairs: no transition prior (c = 0), as model.json without one
    L = features.transition_logs(list(t["accelerator"][held]), list(t["precision"][held]))
    R = features.transition_logs(list(ref), list(t["precision"][held]))
    x = features.transition_design(L - R, np.log(p_ref.memory_s / own.memory_s[idx]), np.zeros(k),
                                   0.5 * (share_t + share_r)) @ np.asarray(tr["c"])
    shipped = {"stats-only": stat, "anchored": anch}
    carried, jump = {}, {}
    for kind, (own1, ref1) in one.items():
        o = np.log(own1 / ref1)
        j = np.clip(x, np.minimum(0.0, o), np.maximum(0.0, o)) if tr["pairs"] else o
        carried[kind] = shipped[kind] * ref1 * np.exp(j) / own1
        jump[kind] = np.abs(j)
    # the scaling the correction learned on every measured multi-device row (λ = 1) against the anchored path's
    # (λ by regime, the anchors' shift), only where it is lower (model.predict_many's ``_carry_scaling``)
    dev = prep.setup.count[held] * prep.setup.nodes[held]
    full = np.log(fm.prior_sps[held]) + fm.f[held] - np.log(fm.prior_v[idx]) - fm.f_v[idx]
    scaling = {"stats-only": np.zeros(k),
               "anchored": np.where((dev > 1) & has, np.minimum(0.0, np.minimum(full, np.log(dev))
                                                                  - np.log(np.where(has, anch, 1.0) / one["anchored"][0])), 0.0)}
    return GenerationFold(train, held, fp, fm, tr, ref, dist, shipped, carried, jump, share_t, scaling)


def carried_scaling(f: GenerationFold, mu: float) -> GenerationFold:
    """``f`` with μ of its ``scaling`` in the carried predictions (an unmeasured accelerator's multi-device /
    one-device ratio moved μ of the way to the full model's, where that is lower)."""
    return dataclasses.replace(f, carried={k: v * np.exp((mu - f.scaling_mu) * f.scaling[k]) for k, v in f.carried.items()},
                               scaling_mu=mu)


#: the shares of the full model's scaling tried by :func:`calibrate_scaling`
SCALING_GRID = (0.0, 0.25, 0.5, 0.75, 1.0)


def calibrate_scaling(prep: Prepared, folds: Sequence[GenerationFold]) -> float:
    """μ of :func:`carried_scaling`: the grid value with the least mean |log(measured / carried)| over the anchored
    multi-device rows of ``folds`` (older generations only; ties: the smaller μ); 0 without such rows."""
    err = {}
    for mu in SCALING_GRID:
        v = []
        for f in folds:
            p = carried_scaling(f, mu).carried["anchored"]
            ok = prep.multi[f.held] & np.isfinite(p) & (p > 0)
            v += list(np.abs(np.log(prep.measured[f.held][ok] / p[ok])))
        if not v:
            return 0.0
        err[mu] = float(np.mean(v))
    return min(SCALING_GRID, key=lambda mu: (round(err[mu], 9), mu))


def generation_folds(prep: Prepared, rows: np.ndarray, lam: dict[str, float], *, before: float | None = None,
                     progress: Callable[[str], None] | None = None) -> list[GenerationFold]:
    """Every leave-one-generation-out fold among ``rows`` (generations older than ``before`` only, when given):
    for each generation cut-off with at least two generations at or below it (a transition to learn from), a fit
    on those rows predicting each newer generation's rows — Volta and Ampere from ≤ Pascal, Ampere from ≤ Volta,
    …: one hop and more."""
    g = np.array([features.generation(a) for a in prep.table["accelerator"][rows]])
    gens = sorted(set(g) if before is None else {x for x in g if x < before})
    out = []
    for cut in gens[1:-1]:
        train = rows[g <= cut]
        newer = [x for x in gens if x > cut]
        held = rows[np.isin(g, newer)]
        if progress:
            progress(f"generation ≤ {cut:g}")
        f = generation_fold(prep, train, held, lam)
        out.append(f)
    return out


#: A band of fewer residuals than this borrows (see :func:`generation_band`)
GENERATION_BAND_MIN = 20


def generation_band(prep: Prepared, folds: Sequence[GenerationFold]) -> dict[str, Any]:
    """The band by distance: per regime (single / multi-device × stats-only / anchored) and distance
    (``features.distance``: generation hops from the reference, + 1 for a precision class never measured on it),
    the 10% and 90% quantiles of the carried predictions' log residuals ``log(measured / carried)`` over every
    held row of ``folds``, each (source, workload) group weighing about the same (:func:`_group_quantiles`).
    A regime with fewer than :data:`GENERATION_BAND_MIN` residuals at a distance takes both regimes' of its kind;
    fewer still: the nearer distance's band scaled by the ratio of distances. Each band holds the prediction
    (lo ≤ 0 ≤ hi) and the band of every nearer distance (going further never narrows it).
    ``model.predict_many`` gives it to accelerators with no measured row at distance ≥ 1, and beyond the last
    distance scales the last band by the ratio of distances."""
    t = prep.table
    res: dict[tuple[str, str, int], list[tuple[float, str]]] = {}
    for f in folds:
        for kind in ("stats-only", "anchored"):
            p = f.carried[kind]
            ok = np.isfinite(p) & (p > 0) & (f.distance > 0)
            for i, pp, d in zip(f.held[ok], p[ok], f.distance[ok]):
                res.setdefault((kind, "multi" if prep.multi[i] else "single", int(d)), []).append(
                    (float(np.log(prep.measured[i] / pp)), f"{t['source'][i]}|{t['workload'][i]}"))
    q: dict[str, dict[str, list[float]]] = {}
    used: dict[str, dict[str, str]] = {}
    for regime in REGIMES:
        dev, kind = regime.split("-", 1)
        top = max((d for (k, _, d) in res if k == kind), default=0)
        q[regime], used[regime], last = {}, {}, None
        for d in range(1, top + 1):
            v = res.get((kind, dev, d), [])
            how = f"{len(v)} residuals"
            if len(v) < GENERATION_BAND_MIN:
                v = res.get((kind, "single", d), []) + res.get((kind, "multi", d), [])
                how = f"{len(v)} residuals, both regimes"
            if len(v) >= GENERATION_BAND_MIN:
                lo, hi = _group_quantiles(v)
            elif last is not None:
                lo, hi, how = last[1] * d / last[0], last[2] * d / last[0], f"distance {last[0]} × {d}/{last[0]}"
            else:
                continue
            lo, hi = min(lo, 0.0), max(hi, 0.0)
            if last is not None:
                lo, hi = min(lo, last[1]), max(hi, last[2])
            q[regime][str(d)], used[regime][str(d)] = [float(round(lo, 6)), float(round(hi, 6))], how
            last = (d, lo, hi)
    return {"levels": [ALPHA_LOW, ALPHA_HIGH], "log_quantiles": q, "from": used}


def _group_quantiles(v: list[tuple[float, str]]) -> tuple[float, float]:
    """Weighted 10/90% quantiles of (residual, group) pairs: each group's residuals weigh 1/√(its count) (as
    :func:`row_weights`), so one source's many rows do not set a band alone. Low: the largest residual with
    less than 10% of the weight below it; high: the smallest with at least 90% of the weight at or below it."""
    r = np.array([x for x, _ in v])
    g = [k for _, k in v]
    cnt = {k: g.count(k) for k in set(g)}
    w = np.array([1.0 / math.sqrt(cnt[k]) for k in g])
    o = np.argsort(r, kind="stable")
    r, c = r[o], np.cumsum(w[o]) / w.sum()
    lo = r[max(0, int(np.searchsorted(c, ALPHA_LOW, side="left")) - 1)]
    hi = r[min(len(r) - 1, int(np.searchsorted(c, ALPHA_HIGH - 1e-12, side="left")))]
    return float(lo), float(hi)


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
    folds = generation_folds(prep, rows, cal.anchor_lambda)
    mu = calibrate_scaling(prep, folds)
    folds = [carried_scaling(f, mu) for f in folds]
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "cloudfit performance model: roofline + communication prior × xgboost correction",
        "features": [{"name": n, "monotone": m} for n, m in features.FEATURES],
        "prior_constants": {k: prep.constants[k] for k in sorted(prep.constants)},
        "kernel_tables": kernel_tables().to_dict(),
        "xgboost_params": {k: XGB_PARAMS[k] for k in sorted(XGB_PARAMS)},
        "rounds": N_ROUNDS,
        "anchor_lambda": cal.anchor_lambda,
        "stats_lambda": cal.stats_lambda,
        "band": {"levels": [ALPHA_LOW, ALPHA_HIGH], "log_quantiles": cal.log_quantiles,
                 "residuals": cal.residual_counts,
                 "method": "split-conformal on grouped out-of-fold residuals (leave-one-accelerator-out + "
                           "leave-one-model-family-out) through the capped predict path, per regime and per "
                           "workload novelty (signature seen in the training rows or new); anchored bands "
                           "scale by 1 + anchor_jump_slope × the hardware jump from the anchors",
                 "anchor_jump_slope": cal.jump_slope,
                 "unmeasured_log_quantiles": cal.unmeasured_quantiles,
                 "source_log_quantiles": cal.source_quantiles,
                 "seen_signatures": [[float(x) for x in r] for r in np.unique(prep.signature[rows], axis=0)],
                 "signature_tolerance": features.SIGNATURE_TOL},
        "training": {"rows": int(len(rows)), "measurements_sha256": digest(mpath), "stats_sha256": digest(spath),
                     "accelerators": sorted(set(prep.table["accelerator"][rows].tolist()))},
        "transition_prior": dict(fit_transitions(prep, rows), method=(
            "NNLS of log measured speed ratio over single-device pairs of the same source and workload on two "
            "(accelerator, precision) points (nearest batch), on log spec ratios split by the prior's tensor-op "
            "share; each (source, workload) group weighing 1/sqrt(its pairs), times recency^(generations between the "
            "pair's newer accelerator and the newest measured one); applied to an accelerator with no measured row from the measured one nearest in spec, "
            "clamped to spec dominance over the catalog (cloudfit.perf.model._transition)")),
        "generation_band": dict(generation_band(prep, folds), carried_scaling=mu,
                                measured_precisions=measured_precisions(prep, rows), method=(
            "leave-one-generation-out: for each generation cut-off with two generations or more at or below it, "
            "a fit on those rows (prior calibration, correction, transition prior; anchors among them) predicts every "
            "newer generation's rows by the carried path (cloudfit.perf.model._transition without the catalog clamp, "
            "fit.generation_fold); 10/90% quantiles of log(measured / carried) per regime and distance (generation "
            "hops from the reference, + 1 for a precision class never measured on it), each (source, workload) group "
            "weighing 1/sqrt(its rows), holding 0 and every nearer distance's band (fit.generation_band); the "
            "carried path's anchored multi-device / one-device ratio moved carried_scaling of the way to the full "
            "model's (prior x correction) where lower, carried_scaling the grid value with the least mean "
            "|log residual| on those folds' anchored multi-device rows (fit.calibrate_scaling)")),
        "forest": booster,
    }


def dumps(doc: dict[str, Any]) -> str:
    """Stable text: sorted keys, repr floats (shortest round-trip), no whitespace variation."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n"


def write_model(doc: dict[str, Any], path: Path | None = None) -> Path:
    """Write the model document atomically (no half-written model on a crash)."""
    from cloudfit.atomic import atomic_open

    path = path or default_model_path()
    text = dumps(doc)
    with atomic_open(path, encoding="utf-8") as f:
        f.write(text)
    return path
