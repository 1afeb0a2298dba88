"""A Llama-style decoder in plain torch, and the shapes of the real models it stands in for.

Layer types are Llama 3's: RMSNorm, rotary position embeddings, grouped-query attention through
``scaled_dot_product_attention``, a SwiGLU MLP, input/output embeddings tied or not. Parameter
names follow torchtitan's (``layers.0.attention.wq.weight``, ``feed_forward.w1`` …) so a tensor-
parallel plan and a DCP checkpoint read the same way as there.

:func:`shrink` keeps a real shape's layer types and ratios (query heads per KV head, MLP width per
model width, tied embeddings) at a tiny width and a few layers — what the local backend trains on
CPU ranks to rehearse a plan's layout.

This package imports torch lazily (the shapes table and :func:`shrink` are plain Python): the
modules (:mod:`cloudfit.llm_model.layers`) are imported on first use by :func:`build`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class LlamaConfig:
    dim: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    ffn_dim: int
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    tie_embeddings: bool = False
    name: str = "custom"

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def problems(self, tp: int = 1) -> list[str]:
        """What makes this shape unbuildable (or not splittable over ``tp`` ranks); empty when fine."""
        out = []
        for k in ("dim", "layers", "heads", "kv_heads", "vocab", "ffn_dim"):
            if getattr(self, k) < 1:
                out.append(f"{k} must be positive (got {getattr(self, k)})")
        if out:
            return out
        if self.dim % self.heads:
            out.append(f"dim {self.dim} is not a multiple of heads {self.heads}")
        elif self.head_dim % 2:
            out.append(f"head size {self.head_dim} (dim/heads) must be even for rotary embeddings")
        if self.heads % self.kv_heads:
            out.append(f"heads {self.heads} is not a multiple of kv-heads {self.kv_heads}")
        if tp > 1:
            for k in ("heads", "kv_heads", "ffn_dim"):
                if getattr(self, k) % tp:
                    out.append(f"tensor parallel {tp} does not divide {k.replace('_', '-')} {getattr(self, k)}")
        return out

    def parameters(self) -> int:
        hd = self.head_dim
        attn = self.dim * (self.heads * hd) * 2 + self.dim * (self.kv_heads * hd) * 2
        mlp = 3 * self.dim * self.ffn_dim
        block = attn + mlp + 2 * self.dim
        emb = self.vocab * self.dim * (1 if self.tie_embeddings else 2)
        return self.layers * block + emb + self.dim


# Llama 3.1 / 3.2 and Llama 2 shapes (Meta's published config.json files).
SHAPES: dict[str, LlamaConfig] = {
    "llama3-1b": LlamaConfig(2048, 16, 32, 8, 128256, 8192, tie_embeddings=True, name="llama3-1b"),
    "llama3-3b": LlamaConfig(3072, 28, 24, 8, 128256, 8192, tie_embeddings=True, name="llama3-3b"),
    "llama3-8b": LlamaConfig(4096, 32, 32, 8, 128256, 14336, name="llama3-8b"),
    "llama3-70b": LlamaConfig(8192, 80, 64, 8, 128256, 28672, name="llama3-70b"),
    "llama3-405b": LlamaConfig(16384, 126, 128, 8, 128256, 53248, name="llama3-405b"),
    "llama2-13b": LlamaConfig(5120, 40, 40, 40, 32000, 13824, rope_theta=10000.0, name="llama2-13b"),
}


def llama_ffn_dim(dim: int, multiple_of: int = 8, ffn_dim_multiplier: float = 1.0) -> int:
    """Llama's SwiGLU width: 2/3 of 4·dim, times the multiplier, rounded up to ``multiple_of``."""
    hidden = int(2 * 4 * dim / 3 * ffn_dim_multiplier)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def shrink(cfg: LlamaConfig, *, layers: int = 2, kv_heads: int = 2, head_dim: int = 16, vocab: int = 256) -> LlamaConfig:
    """``cfg``'s layer types at a tiny size: ``layers`` blocks, ``kv_heads`` KV heads and the real
    number of query heads per KV head (GQA ratio), ``head_dim`` per head, the real MLP-to-model
    width ratio (rounded to a multiple of 8), tied embeddings as in ``cfg``, ``vocab`` tokens."""
    ratio = cfg.heads // cfg.kv_heads
    heads = kv_heads * ratio
    dim = heads * head_dim
    ffn = max(8, 8 * round(dim * cfg.ffn_dim / cfg.dim / 8))
    return replace(cfg, dim=dim, layers=layers, heads=heads, kv_heads=kv_heads, vocab=vocab, ffn_dim=ffn,
                   name=f"{cfg.name} (shrunk)")


def _define() -> dict[str, Any]:
    """The torch modules (:mod:`cloudfit.llm_model.layers`), imported on first use."""
    from cloudfit.llm_model import layers

    return {k: getattr(layers, k) for k in ("RMSNorm", "Attention", "FeedForward", "Block", "Transformer",
                                            "apply_rope", "rope_tables")}


def build(cfg: LlamaConfig, *, max_seq_len: int = 2048, seed: int | None = 0, device=None):
    """A :class:`Transformer` for ``cfg``. ``device="meta"`` builds it without memory (call
    ``to_empty`` then ``init_weights`` after sharding)."""
    import torch

    T = _define()["Transformer"]
    if device is not None and str(device) == "meta":
        with torch.device("meta"):
            return T(cfg, max_seq_len)
    with torch.device(device or "cpu"):
        m = T(cfg, max_seq_len)
    m.init_weights(seed)
    return m


def tp_plan() -> dict[str, Any]:
    """Megatron-style tensor-parallel plan of one block: q/k/v and gate/up column-wise, the output
    and down projections row-wise (one all-reduce after attention, one after the MLP)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {
        "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(),
        "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(),
    }


__all__ = ["LlamaConfig", "SHAPES", "shrink", "llama_ffn_dim", "build", "tp_plan"]
