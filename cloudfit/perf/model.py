"""Prediction at run time: the prior, the shipped correction and its band, in numpy only.

Importing this module costs numpy + the standard library (no xgboost, sklearn, scipy or pandas):
the recommender calls :func:`predict_many` once with thousands of queries on its start-up path.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import operator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from cloudfit.catalog import hardware, network
from cloudfit.errors import ModelError, ProfileError, UsageError
from cloudfit.perf import features, prior
from cloudfit.perf.trees import Forest
from cloudfit.types import PRECISIONS, Measurement, Prediction, Profile

SCHEMA_VERSION = 3
PARALLELISMS = ("allreduce", "ps")
DEFAULT_PRECISION = "fp16"
#: A profile's measurements at a batch size far from the query's count less:
#: weight = exp(−|Δ log batch| / ANCHOR_SCALE). Weights never depend on the hardware, so the anchored
#: factor is the same for every accelerator and predictions stay monotone in hardware specs.
ANCHOR_SCALE = 0.5
#: … and so do those at another number of devices per node: × exp(−|Δ log devices per node| /
#: ANCHOR_DEVICE_SCALE), so a measurement on 4 GPUs carries its measured scaling to a 4-GPU query and a
#: one-GPU query leans on one-GPU runs. Chosen on the leave-one-accelerator-out sweep over profiles that
#: hold several device counts (bench/anchor_scale_sweep.py; bench/RESULTS_perf.md, "This round").
ANCHOR_DEVICE_SCALE = 1.0


@dataclass(frozen=True)
class HardwareQuery:
    """One configuration to predict: accelerator × devices per node × nodes at a precision and batch.

    ``network_gbps`` is the VM's network cap in Gbit/s (the inter-node link; ignored for one node);
    ``intra_gbps`` (GB/s) defaults to ``hardware.intra_node_gbps``; ``transport`` is NCCL's transport between
    the VMs (``network.FABRICS``, e.g. ``network.fabric_of(machine_type)``; None: by the link's Gbit/s).
    """

    accelerator: str
    count: int = 1
    nodes: int = 1
    network_gbps: float = 0.0
    precision: str = DEFAULT_PRECISION
    batch_size: int | None = None  # None = the profile's batch size
    intra_gbps: float | None = None
    parallelism: str = "allreduce"
    ps_count: int = 1
    ps_network_gbps: float | None = None
    vcpus: float | None = None  # the VM's vCPUs: bounds image decoding (None: no input-pipeline bound)
    transport: str | None = None


@dataclass(frozen=True)
class PredictionTable:
    """Column arrays, one entry per query in the order given. Rows that do not fit in memory have
    ``fits`` False, a ``reason``, and zeros in the numeric columns."""

    samples_per_second: np.ndarray
    low: np.ndarray
    high: np.ndarray
    step_time_s: np.ndarray
    compute_s: np.ndarray
    communication_s: np.ndarray
    fits: np.ndarray  # bool
    basis: tuple[str, ...]
    reason: tuple[str, ...] = field(default=())

    def __len__(self) -> int:
        return len(self.samples_per_second)

    def row(self, i: int) -> Prediction:
        return Prediction(
            samples_per_second=float(self.samples_per_second[i]), low=float(self.low[i]), high=float(self.high[i]),
            step_time_s=float(self.step_time_s[i]), compute_s=float(self.compute_s[i]),
            communication_s=float(self.communication_s[i]), basis=self.basis[i], fits=bool(self.fits[i]),
            reason=self.reason[i] if self.reason else "",
        )


# --------------------------------------------------------------------------------------------
# The shipped model


@dataclass(frozen=True)
class FittedModel:
    forest: Forest
    log_quantiles: dict[str, tuple[float, float]]  # "regime|seen" / "regime|new" → (low, high) in log
    anchor_lambda: dict[str, float]
    constants: dict[str, float]
    version: str
    path: str
    seen_signatures: np.ndarray = field(default_factory=lambda: np.zeros((0, 6)))
    signature_tolerance: float = features.SIGNATURE_TOL
    jump_slope: float = 0.0  # anchored bands scale by 1 + jump_slope × hardware jump from the anchors
    tables: Any = None  # kernel-efficiency tables the prior composes (cloudfit.perf.kernels.Tables)
    measured_accelerators: tuple[str, ...] = ()  # accelerators with rows in the training data
    #: "single-anchored" … → (low, high) log quantiles of leave-one-accelerator-out residuals only
    unmeasured_quantiles: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: coefficients of ``features.TRANSITION_TERMS`` (``fit.fit_transitions``); empty: no transition prior
    transition: tuple[float, ...] = ()
    #: "single-stats-only" … → per distance 1, 2, … (``features.distance``) the (low, high) log quantiles of
    #: leave-one-generation-out residuals of the carried path (``fit.generation_band``); empty: none
    generation_quantiles: dict[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    #: per training accelerator, the precision classes its rows hold (``features.precision_class``)
    measured_precisions: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: share of the learned correction a stats-only prediction keeps (leave-one-source-out, ``fit.calibrate``):
    #: a profile's stack is never one of the training sources, and the correction learned on them carries
    #: their stacks' efficiency, not the profile's
    stats_lambda: float = 1.0
    #: "single-stats-only" / "multi-stats-only" → (low, high) log quantiles of leave-one-source-out residuals:
    #: the stats-only band, whatever the workload's novelty (empty: the in-distribution bands of ``log_quantiles``)
    source_quantiles: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: share μ of the full model's multi-device scaling an anchored unmeasured accelerator takes where it is lower
    #: than the anchored path's (``fit.calibrate_scaling``, leave-one-generation-out; 0: the anchored path's)
    carried_scaling: float = 0.0

    def measured(self, accelerator: str) -> bool:
        """Whether the training data holds rows on this accelerator or on the same chip (same specs)."""
        return _chip(accelerator) in {_chip(a) for a in self.measured_accelerators}

    def novel(self, work: prior.Work) -> bool:
        """Whether a workload is unlike every training workload (its predictions get the wider band)."""
        return not bool(features.seen(features.signature(work), self.seen_signatures,
                                      self.signature_tolerance)[0])


@functools.lru_cache(maxsize=64)
def _chip(accelerator: str) -> tuple:
    a = hardware.get(accelerator)
    return (a.arch, a.fp32_tflops, a.fp16_tflops, a.memory_bandwidth_gbps, a.sms)


def model_path() -> Path:
    return Path(__file__).resolve().parent / "model.json"


@functools.lru_cache(maxsize=4)
def load_model(path: str | None = None) -> FittedModel:
    """Read and check the fitted model file (cached per path)."""
    p = Path(path) if path else model_path()
    try:
        raw = p.read_bytes()
        doc = json.loads(raw)
    except FileNotFoundError:
        raise ModelError(f"performance model {p} not found; rebuild it with `cloudfit model fit`") from None
    except ValueError as e:
        raise ModelError(f"performance model {p} is not valid JSON ({e}); rebuild it with `cloudfit model fit`") from None
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise ModelError(f"performance model {p} has schema_version {doc.get('schema_version')!r}; "
                         f"this cloudfit reads {SCHEMA_VERSION} (rebuild with `cloudfit model fit`)")
    names = [f["name"] for f in doc["features"]]
    if tuple(names) != features.FEATURE_NAMES:
        raise ModelError(f"performance model {p} was fitted on other features; rebuild it with `cloudfit model fit`")
    q = {k: (float(v[0]), float(v[1])) for k, v in doc["band"]["log_quantiles"].items()}
    lam = {k: float(v) for k, v in doc["anchor_lambda"].items()}
    sigs = np.array(doc["band"]["seen_signatures"], dtype=float).reshape(-1, 6)
    from cloudfit.perf.tables import Tables

    return FittedModel(Forest.from_dict(doc["forest"]), q, lam, dict(doc["prior_constants"]),
                       "sha256:" + hashlib.sha256(raw).hexdigest()[:16], str(p), sigs,
                       float(doc["band"]["signature_tolerance"]), float(doc["band"]["anchor_jump_slope"]),
                       Tables.from_dict(doc["kernel_tables"]), tuple(doc["training"]["accelerators"]),
                       {k: (float(v[0]), float(v[1])) for k, v in doc["band"]["unmeasured_log_quantiles"].items()},
                       _transition_coefficients(doc.get("transition_prior")), *_generation_band(doc.get("generation_band")),
                       float(doc.get("stats_lambda", 1.0)),
                       {k: (float(v[0]), float(v[1])) for k, v in doc["band"].get("source_log_quantiles", {}).items()},
                       float((doc.get("generation_band") or {}).get("carried_scaling", 0.0)))


def _generation_band(gb: dict | None) -> tuple[dict[str, tuple[tuple[float, float], ...]], dict[str, tuple[str, ...]]]:
    if not gb:
        return {}, {}
    q = {}
    for regime, by_d in gb["log_quantiles"].items():
        ds = sorted(int(d) for d in by_d)
        if ds != list(range(1, len(ds) + 1)):
            raise ModelError("performance model's generation band skips a distance; rebuild it with `cloudfit model fit`")
        q[regime] = tuple((float(by_d[str(d)][0]), float(by_d[str(d)][1])) for d in ds)
    return q, {a: tuple(v) for a, v in gb["measured_precisions"].items()}


def _transition_coefficients(tp: dict | None) -> tuple[float, ...]:
    if not tp:
        return ()
    if list(tp.get("terms", ())) != list(features.TRANSITION_TERMS) or len(tp.get("c", ())) != len(features.TRANSITION_TERMS):
        raise ModelError("performance model's transition prior has other terms; rebuild it with `cloudfit model fit`")
    return tuple(float(x) for x in tp["c"])


def model_version(path: str | None = None) -> str:
    """Identifies the shipped fitted model (sha256 prefix of its file); recorded in plans."""
    return load_model(path).version


# --------------------------------------------------------------------------------------------
# Anchors


@dataclass(frozen=True)
class _Anchors:
    log_over_prior: np.ndarray  # log(measured / prior) per anchor
    correction: np.ndarray  # the learned correction f at the anchor
    log_batch: np.ndarray
    labels: tuple[str, ...]
    log_prior_per_device: np.ndarray  # log(prior / devices) at each anchor: where its hardware sits
    log_count: np.ndarray = field(default_factory=lambda: np.zeros(0))  # log devices per node at each anchor
    chip: tuple[str, ...] = ()  # "accelerator|precision class" of each anchor (``chip_key``)


def chip_key(accelerator: str, precision: str) -> str:
    """The chip and arithmetic a measurement ran: a query on the same key is measured for this workload. FP8 is
    its 16-bit run's key, as for the table's measured chips (no FP8 row anywhere: the prior carries FP8 from it)."""
    return f"{accelerator}|{features.precision_class('bf16' if precision == 'fp8' else precision)}"


def own_chip_mask(anchors: _Anchors, chips: Sequence[str]) -> np.ndarray | None:
    """(queries, anchors) bool: a query whose chip (``chip_key``) the profile measured is anchored on those
    measurements alone — another GPU's run says less about this chip than its own (H200 at its measured point
    read +4% when an H100 run weighed as much); other queries on every anchor. None where no query has its own."""
    if not anchors.chip:
        return None
    own = np.asarray(chips, dtype=object)[:, None] == np.asarray(anchors.chip, dtype=object)[None, :]
    has = own.any(axis=1)
    if not has.any():
        return None
    return np.where(has[:, None], own, True)


def _own_chips(anchors: _Anchors | None) -> frozenset[str]:
    """The ``chip_key``s the profile measured (none without anchors)."""
    return frozenset(anchors.chip) if anchors is not None else frozenset()


def _measured_here(m: FittedModel, own: frozenset[str], accelerator: str, chip: str) -> bool:
    """Measured for this prediction: rows of the chip in the training data, or the profile's own run of it at the
    query's arithmetic (``chip``, its ``chip_key``)."""
    return m.measured(accelerator) or chip in own


def anchor_weights(log_batch_q: np.ndarray, log_batch_a: np.ndarray, log_count_q: np.ndarray | None = None,
                   log_count_a: np.ndarray | None = None, allowed: np.ndarray | None = None) -> np.ndarray:
    """(queries, anchors) similarity weights exp(−|Δ log batch| / ANCHOR_SCALE − |Δ log devices per node| /
    ANCHOR_DEVICE_SCALE), rows summing to 1 (no device term where counts are not given); ``allowed``
    (queries, anchors) bool: the others weigh 0. Shared by prediction and cross-validation
    (``fit.anchor_weight_matrix``)."""
    d = np.abs(np.asarray(log_batch_q, dtype=float)[:, None] - np.asarray(log_batch_a, dtype=float)[None, :]) / ANCHOR_SCALE
    if log_count_q is not None and log_count_a is not None:
        d = d + np.abs(np.asarray(log_count_q, dtype=float)[:, None]
                       - np.asarray(log_count_a, dtype=float)[None, :]) / ANCHOR_DEVICE_SCALE
    if allowed is not None:
        d = np.where(allowed, d, np.inf)
    w = np.exp(-(d - d.min(axis=1, keepdims=True)))
    return w / w.sum(1, keepdims=True)


def anchor_shift(anchors: _Anchors, log_batch: np.ndarray, count: np.ndarray, nodes: np.ndarray,
                 lam: np.ndarray, chips: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(shift, weights): the anchored log shift Σₐ wₐ·(log(measuredₐ / priorₐ) − λ·fₐ) of each query, and
    its weights at the query's devices per node. ``chips``: each query's ``chip_key`` — a query on a chip
    the profile measured weighs only those anchors (``own_chip_mask``).

    Anchors at several device counts make the shift depend on the count, and then two physical rules need
    care: a query on n nodes takes the least shift of the same devices per node on 1..n nodes *and* of
    c·k devices in one VM (k = 1..n), so more nodes never raise per-GPU throughput and N one-GPU VMs
    never beat one N-GPU VM whatever the anchors say (tests/perf/test_anchors.py). Past the largest
    anchor count the weights no longer change, so k stops there."""
    lb = np.asarray(log_batch, dtype=float)
    lam = np.asarray(lam, dtype=float)
    allowed = None if chips is None else own_chip_mask(anchors, chips)
    w = anchor_weights(lb, anchors.log_batch, np.log(count), anchors.log_count, allowed)
    shift = w @ anchors.log_over_prior - lam * (w @ anchors.correction)
    if len(anchors.log_count) and np.ptp(anchors.log_count) > 0:
        multi_node = np.flatnonzero(nodes > 1)
        if len(multi_node):
            # The envelope depends on (batch, devices per node, λ) and the node count only: the recommender's
            # thousands of queries share a few such keys, so make each key's running minimum once.
            c_top = float(np.exp(anchors.log_count.max()))
            group = np.zeros(len(lb), dtype=np.int64) if allowed is None else \
                np.unique(allowed, axis=0, return_inverse=True)[1].ravel()
            cols = (lb[multi_node], count[multi_node], lam[multi_node], group[multi_node])
            codes = [np.unique(col, return_inverse=True) for col in cols]
            key = np.zeros(len(multi_node), dtype=np.int64)
            for vals, inv in codes:
                key = key * len(vals) + inv.ravel()
            _, first, inv = np.unique(key, return_index=True, return_inverse=True)
            n = nodes[multi_node]
            for u, r in enumerate(first):
                rows = inv.ravel() == u
                c = float(count[multi_node[r]])
                k_top = int(min(n[rows].max(), np.ceil(c_top / c) + 1))
                ks = np.arange(1, k_top + 1, dtype=float)
                wk = anchor_weights(np.full(k_top, lb[multi_node[r]]), anchors.log_batch, np.log(c * ks),
                                    anchors.log_count, None if allowed is None else
                                    np.repeat(allowed[multi_node[r]][None, :], k_top, axis=0))
                sk = np.minimum.accumulate(wk @ anchors.log_over_prior - lam[multi_node[r]] * (wk @ anchors.correction))
                idx = multi_node[rows]
                shift[idx] = np.minimum(shift[idx], sk[np.minimum(n[rows], k_top).astype(int) - 1])
    return shift, w


# --------------------------------------------------------------------------------------------
# Prediction


def _check_profile(profile: Profile) -> None:
    if not isinstance(profile, Profile):
        raise ProfileError(f"expected a Profile, got {type(profile).__name__}")
    s = getattr(profile, "stats", None)
    if s is None or not getattr(s, "op_classes", None) or not s.flops_per_sample or s.flops_per_sample <= 0:
        raise ProfileError(f"profile {profile.model!r} has no model stats (FLOPs, bytes per op class); "
                           "re-run `cloudfit profile run` to count them")


def _positive_int(v: Any, what: str) -> int:
    if type(v) is int and v >= 1:  # the common case, checked first: thousands of queries per call
        return v
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        if isinstance(v, float) and v.is_integer() and v >= 1:
            return int(v)
        raise UsageError(f"{what} must be a positive integer, got {v!r}")
    return int(v)


def _canonical_queries(queries: Sequence[HardwareQuery]) -> list[HardwareQuery]:
    """Validated queries. Accelerator names are the catalog's canonical ones (resolved once, where the
    catalog or ``predict`` reads them); another spelling is resolved here, an unknown one raises. A batch
    of None stays None (the profile's batch, filled in by ``_rows``): the recommender's thousands of
    queries are then returned as they are, not rebuilt."""
    known = hardware.ACCELERATORS
    out = []
    for q in queries:
        acc = q.accelerator if q.accelerator in known else hardware.canonical_name(q.accelerator)
        count = _positive_int(q.count, "accelerator count")
        nodes = _positive_int(q.nodes, "node count")
        prec = q.precision if q.precision in PRECISIONS else str(q.precision).lower()
        if prec not in PRECISIONS:
            raise UsageError(f"unknown precision {q.precision!r} (expected {', '.join(PRECISIONS)})")
        batch = None if q.batch_size is None else _positive_int(q.batch_size, "batch size")
        if q.parallelism not in PARALLELISMS:
            raise UsageError(f"unknown parallelism {q.parallelism!r} (expected {', '.join(PARALLELISMS)})")
        net = float(q.network_gbps or 0.0)
        if q.transport is not None and q.transport not in network.FABRICS and q.transport not in network.TRANSPORTS:
            raise UsageError(f"unknown transport {q.transport!r} (expected one of {', '.join(network.FABRICS)})")
        if nodes > 1 and not net > 0:
            raise UsageError(f"{nodes} nodes need the VM's network bandwidth (network_gbps > 0, or a machine type)")
        if (acc, count, nodes, prec, batch) == (q.accelerator, q.count, q.nodes, q.precision, q.batch_size) \
                and net == q.network_gbps:
            out.append(q)
        else:
            out.append(HardwareQuery(acc, count, nodes, net, prec, batch, q.intra_gbps, q.parallelism,
                                     q.ps_count, q.ps_network_gbps, q.vcpus, q.transport))
    return out


def _rows(qs: Sequence[HardwareQuery], default_batch: int | None = None) -> dict[str, np.ndarray | list]:
    acc = [q.accelerator for q in qs]
    count = np.array([q.count for q in qs], dtype=float)
    nodes = np.array([q.nodes for q in qs], dtype=float)
    intra_default = features.intra_gbps(acc, count)
    intra = np.array([q.intra_gbps if q.intra_gbps else d for q, d in zip(qs, intra_default)], dtype=float)
    net = np.array([q.network_gbps if q.nodes > 1 else features.NO_LINK_GBPS for q in qs], dtype=float)
    ps = np.array([1.0 if q.parallelism == "ps" else 0.0 for q in qs])
    ps_net = np.array([q.ps_network_gbps if q.ps_network_gbps else n for q, n in zip(qs, net)], dtype=float)
    batch = np.array([default_batch if q.batch_size is None else q.batch_size for q in qs], dtype=float)
    prec = [q.precision for q in qs]
    keys: dict[tuple[str, str], str] = {}  # thousands of queries, a few (chip, precision) pairs
    chip = [keys.get(k) or keys.setdefault(k, chip_key(*k)) for k in zip(acc, prec)]
    return {"acc": acc, "prec": prec, "chip": chip, "batch": batch,
            "count": count, "nodes": nodes,
            "intra": intra, "net": net, "ps": ps, "ps_count": np.array([q.ps_count for q in qs], dtype=float),
            "ps_net": ps_net, "transport": [q.transport if q.nodes > 1 else None for q in qs]}


def _evaluate(m: FittedModel, work: prior.Work, r: dict[str, Any], framework_tf: float = 0.0):
    s = features.setup(r["acc"], r["prec"], batch=r["batch"], count=r["count"], nodes=r["nodes"],
                       intra_gbps=r["intra"], network_gbps=r["net"], ps=r["ps"], ps_count=r["ps_count"],
                       ps_network_gbps=r["ps_net"], tables=m.tables, transport=r["transport"])
    p = prior.prior(work, s, m.constants)
    # The trees have never seen an FP8 run (its peak lies outside every training row's): FP8 rows take the
    # correction of the 16-bit run they are on top of, and the prior alone carries what FP8 changes.
    s_f = s.at_16bit()
    p_f = p if s_f is s else prior.prior(work, s_f, m.constants)
    X = features.feature_matrix(work, s_f, p_f, np.full(len(r["acc"]), framework_tf))
    return s, p, m.forest.predict(X)


def _anchors(m: FittedModel, profile: Profile, work: prior.Work) -> _Anchors | None:
    usable: list[Measurement] = []
    for meas in profile.measurements:
        if meas.accelerator.lower() == "cpu" or meas.samples_per_second <= 0 or meas.nodes != 1:
            continue  # CPU runs say nothing about a GPU; multi-node runs lack their network
        try:
            acc = hardware.canonical_name(meas.accelerator)
        except UsageError:
            continue
        prec = meas.precision.lower() if meas.precision.lower() in PRECISIONS else "fp32"
        usable.append(Measurement(acc, max(1, meas.count), 1, max(1, meas.batch_size_per_device), prec,
                                  meas.samples_per_second, source=meas.source))
    if not usable:
        return None
    qs = [HardwareQuery(u.accelerator, u.count, 1, 0.0, u.precision, u.batch_size_per_device) for u in usable]
    r = _rows(qs)
    _, p, f = _evaluate(m, work, r)
    labels = tuple(f"{u.accelerator}×{u.count} bs{u.batch_size_per_device} {u.precision}" for u in usable)
    meas_sps = np.array([u.samples_per_second for u in usable])
    return _Anchors(np.log(meas_sps / p.samples_per_second), f, np.log(r["batch"]), labels,
                    np.log(p.samples_per_second / r["count"]), np.log(r["count"]),
                    tuple(r["chip"]))


def predict_many(profile: Profile, queries: Sequence[HardwareQuery], *, model_file: str | None = None) -> PredictionTable:
    """Predict every query for one profile in one vectorised pass (numpy only).

    Duplicated queries are evaluated once. Raises ``ProfileError`` for a profile without stats,
    ``UnknownAcceleratorError``/``UsageError`` for bad queries, ``ModelError`` for a missing model file.
    """
    _check_profile(profile)
    m = load_model(model_file)
    qs = _canonical_queries(queries)
    n_in = len(qs)
    if n_in == 0:
        z = np.zeros(0)
        return PredictionTable(z, z, z, z, z, z, np.zeros(0, bool), (), ())
    uniq: dict[HardwareQuery, int] = {}
    inverse = np.array([uniq.setdefault(q, len(uniq)) for q in qs])
    # Each multi-device query also needs its one-node and one-device versions (for the scaling cap).
    # Queries that differ only in their node count share both variants: make each pair once (the
    # recommender asks for every shape at 1..64 nodes).
    base, pairs = {}, {}
    for q, i in list(uniq.items()):
        if q.count * q.nodes > 1:
            key = _ALL_BUT_NODES(q)
            ids = pairs.get(key)
            if ids is None:
                node1, dev1 = _variant(q, q.count, 1), _variant(q, 1, 1)
                ids = pairs[key] = (uniq.setdefault(node1, len(uniq)), uniq.setdefault(dev1, len(uniq)))
            base[i] = ids
    uq = list(uniq)
    work = features.work_from_stats(profile.stats)
    r = _rows(uq, int(profile.stats.batch_size))
    s, p, f = _evaluate(m, work, r)
    anchors = _anchors(m, profile, work)
    devices = r["count"] * r["nodes"]
    multi = devices > 1
    band_scale = np.ones(len(uq))
    sps, w = _shipped_sps(m, anchors, r, p, f)
    if anchors is not None:
        kind = "anchored"
        n_w = (w > 0).sum(axis=1)
        basis = [f"anchored on {anchors.labels[b]}" + (f" (+{n - 1} more)" if n > 1 else "")
                 for b, n in zip(np.argmax(w, axis=1), n_w)]
        # The band widens with the hardware jump from the anchors (one-device prior vs theirs).
        dev1 = np.arange(len(uq))
        for i, (_, d1) in base.items():
            dev1[i] = d1
        jump = (w * np.abs(np.log(p.samples_per_second[dev1])[:, None] - anchors.log_prior_per_device[None, :])).sum(1)
        band_scale = 1.0 + m.jump_slope * jump
    else:
        kind, basis = "stats-only", ["stats-only"] * len(uq)
    # Accelerators with no measured row (none of the same chip) in the training data, unless this profile
    # measured the chip at the query's arithmetic: then it is measured for this workload.
    own = _own_chips(anchors)
    known = {(a, c): _measured_here(m, own, a, c) for a, c in set(zip(r["acc"], r["chip"]))}
    unmeasured = np.array([not known[k] for k in zip(r["acc"], r["chip"])])
    if anchors is not None and unmeasured.any() and m.carried_scaling:
        sps = _carry_scaling(m, sps, p.samples_per_second, f, r, base, unmeasured)
    if unmeasured.any() and m.transition:
        sps = sps * _transition(m, work, anchors, r, sps, unmeasured)  # same factor at every device count
    sps = _cap_scaling(sps, r, base)
    # issue 33: never faster than the wire lets the all-reduce finish (cloudfit/catalog/network.py)
    sps = np.minimum(sps, network.wire_bound_sps(work.gradient_bytes, r["count"], r["nodes"], r["batch"], r["net"],
                                                 r["intra"], r["ps"], r["transport"]))
    launch = prior.launch_bound_sps(work.kernels, r["batch"], devices)
    vcpus = np.array([np.inf if q.vcpus is None else float(q.vcpus) for q in uq])
    launch = np.minimum(launch, r["nodes"] * prior.input_bound_sps(profile.stats.input, vcpus))
    sps = np.minimum(sps, launch)
    novelty = "new" if m.novel(work) else "seen"
    q_single, q_multi = m.log_quantiles[f"single-{kind}|{novelty}"], m.log_quantiles[f"multi-{kind}|{novelty}"]
    if kind == "stats-only" and m.source_quantiles:  # a profile's stack is one no training source ran
        q_single, q_multi = m.source_quantiles["single-stats-only"], m.source_quantiles["multi-stats-only"]
    lo_q = np.where(multi, q_multi[0], q_single[0]) * band_scale
    hi_q = np.where(multi, q_multi[1], q_single[1]) * band_scale
    # Accelerators with no measured row: say so, and widen the band to what leave-one-accelerator-out says
    # such predictions miss by.
    if unmeasured.any() and m.unmeasured_quantiles:
        u_single, u_multi = m.unmeasured_quantiles[f"single-{kind}"], m.unmeasured_quantiles[f"multi-{kind}"]
        lo_q = np.where(unmeasured, np.minimum(lo_q, np.where(multi, u_multi[0], u_single[0]) * band_scale), lo_q)
        hi_q = np.where(unmeasured, np.maximum(hi_q, np.where(multi, u_multi[1], u_single[1]) * band_scale), hi_q)
        basis = [b + f"; {a}: no measured rows, spec-based" if u else b for b, a, u in zip(basis, r["acc"], unmeasured)]
    # issue 33, bands by distance: one carried a generation or more (or to a precision never measured on its
    # reference) takes the band leave-one-generation-out calibrated at that distance instead — never narrower than
    # the same query's band on a measured accelerator where that band knows more: an anchored one (it widens with
    # the hardware jump from the anchors, which the generation residuals, all one or two hops from their anchors,
    # do not see; the band widens with the distance) and a workload unlike every training workload (the held-out
    # generations' workloads were all measured on older ones: their residuals do not show a new workload's miss)
    if unmeasured.any() and m.generation_quantiles:
        dists = {k: extrapolation_distance(m, *k) for k in {(a, pr) for a, pr, u in zip(r["acc"], r["prec"], unmeasured) if u}}
        dist = np.array([dists[a, pr] if u else 0 for a, pr, u in zip(r["acc"], r["prec"], unmeasured)])
        far = dist > 0
        if far.any():
            g_lo, g_hi = generation_quantiles(m, kind, multi[far], dist[far])
            if novelty == "new" or kind == "anchored":
                g_lo = np.minimum(g_lo, np.where(multi, q_multi[0], q_single[0])[far] * band_scale[far])
                g_hi = np.maximum(g_hi, np.where(multi, q_multi[1], q_single[1])[far] * band_scale[far])
            lo_q[far], hi_q[far] = g_lo, g_hi
    step = devices * r["batch"] / sps
    scale = step / p.step_time_s  # split the final step time in the prior's proportions
    compute, comm = p.compute_s * scale, p.communication_s * scale
    need = prior.memory_needed_bytes(work, s, m.constants)
    cap = prior.memory_capacity_bytes(s, m.constants)
    fits = need <= cap
    reasons = ["" if ok else f"needs ~{nd / 2**30:.1f} GiB per device at batch {int(b)}, "
               f"{a} has {hardware.get(a).memory_gib:g} GiB" for ok, nd, b, a in zip(fits, need, r["batch"], r["acc"])]
    cols = [sps, sps * np.exp(lo_q), np.minimum(sps * np.exp(hi_q), launch), step, compute, comm]
    cols = [np.where(fits, c, 0.0)[inverse] for c in cols]
    return PredictionTable(*cols, fits=fits[inverse], basis=tuple(basis[i] for i in inverse),
                           reason=tuple(reasons[i] for i in inverse))


def extrapolation_distance(m: FittedModel, accelerator: str, precision: str) -> int:
    """``features.distance`` of an accelerator with no measured row from the measured one nearest in spec at the
    precision (its reference; where ``_transition`` carries the prediction from); 0 for a measured one."""
    if m.measured(accelerator):
        return 0
    return _distance(m.measured_accelerators, tuple(sorted(m.measured_precisions.items())), accelerator, precision)


@functools.lru_cache(maxsize=256)
def _distance(measured: tuple[str, ...], classes: tuple, accelerator: str, precision: str) -> int:
    ref = features.nearest_measured(measured, accelerator, "bf16" if precision == "fp8" else precision)
    return features.distance(accelerator, ref, precision, dict(classes))


def generation_quantiles(m: FittedModel, kind: str, multi: np.ndarray, distance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) log band per row at ``distance`` ≥ 1 (``fit.generation_band``); beyond the last calibrated
    distance D, D's band × distance / D (never narrower than D's)."""
    multi, distance = np.asarray(multi, dtype=bool), np.asarray(distance, dtype=int)
    lo, hi = np.zeros(len(distance)), np.zeros(len(distance))
    for mu in (False, True):
        q = np.array(m.generation_quantiles[f"{'multi' if mu else 'single'}-{kind}"])
        sel = multi == mu
        d = distance[sel]
        top = len(q)
        a, b = q[np.minimum(d, top) - 1].T
        s = np.maximum(1.0, d / top)
        lo[sel], hi[sel] = np.minimum(a, a * s), np.maximum(b, b * s)
    return lo, hi


def _shipped_sps(m: FittedModel, anchors: _Anchors | None, r: dict[str, Any], p: prior.PriorResult,
                 f: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(samples/s, anchor weights) before the caps: stats-only prior·exp(λ_s·f) (λ_s: leave-one-source-out,
    ``FittedModel.stats_lambda``); anchored prior·exp(λ·f) on both ends, λ per single/multi-device chosen by
    grouped CV."""
    if anchors is None:
        return p.samples_per_second * np.exp(m.stats_lambda * f), None
    multi = r["count"] * r["nodes"] > 1
    lam = np.where(multi, m.anchor_lambda["multi"], m.anchor_lambda["single"])
    shift, w = anchor_shift(anchors, np.log(r["batch"]), r["count"], r["nodes"], lam, r["chip"])
    return p.samples_per_second * np.exp(lam * f + shift), w


def _carry_scaling(m: FittedModel, sps: np.ndarray, prior_sps: np.ndarray, f: np.ndarray, r: dict[str, Any],
                   base: dict[int, tuple[int, int]], unmeasured: np.ndarray) -> np.ndarray:
    """Anchored multi-device rows of accelerators with no measured row: the multi-device / one-device ratio moves
    μ (``FittedModel.carried_scaling``) of the way to the full model's (prior · exp(f), the correction learned on
    every measured multi-device row, at most linear) where that is lower — the anchors fix the one-device level,
    not how this accelerator scales, and the regime's λ may have dropped the correction (issue 33). Never raises
    a prediction; measured accelerators keep theirs."""
    out = sps.copy()
    pairs = np.array([(i, d1) for i, (_, d1) in base.items() if unmeasured[i]], dtype=int).reshape(-1, 2)
    i, d1 = pairs[:, 0], pairs[:, 1]
    full = np.minimum(np.log(prior_sps[i] / prior_sps[d1]) + f[i] - f[d1], np.log(r["count"][i] * r["nodes"][i]))
    out[i] = sps[i] * np.exp(m.carried_scaling * np.minimum(0.0, full - np.log(sps[i] / sps[d1])))
    return out


#: Precisions the transition prior has pairs of (no pair in the training table is FP8: FP8 stays on the prior)
TRANSITION_PRECISIONS = ("fp32", "tf32", "fp16", "bf16")


@functools.lru_cache(maxsize=64)
def _catalog_specs(precision: str, count: int) -> tuple[tuple[str, ...], np.ndarray, np.ndarray]:
    """(accelerators, transition logs, weak spec dominance matrix dom[a, b]: a ≥ b on the tensor peak at the
    precision, the FP32 rate, the memory bandwidth, sustained and nominal, and the link between ``count``
    devices in one VM)."""
    accs = tuple(sorted(hardware.ACCELERATORS))
    logs = features.transition_logs(accs, [precision] * len(accs))
    spec = np.array([[hardware.get(a).peak_tflops(precision), hardware.get(a).fp32_tflops,
                      hardware.get(a).memory_bandwidth_gbps, hardware.get(a).sustained_bandwidth_gbps,
                      hardware.intra_node_gbps(a, count) if count > 1 else 0.0] for a in accs])
    dom = np.all(spec[:, None, :] >= spec[None, :, :], axis=2)
    return accs, logs, dom


def _transition(m: FittedModel, work: prior.Work, anchors: _Anchors | None, r: dict[str, Any], sps: np.ndarray,
                unmeasured: np.ndarray) -> np.ndarray:
    """Per query row, the factor that moves an unmeasured accelerator's prediction onto the transition prior
    (issue 33); 1 for measured accelerators.

    One device, at the row's precision and batch, for every catalog accelerator: an unmeasured one is the
    shipped prediction on the measured accelerator nearest in spec (|Δ log peak| + |Δ log bandwidth|, ties by
    name) × exp(c · x), x the log ratios of ``features.TRANSITION_TERMS`` split by the tensor-op share (mean
    of the two accelerators', as fitted); the log jump is clipped
    between 0 and the shipped model's own jump to the target (the transition takes back part of the shipped
    extrapolation, never reverses or exceeds it: a step bound by kernel latency, which the prior knows, moves
    less than its specs). That one-device factor carries the model's multi-device prediction of the same
    accelerator (its scaling stays the model's, after ``_carry_scaling``). Then spec order: an unmeasured accelerator is at least every
    accelerator it dominates and at most every measured one that dominates it — over the whole catalog at one
    device, among the accelerators asked at the same shape otherwise (measured ones keep the shipped
    prediction; the clamp is monotone, so dominance holds across references)."""
    c = np.asarray(m.transition, dtype=float)
    factor = np.ones(len(r["acc"]))
    prec16 = ["bf16" if p_ == "fp8" else p_ for p_ in r["prec"]]  # FP8 rows: the factor of their 16-bit run
    todo = [i for i in np.flatnonzero(unmeasured) if prec16[i] in TRANSITION_PRECISIONS]
    if not todo:
        return factor
    accs = tuple(sorted(hardware.ACCELERATORS))
    n = len(accs)
    idx = {a: j for j, a in enumerate(accs)}
    own_chips = _own_chips(anchors)
    one = sorted({(prec16[i], float(r["batch"][i])) for i in todo})
    rr = _rows([HardwareQuery(a, 1, 1, 0.0, p_, int(b_)) for p_, b_ in one for a in accs])
    _, p1, f1 = _evaluate(m, work, rr)
    sps1 = _shipped_sps(m, anchors, rr, p1, f1)[0].reshape(len(one), n)
    share1 = (p1.tensor_s / np.maximum(p1.compute_s, 1e-300)).reshape(len(one), n)
    mem1 = np.maximum(p1.memory_s, 1e-300).reshape(len(one), n)
    carry, final1 = {}, {}  # (precision, batch) → per catalog accelerator
    meas_at: dict[str, np.ndarray] = {}  # per precision: measured in the table, or by this profile on the chip
    for u, (prec, batch) in enumerate(one):
        meas = meas_at.setdefault(prec, np.array([_measured_here(m, own_chips, a, chip_key(a, prec)) for a in accs]))
        mi = np.flatnonzero(meas)
        _, logs, dom = _catalog_specs(prec, 1)
        t = np.ones(n)
        for g in np.flatnonzero(~meas):
            k = mi[np.argmin(np.abs(logs[mi, 0] - logs[g, 0]) + np.abs(logs[mi, 1] - logs[g, 1]))]
            x = features.transition_design(logs[g] - logs[k], [np.log(mem1[u, k] / mem1[u, g])], [0.0],
                                           [0.5 * (share1[u, k] + share1[u, g])])[0]
            own = np.log(sps1[u, g] / sps1[u, k])
            t[g] = np.exp(np.clip(x @ c, min(0.0, own), max(0.0, own)) - own)  # exactly 1 where clipped at own
        raw = sps1[u] * t
        fin = raw.copy()
        for g in np.flatnonzero(~meas):
            above = dom[:, g] & meas
            fin[g] = min(raw[dom[g]].max(), raw[above].min() if above.any() else np.inf)
        carry[(prec, batch)], final1[(prec, batch)] = t, fin / sps1[u]
    # several devices: the one-device factor, then spec order among the accelerators asked at the same shape
    shapes: dict[tuple, list[int]] = {}
    for i in range(len(r["acc"])):
        if prec16[i] in TRANSITION_PRECISIONS and (prec16[i], float(r["batch"][i])) in carry:
            key = (prec16[i], r["prec"][i], float(r["batch"][i]), float(r["count"][i]), float(r["nodes"][i]),
                   float(r["net"][i]), float(r["ps"][i]), float(r["ps_count"][i]), float(r["ps_net"][i]))
            shapes.setdefault(key, []).append(i)
    for key, rows in shapes.items():
        rows_u = [i for i in rows if unmeasured[i]]
        if not rows_u:
            continue
        if key[3] * key[4] == 1:
            for i in rows_u:
                factor[i] = final1[key[0], key[2]][idx[r["acc"][i]]]
            continue
        t = carry[key[0], key[2]]
        dom = _catalog_specs(key[0], int(key[3]))[2]
        js = np.array([idx[r["acc"][i]] for i in rows])
        raw = sps[rows] * t[js]
        isu = np.array([bool(unmeasured[i]) for i in rows])
        for a, i in enumerate(rows):
            if not isu[a]:
                continue
            below = dom[js[a], js]
            above = dom[js, js[a]] & ~isu
            fin = min(raw[below].max(), raw[above].min() if above.any() else np.inf)
            factor[i] = fin / sps[i]
    return factor


#: Every field of a query but its node count (what the one-node and one-device variants depend on).
_ALL_BUT_NODES = operator.attrgetter(*(f.name for f in dataclasses.fields(HardwareQuery) if f.name != "nodes"))


def _variant(q: HardwareQuery, count: int, nodes: int) -> HardwareQuery:
    # dataclasses.replace is ~5 µs a call; the recommender makes thousands of these
    return HardwareQuery(q.accelerator, count, nodes, q.network_gbps, q.precision, q.batch_size, q.intra_gbps,
                         q.parallelism, q.ps_count, q.ps_network_gbps, q.vcpus, q.transport)


def _cap_scaling(sps: np.ndarray, r: dict[str, Any], base: dict[int, tuple[int, int]]) -> np.ndarray:
    """Never predict superlinear data-parallel scaling.

    With a fixed per-device batch, n nodes cannot run more than n times one node, nor d devices more
    than d times one device. The learned correction has no such constraint and, extrapolating over
    node counts it has seen little of, sometimes predicted more samples/s per node on 8 nodes than on
    one; physics wins here.
    """
    out = sps.copy()
    for i, (node1, dev1) in base.items():
        out[i] = min(out[i], r["nodes"][i] * sps[node1], r["count"][i] * r["nodes"][i] * sps[dev1])
    return out


def _catalog_for(machine_type: str | None):
    """The shipped catalog of the cloud ``machine_type`` belongs to (AWS ``g4dn.12xlarge``, Nebius ``gpu-…``);
    GCP's without one."""
    from cloudfit import catalog

    return catalog.load(clouds=(hardware.cloud_of_machine_type(machine_type),) if machine_type else None)


def _offering(machine_type: str | None, accelerator: str, count: int):
    """The catalog's VM shape for ``machine_type`` (or its largest VM with ``count`` × ``accelerator``); None if none."""
    offs = [o for o in _catalog_for(machine_type).offerings
            if o.accelerator == accelerator and o.accelerators_per_node == count
            and (machine_type is None or o.machine_type == machine_type)]
    return max(offs, key=lambda o: (o.vcpus, o.machine_type)) if offs else None


def _network_for(machine_type: str | None, accelerator: str, count: int,
                 network_gbps: float | None) -> tuple[float, str | None]:
    """(Gbit/s, fabric) of the VM link: ``network_gbps`` as given (the fabric of ``machine_type`` if named), else
    the catalog VM's (``machine_type``, or the largest VM with ``count`` × ``accelerator``)."""
    if network_gbps is not None:
        if network_gbps <= 0:
            raise UsageError(f"network bandwidth must be positive, got {network_gbps!r} Gbps")
        return float(network_gbps), (network.fabric_of(machine_type) if machine_type else None)
    offs = [o for o in _catalog_for(machine_type).offerings
            if o.accelerator == accelerator and o.accelerators_per_node == count
            and (machine_type is None or o.machine_type == machine_type)]
    if not offs:
        what = machine_type or f"{count}× {accelerator}"
        raise UsageError(f"no catalog offering for {what}; give the VM's network bandwidth (network_gbps)")
    o = max(offs, key=lambda o: (o.vcpus, o.machine_type))
    return (hardware.vm_network_gbps(o.machine_type, o.accelerator, o.accelerators_per_node, o.vcpus),
            network.fabric_of(o.machine_type))


def predict(profile: Profile, accelerator: str, count: int = 1, nodes: int = 1, *, precision: str | None = None,
            batch_size: int | None = None, machine_type: str | None = None, network_gbps: float | None = None,
            parallelism: str = "allreduce") -> Prediction:
    """Predicted training throughput of ``profile`` on ``nodes`` × ``count`` ``accelerator``.

    ``precision`` defaults to fp16 (mixed precision; accelerators without fast fp16 run it at their
    fp32 rate), ``batch_size`` (per device) to the profile's. Across nodes the link is the VM's
    network: ``network_gbps``, else that of ``machine_type`` (or the catalog's largest VM with
    ``count`` of these accelerators). A batch that does not fit memory gives ``fits=False`` and a reason.
    """
    _check_profile(profile)
    acc = hardware.canonical_name(accelerator)
    net, fabric = 0.0, None
    if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes > 1:
        net, fabric = _network_for(machine_type, acc, count, network_gbps)
    vcpus = None
    if machine_type is not None:  # the VM's vCPUs bound the input pipeline (image decoding)
        off = _offering(machine_type, acc, count)
        vcpus = float(off.vcpus) if off is not None else None
    q = HardwareQuery(acc, count, nodes, net, precision or DEFAULT_PRECISION, batch_size, parallelism=parallelism,
                      vcpus=vcpus, transport=fabric)
    return predict_many(profile, [q]).row(0)


def memory_fits(profile: Profile, accelerator: str, batch_size: int | None, precision: str | None) -> tuple[bool, str]:
    """(fits, reason): whether one device holds weights, gradients, optimizer state and activations."""
    t = predict_many(profile, [HardwareQuery(accelerator, 1, 1, 0.0, precision or DEFAULT_PRECISION, batch_size)])
    return bool(t.fits[0]), t.reason[0] if not t.fits[0] else ""
