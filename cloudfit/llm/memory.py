"""Peak memory per GPU of a layout: model states, activations, logits, buffers, framework overhead.

Mixed-precision AdamW, bytes per parameter (DESIGN.md "Large models"): bf16 weights 2, gradients 2
(bf16 reduce; FSDP2 and Megatron-FSDP default) or 4 (``grad_bytes=4``: Megatron's fp32 main-gradient
buffer), fp32 master weights 4, two fp32 moments 8. ZeRO stage s divides, over the shard group (the
data-parallel shards × cp: context-parallel peers hold the same weights, and both FSDP2 and Megatron's
distributed optimizer shard over them): optimizer states (s ≥ 1), gradients (s ≥ 2), weights (s = 3). TP
divides a layer's weights; PP keeps ceil(layers / pp) layers per stage plus the embedding (first stage) or
the LM head (last stage), whichever is larger. FP8 training under Megatron keeps fp8 primary weights (1 byte:
its fp8 parameter gather; the bf16 copy is not kept); every FP8 stack saves the inputs of its linear layers in
fp8 (activations × 0.75).

Fine-tuning: ``full`` = pre-training states; ``lora`` = frozen bf16 base (2 B/param, sharded like the
weights), adapters of rank r on every linear of every layer (q, k, v, o, and the MLP matrices) holding
16 B/param of states, no base gradients.

Activations per micro-batch (see ``cloudfit.llm.stats`` for bytes per token per layer) are divided by
tp (sequence parallelism) and cp; a pipeline's first stage holds ``min(ga, pp)`` micro-batches in flight
under 1F1B (× (1 + (pp−1)/(pp·vp)) interleaved; all ``ga`` under GPipe). cloudfit's own trainer repeats K and V
to every query head before SDPA (grouped-query attention), which saves them for its backward: 4·(hidden − kv_dim)
more bytes per token and layer; with its all-gather context parallelism (``cloudfit.llm.step.CP_ALLGATHER``) also
the other cp − 1 chunks' (4·hidden bytes per local token each).
The last stage holds the logits of one micro-batch ÷ tp: Megatron's fused vocab-parallel loss 4 B per
vocabulary entry (bf16 logits and their gradient; llm-foundry's FSDP runs fit only with the same); cloudfit's
own trainer's loss on ``logits.float()`` 10 B (bf16 logits, their fp32 copy and the fp32 log-softmax it saves);
Megatron-DeepSpeed's unfused ``vocab_parallel_cross_entropy(output.float(), labels)`` 14 B at its peak, which
comes with every activation of the micro-batch alive (``megatron/model/gpt_model.py`` and
``megatron/core/tensor_parallel/cross_entropy.py``: the bf16 logits, their fp32 copy, the max-shifted fp32 copy
and the fp32 ``exp`` it saves; its DeepSpeed pipeline model keeps the fp32 logits as the stage's output, 12–14 B).
Sailor's OPT-350M peaks on GH200 grow 3.1 GiB per 2,048-token sequence: this rule with Korthikanti's activations
says 3.0, the 4 B one 2.0.
FSDP (zero 3) without a pipeline keeps two layers unsharded (the current one and the prefetched one: weights
and their gradients, bf16). With a pipeline a stage runs several micro-batches through its layers, and FSDP
keeps the whole stage gathered until its last micro-batch (no reshard after forward or backward, gradient
reduce-scatter only after the last one): the stage's bf16 weights and its unsharded gradients, accumulated in
the fp32 reduce dtype (4 B), stay resident on top of the sharded states.
PyTorch stacks (``fsdp``: torchtitan, Accelerate, a user's script) with nothing sharded, tensor- or
pipeline-parallel — one GPU, or DDP replicas — train with AMP, not FSDP's mixed precision (torchtitan's
``maybe_enable_amp``: "Mixed precision training is handled by AMP"): fp32 weights (4 B) and gradients (4 B), the
two moments (8 B), and autocast's bf16 copy of every weight cast in the forward (2 B, cached until the forward
ends and, under gradient accumulation, alive beside the gradients): 18 B per parameter. Measured: torchtitan
0.2.2, llama3-8b on one H200 at seq 2,048, full AC, mb=1 ga=4 peaked at 137.27 GiB (this rule: ~145; the
16 B rule said 130.0 and let mb=2 ga=2 "fit" at 131.9 GiB — it ran out of memory; bench/RESULTS_gpu.md).
cloudfit's own trainer wraps FSDP2 even on one rank (bf16 weights): the 16 B rule.
Framework overhead: CUDA context, NCCL buffers and allocator fragmentation, 2.5 GiB + 5% of the rest
(a measured-style allowance: PyTorch reserves typically 3–8% above allocated at peak).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from cloudfit.errors import UsageError
from cloudfit.llm.layout import AC_CODE, Layout
from cloudfit.llm.stats import TokenStats

GIB = 1024.0 ** 3
OVERHEAD_GIB = 2.5
OVERHEAD_FRACTION = 0.05


@dataclass(frozen=True)
class MemoryEstimate:
    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    activations_gib: float
    logits_gib: float
    buffers_gib: float
    overhead_gib: float
    total_gib: float
    capacity_gib: float
    fits: bool
    reason: str

    @property
    def states_gib(self) -> float:
        return self.weights_gib + self.gradients_gib + self.optimizer_gib

    def to_dict(self) -> dict:
        return asdict(self)


def lora_parameters(st: TokenStats, rank: int) -> int:
    """Adapter parameters of rank ``rank`` on every linear layer of every block."""
    if rank < 1:
        raise UsageError(f"--lora-rank must be at least 1, got {rank}")
    h, kv, f = st.hidden, st.kv_dim, st.ffn_hidden
    mats = [(h, h), (h, kv), (h, kv), (h, h)]
    mats += [(h, f), (h, f), (f, h)] if st.layer_matmul_flops > 2 * (2 * h * f + 2 * h * h + 2 * h * kv) else \
        [(h, f), (f, h)]
    return st.layers * sum(rank * (a + b) for a, b in mats)


def stage_parameters(st: TokenStats, lay: Layout) -> float:
    """Parameters held by the most loaded pipeline stage, before TP and sharding division."""
    per_stage = math.ceil(st.layers / lay.pp) * st.layer_parameters
    if lay.pp == 1:
        return float(st.parameters)
    return float(per_stage + max(st.embedding_parameters, st.head_parameters))


def in_flight(lay: Layout) -> float:
    """Micro-batches of activations the first pipeline stage holds at its peak."""
    if lay.pp == 1:
        return 1.0
    if lay.schedule == "gpipe":
        return float(lay.grad_accum)
    m = float(min(lay.grad_accum, lay.pp))
    if lay.vp > 1:
        m *= 1.0 + (lay.pp - 1) / (lay.pp * lay.vp)
    return m


#: Headroom a person keeps: where a layout within ``ROOMY_SPEED`` of the fastest leaves ``1 - ROOMY_FRACTION`` of
#: the GPU's memory free and the fastest does not, the roomy one is chosen (llama3-8b on 16 B200 at 8K tokens:
#: mb=4 needs 179.2 of 180 GiB for 288,708 tokens/s, mb=2 95.6 GiB for 288,051 — no one runs the first; the
#: predicted peak is an estimate and the allocator fragments). A policy, not a fit.
ROOMY_FRACTION = 0.90
ROOMY_SPEED = 0.98
#: Above this share of the GPU, a plan that is kept anyway (no roomy one within ``ROOMY_SPEED``) says so.
FULL_FRACTION = 0.95


def crowded(tokens_per_second, memory_gib, capacity_gib, group=None):
    """Per layout (numpy columns; all of them fit), whether it gives way to a roomier one of its ``group``
    (e.g. one hardware shape × node count): True where it leaves less than ``1 - ROOMY_FRACTION`` of memory
    free and its group has a layout that does, within ``ROOMY_SPEED`` of the group's fastest. Pick the fastest
    layout that is not crowded; list crowded ones after the others."""
    import numpy as np

    t = np.asarray(tokens_per_second, dtype=float)
    g = np.zeros(t.shape, dtype=np.int64) if group is None else np.asarray(group, dtype=np.int64)
    roomy = np.asarray(memory_gib, dtype=float) <= ROOMY_FRACTION * np.asarray(capacity_gib, dtype=float)
    if t.size == 0 or roomy.all():
        return np.zeros(t.shape, dtype=bool)
    n = int(g.max()) + 1
    best, best_roomy = np.full(n, -np.inf), np.full(n, -np.inf)
    np.maximum.at(best, g, t)
    np.maximum.at(best_roomy, g, np.where(roomy, t, -np.inf))
    give_way = best_roomy >= ROOMY_SPEED * best
    return ~roomy & give_way[g]


#: Bytes per logit entry at the loss's peak: Megatron's fused vocab-parallel cross-entropy, Megatron-DeepSpeed's
#: unfused one on fp32 logits, a PyTorch loss on fp32 (the module docstring).
LOGIT_BYTES = {"megatron": 4.0, "megatron-deepspeed": 14.0, "fsdp": 4.0, "cloudfit": 10.0}
#: Stacks that keep the all-gathered K/V of context parallelism for the backward.
_CP_GATHER = ("cloudfit",)


def _parts(st: TokenStats, *, tp, pp, cp, vp, zero, dp_shard, micro_batch, grad_accum, ac_code, gpipe,
           precision: str, finetune: str, lora_rank: int, grad_bytes: float, framework: str) -> dict:
    """Bytes per GPU of every memory part (numpy arrays broadcast; the rule of the module docstring)."""
    import numpy as np

    f = lambda x: np.asarray(x, dtype=float)  # noqa: E731
    tp, pp, cp, vp, zero, dps = f(tp), f(pp), f(cp), f(vp), f(zero), f(dp_shard)
    mb, ga, ac, gp = f(micro_batch), f(grad_accum), f(ac_code), f(gpipe)
    stage_layers = np.ceil(st.layers / pp)
    p_stage = np.where(pp == 1, float(st.parameters),
                       stage_layers * st.layer_parameters + max(st.embedding_parameters, st.head_parameters)) / tp
    shard = np.where(zero > 0, dps * cp, 1.0)
    w_div, g_div, o_div = (np.where(zero >= k, shard, 1.0) for k in (3, 2, 1))
    w_bytes = 1.0 if (precision == "fp8" and framework.startswith("megatron")) else 2.0
    if finetune == "lora":
        adapters = lora_parameters(st, lora_rank) / tp / pp
        weights = p_stage * w_bytes / w_div + adapters * 2.0
        grads, opt = adapters * grad_bytes / g_div, adapters * 12.0 / o_div
    else:
        weights, grads, opt = p_stage * w_bytes / w_div, p_stage * grad_bytes / g_div, p_stage * 12.0 / o_div
        if framework == "fsdp":  # nothing sharded, no TP/PP: AMP (fp32 weights + their bf16 autocast copy)
            amp = (shard == 1) & (tp == 1) & (pp == 1)
            weights, grads, opt = (np.where(amp, p_stage * b, x) for b, x in ((6.0, weights), (4.0, grads), (8.0, opt)))
    flight = np.where(pp == 1, 1.0, np.where(gp > 0, ga, np.minimum(ga, pp) *
                                             np.where(vp > 1, 1.0 + (pp - 1) / (pp * vp), 1.0)))
    tokens_mb = mb * st.seq_len / cp
    none, sel, full = st.act_bytes
    kept = np.where(ac == 2, full, np.where(ac == 1, sel, none))
    if framework in _CP_GATHER:  # SDPA saves K and V repeated to every query head (GQA), the other CP chunks' too
        kept = kept + np.where(ac < 2, 4.0 * (st.hidden - st.kv_dim) + (cp - 1.0) * 4.0 * st.hidden, 0.0)
    act = tokens_mb * (stage_layers * kept * flight + np.where(ac == 2, none, 0.0)) / tp
    act = act * (0.75 if precision == "fp8" else 1.0)
    logits = tokens_mb * st.vocab * LOGIT_BYTES.get(framework, 4.0) / tp
    sharded3 = (zero >= 3) & (shard > 1)
    stage_unsharded = p_stage * (2.0 + 4.0) if finetune == "full" else p_stage * 2.0 + adapters * 4.0
    buffers = np.where(sharded3, np.where(pp > 1, stage_unsharded, 2.0 * st.layer_parameters / tp * 2.0 * 2.0), 0.0)
    raw = weights + grads + opt + act + logits + buffers
    return {"weights": weights, "gradients": grads, "optimizer": opt, "activations": act, "logits": logits,
            "buffers": buffers, "overhead": OVERHEAD_GIB * GIB + OVERHEAD_FRACTION * raw, "raw": raw}


def estimate(st: TokenStats, lay: Layout, *, capacity_gib: float, precision: str = "bf16",
             finetune: str = "full", lora_rank: int = 16, grad_bytes: int = 2,
             accelerator: str = "GPU", framework: str = "cloudfit") -> MemoryEstimate:
    """Peak GiB per GPU of ``lay`` for the model of ``st`` run by ``framework`` (see the module docstring)."""
    if finetune not in ("full", "lora"):
        raise UsageError(f"--finetune must be full or lora, got {finetune!r}")
    p = parts_gib_many(st, tp=lay.tp, pp=lay.pp, cp=lay.cp, vp=lay.vp, zero=lay.zero, dp_shard=lay.dp_shard,
                       micro_batch=lay.micro_batch, grad_accum=lay.grad_accum, ac_code=AC_CODE[lay.ac],
                       gpipe=float(lay.schedule == "gpipe"), precision=precision, finetune=finetune,
                       lora_rank=lora_rank, grad_bytes=grad_bytes, framework=framework)
    g = {k: float(v) for k, v in p.items()}
    total = g["total"]
    fits = total <= capacity_gib
    reason = "" if fits else f"does not fit: needs {total:,.1f} GiB of {capacity_gib:,.0f} GiB per {accelerator}"
    return MemoryEstimate(g["weights"], g["gradients"], g["optimizer"], g["activations"], g["logits"], g["buffers"],
                          g["overhead"], total, capacity_gib, fits, reason)


def total_gib_many(st: TokenStats, *, tp, pp, cp, vp, zero, dp_shard, micro_batch, grad_accum, ac_code, gpipe=0.0,
                   precision: str = "bf16", finetune: str = "full", lora_rank: int = 16,
                   grad_bytes: int = 2, framework: str = "cloudfit"):
    """``estimate(...).total_gib`` for many layouts at once (numpy arrays broadcast; same rules, no records).

    ``ac_code``: 0 none, 1 selective, 2 full; ``gpipe``: 1 where the schedule is GPipe."""
    p = _parts(st, tp=tp, pp=pp, cp=cp, vp=vp, zero=zero, dp_shard=dp_shard, micro_batch=micro_batch,
               grad_accum=grad_accum, ac_code=ac_code, gpipe=gpipe, precision=precision, finetune=finetune,
               lora_rank=lora_rank, grad_bytes=grad_bytes, framework=framework)
    return (p["raw"] + p["overhead"]) / GIB


def parts_gib_many(st: TokenStats, *, tp, pp, cp, vp, zero, dp_shard, micro_batch, grad_accum, ac_code, gpipe=0.0,
                   precision: str = "bf16", finetune: str = "full", lora_rank: int = 16,
                   grad_bytes: int = 2, framework: str = "cloudfit") -> dict:
    """Every part of ``estimate`` in GiB for many layouts at once (numpy arrays broadcast): weights, gradients,
    optimizer, activations, logits, buffers, overhead, raw and total — ``estimate`` reads its record from here,
    so the two agree to the bit (what ``cloudfit.llm.anchor.apply_memory`` rescales, as columns)."""
    p = _parts(st, tp=tp, pp=pp, cp=cp, vp=vp, zero=zero, dp_shard=dp_shard, micro_batch=micro_batch,
               grad_accum=grad_accum, ac_code=ac_code, gpipe=gpipe, precision=precision, finetune=finetune,
               lora_rank=lora_rank, grad_bytes=grad_bytes, framework=framework)
    g = {k: v / GIB for k, v in p.items()}
    g["total"] = g["raw"] + g["overhead"]
    return g
