"""Kernel-level efficiency: how much of its roofline one GPU kernel achieves, from NeuSight's measurements.

``data/kernels/neusight_kernels.csv.xz`` (built by ``scripts/build_kernels.py``; provenance in
``data/kernels/PROVENANCE.md``) holds per-kernel latencies measured by one method (PyTorch 2.1, CUDA 12.1,
fp32) on eight NVIDIA GPUs: GEMM (linear, bmm), convolution (as its implicit GEMM) and memory-bound ops
(element-wise, layer norm, softmax). Per op class a gradient-boosted model learns

    log(latency / roofline),   roofline = max(FLOPs / sustained fp32 peak, bytes / memory bandwidth)

The *sustained* peak is the datasheet fp32 peak capped by what the board's power can feed
(:func:`sustained_fp32_tflops`): min(peak, TDP / e), e = 15 W per TFLOPS at 12 nm × node / 12 nm (energy per
FLOP ∝ feature size). It binds on the 70 W cards only — T4 0.58 of its peak, P4 0.68, L4 0.38, A10 0.48,
L40S 0.61 — and not on any 250 W+ datacentre board. Without it the trees, which cannot extrapolate, put a
held-out L4 (72 W, 30 TFLOPS: it sustains 27–29% of its peak on long sgemm) at a T4's fraction; with it the
L4 is where its power puts it. The constant and the exponent were chosen by leave-one-training-GPU-out
cross-validation on the five training GPUs only (bench/RESULTS_perf.md).

Features: the kernel's shape as it meets the GPU — waves of 128×128 and 64×64 output tiles over the SMs and
the last wave's fill, reduction depth, arithmetic intensity against the (sustained) ridge point, working set
against L2, roofline times (small kernels are latency-bound) — the shape itself (log batch count and output
sides, the same on every GPU) and two spec ratios (FP32 lanes per SM, memory bandwidth per SM). Not the raw
SM count or clock: they reach the model through the waves and the peak, and as features of their own they
let the trees recognise a GPU (with eight GPUs, a held-out H100 fell among the L4's leaves by its clock:
leave-H100-out MAPE 118% with them, 20% without). Never a GPU's name: a GPU that is not in the data gets a
prediction from its specs (``cloudfit.catalog.hardware``; the process node from its architecture,
:data:`PROCESS_NM`). The evaluation (:func:`leave_gpu_out`, shown by ``cloudfit model eval``) trains on P4,
P100, T4, V100 and A100-40GB and tests on A100-80GB, H100 and L4 (convolutions: A100-80GB only — NeuSight
measured no convolution on H100 or L4).

The measured boards differ from the canonical specs in a few numbers (:data:`BOARDS`): NeuSight's V100 is the
PCIe card (1370 MHz, 14.0 TFLOPS, 250 W), its A100s are PCIe cards (250 W; the 80 GB one 1935 GB/s, 300 W).

Fitting needs xgboost and is deterministic (``nthread=1``, fixed seed); nothing here is imported on the
prediction path.
"""

from __future__ import annotations

import csv
import io
import lzma
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cloudfit.catalog import hardware
from cloudfit.perf.tables import BYTES_LOG2, FLOPS_LOG2, Tables  # noqa: F401  (re-exported)

OP_CLASSES = ("gemm", "conv", "memory")
TRAIN_GPUS = ("P4", "P100", "T4", "V100", "A100")
TEST_GPUS = ("A100-80GB", "H100", "L4")

#: Specs of the boards NeuSight measured where they differ from the canonical accelerator's.
BOARDS: dict[str, dict[str, float]] = {
    "V100": {"fp32_tflops": 14.0, "clock_mhz": 1370.0, "tdp_w": 250.0},
    "A100": {"tdp_w": 250.0},
    "A100-80GB": {"memory_bandwidth_gbps": 1935.0, "tdp_w": 300.0},
}

#: Process node in nm per architecture (TSMC N4/4N/4NP are 5 nm-class processes), and boards whose chip
#: differs from their architecture's flagship: the A10 is GA102 on Samsung 8N, not GA100 on TSMC N7.
PROCESS_NM = {"Kepler": 28.0, "Maxwell": 28.0, "Pascal": 16.0, "Volta": 12.0, "Turing": 12.0, "Ampere": 7.0,
              "Ada Lovelace": 5.0, "Hopper": 5.0, "Blackwell": 5.0}
PROCESS_NM_BOARD = {"A10": 8.0}

#: Board watts per sustained fp32 TFLOPS at 12 nm (energy per FLOP scales with the node: capacitance ∝
#: feature size). Chosen with the exponent 1 by leave-one-training-GPU-out cross-validation on the five
#: training GPUs only (grid 12–30 W/TFLOPS × exponent 0, 0.5, 1, 1.5; bench/RESULTS_perf.md).
POWER_W_PER_TFLOPS_12NM = 15.0
POWER_NODE_EXPONENT = 1.0

FEATURES = ("log_waves_128", "wave_fill_128", "log_waves_64", "wave_fill_64", "log_k", "log_intensity_over_ridge",
            "log_compute_us", "log_memory_us", "log_bytes_over_l2", "lanes_per_sm", "log_bw_per_sm", "log_b", "log_m",
            "log_n")
#: Features per op class: the shape columns (log b, m, n) for the GEMM-like classes only — a memory-bound op's
#: "shape" is rows × row length, and the tables probe it at one row (b = 1), below every measured kernel (b ≥ 4),
#: where the trees' extrapolation gave the H100 (no memory-bound kernel measured) 3–5× the tiny-kernel speed.
CLASS_FEATURES = {"gemm": FEATURES, "conv": FEATURES, "memory": FEATURES[:-3]}
_CLASS_COLS = {cls: [FEATURES.index(f) for f in names] for cls, names in CLASS_FEATURES.items()}

XGB_PARAMS = {"objective": "reg:squarederror", "eta": 0.05, "max_depth": 6, "min_child_weight": 5.0,
              "subsample": 0.8, "nthread": 1, "seed": 20261123, "tree_method": "hist", "base_score": 0.0}
ROUNDS = 600


def data_path() -> Path:
    from cloudfit.resources import shipped

    return shipped("data/kernels/neusight_kernels.csv.xz")


@dataclass(frozen=True)
class Kernels:
    op: np.ndarray
    op_class: np.ndarray
    accelerator: np.ndarray
    b: np.ndarray
    m: np.ndarray
    n: np.ndarray  # 1 for memory-bound ops
    k: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    latency_us: np.ndarray

    def __len__(self) -> int:
        return len(self.latency_us)

    def take(self, idx: np.ndarray) -> "Kernels":
        return Kernels(*(getattr(self, f)[idx] for f in self.__dataclass_fields__))


def load(path: Path | None = None) -> Kernels:
    text = lzma.decompress((path or data_path()).read_bytes()).decode()
    rows = list(csv.DictReader(io.StringIO(text)))

    def num(key: str, empty: float = 1.0) -> np.ndarray:
        return np.array([float(r[key]) if r[key] != "" else empty for r in rows])

    return Kernels(np.array([r["op"] for r in rows]), np.array([r["op_class"] for r in rows]),
                   np.array([r["accelerator"] for r in rows]), num("b"), num("m"), num("n"), num("k"),
                   num("flops"), num("bytes"), num("latency_us"))


def specs(accelerators: np.ndarray, boards: bool = True) -> dict[str, np.ndarray]:
    """Per row: fp32 peak (TFLOPS), bandwidth (GB/s), SMs, clock (MHz), L2 (MiB), board power (W) and process
    node (nm) of the board NeuSight measured (``boards``) or of the canonical accelerator."""
    keys = ("fp32_tflops", "memory_bandwidth_gbps", "sms", "clock_mhz", "l2_mib", "tdp_w")
    out: dict[str, list[float]] = {k: [] for k in keys + ("node_nm",)}
    cache: dict[str, tuple[float, ...]] = {}
    for a in accelerators:
        v = cache.get(a)
        if v is None:
            acc, board = hardware.get(a), BOARDS.get(a, {}) if boards else {}
            node = PROCESS_NM_BOARD.get(acc.name, PROCESS_NM.get(acc.arch, float("nan")))
            v = cache[a] = tuple(float(board.get(k, getattr(acc, k))) for k in keys) + (node,)
        for k, x in zip(out, v):
            out[k].append(x)
    return {k: np.array(v) for k, v in out.items()}


def sustained_fp32_tflops(s: dict[str, np.ndarray]) -> np.ndarray:
    """The fp32 peak a board can hold within its power: min(peak, TDP / e(node)), e = watts per TFLOPS,
    :data:`POWER_W_PER_TFLOPS_12NM` × (node / 12 nm)^:data:`POWER_NODE_EXPONENT`. Binds on the 70 W cards
    (T4 0.58 of its peak, P4 0.68, L4 0.38), not on the 250 W+ boards (no node known: no ceiling)."""
    e = POWER_W_PER_TFLOPS_12NM * (s["node_nm"] / 12.0) ** POWER_NODE_EXPONENT
    cap = np.where(np.isfinite(e), s["tdp_w"] / (s["fp32_tflops"] * np.where(np.isfinite(e), e, 1.0)), 1.0)
    return s["fp32_tflops"] * np.minimum(1.0, cap)


def roofline_us(kern: Kernels, s: dict[str, np.ndarray], sustained: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(compute, memory) time at the power-sustained fp32 peak (:func:`sustained_fp32_tflops`; the datasheet
    peak with ``sustained=False``) and the datasheet bandwidth, microseconds."""
    peak = sustained_fp32_tflops(s) if sustained else s["fp32_tflops"]
    return kern.flops / (peak * 1e6), kern.bytes / (s["memory_bandwidth_gbps"] * 1e3)


def features(kern: Kernels, boards: bool = True) -> np.ndarray:
    s = specs(kern.accelerator, boards)
    t_c, t_m = roofline_us(kern, s)
    sms = s["sms"]
    cols = []
    for tile in (128.0, 64.0):
        tiles = kern.b * np.ceil(kern.m / tile) * np.ceil(kern.n / tile)
        waves = tiles / sms
        cols += [np.log(waves), tiles / (np.ceil(waves) * sms)]
    ridge = sustained_fp32_tflops(s) * 1e3 / s["memory_bandwidth_gbps"]  # FLOPs per byte where compute = memory time
    lanes = s["fp32_tflops"] * 1e6 / (2.0 * sms * s["clock_mhz"])
    # SMs and clock enter only through the waves and the peak: as raw features they name the GPU (five
    # training GPUs are five points; H100's 1.98 GHz sits next to L4's 2.04, not next to any training GPU)
    cols += [np.log(kern.k), np.log(kern.flops / kern.bytes / ridge), np.log(t_c), np.log(t_m),
             np.log(kern.bytes / (s["l2_mib"] * 2**20)), lanes, np.log(s["memory_bandwidth_gbps"] / sms),
             # the shape itself (the same on every GPU, so it cannot name one): batch count and output sides
             np.log(kern.b), np.log(kern.m), np.log(kern.n)]
    X = np.column_stack(cols)
    return X.astype(np.float32).astype(np.float64)


def target(kern: Kernels) -> np.ndarray:
    """log(measured latency / roofline latency)."""
    t_c, t_m = roofline_us(kern, specs(kern.accelerator))
    return np.log(kern.latency_us / np.maximum(t_c, t_m))


def fit(kern: Kernels):
    """One numpy forest (``cloudfit.perf.trees.Forest``) per op class present in ``kern``."""
    try:
        import xgboost as xgb
    except ImportError as e:  # pragma: no cover - dev dependency
        from cloudfit.errors import ModelError

        raise ModelError("fitting needs xgboost (pip install xgboost-cpu)") from e
    from cloudfit.perf.trees import Forest, export_booster

    X, y = features(kern), target(kern)
    out = {}
    for cls in OP_CLASSES:
        sel = kern.op_class == cls
        if not sel.any():
            continue
        d = xgb.DMatrix(X[sel][:, _CLASS_COLS[cls]].astype(np.float32), label=y[sel].astype(np.float32),
                        feature_names=list(CLASS_FEATURES[cls]))
        out[cls] = Forest.from_dict(export_booster(xgb.train(dict(XGB_PARAMS), d, num_boost_round=ROUNDS)))
    return out


def predict_us(forests: dict[str, Any], kern: Kernels, boards: bool = True) -> np.ndarray:
    X = features(kern, boards)
    t_c, t_m = roofline_us(kern, specs(kern.accelerator, boards))
    out = np.full(len(kern), np.nan)
    for cls, forest in forests.items():
        sel = kern.op_class == cls
        if sel.any():
            out[sel] = np.maximum(t_c, t_m)[sel] * np.exp(forest.predict(X[sel][:, _CLASS_COLS[cls]]))
    return out


def leave_gpu_out(kern: Kernels | None = None, train_gpus=TRAIN_GPUS, test_gpus=TEST_GPUS) -> dict[str, Any]:
    """Fit on ``train_gpus``, predict every kernel of ``test_gpus``. Per op (linear, bmm, conv, element-wise
    ops, layer norm, softmax), per op class and per test GPU: MAPE and median APE of the latency, for the
    model and for the roofline with one median efficiency per op class fitted on the training GPUs."""
    kern = kern or load()
    train = np.isin(kern.accelerator, train_gpus)
    test = np.isin(kern.accelerator, test_gpus)
    forests = fit(kern.take(np.flatnonzero(train)))
    tk = kern.take(np.flatnonzero(test))
    pred = predict_us(forests, tk)
    # baseline: the roofline × the training GPUs' median latency/roofline ratio of the op class
    tr = kern.take(np.flatnonzero(train))
    t_c, t_m = roofline_us(tr, specs(tr.accelerator), sustained=False)
    y_train = np.log(tr.latency_us / np.maximum(t_c, t_m))
    t_c, t_m = roofline_us(tk, specs(tk.accelerator), sustained=False)
    base = np.maximum(t_c, t_m) * np.array([np.exp(np.median(y_train[kern.op_class[train] == c])) for c in tk.op_class])
    ape, ape_b = np.abs(pred / tk.latency_us - 1), np.abs(base / tk.latency_us - 1)
    group = np.where(np.isin(tk.op, ("linear", "bmm", "conv", "ln", "softmax")), tk.op, "element-wise")

    def block(sel: np.ndarray) -> dict[str, Any]:
        return {"n": int(sel.sum()), "mape": float(ape[sel].mean()), "mdape": float(np.median(ape[sel])),
                "roofline_mape": float(ape_b[sel].mean()),
                "log_bias": float(np.median(np.log(pred[sel] / tk.latency_us[sel])))}

    report: dict[str, Any] = {"train": list(train_gpus), "test": list(test_gpus), "rows_train": int(train.sum()),
                              "rows_test": int(test.sum()), "classes": {}, "ops": {}}
    for cls in OP_CLASSES:
        sel = tk.op_class == cls
        if sel.any():
            report["classes"][cls] = dict(block(sel), gpus={g: block(sel & (tk.accelerator == g))
                                                            for g in test_gpus if (sel & (tk.accelerator == g)).any()})
    for op in ("linear", "bmm", "conv", "element-wise", "ln", "softmax"):
        sel = group == op
        if sel.any():
            report["ops"][op] = dict(block(sel), gpus={g: block(sel & (tk.accelerator == g))
                                                       for g in test_gpus if (sel & (tk.accelerator == g)).any()})
    return report


# --------------------------------------------------------------------------------------------
# Efficiency tables: what the end-to-end prior uses (cloudfit.perf.prior.compute_time)

def _sig4(x: float) -> float:
    return float(f"{x:.4g}")


def _time_monotone(fraction: np.ndarray, grid_log2: np.ndarray) -> np.ndarray:
    """A bigger kernel never takes less time: along the grid, the achieved fraction may at most double per
    doubling of the size (its time, size / (peak × fraction), then never falls; between grid points too, as
    the prior interpolates log fractions linearly in log2 size). Where the trees say a kernel twice the size
    runs faster, the smaller one is given the larger one's time (the envelope runs down from the large,
    measured sizes: a running minimum of time; latency-bound small kernels, whose time is flat, are left as
    they are)."""
    e = np.array(fraction, dtype=float)
    step = np.diff(np.asarray(grid_log2, dtype=float))
    for i in range(len(e) - 2, -1, -1):
        # a hair over half, so the tables' rounding to 4 significant digits cannot turn the step back
        e[i] = max(e[i], e[i + 1] / 2.0 ** step[i] * (1.0 + 1e-3))
    return e


def efficiency_tables(forests: dict[str, Any], accelerators: list[str]) -> Tables:
    """Evaluate the fitted kernel models on the table grids for every accelerator (by its specs)."""
    mem, gemm = {}, {}
    by = 2.0 ** np.array(BYTES_LOG2, dtype=float)
    fl = 2.0 ** np.array(FLOPS_LOG2, dtype=float)
    for acc in accelerators:
        # element-wise unary op over E fp32 elements (8 bytes per element moved) as rows of 1024
        E = by / 8.0
        rows = np.maximum(E / 1024.0, 1.0)
        km = Kernels(np.full(len(E), "relu"), np.full(len(E), "memory"), np.full(len(E), acc), rows,
                     np.minimum(E, 1024.0), np.ones(len(E)), np.ones(len(E)), E, by, np.ones(len(E)))
        t = predict_us(forests, km, boards=False)
        s = specs(km.accelerator, boards=False)
        # a larger kernel never reaches a smaller fraction of the peak (running maximum over the grid: the
        # trees are flat and noisy beyond the measured sizes)
        frac = np.maximum.accumulate(np.minimum(1.0, (by / (s["memory_bandwidth_gbps"] * 1e3)) / t))
        mem[acc] = tuple(_sig4(x) for x in _time_monotone(frac, BYTES_LOG2))
        n = np.round((fl / 2.0) ** (1.0 / 3.0))
        kg = Kernels(np.full(len(n), "linear"), np.full(len(n), "gemm"), np.full(len(n), acc), np.ones(len(n)),
                     n, n, n, 2.0 * n**3, 12.0 * n**2, np.ones(len(n)))
        t = predict_us(forests, kg, boards=False)
        s = specs(kg.accelerator, boards=False)
        frac = np.maximum.accumulate(np.minimum(1.0, (kg.flops / (s["fp32_tflops"] * 1e6)) / t))
        gemm[acc] = tuple(_sig4(x) for x in _time_monotone(frac, FLOPS_LOG2))
    return _monotone(mem, gemm)


def _dominates(b: str, a: str) -> bool:
    A, B = hardware.get(a), hardware.get(b)
    sa = (A.fp32_tflops, A.memory_bandwidth_gbps, A.peak_tflops("fp16"))
    sb = (B.fp32_tflops, B.memory_bandwidth_gbps, B.peak_tflops("fp16"))
    return all(y >= x for x, y in zip(sa, sb))


def _monotone(mem: dict[str, tuple[float, ...]], gemm: dict[str, tuple[float, ...]]) -> Tables:
    """A better accelerator never runs a kernel slower. Where ``b`` has at least ``a``'s fp32 and fp16 peaks
    and bandwidth: ``b``'s achieved bandwidth (fraction × its bandwidth) is at least ``a``'s at every traffic,
    and its GEMM fraction at least ``a``'s (the fraction also multiplies tensor-core peaks, whose ratio
    between two chips differs from their fp32 ratio). The trees alone do not guarantee it (e.g. GH200 vs H100,
    the same chip with more bandwidth, fell on different leaves)."""
    names = sorted(mem, key=lambda a: (hardware.get(a).memory_bandwidth_gbps, hardware.get(a).fp32_tflops, a))
    mem_a = {a: np.array(mem[a]) * hardware.get(a).memory_bandwidth_gbps for a in names}
    gem = {a: np.array(gemm[a]) for a in names}
    for _ in range(2):  # dominance is transitive; two passes settle chains
        for b in names:
            for a in names:
                if a != b and _dominates(b, a):
                    mem_a[b] = np.maximum(mem_a[b], mem_a[a])
                    gem[b] = np.maximum(gem[b], gem[a])
    bw = {a: hardware.get(a).memory_bandwidth_gbps for a in names}
    mem_f = {a: np.array([_sig4(x) for x in np.minimum(1.0, mem_a[a] / bw[a])]) for a in names}
    # rounding to 4 digits can leave a dominating board a hair (< 1e-4) below the one it dominates, whose
    # achieved bandwidth it took: round its fraction up where that happens, so dominance survives the rounding
    for _ in range(2):
        for b in names:
            for a in names:
                if a != b and _dominates(b, a):
                    low = bw[b] * mem_f[b] < bw[a] * mem_f[a]
                    mem_f[b] = np.where(low, [_sig4_up(x) for x in bw[a] * mem_f[a] / bw[b]], mem_f[b])
    return Tables({a: tuple(float(x) for x in mem_f[a]) for a in sorted(names)},
                  {a: tuple(_sig4(x) for x in gem[a]) for a in sorted(names)})


def _sig4_up(x: float) -> float:
    """The least 4-significant-digit number ≥ ``x`` (x > 0)."""
    r = _sig4(x)
    while r < x:
        r = float(f"{r + 10.0 ** (math.floor(math.log10(r)) - 3):.4g}")
    return r


def shipped_tables() -> Tables:
    """Tables from kernel models fitted on every shipped kernel measurement, for every accelerator in
    ``cloudfit.catalog.hardware`` (what ``cloudfit model fit`` stores in the model file)."""
    kern = load()
    return efficiency_tables(fit(kern), list(hardware.ACCELERATORS))
