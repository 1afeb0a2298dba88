"""Per-token statistics of a decoder at a sequence length: parameters, FLOPs, activation bytes.

FLOPs convention (stated once, used everywhere — MFU, compute time, the measurement table):
- a multiply-add is 2 FLOPs; training = forward + backward = 3 × forward (backward is 2 × forward);
- matrix multiplies of every layer and of the LM head count; the input-embedding lookup does not;
- attention scores and the attention-weighted sum count **causal-half**: 2 × 2 × seq × hidden per
  layer and token forward, halved because a causal kernel skips the masked upper triangle. This is the
  convention of Megatron-Bridge's "Model TFLOP/s/GPU" column (checked: Llama-3-8B at 8,192 tokens =
  51.5 GFLOP per token; 14,451 tokens/s/GPU × 51.5 GFLOP = 744 TFLOP/s, as the table says).
  llm-foundry counts attention in full and 6 × all parameters; vTrain reports only times.
- norms, activations, softmax and residual adds are not counted (they are memory-bound: the step model
  absorbs them in its calibrated efficiency).
Recomputation (activation checkpointing) adds hardware FLOPs (HFU), never model FLOPs (MFU).

Activation bytes (bf16, flash attention: no seq² tensors) per token and layer, before tensor/context
parallel division (Korthikanti et al. 2022, adapted to SwiGLU and grouped-query attention):
- ``none``: attention block keeps its norm input and output, Q, K, V and the attention output
  (2 × (4·h + 2·kv) bytes); a SwiGLU MLP keeps norm input/output, gate, up, SiLU(gate) and the product
  (2 × (2·h + 4·ffn)); a GELU MLP keeps norm input/output, fc1 output and GELU output (2 × (2·h + 2·ffn)).
- ``selective``: the element-wise MLP intermediates are recomputed (SwiGLU keeps gate and up only:
  2 × (2·h + 2·ffn); GELU keeps fc1 output: 2 × (2·h + ffn)); Megatron's selective recompute of the
  attention core is free here because flash attention stores no seq² tensor.
- ``full``: only each layer's input (2·h) is kept, plus one layer's ``none`` working set while it is
  recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from cloudfit.errors import UsageError
from cloudfit.llm.zoo import LLMShape

AC_MODES = ("none", "selective", "full")


def layer_parameters(s: LLMShape) -> int:
    """Parameters of one transformer block (attention + MLP + norms, biases if the shape has them)."""
    h, kv, f = s.hidden, s.kv_dim, s.ffn_hidden
    attn = h * h + 2 * h * kv + h * h
    mlp = (3 if s.mlp == "swiglu" else 2) * h * f
    norms = 2 * h * (2 if s.norm == "layer" else 1)
    bias = (h + 2 * kv + h + (2 * f if s.mlp == "swiglu" else f) + h) if s.bias else 0
    return attn + mlp + norms + bias


def embedding_parameters(s: LLMShape) -> int:
    """Input embedding (+ learned position table)."""
    return s.vocab * s.hidden + s.learned_positions * s.hidden


def head_parameters(s: LLMShape) -> int:
    """The LM head's own parameters (0 when tied to the input embedding) + the final norm."""
    final_norm = s.hidden * (2 if s.norm == "layer" else 1)
    return (0 if s.tied_embeddings else s.vocab * s.hidden) + final_norm


def parameters(s: LLMShape) -> int:
    return s.layers * layer_parameters(s) + embedding_parameters(s) + head_parameters(s)


@dataclass(frozen=True)
class TokenStats:
    """What the memory and step models need of a model at one sequence length (all per token)."""

    model: str
    seq_len: int
    parameters: int
    layer_parameters: int
    embedding_parameters: int
    head_parameters: int
    layers: int
    hidden: int
    kv_dim: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    vocab: int
    layer_matmul_flops: float  # forward FLOPs of one layer's weight matmuls per token
    layer_attention_flops: float  # forward FLOPs of one layer's attention core per token (causal-half)
    head_flops: float  # forward FLOPs of the LM head per token
    act_bytes: tuple[float, float, float]  # per token per layer: none, selective, full(kept)

    @property
    def forward_flops_per_token(self) -> float:
        return self.layers * (self.layer_matmul_flops + self.layer_attention_flops) + self.head_flops

    @property
    def flops_per_token(self) -> float:
        """Model FLOPs per trained token (forward + backward, causal-half attention)."""
        return 3.0 * self.forward_flops_per_token

    @property
    def flops_per_sample(self) -> float:
        return self.flops_per_token * self.seq_len

    def to_dict(self) -> dict:
        return {"model": self.model, "seq_len": self.seq_len, "parameters": self.parameters,
                "flops_per_token": self.flops_per_token, "flops_per_sample": self.flops_per_sample,
                "attention_flops_share": self.layers * self.layer_attention_flops / self.forward_flops_per_token,
                "activation_bytes_per_token_per_layer": dict(zip(AC_MODES, self.act_bytes)),
                "flops_convention": "6 x matmul params (incl. LM head, not input embedding) + causal-half attention"}


@lru_cache(maxsize=512)
def token_stats(s: LLMShape, seq_len: int) -> TokenStats:
    """Per-token statistics of ``s`` at ``seq_len`` tokens per sequence (cached; pure arithmetic)."""
    if not isinstance(seq_len, int) or seq_len < 1:
        raise UsageError(f"the sequence length must be a positive integer, got {seq_len!r}")
    if seq_len > s.max_seq_len and s.learned_positions:
        raise UsageError(f"{s.name} has {s.learned_positions} learned positions; sequence {seq_len} is longer")
    h, kv, f = s.hidden, s.kv_dim, s.ffn_hidden
    n_mat = (3 if s.mlp == "swiglu" else 2) * h * f + 2 * h * h + 2 * h * kv
    matmul = 2.0 * n_mat
    attention = 2.0 * seq_len * h  # QK^T + AV: 2 × (2 · seq · h), halved for causal
    head = 2.0 * s.vocab * h
    if s.mlp == "swiglu":
        mlp_none, mlp_sel = 2 * (2 * h + 4 * f), 2 * (2 * h + 2 * f)
    else:
        mlp_none, mlp_sel = 2 * (2 * h + 2 * f), 2 * (2 * h + f)
    attn_b = 2 * (4 * h + 2 * kv)
    acts = (float(attn_b + mlp_none), float(attn_b + mlp_sel), float(2 * h))
    return TokenStats(s.name, seq_len, parameters(s), layer_parameters(s), embedding_parameters(s),
                      head_parameters(s), s.layers, h, kv, s.heads, s.kv_heads, f, s.vocab, matmul, attention,
                      head, acts)


def counted_parameters(shape: LLMShape) -> int:
    """Parameters counted on the real ``transformers`` module built on the meta device (a check)."""
    m = build = None
    from cloudfit.llm.zoo import build_meta

    m = build_meta(shape)
    seen = set()
    n = 0
    for p in m.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        n += p.numel()
    del m, build
    return n


def info(name: str) -> dict:
    """A zoo shape's dimensions and parameter count (``cloudfit models``). Here, not in ``zoo``: stats builds
    on the zoo's shapes, and the zoo imports nothing back (tests/test_layering.py)."""
    from cloudfit.llm.zoo import get

    s = get(name)
    return {"name": s.name, "family": s.family, "parameters": parameters(s), "hidden": s.hidden, "layers": s.layers,
            "heads": s.heads, "kv_heads": s.kv_heads, "ffn_hidden": s.ffn_hidden, "vocab": s.vocab,
            "max_seq_len": s.max_seq_len}


def stats_profile(shape: LLMShape, seq_len: int, *, count_on_meta: bool = True) -> dict:
    """A stats-only profile: analytic stats, and (optionally) the parameter count of the meta module."""
    st = token_stats(shape, seq_len)
    out = {"model": shape.name, "shape": shape.to_dict(), "stats": st.to_dict()}
    if count_on_meta:
        out["stats"]["parameters_counted_on_meta"] = counted_parameters(shape)
    return out
