"""Features of a query for the learned correction: hardware specs, model stats, configuration.

Never names: an accelerator enters as its datasheet numbers (``cloudfit.catalog.hardware``), a model as its
counted stats (``ModelStats``). Hardware features carry monotone constraints (+1: more of it never
predicts slower; −1 for pressure/ratios that fall as the hardware gets better) so the fitted model
stays monotone in every spec by construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from cloudfit.catalog import hardware
from cloudfit.perf.prior import (CONSTANTS, TENSOR, PriorResult, Setup, Work, activation_scale, fp8_byte_scale,
                                 memory_needed_bytes)
from cloudfit.types import OP_CLASSES, ModelStats

#: Big stand-in for "no such link" (one device, one node) so log features stay finite.
NO_LINK_GBPS = 1e4

# name → monotone constraint for xgboost (+1 increasing, −1 decreasing, 0 free)
FEATURES: tuple[tuple[str, int], ...] = (
    ("log_peak_tflops", 1),
    ("log_vector_tflops", 1),
    ("log_mem_bw", 1),
    ("memory_pressure", -1),  # needed / capacity: falls as memory grows
    ("log_ring_link_gbps", 1),  # the all-reduce ring's slowest link: intra-node, or the VM network across nodes
    ("log_network_gbps", 1),
    ("log_comm_s", -1),  # prior's gradient exchange time per step (before overlap): falls as links get faster
    # More devices or nodes never make the correction more optimistic (per-device throughput cannot rise with
    # the node count, and N one-GPU VMs never beat one N-GPU VM: every feature that differs moves the same way).
    ("log_devices", -1),
    ("log_nodes", -1),
    ("log_batch", 0),
    ("is_ps", 0),
    ("framework_tf", 0),
    ("log_flops_per_sample", 0),
    ("log_flops_per_step", 0),
    ("log_params", 0),
    ("log_intensity", 0),  # tensor FLOPs per byte moved (model only)
    ("conv_share", 0),
    ("matmul_share", 0),
    ("attention_share", 0),
    ("memory_bytes_share", 0),  # bytes of non-tensor classes / all bytes (model only)
    ("log_act_bytes_per_sample", 0),
    ("reduced_precision", 0),
)
FEATURE_NAMES = tuple(n for n, _ in FEATURES)
MONOTONE = tuple(m for _, m in FEATURES)


@dataclass(frozen=True)
class HardwareArrays:
    peak_tflops: np.ndarray
    vector_tflops: np.ndarray
    mem_bw_gbps: np.ndarray
    memory_gib: np.ndarray


def hardware_arrays(accelerators: Sequence[str], precisions: Sequence[str] | str) -> HardwareArrays:
    """Spec arrays for canonical accelerator names at their precisions (one lookup per distinct pair)."""
    accs = list(accelerators)
    precs = [precisions] * len(accs) if isinstance(precisions, str) else list(precisions)
    cache: dict[tuple[str, str], tuple[float, float, float, float]] = {}
    out = np.empty((len(accs), 4))
    for i, key in enumerate(zip(accs, precs)):
        v = cache.get(key)
        if v is None:
            a = hardware.get(key[0])
            v = cache[key] = (a.peak_tflops(key[1]), a.fp32_tflops, a.sustained_bandwidth_gbps, a.memory_gib)
        out[i] = v
    return HardwareArrays(out[:, 0], out[:, 1], out[:, 2], out[:, 3])


def work_from_stats(stats: ModelStats | Sequence[ModelStats]) -> Work:
    """Per-sample arrays from one ModelStats (scalars broadcast) or a sequence (one per row)."""
    many = not isinstance(stats, ModelStats)
    seq = list(stats) if many else [stats]

    def oc(s: ModelStats, attr: str) -> list[float]:
        return [float(getattr(s.op_classes[c], attr)) if c in s.op_classes else 0.0 for c in OP_CLASSES]

    flops = np.array([oc(s, "flops") for s in seq])
    byts = np.array([oc(s, "bytes") for s in seq])
    params = np.array([float(s.parameters) for s in seq])
    grad = np.array([float(s.gradient_bytes) for s in seq])
    act = np.array([float(s.activation_bytes_per_sample) for s in seq])
    kern = np.array([np.nan if s.kernels_per_step is None else float(s.kernels_per_step) for s in seq])
    if not many:
        return Work(flops[0], byts[0], params[0], grad[0], act[0], kern[0])
    return Work(flops, byts, params, grad, act, kern)


def _log(x) -> np.ndarray:
    return np.log(np.maximum(np.asarray(x, dtype=float), 1e-30))


def feature_matrix(w: Work, s: Setup, p: PriorResult, framework_tf) -> np.ndarray:
    """(n, len(FEATURES)) float32-safe feature matrix (xgboost compares in float32)."""
    n = np.broadcast(s.batch, s.count, s.nodes, s.peak_tflops).shape
    flops = np.broadcast_to(np.asarray(w.flops, dtype=float), n + (len(OP_CLASSES),))
    byts = np.broadcast_to(np.asarray(w.bytes, dtype=float), n + (len(OP_CLASSES),))
    tensor_idx = [OP_CLASSES.index(c) for c in TENSOR]
    tensor_flops = flops[..., tensor_idx].sum(-1)
    tensor_bytes = byts[..., tensor_idx].sum(-1)
    all_bytes = byts.sum(-1)
    batch = np.broadcast_to(np.asarray(s.batch, dtype=float), n)
    need = memory_needed_bytes(w, s)
    cap = np.asarray(s.memory_gib, dtype=float) * 2**30
    intra = np.where(np.asarray(s.count) > 1, np.asarray(s.intra_gbps, dtype=float), NO_LINK_GBPS)
    net = np.where(np.asarray(s.nodes) > 1, np.asarray(s.network_gbps, dtype=float), NO_LINK_GBPS)
    ring = np.where(np.asarray(s.nodes) > 1, np.minimum(intra, net / 8.0), intra)  # GB/s
    cols = {
        "log_peak_tflops": _log(s.peak_tflops),
        "log_vector_tflops": _log(s.vector_tflops),
        "log_mem_bw": _log(s.mem_bw_gbps),
        "memory_pressure": need / cap,
        "log_ring_link_gbps": _log(np.minimum(ring, NO_LINK_GBPS)),
        "log_network_gbps": _log(np.minimum(net, NO_LINK_GBPS)),
        # Independent of the accelerator's compute speed on purpose: a faster chip must never look worse.
        "log_comm_s": np.log10(np.asarray(p.comm_total_s, dtype=float) + 1e-6),
        "log_devices": _log(np.asarray(s.count, dtype=float) * np.asarray(s.nodes, dtype=float)),
        "log_nodes": _log(s.nodes),
        "log_batch": _log(batch),
        "is_ps": np.asarray(s.ps, dtype=float),
        "framework_tf": np.asarray(framework_tf, dtype=float),
        "log_flops_per_sample": _log(tensor_flops),
        "log_flops_per_step": _log(tensor_flops * batch),
        "log_params": _log(w.parameters),
        "log_intensity": _log(tensor_flops / np.maximum(tensor_bytes, 1.0)),
        "conv_share": flops[..., OP_CLASSES.index("conv")] / np.maximum(tensor_flops, 1.0),
        "matmul_share": flops[..., OP_CLASSES.index("matmul")] / np.maximum(tensor_flops, 1.0),
        "attention_share": flops[..., OP_CLASSES.index("attention")] / np.maximum(tensor_flops, 1.0),
        "memory_bytes_share": (all_bytes - tensor_bytes) / np.maximum(all_bytes, 1.0),
        "log_act_bytes_per_sample": _log(w.activation_bytes),
        "reduced_precision": (np.asarray(s.act_scale, dtype=float) < 1.0).astype(float),
    }
    X = np.column_stack([np.broadcast_to(np.asarray(cols[k], dtype=float), n).ravel() for k in FEATURE_NAMES])
    # xgboost compares float32 features with float32 thresholds: round here so the numpy trees agree.
    return X.astype(np.float32).astype(np.float64)


#: Two workloads with signatures closer than this (max abs difference) count as the same workload.
SIGNATURE_TOL = 0.01


def signature(w: Work) -> np.ndarray:
    """Batch-free fingerprint of a workload's stats, (n, 6) or (6,): log tensor FLOPs, parameters and
    activation bytes per sample, and the conv/matmul/attention shares of tensor FLOPs. The band is
    wider for workloads whose signature matches none of the training set's (:func:`seen`)."""
    flops = np.asarray(w.flops, dtype=float)
    tensor_idx = [OP_CLASSES.index(c) for c in TENSOR]
    tf = flops[..., tensor_idx].sum(-1)
    share = [flops[..., OP_CLASSES.index(c)] / np.maximum(tf, 1.0) for c in ("conv", "matmul", "attention")]
    cols = [_log(tf), _log(w.parameters), _log(w.activation_bytes)] + share
    out = np.stack([np.asarray(c, dtype=float) for c in np.broadcast_arrays(*cols)], axis=-1)
    return np.round(out, 6)


def seen(sig: np.ndarray, known: np.ndarray, tol: float = SIGNATURE_TOL) -> np.ndarray:
    """Per row of ``sig`` (n, k): whether some row of ``known`` (m, k) is within ``tol`` everywhere."""
    sig = np.atleast_2d(sig)
    known = np.asarray(known, dtype=float).reshape(-1, sig.shape[1])
    if len(known) == 0:
        return np.zeros(len(sig), bool)
    return (np.abs(sig[:, None, :] - known[None, :, :]).max(-1) <= tol).any(1)


def table_rows(accelerators: Sequence[str], tables) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Per-row copies of the kernel-efficiency tables (``cloudfit.perf.kernels.Tables``) for canonical names."""
    if tables is None:
        return None, None
    # a board variant the fit never saw (AWS's A10G) uses its chip's tables (hardware.BOARD_OF): efficiencies
    # are fractions of the board's own peaks
    from cloudfit.catalog.hardware import accelerator_of

    accs = [a if a in tables.memory else accelerator_of(a) for a in accelerators]
    names = sorted(set(accs))
    missing = [a for a in names if a not in tables.memory]
    if missing:
        from cloudfit.errors import ModelError

        raise ModelError(f"the performance model has no kernel tables for {', '.join(missing)}; "
                         "rebuild it with `cloudfit model fit`")
    pos = {a: i for i, a in enumerate(names)}
    idx = np.array([pos[a] for a in accs], dtype=int)
    mem = np.array([tables.memory[a] for a in names])[idx]
    gem = np.array([tables.gemm[a] for a in names])[idx]
    return mem, gem


def setup(accelerators: Sequence[str], precisions: Sequence[str] | str, *, batch, count, nodes, intra_gbps,
          network_gbps, ps=0.0, ps_count=1.0, ps_network_gbps=np.nan, tables=None, transport=None) -> Setup:
    """Build a :class:`Setup` for rows of (canonical accelerator, precision, configuration); ``tables``:
    the kernel-efficiency tables the prior composes (None: constant efficiencies); ``transport``: NCCL's
    transport between nodes per row (``Setup.transport``)."""
    hw = hardware_arrays(accelerators, precisions)
    mem_eff, gemm_eff = table_rows(accelerators, tables)
    precs = [precisions] * len(hw.peak_tflops) if isinstance(precisions, str) else list(precisions)
    act = np.array([activation_scale(p) for p in precs])
    mixed = (act < 1.0).astype(float)
    fp8_scale = peak16 = None
    if "fp8" in precs:  # Transformer Engine FP8: the Linear GEMMs at the FP8 peak, other tensor ops at 16-bit
        fp8_scale = np.array([fp8_byte_scale(p) for p in precs])
        peak16 = hardware_arrays(accelerators, ["bf16" if p == "fp8" else p for p in precs]).peak_tflops
    return Setup(hw.peak_tflops, hw.vector_tflops, hw.mem_bw_gbps, hw.memory_gib, act, mixed,
                 np.asarray(batch, dtype=float), np.asarray(count, dtype=float), np.asarray(nodes, dtype=float),
                 np.asarray(intra_gbps, dtype=float), np.asarray(network_gbps, dtype=float),
                 np.asarray(ps, dtype=float), np.asarray(ps_count, dtype=float), np.asarray(ps_network_gbps, dtype=float),
                 mem_eff, gemm_eff, fp8_scale, peak16,
                 None if transport is None else np.asarray(transport, dtype=object))


def intra_gbps(accelerators: Sequence[str], counts) -> np.ndarray:
    """hardware.intra_node_gbps per row (one lookup per distinct pair)."""
    cache: dict[tuple[str, int], float] = {}
    out = np.empty(len(accelerators))
    for i, key in enumerate(zip(accelerators, (int(c) for c in np.broadcast_to(counts, (len(accelerators),))))):
        v = cache.get(key)
        if v is None:
            v = cache[key] = hardware.intra_node_gbps(key[0], key[1])
        out[i] = v
    return out


__all__ = ["signature", "seen", "SIGNATURE_TOL",
           "FEATURES", "FEATURE_NAMES", "MONOTONE", "CONSTANTS", "feature_matrix", "setup", "work_from_stats",
           "hardware_arrays", "intra_gbps"]


# --------------------------------------------------------------------------------------------
# The transition prior's design (issue 33): fitted in ``fit.fit_transitions``, applied in ``model.predict_many``

#: log spec ratios between two (accelerator, precision) points, split by the tensor-op (matmul/conv/attention)
#: share s of the step: tensor peak at the precision, memory bandwidth per fp32-equivalent byte (16-bit
#: activations move half the bytes), the prior's speed on the step's memory-bound work (bandwidth, FP32/vector
#: rate and the kernel tables' efficiencies: an L4 runs it ~1.2× a T4 despite 6% less bandwidth), and the log
#: batch ratio. A coefficient is the realised fraction of that log ratio.
TRANSITION_TERMS = ("s·log peak", "(1−s)·log peak", "s·log bw", "(1−s)·log prior memory-bound speed", "log batch")


def transition_logs(accelerators: Sequence[str], precisions: Sequence[str]) -> np.ndarray:
    """(n, 2): log tensor peak at the precision, log effective bandwidth."""
    hw = hardware_arrays(list(accelerators), list(precisions))
    act = np.array([activation_scale(p) for p in precisions])
    return np.column_stack([np.log(hw.peak_tflops), np.log(hw.mem_bw_gbps / act)])


def transition_design(d_logs: np.ndarray, d_log_memory_speed, d_log_batch, share) -> np.ndarray:
    """Rows of :data:`TRANSITION_TERMS` from differences of :func:`transition_logs`, of the log of the prior's
    per-sample speed on memory-bound work, and of log batch."""
    d = np.atleast_2d(np.asarray(d_logs, dtype=float))
    s = np.asarray(share, dtype=float)
    return np.column_stack([s * d[:, 0], (1 - s) * d[:, 0], s * d[:, 1], (1 - s) * np.asarray(d_log_memory_speed, dtype=float),
                            np.asarray(d_log_batch, dtype=float)])


# --------------------------------------------------------------------------------------------
# Distance of an extrapolation (issue 33, bands by distance): fitted in ``fit.generation_band``, applied in
# ``model.predict_many`` to accelerators with no measured row

#: NVIDIA architectures in release order; Turing and Ada sit between the data-centre generations they followed
GENERATION = {"Kepler": 0.0, "Pascal": 1.0, "Volta": 2.0, "Turing": 2.5, "Ampere": 3.0, "Ada Lovelace": 3.5,
              "Hopper": 4.0, "Blackwell": 5.0}


def generation(accelerator: str) -> float:
    return GENERATION[hardware.get(accelerator).arch]


def precision_class(precision: str) -> str:
    """The arithmetic a precision runs: 32-bit (fp32, and tf32 — what PyTorch runs fp32 matmuls as on Ampere and
    newer, and fp32 on older GPUs), 16-bit (fp16, bf16) or fp8."""
    return {"fp32": "32-bit", "tf32": "32-bit", "fp16": "16-bit", "bf16": "16-bit"}.get(precision, precision)


def hops(target: str, reference: str) -> int:
    """Generation hops between two accelerators (Volta→Ampere 1, Volta→Ada 2, Hopper→Hopper 0)."""
    return int(np.ceil(abs(generation(target) - generation(reference)) - 1e-9))


def distance(target: str, reference: str, precision: str, measured_classes: dict) -> int:
    """How far a prediction for ``target`` carried from the measured ``reference`` extrapolates: its generation
    hops, plus one when the precision's arithmetic (:func:`precision_class`) was never measured on the
    reference's family (``measured_classes``: per measured accelerator, the classes its rows hold; the family:
    the measured accelerators of the reference's architecture)."""
    arch = hardware.get(reference).arch
    family = {c for a, cs in measured_classes.items() if hardware.get(a).arch == arch for c in cs}
    return hops(target, reference) + int(precision_class(precision) not in family)


def nearest_measured(measured: Sequence[str], target: str, precision: str) -> str:
    """The accelerator of ``measured`` nearest ``target`` in spec at ``precision`` (|Δ log tensor peak| +
    |Δ log effective bandwidth|, ties by name): where ``model._transition`` carries a prediction from."""
    accs = sorted(set(measured))
    L = transition_logs([target] + accs, [precision] * (len(accs) + 1))
    d = np.abs(L[1:, 0] - L[0, 0]) + np.abs(L[1:, 1] - L[0, 1])
    return accs[int(np.argmin(d))]
