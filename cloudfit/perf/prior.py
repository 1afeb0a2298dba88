"""The physics prior: roofline compute time per op class plus data-parallel communication.

Everything is vectorised over queries (numpy arrays broadcast against each other), so the recommender's
~2,500 configurations cost one pass. Inputs are plain arrays — see :class:`Work` and :class:`Setup` —
so this module knows nothing of profiles, catalogs or the learned correction.

Single device, one training step at batch ``b``::

    t_class  = max(flops_class·b / (peak_class · η_class),  bytes_class·b·s_p / (BW · η_mem))
    t_opt    = params · bytes_per_param_update / (BW · η_mem)          (optimizer update, memory-bound)
    t_fixed  = (step_overhead + ps_overhead·[ps]) · BW_ref / BW         (per step, whatever the batch)
    compute  = Σ_class t_class + t_opt + t_fixed

``peak`` is the accelerator's usable peak at the training precision for matmul/conv/attention (its
FP32 vector rate plus a share κ of what tensor cores add on top) and its FP32 rate for the rest;
``s_p`` halves activation traffic at 16-bit precisions. ``t_fixed`` is the work a step does whatever
its batch — under TensorFlow's parameter servers, the per-variable pulls and pushes and their small
latency-bound kernels: it is what makes small models there run far below their roofline (CM-DARE's
CIFAR ResNets: ~40 ms a step on a P100 where the roofline says 3 ms). It shrinks on a faster
accelerator (scaled by memory bandwidth, BW_ref = 1000 GB/s). The general ``step_overhead`` is kept at
0: one calibrated constant hurt held-out accuracy. Kernel launches enter instead as a floor on the
step (:func:`launch_bound_sps`, from the profile's counted ``kernels_per_step``), applied to the final
prediction.

Data parallelism over N = count × nodes devices (``parallelism="allreduce"``): a ring all-reduce moves
2(N−1)/N × gradient bytes over the slowest link (the intra-node link inside one VM; the VM network,
at TCP efficiency, once nodes > 1) plus 2(N−1) link latencies. DDP overlaps it with the backward pass
(≈ 2/3 of compute), but the last gradient bucket never overlaps::

    exposed  = max(comm − t_backward, tail · comm)
    step     = compute + exposed

Parameter servers (``parallelism="ps"``, TensorFlow's PS / CM-DARE): each worker pulls parameters and
pushes gradients every step over its own link, and the ``ps_count`` servers carry N workers' traffic::

    step     = max(compute + 2·G / worker_link,  N · (2·G / ps_link + ps_server_overhead) / ps_count)

``ps_server_overhead`` is the servers' CPU time per worker and step (RPCs, applying the gradients): why
parameter-server throughput plateaus as workers are added even when the links are not full.

Throughput = N × b / step. Constants are in :data:`CONSTANTS` (recorded in the fitted model file).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cloudfit.types import OP_CLASSES

TENSOR = ("matmul", "conv", "attention")

CONSTANTS: dict[str, float] = {
    # Achievable fractions of peak (dense GEMM ≈ 75% of datasheet, convolutions less, fused attention less).
    "eta_matmul": 0.75,
    "eta_conv": 0.6,
    "eta_attention": 0.5,
    "eta_vector": 0.5,
    # Tensor cores deliver less of their datasheet advantage than CUDA cores (operand traffic, small
    # tiles): the usable peak is vector + κ·(peak − vector). κ and eta_mem are recalibrated on the
    # training measurements by ``cloudfit model fit`` (see fit.calibrate_prior); these are the defaults.
    "tensor_core_share": 1.0,
    "eta_mem": 0.8,  # STREAM-like share of datasheet memory bandwidth
    # Fixed time per step (at a memory bandwidth of OVERHEAD_REF_BW_GBPS; scaled by ref / BW), extra
    # worker time per step under parameter servers, and the servers' CPU time per worker and step.
    # 0 here; ``cloudfit model fit`` calibrates the two parameter-server ones (fit.calibrate_prior) and
    # keeps step_overhead_s at 0 (calibrated, it hurt held-out accuracy; see fit.CALIBRATED_OVERHEAD).
    "step_overhead_s": 0.0,
    "ps_overhead_s": 0.0,
    "ps_server_overhead_s": 0.0,
    "eta_net": 0.85,  # TCP share of a VM's network cap (Sailor measured 19.4 of 24 Gbps on a2-highgpu-1g)
    "bytes_per_param_update": 24.0,  # read param+grad+2 states, write param+states (Adam/momentum, fp32)
    "latency_intra_s": 10e-6,
    "latency_inter_s": 50e-6,
    "backward_share": 2.0 / 3.0,
    "tail": 0.2,  # share of the all-reduce that cannot hide behind backward (last bucket)
    "reserve_gib": 1.5,  # CUDA context, cuDNN/cuBLAS workspaces, allocator slack
    "memory_usable": 0.95,
    "state_bytes_per_param": 16.0,  # fp32 weights + grads + two optimizer states
    "mixed_extra_bytes_per_param": 2.0,  # 16-bit weight copy under mixed precision
}

#: Memory bandwidth (GB/s) at which ``step_overhead_s`` and ``ps_overhead_s`` hold.
OVERHEAD_REF_BW_GBPS = 1000.0

_SCALE_16 = {"fp32": 1.0, "tf32": 1.0, "fp16": 0.5, "bf16": 0.5, "fp8": 0.5}


def activation_scale(precision: str) -> float:
    """Share of fp32 activation bytes a precision moves (16-bit activations under mixed precision)."""
    return _SCALE_16[precision]


@dataclass(frozen=True)
class Work:
    """Per-sample counts of the model (arrays or scalars; op-class arrays have a trailing axis of 6)."""

    flops: np.ndarray  # (..., 6) per op class, in OP_CLASSES order
    bytes: np.ndarray  # (..., 6)
    parameters: np.ndarray
    gradient_bytes: np.ndarray
    activation_bytes: np.ndarray  # saved for backward, per sample, fp32
    kernels: np.ndarray | float = float("nan")  # per step (forward + backward); NaN where not counted


#: Host-side seconds per counted kernel of an eager PyTorch training step (dispatch, autograd, launch,
#: the optimizer's share). This 2-core VM takes 29 µs (`mlp`, 20 counted kernels, a whole SGD step at
#: batch 1 in 587 µs, where compute is negligible); cloud GPU hosts have faster cores but add the CUDA
#: launch (a few µs). 10 µs is a third of the measurement: a floor, not an estimate.
LAUNCH_S_PER_KERNEL = 10e-6


def launch_bound_sps(kernels, batch, devices) -> np.ndarray:
    """Most samples/s a data-parallel step can reach when the host launches its kernels one by one:
    the host launches while the device computes, so a step takes at least ``kernels × LAUNCH_S_PER_KERNEL``
    however fast the device is. Infinite where the kernel count is unknown (NaN)."""
    k = np.asarray(kernels, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        bound = np.asarray(devices, dtype=float) * np.asarray(batch, dtype=float) / (k * LAUNCH_S_PER_KERNEL)
    return np.where(np.isnan(k) | (k <= 0), np.inf, bound)


@dataclass(frozen=True)
class Setup:
    """Hardware and parallel configuration per query (arrays broadcasting together)."""

    peak_tflops: np.ndarray  # at the training precision (tensor ops)
    vector_tflops: np.ndarray  # FP32 rate for non-tensor ops
    mem_bw_gbps: np.ndarray  # GB/s
    memory_gib: np.ndarray
    act_scale: np.ndarray  # 1.0 fp32/tf32, 0.5 16-bit
    mixed: np.ndarray  # 1.0 when training keeps 16-bit weight copies
    batch: np.ndarray  # per device
    count: np.ndarray  # devices per node
    nodes: np.ndarray
    intra_gbps: np.ndarray  # GB/s, effective ring bandwidth inside a node (inf for one device)
    network_gbps: np.ndarray  # Gbit/s, the VM's network cap (inter-node link)
    ps: np.ndarray  # 1.0 parameter server, 0.0 all-reduce
    ps_count: np.ndarray
    ps_network_gbps: np.ndarray  # Gbit/s per parameter server


@dataclass(frozen=True)
class PriorResult:
    samples_per_second: np.ndarray
    step_time_s: np.ndarray
    compute_s: np.ndarray
    communication_s: np.ndarray  # exposed (not hidden behind compute)
    comm_total_s: np.ndarray  # before overlap
    tensor_s: np.ndarray  # compute time of matmul/conv/attention at their roofline
    memory_s: np.ndarray  # compute time of memory-bound work


def _f(x) -> np.ndarray:
    return np.asarray(x, dtype=float)


def compute_time(w: Work, s: Setup, c: dict[str, float] = CONSTANTS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(total, tensor-class part, memory-bound part) of one single-device step, seconds."""
    b = _f(s.batch)
    flops = _f(w.flops)
    byts = _f(w.bytes)
    bw = _f(s.mem_bw_gbps)[..., None] * 1e9 * c["eta_mem"]
    eta = np.array([c[f"eta_{k}"] if k in TENSOR else c["eta_vector"] for k in OP_CLASSES])
    is_tensor = np.array([k in TENSOR for k in OP_CLASSES])
    vec = _f(s.vector_tflops)
    usable = vec + c["tensor_core_share"] * np.maximum(_f(s.peak_tflops) - vec, 0.0)
    peak = np.where(is_tensor, usable[..., None], vec[..., None]) * 1e12 * eta
    t_flop = flops * b[..., None] / peak
    t_mem = byts * b[..., None] * _f(s.act_scale)[..., None] / bw
    per_class = np.maximum(t_flop, t_mem)
    t_opt = _f(w.parameters) * c["bytes_per_param_update"] / (_f(s.mem_bw_gbps) * 1e9 * c["eta_mem"])
    # Per-step fixed work, independent of the batch; it runs faster on a faster memory system.
    fixed = (c["step_overhead_s"] + c.get("ps_overhead_s", 0.0) * _f(s.ps)) * (OVERHEAD_REF_BW_GBPS / _f(s.mem_bw_gbps))
    tensor = np.where(is_tensor, per_class, 0.0).sum(-1)
    memory = np.where(is_tensor, 0.0, per_class).sum(-1) + t_opt + fixed
    return tensor + memory, tensor, memory


def prior(w: Work, s: Setup, c: dict[str, float] = CONSTANTS) -> PriorResult:
    """Throughput and step-time breakdown for every query (see the module docstring)."""
    compute, tensor, memory = compute_time(w, s, c)
    count, nodes = _f(s.count), _f(s.nodes)
    n = count * nodes
    g = _f(w.gradient_bytes)
    # All-reduce over the slowest link of the ring.
    net_bps = _f(s.network_gbps) * 1e9 / 8 * c["eta_net"]
    intra_bps = _f(s.intra_gbps) * 1e9
    link = np.where(nodes > 1, np.minimum(intra_bps, net_bps), intra_bps)
    lat = np.where(nodes > 1, c["latency_inter_s"], c["latency_intra_s"])
    with np.errstate(divide="ignore", invalid="ignore"):
        ring = np.where(n > 1, 2 * (n - 1) / n * g / link + 2 * (n - 1) * lat, 0.0)
    exposed_ar = np.maximum(ring - c["backward_share"] * compute, c["tail"] * ring)
    # Parameter servers: worker link = the VM network across nodes, the intra-node link inside one.
    worker_bps = np.where(nodes > 1, net_bps, np.minimum(intra_bps, _f(s.ps_network_gbps) * 1e9 / 8))
    worker_bps = np.where(np.isfinite(worker_bps), worker_bps, _f(s.ps_network_gbps) * 1e9 / 8)
    ps_bps = np.maximum(_f(s.ps_count), 1.0) * _f(s.ps_network_gbps) * 1e9 / 8 * c["eta_net"]
    worker_comm = 2 * g / worker_bps
    ps_comm = n * (2 * g / ps_bps + c.get("ps_server_overhead_s", 0.0) / np.maximum(_f(s.ps_count), 1.0))
    ps_step = np.maximum(compute + worker_comm, ps_comm)
    is_ps = _f(s.ps) > 0.5
    step = np.where(is_ps, ps_step, compute + exposed_ar)
    comm_total = np.where(is_ps, np.maximum(worker_comm, ps_comm), ring)
    exposed = step - compute
    sps = n * _f(s.batch) / step
    return PriorResult(sps, step, compute, exposed, comm_total, tensor, memory)


def memory_needed_bytes(w: Work, s: Setup, c: dict[str, float] = CONSTANTS) -> np.ndarray:
    """Bytes one device needs to train at batch ``s.batch``: weights, grads, optimizer state, activations."""
    per_param = c["state_bytes_per_param"] + _f(s.mixed) * c["mixed_extra_bytes_per_param"]
    return (_f(w.parameters) * per_param + _f(w.activation_bytes) * _f(s.batch) * _f(s.act_scale)
            + c["reserve_gib"] * 2**30)


def memory_capacity_bytes(s: Setup, c: dict[str, float] = CONSTANTS) -> np.ndarray:
    return _f(s.memory_gib) * 2**30 * c["memory_usable"]
