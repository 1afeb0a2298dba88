"""Peak memory per GPU of a layout: model states, activations, logits, buffers, framework overhead.

Mixed-precision AdamW, bytes per parameter (DESIGN.md "Large models"): bf16 weights 2, gradients 2
(bf16 reduce; FSDP2 and Megatron-FSDP default) or 4 (``grad_bytes=4``: Megatron's fp32 main-gradient
buffer), fp32 master weights 4, two fp32 moments 8. ZeRO stage s divides, over the shard group:
optimizer states (s ≥ 1), gradients (s ≥ 2), weights (s = 3). TP divides a layer's weights; PP keeps
ceil(layers / pp) layers per stage plus the embedding (first stage) or the LM head (last stage), whichever
is larger. FP8 adds a 1-byte cast copy of the local weights (Transformer Engine keeps fp8 weights
and their transposes between micro-batches).

Fine-tuning: ``full`` = pre-training states; ``lora`` = frozen bf16 base (2 B/param, sharded like the
weights), adapters of rank r on every linear of every layer (q, k, v, o, and the MLP matrices) holding
16 B/param of states, no base gradients.

Activations per micro-batch (see ``cloudfit.llm.stats`` for bytes per token per layer) are divided by
tp (sequence parallelism) and cp; a pipeline's first stage holds ``min(ga, pp)`` micro-batches in flight
under 1F1B (× (1 + (pp−1)/(pp·vp)) interleaved; all ``ga`` under GPipe). The last stage holds the logits of
one micro-batch (bf16 + fp32 for the loss, 6 B per vocabulary entry, ÷ tp). FSDP (zero 3) keeps two
layers unsharded (the current one and the prefetched one: weights and their gradients, bf16).
Framework overhead: CUDA context, NCCL buffers and allocator fragmentation, 2.5 GiB + 5% of the rest
(a measured-style allowance: PyTorch reserves typically 3–8% above allocated at peak).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from cloudfit.errors import UsageError
from cloudfit.llm.layout import Layout
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


def estimate(st: TokenStats, lay: Layout, *, capacity_gib: float, precision: str = "bf16",
             finetune: str = "full", lora_rank: int = 16, grad_bytes: int = 2,
             accelerator: str = "GPU") -> MemoryEstimate:
    """Peak GiB per GPU of ``lay`` for the model of ``st`` (see the module docstring for the rules)."""
    if finetune not in ("full", "lora"):
        raise UsageError(f"--finetune must be full or lora, got {finetune!r}")
    p_stage = stage_parameters(st, lay) / lay.tp
    shard = lay.shard
    w_div = shard if lay.zero >= 3 else 1
    g_div = shard if lay.zero >= 2 else 1
    o_div = shard if lay.zero >= 1 else 1
    fp8_copy = 1.0 if precision == "fp8" else 0.0
    if finetune == "lora":
        adapters = lora_parameters(st, lora_rank) / lay.tp / lay.pp
        weights = p_stage * (2.0 + fp8_copy) / w_div + adapters * 2.0
        grads = adapters * grad_bytes / g_div
        opt = adapters * 12.0 / o_div
    else:
        weights = p_stage * (2.0 + fp8_copy) / w_div
        grads = p_stage * grad_bytes / g_div
        opt = p_stage * 12.0 / o_div
    tokens_mb = lay.micro_batch * st.seq_len / lay.cp
    per_tok_layer = st.act_bytes
    stage_layers = math.ceil(st.layers / lay.pp)
    if lay.ac == "full":
        act = tokens_mb * (stage_layers * per_tok_layer[2] * in_flight(lay) + per_tok_layer[0]) / lay.tp
    else:
        idx = 0 if lay.ac == "none" else 1
        act = tokens_mb * stage_layers * per_tok_layer[idx] * in_flight(lay) / lay.tp
    logits = tokens_mb * st.vocab * 6.0 / lay.tp
    buffers = 2.0 * st.layer_parameters / lay.tp * 2.0 * 2.0 if (lay.zero >= 3 and shard > 1) else 0.0
    raw = weights + grads + opt + act + logits + buffers
    overhead = OVERHEAD_GIB * GIB + OVERHEAD_FRACTION * raw
    total = (raw + overhead) / GIB
    fits = total <= capacity_gib
    reason = "" if fits else f"does not fit: needs {total:,.1f} GiB of {capacity_gib:,.0f} GiB per {accelerator}"
    return MemoryEstimate(weights / GIB, grads / GIB, opt / GIB, act / GIB, logits / GIB, buffers / GIB,
                          overhead / GIB, total, capacity_gib, fits, reason)
