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

import dataclasses
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
    "network_model": 0.0,  # 1: inter-node all-reduce from cloudfit/catalog/network.py (off: the shipped fit's prior)
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


#: ``fp8`` is Transformer Engine FP8 (``hardware.precision_note``): the Linear layers' GEMMs (this op class)
#: run on the FP8 tensor cores; convolutions and attention stay 16-bit, as every other op does.
FP8_CLASSES = ("matmul",)
#: Share of fp32 bytes such an FP8 GEMM moves: its inputs are 1-byte FP8 and its output stays 16-bit, so a
#: GEMM whose input and output are the same size moves (1 + 2) / (4 + 4) of its fp32 traffic; the casts are
#: fused into the kernels that produce the inputs (TE's LayerNormLinear / LayerNormMLP).
FP8_GEMM_BYTE_SCALE = 3.0 / 8.0


_IS_FP8_CLASS = np.array([k in FP8_CLASSES for k in OP_CLASSES])


def fp8_byte_scale(precision: str) -> float:
    """Share of fp32 bytes the FP8 op classes (:data:`FP8_CLASSES`) move at ``precision``."""
    return FP8_GEMM_BYTE_SCALE if precision == "fp8" else _SCALE_16[precision]


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


#: Images a vCPU decodes and augments per second at 224×224 (JPEG decode, random-resized crop, flip, to
#: tensor) with PyTorch's DataLoader and Pillow: a documented default, not a fit. NVIDIA's DALI documentation
#: and the common rule of ~4–6 CPU cores per V100 for ResNet-50 put it near 100–150 per vCPU (8 V100s at
#: ~1,400 images/s each need ~100 vCPUs). Scales with pixels: smaller images decode proportionally faster.
DECODE_IMAGES_PER_VCPU_224 = 120.0


def input_bound_sps(input_desc: str, vcpus) -> np.ndarray:
    """Most samples/s one VM's vCPUs can decode for an image workload (``input`` like ``"3x224x224 image"``);
    infinite for other inputs (tokens, ids: no decoding to speak of) or unknown vCPUs."""
    v = np.asarray(vcpus, dtype=float)
    desc = (input_desc or "").lower()
    if "image" not in desc:
        return np.full(v.shape, np.inf)
    dims = [int(x) for x in desc.split()[0].split("x") if x.isdigit()] if desc.split() else []
    pixels = dims[-1] * dims[-2] if len(dims) >= 2 else 224 * 224
    rate = DECODE_IMAGES_PER_VCPU_224 * (224 * 224) / max(pixels, 1)
    return np.where(np.isfinite(v) & (v > 0), v * rate, np.inf)


@dataclass(frozen=True)
class Setup:
    """Hardware and parallel configuration per query (arrays broadcasting together)."""

    peak_tflops: np.ndarray  # at the training precision (tensor ops)
    vector_tflops: np.ndarray  # FP32 rate for non-tensor ops
    mem_bw_gbps: np.ndarray  # GB/s
    memory_gib: np.ndarray
    act_scale: np.ndarray  # 1.0 fp32/tf32, 0.5 16-bit (and every op fp8 leaves 16-bit)
    mixed: np.ndarray  # 1.0 when training keeps 16-bit weight copies
    batch: np.ndarray  # per device
    count: np.ndarray  # devices per node
    nodes: np.ndarray
    intra_gbps: np.ndarray  # GB/s, effective ring bandwidth inside a node (inf for one device)
    network_gbps: np.ndarray  # Gbit/s, the VM's network cap (inter-node link)
    ps: np.ndarray  # 1.0 parameter server, 0.0 all-reduce
    ps_count: np.ndarray
    ps_network_gbps: np.ndarray  # Gbit/s per parameter server
    #: Kernel-model efficiency tables per row (``cloudfit.perf.kernels.Tables``): achieved fraction of the
    #: memory bandwidth by a kernel moving 2^BYTES_LOG2 bytes, (n, len(BYTES_LOG2)), and of the peak by a
    #: GEMM of 2^FLOPS_LOG2 FLOPs, (n, len(FLOPS_LOG2)). None: constant efficiencies (η_mem, η_class).
    mem_eff: np.ndarray | None = None
    gemm_eff: np.ndarray | None = None
    #: FP8 rows (Transformer Engine): the share of fp32 bytes the FP8 classes move (:func:`fp8_byte_scale`) and
    #: the 16-bit peak the other tensor classes keep; None: no FP8 row (``act_scale``, ``peak_tflops``).
    fp8_scale: np.ndarray | None = None
    peak16_tflops: np.ndarray | None = None
    #: NCCL's transport between nodes per row (``cloudfit.catalog.network.FABRICS``: a fabric or its share class;
    #: None or "": by the link's Gbit/s, ``network.transport_of_gbps``).
    transport: np.ndarray | None = None

    def byte_scale(self) -> np.ndarray:
        """(…, classes) share of fp32 bytes each op class moves."""
        return _by_fp8_class(self.act_scale if self.fp8_scale is None else self.fp8_scale, self.act_scale)

    def class_peak_tflops(self) -> np.ndarray:
        """(…, classes) the tensor peak each op class runs at (FP8 for the FP8 classes of an FP8 row only)."""
        return _by_fp8_class(self.peak_tflops,
                             self.peak_tflops if self.peak16_tflops is None else self.peak16_tflops)

    def at_16bit(self) -> "Setup":
        """The same rows with every FP8 row as the 16-bit run it builds on (itself when there is none)."""
        if self.peak16_tflops is None:
            return self
        return dataclasses.replace(self, peak_tflops=self.peak16_tflops, fp8_scale=None, peak16_tflops=None)


def _by_fp8_class(fp8_classes, other_classes) -> np.ndarray:
    """(…, classes): ``fp8_classes`` on :data:`FP8_CLASSES`, ``other_classes`` on the rest (per-row values)."""
    return np.where(_IS_FP8_CLASS, _f(fp8_classes)[..., None], _f(other_classes)[..., None])


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


#: Share of a step's kernels that are matmul/conv/attention (the rest are memory-bound), to split the
#: profile's counted ``kernels_per_step`` between the classes: a transformer layer runs ~6 GEMMs beside ~12
#: element-wise/normalisation kernels, a CNN block a convolution beside its BatchNorm and ReLU.
TENSOR_KERNEL_SHARE = 1.0 / 3.0


def _interp_rows(table: np.ndarray, log2_x: np.ndarray, start: int) -> np.ndarray:
    """Row-wise interpolation of ``table`` (n, G) of achieved fractions, sampled at log2 = start, start+1, …,
    at ``log2_x`` (clamped to the grid): linear in log fraction and log2 size, so a kernel's time,
    size / (peak × fraction), is monotone between two grid points whenever it is at them."""
    g = table.shape[-1]
    pos = np.clip(np.nan_to_num(log2_x - start, nan=g - 1.0), 0.0, g - 1.0)
    lo = np.minimum(np.floor(pos).astype(int), g - 2)
    frac = pos - lo
    rows = np.arange(table.shape[0])
    return np.exp(np.log(table[rows, lo]) * (1.0 - frac) + np.log(table[rows, lo + 1]) * frac)


def kernel_efficiencies(w: Work, s: Setup) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(e_gemm, e_mem_tensor, e_mem_other, e_mem_optimizer) per row from the kernel-model tables: the
    achieved fraction of peak of the step's average tensor kernel (its FLOPs) and of the memory bandwidth
    of its average kernel's traffic, from the counted kernels per step. 1 where there are no tables or no
    kernel count."""
    from cloudfit.perf.tables import BYTES_LOG2, FLOPS_LOG2

    b = _f(s.batch)
    n = b.shape[0] if b.ndim else 1
    flops = np.broadcast_to(_f(w.flops), (n, len(OP_CLASSES)))
    is_tensor = np.array([k in TENSOR for k in OP_CLASSES])
    byts = np.broadcast_to(_f(w.bytes), (n, len(OP_CLASSES))) * s.byte_scale().reshape(-1, len(OP_CLASSES))
    k = np.broadcast_to(_f(w.kernels), (n,))
    ok = np.isfinite(k) & (k > 0)
    k = np.where(ok, k, 1.0)
    k_t = np.maximum(k * TENSOR_KERNEL_SHARE, 1.0)
    k_m = np.maximum(k - k_t, 1.0)
    bb = b.reshape(-1) if b.ndim else np.full(n, float(b))
    with np.errstate(divide="ignore"):
        lf = np.log2(np.maximum(flops[:, is_tensor].sum(1) * bb / k_t, 1.0))
        lbt = np.log2(np.maximum(byts[:, is_tensor].sum(1) * bb / k_t, 1.0))
        lbo = np.log2(np.maximum(byts[:, ~is_tensor].sum(1) * bb / k_m, 1.0))
        lopt = np.log2(np.maximum(np.broadcast_to(_f(w.parameters), (n,)) * CONSTANTS["bytes_per_param_update"] / k_t, 1.0))
    mem, gem = s.mem_eff, s.gemm_eff
    e_g = _interp_rows(gem, lf, FLOPS_LOG2[0])
    e_t, e_o, e_p = (_interp_rows(mem, x, BYTES_LOG2[0]) for x in (lbt, lbo, lopt))
    one = np.ones(n)
    return tuple(np.where(ok, np.maximum(e, 1e-4), one) for e in (e_g, e_t, e_o, e_p))


def compute_time(w: Work, s: Setup, c: dict[str, float] = CONSTANTS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(total, tensor-class part, memory-bound part) of one single-device step, seconds.

    With kernel-model tables in ``s`` (:func:`kernel_efficiencies`), tensor classes run at the usable peak ×
    the average tensor kernel's achieved fraction (× η_class / η_matmul: convolutions and attention keep
    their ratio to GEMMs) and every byte moves at the bandwidth × η_mem × its kernel's achieved fraction;
    without, at the constant η_class and η_mem."""
    b = _f(s.batch)
    flops = _f(w.flops)
    byts = _f(w.bytes)
    eta = np.array([c[f"eta_{k}"] if k in TENSOR else c["eta_vector"] for k in OP_CLASSES])
    is_tensor = np.array([k in TENSOR for k in OP_CLASSES])
    bw0 = _f(s.mem_bw_gbps) * 1e9 * c["eta_mem"]
    vec = _f(s.vector_tflops)
    usable = vec[..., None] + c["tensor_core_share"] * np.maximum(s.class_peak_tflops() - vec[..., None], 0.0)
    if s.mem_eff is not None and s.gemm_eff is not None:
        e_g, e_t, e_o, e_p = kernel_efficiencies(w, s)
        shape = np.shape(b)
        e_g, e_t, e_o, e_p = (e.reshape(shape) for e in (e_g, e_t, e_o, e_p))
        eta = np.where(is_tensor, eta / c["eta_matmul"] * e_g[..., None], eta)
        bw = bw0[..., None] * np.where(is_tensor, e_t[..., None], e_o[..., None])
        bw_opt = bw0 * e_p
    else:
        bw, bw_opt = bw0[..., None], bw0
    peak = np.where(is_tensor, usable, vec[..., None]) * 1e12 * eta
    t_flop = flops * b[..., None] / peak
    t_mem = byts * b[..., None] * s.byte_scale() / bw
    per_class = np.maximum(t_flop, t_mem)
    t_opt = _f(w.parameters) * c["bytes_per_param_update"] / bw_opt
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
    if c.get("network_model", 0.0) > 0.5:  # issue 33: NCCL's effective all-reduce by fabric (catalog/network.py)
        from cloudfit.catalog import network

        transport = network.resolve(s.transport, s.network_gbps)
        ring = network.allreduce_s(g, n, nodes, _f(s.network_gbps), intra_bps, transport,
                                   intra_latency_s=c["latency_intra_s"])
        share = np.where(nodes > 1, network.overlap_share(transport, c["backward_share"]), c["backward_share"])
        exposed_ar = network.exposed_s(ring, compute, g, share, c["tail"])
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
