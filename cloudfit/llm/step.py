"""Step time of one training step of a layout: compute, exposed communication, pipeline bubble.

Vectorised: every layout field and hardware figure may be a numpy array (broadcast together), so a
layout search can price thousands of candidates in one call (``step_time``). ``cloudfit.llm.predict``
wraps it for one layout.

Per step (one optimizer step of the global batch), for the slowest pipeline stage:
- compute: hardware FLOPs of one micro-batch on the stage ÷ (dense peak × efficiency). Efficiency =
  ``eff(accelerator, precision)`` × a saturation in the GEMM work per GPU, x = tokens per micro-batch ÷ (cp · tp)
  and in the width hidden ÷ tp: 1 / (1 + (t0 / x)^alpha) / (1 + (w0 / width)^beta_w); attention runs at
  ``attn_eff`` of the 16-bit GEMM rate, × 1 / (1 + k0 / key block) (blocks S/2 long on average without CP,
  S/(2·cp) under ring CP). Hardware FLOPs add recomputation (full: ``recompute`` × one forward).
  A flash attention kernel's backward recomputes the scores (QK^T and softmax) from the saved log-sum-exp
  before its four gradient matmuls: 5 matmuls against the forward's 2, so its core costs 1 + 2.5 forwards per
  step (FlashAttention, Dao 2022/2023), not the 1 + 2 of a plain backward; an unfused core keeps 1 + 2.
  Unfused attention (``flash`` false: vTrain's Megatron-DeepSpeed) computes the whole seq × seq score matrix
  and masks it afterwards, so its attention core costs twice the causal-half FLOPs, and it writes and reads
  that matrix in HBM: QK^T writes and AV reads 2 bytes per score (4·heads·seq bytes per token forward, twice
  that backward, once more when recomputed), on top of the softmax/dropout traffic (5·heads·seq stored bytes
  × ``mem_traffic``).
- FP8 (by stack): only the Linear GEMMs run at the FP8 peak; attention and the LM head stay 16-bit (at the
  accelerator's 16-bit efficiency); the casts (amax, bf16 → fp8, transposed copies) move ``fp8_cast`` bytes per
  Linear input and output-gradient element (fused in Megatron's Transformer Engine, separate kernels in a
  Linear-only FP8 stack) and ``fp8_weight`` bytes per weight element and micro-batch, at memory bandwidth.
- TP: 4 collectives per layer and micro-batch (2 forward, 2 backward; + 2 when the forward is recomputed),
  each moving 2(tp−1)/tp × micro-batch activations over NVLink inside the NVLink domain, else over the
  node network; ``tp_exposed`` of it is not hidden (fitted per framework).
- CP (by stack): ring attention passes K/V round the ring (forward K and V, backward K, V, dK, dV: 3 × (cp−1)
  chunks per layer), hidden behind the attention compute up to ``cp_overlap`` — exposed when attention is short;
  cloudfit's own trainer all-gathers K/V before the attention and reduce-scatters their gradients after it
  (exposed) and computes its masked query chunk × whole sequence in full (twice the causal-half FLOPs).
- FSDP / ZeRO over the shard group dp_shard × cp: ZeRO-3 all-gathers weights forward and backward and
  reduce-scatters gradients every micro-batch (3 passes of (s−1)/s × the stage's bf16 weights ÷ tp) — but a
  pipeline stage keeps its weights gathered across its micro-batches (one gather, one reduce-scatter per step);
  ZeRO-2 all-gathers and reduce-scatters every micro-batch (2 passes); ZeRO-0/1 all-reduce (or reduce-scatter +
  all-gather) once per step over dp × cp. Per-micro-batch traffic hides behind that micro-batch's compute up to
  ``fsdp_overlap``; per-step traffic behind the last micro-batch's backward up to ``dp_overlap``. HSDP adds a
  replica all-reduce per step.
- PP: bubble (pp − 1) / vp × (micro-batch stage time) — i.e. (p−1)/(m+p−1) of the step for 1F1B — plus
  point-to-point activation sends between stages (forward and backward, × vp when interleaved).
- optimizer: AdamW reads and writes ~32 bytes per local parameter at memory bandwidth; plus a fixed
  per-step overhead.
- host dispatch: the framework's Python/launch work per layer and micro-batch is ``tau_s`` × the layer's
  host-dispatched ops ÷ those of the reference layer (``host_ops``: a flash-attention layer without recompute or
  TP, 12 forward ops + 24 backward); full recompute dispatches the forward's ops again, an unfused attention core
  dispatches 3 more per forward (QK^T, masked softmax, dropout, AV in place of one flash kernel), TP its collectives.
  Kernel launches are asynchronous, so the host runs ahead of the GPU: only the part of the host time that exceeds the
  micro-batch's GPU time (compute + exposed communication) shows, max(GPU, host) per micro-batch. Small models
  with short kernels are host-bound; large ones hide it completely.
Collectives across nodes run at the per-GPU share of the node's network (node Gbit/s ÷ 8 ÷ GPUs per node)
× ``net_eff`` × (group ranks per node)^``nic_parallel``; inside the NVLink domain at NCCL's bus bandwidth
× ``nvlink_eff`` (≤ 1: NCCL's measured all-reduce bus bandwidth on an NVSwitch board is that figure). A
collective over m nodes moves 2(m−1)/m of its buffer through each node's network (NCCL's tree / hierarchical
schedule: reduce inside the node over NVLink, exchange between nodes, broadcast inside), not the
2(n−1)/n of a flat ring over all n ranks: across m < n nodes the network term is (n−1)/n ÷ (m−1)/m shorter
than a flat ring's (a group with one rank per node is unchanged). E.g. TP 16 over 2 nodes: 1.875× shorter.
The node network runs as its fabric lets it (``node_transport``, a ``cloudfit.catalog.network.FABRICS`` name; issue 33):
``net_eff`` is fitted on the public runs, all InfiniBand/RoCE, so another fabric scales it by NCCL's share over that
fabric ÷ the RDMA share at the same node count (``network.effective_gbps``: sockets over a 100 Gbit/s gVNIC reach 0.71 of
it on 2 nodes, GPUDirect-TCPX 0.74, EFA 1.10), never past the link; each collective across m nodes also waits ``LATENCY_STEPS``·(m−1) steps per pass of the
fabric's step latency beyond RDMA's (``network.STEP_LATENCY_S``: what makes small messages slow over sockets; the
fitted constants carry the RDMA fabric's own). Without a transport (the public rows) the fabric is RDMA-class and
the step is exactly the fitted model's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from cloudfit.catalog import network

#: Frameworks the public runs used (each gets its own fitted constants), and cloudfit's own FSDP2 trainer
#: (``cloudfit.train_llm``, what ``launch`` runs): PyTorch FSDP like llm-foundry's stack, whose fitted
#: constants it borrows (``BORROWS``) until its own profile runs anchor it; its implementation facts are its
#: own (all-gather context parallelism, ``CP_ALLGATHER``; an fp32 loss, ``cloudfit.llm.memory.LOGIT_BYTES``).
FRAMEWORKS = ("megatron", "megatron-deepspeed", "fsdp", "cloudfit")
TRAINER = "cloudfit"
BORROWS = {"cloudfit": "fsdp"}


@dataclass(frozen=True)
class Constants:
    """The calibrated constants of the step model (``cloudfit/llm/calibration.json`` ships the fitted ones)."""

    eff: dict = field(default_factory=dict)  # "ACC/precision" → peak efficiency (large GEMMs)
    eff_prior: dict = field(default_factory=lambda: {"bf16": 0.62, "fp8": 0.42, "fp16": 0.62, "fp32": 0.5,
                                                     "tf32": 0.5})
    eff_bw_slope: float = 0.0  # log-eff per log(memory bandwidth ÷ peak), for unmeasured accelerators
    t0: float = 512.0  # tokens per micro-batch (per GPU) at half efficiency
    alpha: float = 1.0
    w0: float = 256.0  # hidden ÷ tp at half efficiency
    beta_w: float = 1.0
    attn_eff: dict = field(default_factory=lambda: {"megatron": 0.7, "megatron-deepspeed": 0.7, "fsdp": 0.7, "cloudfit": 0.7})
    recompute: float = 1.0  # share of one forward pass a full recompute costs in time
    mem_traffic: float = 3.0  # memory-bound bytes moved (fwd + bwd) per byte of stored activations (norms, …)
    #: frameworks whose attention is not a flash kernel: softmax over heads × seq scores per token is
    #: memory-bound (Korthikanti's 5·a·s bytes per token and layer); vTrain's Megatron-DeepSpeed GPT
    no_flash: tuple = ("megatron-deepspeed",)
    #: bytes per gradient element the data-parallel reduction moves (2 = bf16/fp16; up to 4 = fp32 main grads)
    grad_bytes: dict = field(default_factory=lambda: {"megatron": 2.0, "megatron-deepspeed": 2.0, "fsdp": 2.0, "cloudfit": 2.0})
    nic_parallel: float = 0.5  # cross-node bandwidth × (group ranks per node)^nic_parallel
    tau_s: float = 2.0e-3  # host seconds per layer per micro-batch of the reference layer (``host_ops``); hidden behind GPU work
    step_overhead_s: float = 0.05
    net_eff: float = 0.7  # achieved ÷ nominal inter-node bandwidth
    nvlink_eff: float = 0.9  # achieved ÷ NCCL's NVLink bus bandwidth (fitted in (0, 1])
    tp_exposed: dict = field(default_factory=lambda: {"megatron": 0.5, "megatron-deepspeed": 1.0, "fsdp": 1.0, "cloudfit": 1.0})
    dp_overlap: dict = field(default_factory=lambda: {"megatron": 0.9, "megatron-deepspeed": 0.0, "fsdp": 0.9, "cloudfit": 0.9})
    fsdp_overlap: dict = field(default_factory=lambda: {"megatron": 0.9, "megatron-deepspeed": 0.9, "fsdp": 0.9, "cloudfit": 0.9})
    fw_eff: dict = field(default_factory=lambda: {"megatron": 1.0, "megatron-deepspeed": 1.0, "fsdp": 1.0, "cloudfit": 1.0})
    cp_overlap: float = 0.8
    p2p_exposed: float = 1.0
    #: key-block length (tokens) at which a flash attention kernel runs at half its rate: the blocks are S/2
    #: long on average without CP (causal), S/(2·cp) under ring CP (2·cp load-balanced chunks per sequence)
    k0: float = 64.0
    #: FP8 casts: bytes of memory traffic per element of every Linear input (forward) and output gradient
    #: (backward) — amax reductions, the bf16 → fp8 casts and the transposed copies the weight-gradient GEMM
    #: needs. Transformer Engine inside Megatron fuses the casts into the norms and activations (prior 3: one
    #: bf16 read, fp8 + transposed fp8 written); a Linear-only FP8 stack (PyTorch FSDP with te.Linear or
    #: torchao's tensorwise Float8Linear) runs amax and casts as separate kernels (prior 8: amax read 2,
    #: cast 3, transposed cast 3). Fitted where the data has FP8 rows.
    fp8_cast: dict = field(default_factory=lambda: {"megatron": 3.0, "megatron-deepspeed": 3.0, "fsdp": 8.0, "cloudfit": 8.0})
    #: bytes per weight element and micro-batch the FP8 weight casts move (Megatron keeps fp8 weights across
    #: micro-batches: 0; a Linear-only stack re-casts the gathered bf16 weight every micro-batch: 8)
    fp8_weight: dict = field(default_factory=lambda: {"megatron": 0.0, "megatron-deepspeed": 0.0, "fsdp": 8.0, "cloudfit": 8.0})
    band: tuple = (-0.15, 0.12)  # 10% / 90% quantiles of log(measured ÷ predicted) (grouped CV)
    #: An accelerator × precision without a fitted efficiency (no public LLM run of it) is extrapolated from the
    #: measured one nearest in spec (``reference``): eff × (peak ratio)^eff_peak_exp[precision] × (memory
    #: bandwidth ratio)^eff_bw_exp — the realised fraction of the peak ratio is 1 + eff_peak_exp. Both learned
    #: from the public transitions (A100 → H100 bf16, H100 → B200/GB200/GB300 fp8; ``fit._fit_eff_prior``);
    #: before they are fitted, ``EXTRAPOLATION_PRIOR``.
    eff_peak_exp: dict = field(default_factory=dict)
    eff_bw_exp: float | None = None
    #: 10% / 90% band of such an extrapolated prediction: ``band`` widened on both sides until it holds 80% of the
    #: residuals of predicting each GPU generation from the older ones (``evaluate.generation_hops``); None = ``band``
    band_extrapolated: tuple | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    def borrowed(self) -> "Constants":
        """These constants with every per-framework table's entry for a framework in ``BORROWS`` set to the
        entry of the framework it borrows from (a calibration fitted before the trainer had a name works too)."""
        d = self.to_dict()
        for k, v in d.items():
            if isinstance(v, dict) and all(f in v for f in BORROWS.values()) and set(v) <= set(FRAMEWORKS):
                d[k] = {**v, **{f: v[src] for f, src in BORROWS.items()}}
        return Constants.from_dict(d)

    @classmethod
    def from_dict(cls, d: dict) -> "Constants":
        keys = cls.__dataclass_fields__.keys()
        return cls(**{k: v for k, v in d.items() if k in keys})

    def efficiency(self, accelerator: str, precision: str, bw_per_tflop: float, framework: str = "fsdp") -> float:
        """Large-GEMM efficiency of ``accelerator`` at ``precision`` under ``framework``: fitted; else carried from
        the nearest measured accelerator by the learned transition exponents (``reference``, ``_extrapolated``);
        with no fitted efficiency at all, the prior for the precision scaled by (memory GB/s per TFLOP ÷ H100's at
        that precision)^eff_bw_slope."""
        key = eff_key(accelerator, precision)
        fw = float(self.fw_eff.get(framework, 1.0))
        if key in self.eff:
            return float(self.eff[key]) * fw
        if self.eff:  # carried from the nearest measured accelerator (a spec twin: its efficiency unchanged)
            ref = _nearest(frozenset(self.eff), accelerator, key.split("/")[1])
            return self._extrapolated(ref, accelerator, precision) * fw
        base = self.eff_prior.get(precision, 0.5)
        ref = 3350.0 / (1979.0 if precision == "fp8" else 989.0)
        return float(base * (bw_per_tflop / ref) ** self.eff_bw_slope) * fw

    def measured(self, accelerator: str, precision: str) -> bool:
        """Whether the fit saw public runs of ``accelerator`` at ``precision`` (fp16 counts as bf16), or of a GPU
        with the same peak and memory bandwidth at that precision (A3 Mega's H100 is an H100)."""
        key = eff_key(accelerator, precision)
        if key in self.eff:
            return True
        if not self.eff:
            return False
        ref = _nearest(frozenset(self.eff), accelerator, key.split("/")[1])
        return ref.split("/")[1] == key.split("/")[1] and _spec(ref) == _spec(key)

    def reference(self, accelerator: str, precision: str) -> str | None:
        """The measured "ACC/precision" an unmeasured one is extrapolated from: the nearest in log dense peak and
        log memory bandwidth at the same precision (any precision when none was measured); None when measured
        itself or when nothing was."""
        if self.measured(accelerator, precision) or not self.eff:
            return None
        return _nearest(frozenset(self.eff), accelerator, eff_key(accelerator, precision).split("/")[1])

    def realised(self, precision: str) -> tuple[float, float]:
        """(peak exponent, bandwidth exponent) of the extrapolation at ``precision``."""
        p = eff_key("x", precision).split("/")[1]
        beta = self.eff_peak_exp.get(p, self.eff_peak_exp.get("all", EXTRAPOLATION_PRIOR[0]))
        gamma = EXTRAPOLATION_PRIOR[1] if self.eff_bw_exp is None else self.eff_bw_exp
        return float(beta), float(gamma)

    def _extrapolated(self, ref: str, accelerator: str, precision: str) -> float:
        """The reference's efficiency carried to ``accelerator`` by the transition exponents of the reference's
        precision, the peaks compared at that precision: the exponents are learned on accelerator transitions at
        a fixed precision, so a precision measured nowhere (FP8 before any FP8 row) keeps the reference's
        efficiency at its own peak rather than discounting the precision's speed-up as if it were a new chip."""
        rp = ref.split("/")[1]
        beta, gamma = self.realised(rp)
        (pk_t, bw_t), (pk_r, bw_r) = _spec(f"{accelerator}/{rp}"), _spec(ref)
        return float(self.eff[ref]) * (pk_t / pk_r) ** beta * (bw_t / bw_r) ** gamma

    def band_for(self, accelerator: str, precision: str) -> tuple[float, float]:
        """The 10–90% log band of a prediction on ``accelerator`` at ``precision``: the cross-validated band
        where the fit saw public runs of it, else the generation-hop band."""
        if self.measured(accelerator, precision) or self.band_extrapolated is None or not self.eff:
            return float(self.band[0]), float(self.band[1])
        return float(self.band_extrapolated[0]), float(self.band_extrapolated[1])

    def extrapolation(self, accelerator: str, precision: str) -> str:
        """What a prediction on an unmeasured accelerator or precision rests on ('' when measured)."""
        from cloudfit.llm import hardware as lhw

        name, prec = lhw.canonical(accelerator), eff_key(accelerator, precision).split("/")[1]
        ref = self.reference(name, precision)
        if ref is None:
            return ""
        others = sorted(k.split("/")[1] for k in self.eff if k.split("/")[0] == name)
        what = f"no public LLM run of {name} at {prec} ({name} measured at {', '.join(others)} only)" if others \
            else f"no public LLM run on {name}"
        rn, rp = ref.split("/")
        beta, gamma = self.realised(rp)
        band = "; band from leave-one-generation-out" if self.band_extrapolated is not None else ""
        return (f"{what}: extrapolated from {rn}{'' if rp == prec else ' ' + rp} by spec (realised "
                f"{1 + beta:.2f} of the log peak ratio, {gamma:.2f} of the bandwidth ratio, learned on public "
                f"generation transitions){band}")


#: (peak exponent, bandwidth exponent) of the extrapolation before it is fitted: efficiency ∝ (bandwidth ÷
#: peak)^0.5, the roofline-style prior of a workload mixing compute- and memory-bound kernels
EXTRAPOLATION_PRIOR = (-0.5, 0.5)


def eff_key(accelerator: str, precision: str) -> str:
    """"ACC/precision" of the efficiency table (fp16 runs at the bf16 tensor rate and shares its key)."""
    p = precision.lower()
    return f"{accelerator}/{'bf16' if p == 'fp16' else p}"


_SPEC: dict[str, tuple[float, float]] = {}


def _spec(key: str) -> tuple[float, float]:
    """(dense peak TFLOPS at the key's precision, memory GB/s) of an "ACC/precision" key."""
    if key not in _SPEC:
        from cloudfit.llm import hardware as lhw

        a, p = key.split("/")
        _SPEC[key] = (float(lhw.get(a).peak_tflops(p)), float(lhw.get(a).memory_bandwidth_gbps))
    return _SPEC[key]


_NEAREST: dict[tuple, str] = {}


def _nearest(keys: frozenset, accelerator: str, precision: str) -> str:
    """The key of ``keys`` nearest to accelerator × precision in |log peak ratio| + |log bandwidth ratio|,
    among the same precision's keys when there are any (ties: by name)."""
    ck = (keys, accelerator, precision)
    if ck not in _NEAREST:
        import math

        pk, bw = _spec(f"{accelerator}/{precision}")
        same = sorted(k for k in keys if k.split("/")[1] == precision) or sorted(keys)
        dist = lambda k: abs(math.log(pk / _spec(k)[0])) + abs(math.log(bw / _spec(k)[1]))  # noqa: E731
        _NEAREST[ck] = min(same, key=lambda k: (dist(k), k))
    return _NEAREST[ck]


def _f(x):
    return np.asarray(x, dtype=float)


#: Latency steps per node of one collective pass across nodes (ring: m − 1 per all-gather / reduce-scatter pass, two
#: passes per all-reduce; module docstring).
LATENCY_STEPS = 1.0


def _ring(n, bytes_, bw_gbs):
    """Seconds of a ring all-reduce of ``bytes_`` over ``n`` ranks at ``bw_gbs`` GB/s (0 when n = 1)."""
    n = _f(n)
    return np.where(n > 1, 2.0 * (n - 1.0) / np.maximum(n, 1.0) * _f(bytes_) / (_f(bw_gbs) * 1e9), 0.0)


def _pass(n, bytes_, bw_gbs):
    """Seconds of one all-gather or reduce-scatter pass (half a ring all-reduce)."""
    return 0.5 * _ring(n, bytes_, bw_gbs)


#: Host-dispatched ops (kernel launches and the Python around them) of one decoder layer's forward with a flash
#: attention kernel: 2 norms, the QKV projection, attention, the output projection, 2 residual adds, the MLP's
#: 2 matmuls and activation, dropout / bias adds (~12); an unfused attention core adds 3 (QK^T, masked softmax,
#: dropout and AV in place of one kernel). A backward dispatches ~2 ops per forward op (input and weight gradient).
FWD_OPS = 12.0
UNFUSED_ATTENTION_OPS = 3.0


def host_ops(ac_code, flash=1.0, tp=1.0):
    """Host-dispatched ops of one layer and micro-batch ÷ those of the reference layer (flash attention, no
    recompute, no TP: 3 × ``FWD_OPS``), the multiplier of ``tau_s``. Full recompute (``ac_code`` 2) re-dispatches
    the forward; an unfused attention core adds ``UNFUSED_ATTENTION_OPS`` per forward; TP adds its collectives
    (4 per layer, 6 with full recompute)."""
    full = np.where(_f(ac_code) == 2, 1.0, 0.0)
    fwd = FWD_OPS + np.where(_f(flash) <= 0, UNFUSED_ATTENTION_OPS, 0.0)
    coll = np.where(_f(tp) > 1, 4.0 + 2.0 * full, 0.0)
    return ((3.0 + full) * fwd + coll) / (3.0 * FWD_OPS)


#: Frameworks whose context parallelism all-gathers every chunk's keys and values before attention (and
#: reduce-scatters their gradients after it) with a boolean causal mask: cloudfit's own FSDP2 trainer
#: (``cloudfit.llm_model``). The others run ring attention (K/V chunks passed round the CP ring, overlapped
#: with the attention of the chunk at hand, causal work balanced by the head-tail split).
CP_ALLGATHER = ("cloudfit",)
#: ZeRO stage a stack runs data parallelism with under a pipeline: Megatron's distributed optimizer (1); PyTorch
#: stacks shard with FSDP there too (cloudfit's trainer: ``fully_shard`` on every stage, kept gathered).
PIPELINE_ZERO = {"megatron": 1, "megatron-deepspeed": 1, "fsdp": 3, "cloudfit": 3}


def stack_args(c: Constants, frameworks, *, fp8=None) -> dict:
    """Per-row arrays of the stack-dependent constants for ``step_time`` (one framework name per row): the
    constants of the stack that runs the job, never chosen by the layout. ``fp8``: 1 where the run is FP8."""
    fw = list(frameworks)
    arr = lambda d: np.array([float(d[f]) for f in fw])  # noqa: E731
    fp8 = np.zeros(len(fw)) if fp8 is None else np.broadcast_to(_f(fp8), (len(fw),)).copy()
    return {"tp_exposed": arr(c.tp_exposed), "dp_overlap": arr(c.dp_overlap), "fsdp_overlap": arr(c.fsdp_overlap),
            "attn_eff": arr(c.attn_eff), "grad_bytes": arr(c.grad_bytes),
            "flash": np.array([0.0 if f in c.no_flash else 1.0 for f in fw]),
            "fp8": fp8, "fp8_cast_bytes": fp8 * arr(c.fp8_cast), "fp8_weight_bytes": fp8 * arr(c.fp8_weight),
            "cp_allgather": np.array([1.0 if f in CP_ALLGATHER else 0.0 for f in fw])}


def linear_io(hidden, kv_dim, layer_matmul_flops):
    """Elements per token and layer of every Linear input (forward) and output gradient (backward) — what FP8
    casts: inputs of q/k/v (one cast), o, the MLP's first matmul(s) (one cast) and its last; gradients of the
    q/k/v outputs (h + 2·kv), o (h), the MLP's first matmul(s) (2·ffn gated, ffn plain) and last (h). The MLP
    width × matrices comes from the matmul FLOPs: (mm/2 − 2h² − 2h·kv) ÷ h."""
    h, kv = _f(hidden), _f(kv_dim)
    mlp = np.maximum(_f(layer_matmul_flops) / 2.0 - 2.0 * h * h - 2.0 * h * kv, 0.0) / h
    return 6.0 * h + 2.0 * kv + mlp


def _rates(c, *, tokens_gpu, h, tp, peak_tflops, efficiency, attn_peak_tflops, attn_efficiency, attn_eff, memory_gbs,
           key_block):
    """(Linear GEMM, attention / 16-bit GEMM, memory) rates in FLOP/s and B/s. The saturation is in the GEMM
    work per GPU: tokens per GPU (a TP GEMM has tp× the rows of its shard but 1/tp of the columns) and the
    width hidden ÷ tp — so at equal tokens per GPU, TP never makes a GEMM more efficient. Attention also
    saturates in its key-block length (``k0``)."""
    a_peak = _f(peak_tflops if attn_peak_tflops is None else attn_peak_tflops)
    a_eff = _f(efficiency if attn_efficiency is None else attn_efficiency)
    sat = (1.0 / (1.0 + (c.t0 / np.maximum(tokens_gpu, 1.0)) ** c.alpha)
           / (1.0 + (c.w0 / np.maximum(h / tp, 1.0)) ** c.beta_w))
    gemm = _f(peak_tflops) * 1e12 * _f(efficiency) * sat
    attn = a_peak * 1e12 * a_eff * _f(attn_eff) * sat / (1.0 + c.k0 / np.maximum(_f(key_block), 1.0))
    return gemm, a_peak * 1e12 * a_eff * sat, attn, _f(memory_gbs) * 1e9


def _cp_time(c, *, cp, ac, kv_bytes, bw_cp, t_attn_layer, allgather):
    """Exposed seconds per layer and micro-batch of context parallelism. Ring: 3·(cp−1) K/V-sized chunks per
    layer (forward K, V; backward K, V, dK, dV), hidden behind the attention compute up to ``cp_overlap``.
    All-gather: the gather of K and V before the attention (again when the forward is recomputed) and the
    reduce-scatter of their gradients after it, each (cp−1) chunks, waited on at once: exposed."""
    chunk = np.maximum(cp - 1.0, 0.0) * kv_bytes / (bw_cp * 1e9) * np.where(cp > 1, 1.0, 0.0)
    ring = np.maximum(3.0 * chunk - c.cp_overlap * t_attn_layer, 0.0)
    gather = (2.0 + np.where(ac == 2, 1.0, 0.0)) * chunk
    return np.where(_f(allgather) > 0, gather, ring)


class _Links:
    """Bus bandwidth (GB/s) of a collective over ``group`` ranks spaced ``stride`` apart (rank order tp, cp, dp, pp):
    NVLink inside the domain, else the per-GPU network share × (group ranks per node)^nic_parallel, scaled so that
    the ring formula over the n ranks moves 2(m−1)/m of the buffer across the m nodes spanned."""

    def __init__(self, c, *, gpn, dom, intra, inter, link_gbps=None, transport=None):
        self.c, self.gpn, self.dom, self.intra = c, gpn, dom, intra
        # the fabric's share relative to the RDMA-class fabric net_eff was fitted on (1 for it), never past the link
        self.transport = "rdma" if transport is None else network.resolve(transport, link_gbps)
        # step latency beyond the RDMA fabric's (which the fitted constants already carry): 0 for the public runs
        self.alpha = np.maximum(network.step_latency_s(self.transport) - network.STEP_LATENCY_S["rdma"], 0.0)
        self._link, self._inter = link_gbps, inter
        self.inter = inter * self._rel(2.0)  # a point-to-point send between two nodes

    def _rel(self, m):
        if isinstance(self.transport, str) and self.transport == "rdma":
            return 1.0
        link = np.maximum(_f(self._link), 1e-9)
        # the ratio at m nodes, never above its ratio at fewer nodes (RDMA's 3+-node shares are a transfer of EFA's
        # node-count ratio; a fabric must not gain on it by spanning more nodes)
        def ratio(nodes):
            return network.effective_gbps(link, nodes, self.transport) / network.effective_gbps(link, nodes, "rdma")

        m = np.maximum(m, 2.0)
        share = ratio(m)
        for fewer in (2.0, 3.0):
            share = np.where(m >= fewer, np.minimum(share, ratio(fewer)), share)
        return np.minimum(share, 1.0 / self.c.net_eff)

    def _nodes(self, group, stride):
        n = np.maximum(group, 1.0)
        per_node = np.clip(self.gpn / np.maximum(stride, 1.0), 1.0, n)
        return n, per_node, np.maximum(n / per_node, 1.0)  # ranks, ranks per node, nodes the group spans

    def __call__(self, group, stride):
        n, per_node, m = self._nodes(group, stride)
        hier = np.where(m > 1.0, ((n - 1.0) / n) / np.maximum((m - 1.0) / m, 1e-9), 1.0)
        net = self._inter * self._rel(m) * per_node ** self.c.nic_parallel * hier
        return np.where(group * stride <= self.dom, self.intra, np.minimum(self.intra, net))

    def lat(self, group, stride):
        """Seconds of network latency of one all-gather / reduce-scatter pass over the group (0 inside the
        NVLink domain): ``LATENCY_STEPS`` · (m − 1) steps of the fabric's latency across its m nodes."""
        _, _, m = self._nodes(group, stride)
        return np.where(group * stride <= self.dom, 0.0, LATENCY_STEPS * (m - 1.0) * self.alpha)


def _sharding(across, *, zero, dpr, dps, cp, tp, pp, stage_layers, t_mb, w_bytes, g_bytes, fsdp_overlap, dp_overlap):
    """Exposed seconds of ZeRO / FSDP traffic: (per micro-batch, per step) and the per-step data-parallel time
    (which includes the per-step FSDP part). The shard group is dp_shard × cp."""
    shard = np.where(zero > 0, dps * cp, 1.0)
    bw_shard = across(dps * cp, tp)
    lat_shard = np.where(shard > 1, across.lat(dps * cp, tp), 0.0)
    ag_pass = _pass(shard, w_bytes, bw_shard) + lat_shard
    rs_pass = _pass(shard, g_bytes, bw_shard) + lat_shard
    gather = np.where(zero >= 3, 2.0 * ag_pass + rs_pass, np.where(zero == 2, ag_pass + rs_pass, 0.0))
    once = (zero >= 3) & (pp > 1)  # a pipeline stage keeps its gathered weights across its micro-batches
    per_mb = np.where(once, 0.0, gather)
    per_step = np.where(once, ag_pass + rs_pass, 0.0)
    t_fsdp_mb = np.maximum(per_mb - fsdp_overlap * t_mb, 0.0) + per_mb / np.maximum(stage_layers, 1.0)
    t_fsdp_step = np.maximum(per_step - fsdp_overlap * t_mb, 0.0) + per_step / np.maximum(stage_layers, 1.0)
    dp_all, dp_rep = dpr * dps * cp, np.where(zero >= 2, dpr, 1.0)
    dp_step = (np.where(zero <= 1, _ring(dp_all, g_bytes, across(dp_all, tp))
                        + 2.0 * np.where(dp_all > 1, across.lat(dp_all, tp), 0.0), 0.0)
               + _ring(dp_rep, g_bytes / shard, across(dpr, tp * cp * dps))
               + 2.0 * np.where(dp_rep > 1, across.lat(dpr, tp * cp * dps), 0.0))
    t_dp = np.maximum(dp_step - dp_overlap * (2.0 / 3.0) * t_mb, 0.0) + t_fsdp_step
    return t_fsdp_mb, t_fsdp_step, t_dp


def step_time(*, layers, hidden, kv_dim, seq_len, vocab, act_none, layer_params, heads=None, flash=True, stage_extra_params, params,
              layer_matmul_flops, layer_attention_flops, head_flops,
              tp, pp, cp, vp, dp_replicate, dp_shard, zero, micro_batch, grad_accum, ac_code,
              peak_tflops, efficiency, memory_gbs, attn_peak_tflops=None, intra_gbs, node_gbps, gpus_per_node, nvlink_domain,
              tp_exposed, dp_overlap, fsdp_overlap, attn_eff, c: Constants, lora=False, grad_bytes=2.0,
              attn_efficiency=None, fp8=0.0, fp8_cast_bytes=0.0, fp8_weight_bytes=0.0, cp_allgather=0.0,
              node_transport=None) -> dict:
    """Vectorised step time of a layout (arrays broadcast). Returns a dict of arrays, seconds per step.

    ``efficiency`` is the Linear GEMMs' (at ``peak_tflops``, the run's precision); attention and, in FP8 runs
    (``fp8`` 1), the LM head run in 16-bit at ``attn_peak_tflops`` × ``attn_efficiency`` (default: the same).
    FP8 runs also move ``fp8_cast_bytes`` per Linear input / output-gradient element (``linear_io``) and
    ``fp8_weight_bytes`` per weight element and micro-batch at memory bandwidth. ``cp_allgather`` 1: context
    parallelism all-gathers K/V (``_cp_time``) and computes the masked seq × seq attention in full.
    A pipeline with ZeRO-3 (FSDP) gathers a stage's weights once per step and reduce-scatters after the last
    micro-batch (the stage keeps them unsharded across its micro-batches); without a pipeline, every micro-batch.
    The ZeRO shard group and the gradient reduction span dp × cp (CP peers hold the same weights).

    Keys: ``step_s``, ``compute_s``, ``tp_s``, ``cp_s``, ``fsdp_s``, ``dp_s``, ``pp_p2p_s``, ``bubble_s``,
    ``other_s`` (optimizer + overheads); exposed (not hidden) parts only.
    """
    L = _f(layers)
    tp, pp, cp, vp = _f(tp), _f(pp), _f(cp), _f(vp)
    dpr, dps, zero = _f(dp_replicate), _f(dp_shard), _f(zero)
    mb, ga, ac = _f(micro_batch), _f(grad_accum), _f(ac_code)
    S, h = _f(seq_len), _f(hidden)
    gpn = _f(gpus_per_node)
    stage_layers = np.ceil(L / pp)
    tokens_mb = mb * S / cp  # tokens of one micro-batch on one GPU's sequence shard
    # --- compute ----------------------------------------------------------------------------
    mm, att, head = _f(layer_matmul_flops), _f(layer_attention_flops), _f(head_flops)
    unfused = _f(flash) <= 0
    gathered = (_f(cp_allgather) > 0) & (cp > 1)
    n_heads = _f(heads if heads is not None else 0.0)
    # unfused attention, and a masked (not causal) kernel over gathered K/V, compute the masked half too
    att = att * np.where(unfused | gathered, 2.0, 1.0)
    bwd_factor = np.where(lora, 2.0, 3.0)  # LoRA: no weight gradients of the frozen base
    # Three rates: weight GEMMs at the run's precision; attention (flash kernels stay in bf16) at attn_eff of the
    # bf16 GEMM rate; memory-bound element-wise work (norms, activations, residuals, casts) at memory bandwidth,
    # mem_traffic bytes per byte of stored activations. Full recompute re-runs ``c.recompute`` of a forward.
    rec = np.where(ac == 2, c.recompute, 0.0)
    gemm_rate, gemm16_rate, attn_rate, mem_rate = _rates(
        c, tokens_gpu=tokens_mb / tp, h=h, tp=tp, peak_tflops=peak_tflops, efficiency=efficiency,
        attn_peak_tflops=attn_peak_tflops, attn_efficiency=attn_efficiency, attn_eff=attn_eff, memory_gbs=memory_gbs,
        key_block=np.where(gathered, S, S / (2.0 * cp)))
    is8 = _f(fp8) > 0
    scores = np.where(unfused, 5.0 * n_heads * S, 0.0)
    # the score matrix itself, written by QK^T and read by AV (fp16, 2 bytes a score): 4·a·s bytes per token
    # forward, 8·a·s backward, 4·a·s again per recomputed forward; exact traffic, no mem_traffic multiplier
    score_io = np.where(unfused, (12.0 + 4.0 * rec) * n_heads * S, 0.0)
    cast_io = _f(fp8_cast_bytes) * linear_io(h, kv_dim, mm) * (1.0 + rec / 3.0)
    att_units = np.where(unfused, 3.0, 3.5)  # flash backward recomputes the scores: 2.5 forwards, not 2
    t_layer_tok = ((bwd_factor + rec) * mm / gemm_rate + (att_units + rec) * att / attn_rate
                   + ((1.0 + rec / 3.0) * c.mem_traffic * (_f(act_none) + scores) + score_io + cast_io) / mem_rate)
    head_tok = bwd_factor * head / np.where(is8, gemm16_rate, gemm_rate)  # LM head: last stage, 16-bit in FP8 runs
    t_wcast = _f(fp8_weight_bytes) * stage_layers * _f(layer_params) / tp / mem_rate
    t_mb = tokens_mb * (stage_layers * t_layer_tok + head_tok) / tp + t_wcast
    t_attn_layer = tokens_mb * att_units * att / (tp * attn_rate)
    t_launch = c.tau_s * host_ops(ac, flash, tp) * stage_layers
    # --- bandwidths ---------------------------------------------------------------------------
    across = _Links(c, gpn=gpn, dom=_f(nvlink_domain), intra=_f(intra_gbs) * c.nvlink_eff,
                    inter=_f(node_gbps) / 8.0 / gpn * c.net_eff, link_gbps=_f(node_gbps), transport=node_transport)
    bw_tp = across(tp, 1.0)
    bw_cp = across(cp, tp)
    pp_net = tp * cp * dpr * dps >= gpn
    bw_pp = np.where(pp_net, across.inter, across.intra)
    # --- tensor parallel ----------------------------------------------------------------------
    act_bytes = tokens_mb * h * 2.0
    n_coll = 4.0 + np.where(ac == 2, 2.0, 0.0)
    t_tp_mb = stage_layers * n_coll * (_ring(tp, act_bytes, bw_tp) + 2.0 * np.where(tp > 1, across.lat(tp, 1.0), 0.0)
                                       ) * _f(tp_exposed)
    # --- context parallel -----------------------------------------------------------------------
    kv_bytes = tokens_mb * 2.0 * _f(kv_dim) * 2.0 / tp
    t_cp_mb = stage_layers * _cp_time(c, cp=cp, ac=ac, kv_bytes=kv_bytes, bw_cp=bw_cp, t_attn_layer=t_attn_layer,
                                      allgather=cp_allgather)
    # --- data parallel / sharding ---------------------------------------------------------------
    stage_params = stage_layers * _f(layer_params) + np.where(pp > 1, _f(stage_extra_params),
                                                              _f(params) - L * _f(layer_params))
    grad_params = np.where(lora, 0.02 * stage_params, stage_params) / tp
    t_fsdp_mb, t_fsdp_step, t_dp = _sharding(
        across, zero=zero, dpr=dpr, dps=dps, cp=cp, tp=tp, pp=pp, stage_layers=stage_layers, t_mb=t_mb,
        w_bytes=stage_params / tp * 2.0, g_bytes=grad_params * _f(grad_bytes), fsdp_overlap=_f(fsdp_overlap),
        dp_overlap=_f(dp_overlap))
    # --- pipeline -------------------------------------------------------------------------------
    p2p_bytes = tokens_mb * h * 2.0 / tp
    t_p2p_mb = np.where(pp > 1, 2.0 * vp * (p2p_bytes / (bw_pp * 1e9) + np.where(pp_net, across.alpha, 0.0)),
                        0.0) * c.p2p_exposed
    t_gpu_mb = t_mb + t_tp_mb + t_cp_mb + t_fsdp_mb + t_p2p_mb
    t_host_mb = np.maximum(t_launch - t_gpu_mb, 0.0)  # host dispatch runs ahead of the GPU: only its excess shows
    t_stage_mb = t_gpu_mb + t_host_mb
    bubble = (pp - 1.0) / vp * t_stage_mb
    # --- optimizer + fixed ----------------------------------------------------------------------
    opt_params = grad_params / np.where(zero >= 1, dps * cp, 1.0)
    t_opt = opt_params * 32.0 / (_f(memory_gbs) * 1e9)
    other = t_opt + c.step_overhead_s + ga * t_host_mb
    step = ga * (t_mb + t_tp_mb + t_cp_mb + t_fsdp_mb + t_p2p_mb) + bubble + t_dp + other
    return {"step_s": step, "compute_s": ga * t_mb, "tp_s": ga * t_tp_mb, "cp_s": ga * t_cp_mb,
            "fsdp_s": ga * t_fsdp_mb + t_fsdp_step, "dp_s": t_dp - t_fsdp_step, "pp_p2p_s": ga * t_p2p_mb,
            "bubble_s": bubble, "other_s": other}
