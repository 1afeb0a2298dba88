"""A Llama-style decoder in plain torch, and the shapes of the real models it stands in for.

Layer types are Llama 3's: RMSNorm, rotary position embeddings, grouped-query attention through
``scaled_dot_product_attention``, a SwiGLU MLP, input/output embeddings tied or not. Parameter
names follow torchtitan's (``layers.0.attention.wq.weight``, ``feed_forward.w1`` …) so a tensor-
parallel plan and a DCP checkpoint read the same way as there.

:func:`shrink` keeps a real shape's layer types and ratios (query heads per KV head, MLP width per
model width, tied embeddings) at a tiny width and a few layers — what the local backend trains on
CPU ranks to rehearse a plan's layout.

This module imports torch lazily (the shapes table and :func:`shrink` are plain Python): the
classes are built on first use by :func:`build`.
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


_classes: dict[str, Any] = {}


def _define() -> dict[str, Any]:
    """Define the torch modules on first use (keeps ``import cloudfit.llm_model`` light)."""
    if _classes:
        return _classes
    import torch
    import torch.nn.functional as F
    from torch import nn

    class RMSNorm(nn.Module):
        def __init__(self, dim: int, eps: float) -> None:
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            xf = x.float()
            y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
            return y.type_as(x) * self.weight

        def reset_parameters(self) -> None:
            nn.init.ones_(self.weight)

    def rope_tables(head_dim: int, seq_len: int, theta: float, device=None):
        inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
        ang = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv)  # (S, D/2)
        return torch.cos(ang), torch.sin(ang)

    def apply_rope(x, cos, sin):
        # x: (B, S, H, D); pairs (x[..., :D/2], x[..., D/2:]) rotate by the position's angle
        s = x.shape[1]
        c, n = cos[:s].unsqueeze(0).unsqueeze(2), sin[:s].unsqueeze(0).unsqueeze(2)
        x1, x2 = x.float().chunk(2, dim=-1)
        return torch.cat((x1 * c - x2 * n, x1 * n + x2 * c), dim=-1).type_as(x)

    class Attention(nn.Module):
        def __init__(self, cfg: LlamaConfig) -> None:
            super().__init__()
            hd = cfg.head_dim
            self.head_dim = hd
            self.wq = nn.Linear(cfg.dim, cfg.heads * hd, bias=False)
            self.wk = nn.Linear(cfg.dim, cfg.kv_heads * hd, bias=False)
            self.wv = nn.Linear(cfg.dim, cfg.kv_heads * hd, bias=False)
            self.wo = nn.Linear(cfg.heads * hd, cfg.dim, bias=False)

        def forward(self, x, cos, sin):
            b, s, _ = x.shape
            # -1: under tensor parallelism each rank holds heads/tp query and kv_heads/tp KV heads
            q = self.wq(x).view(b, s, -1, self.head_dim)
            k = self.wk(x).view(b, s, -1, self.head_dim)
            v = self.wv(x).view(b, s, -1, self.head_dim)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            rep = q.shape[2] // k.shape[2]
            if rep > 1:  # grouped-query attention: each KV head serves `rep` query heads
                k = k.repeat_interleave(rep, dim=2)
                v = v.repeat_interleave(rep, dim=2)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
            return self.wo(o.transpose(1, 2).reshape(b, s, -1))

    class FeedForward(nn.Module):
        def __init__(self, cfg: LlamaConfig) -> None:
            super().__init__()
            self.w1 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)  # gate
            self.w3 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)  # up
            self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)  # down

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    def _sac_policy():
        """Selective activation checkpointing: keep matmul and attention outputs, recompute the
        cheap element-wise work (norms, rotary, SiLU) in the backward pass."""
        from torch.utils.checkpoint import CheckpointPolicy

        aten = torch.ops.aten
        save = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.linear.default,
                aten._scaled_dot_product_efficient_attention.default,
                aten._scaled_dot_product_flash_attention.default,
                aten._scaled_dot_product_flash_attention_for_cpu.default}

        def policy(ctx, op, *args, **kwargs):
            return CheckpointPolicy.MUST_SAVE if op in save else CheckpointPolicy.PREFER_RECOMPUTE

        return policy

    class Block(nn.Module):
        def __init__(self, cfg: LlamaConfig) -> None:
            super().__init__()
            self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
            self.attention = Attention(cfg)
            self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
            self.feed_forward = FeedForward(cfg)
            self.ac = "none"  # none | selective | full (set by the trainer)

        def _forward(self, x, cos, sin):
            h = x + self.attention(self.attention_norm(x), cos, sin)
            return h + self.feed_forward(self.ffn_norm(h))

        def forward(self, x, cos, sin):
            if self.ac == "none" or not torch.is_grad_enabled():
                return self._forward(x, cos, sin)
            from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

            if self.ac == "full":
                return checkpoint(self._forward, x, cos, sin, use_reentrant=False)
            from functools import partial

            ctx = partial(create_selective_checkpoint_contexts, _sac_policy())
            return checkpoint(self._forward, x, cos, sin, use_reentrant=False, context_fn=ctx)

    class Transformer(nn.Module):
        def __init__(self, cfg: LlamaConfig, max_seq_len: int = 2048) -> None:
            super().__init__()
            self.cfg = cfg
            self.max_seq_len = max_seq_len
            self.tok_embeddings = nn.Embedding(cfg.vocab, cfg.dim)
            self.layers = nn.ModuleDict({str(i): Block(cfg) for i in range(cfg.layers)})
            self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
            self.output = nn.Linear(cfg.dim, cfg.vocab, bias=False)
            if cfg.tie_embeddings:
                self.output.weight = self.tok_embeddings.weight
            cos, sin = rope_tables(cfg.head_dim, max_seq_len, cfg.rope_theta)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

        def init_weights(self, seed: int | None = None) -> None:
            """(Re)initialise every parameter and rebuild the rotary tables (after ``to_empty``)."""
            if seed is not None:
                torch.manual_seed(seed)
            cos, sin = rope_tables(self.cfg.head_dim, self.max_seq_len, self.cfg.rope_theta, device=self.rope_cos.device)
            with torch.no_grad():
                self.rope_cos.copy_(cos)
                self.rope_sin.copy_(sin)
            std = 0.02
            nn.init.normal_(self.tok_embeddings.weight, std=1.0 if not self.cfg.tie_embeddings else std)
            for i, blk in enumerate(self.layers.values()):
                depth_std = std / (2 * (i + 1)) ** 0.5
                for lin in (blk.attention.wq, blk.attention.wk, blk.attention.wv, blk.feed_forward.w1):
                    nn.init.trunc_normal_(lin.weight, std=std)
                for lin in (blk.attention.wo, blk.feed_forward.w2, blk.feed_forward.w3):
                    nn.init.trunc_normal_(lin.weight, std=depth_std)
                blk.attention_norm.reset_parameters()
                blk.ffn_norm.reset_parameters()
            self.norm.reset_parameters()
            if not self.cfg.tie_embeddings:
                nn.init.trunc_normal_(self.output.weight, std=self.cfg.dim ** -0.5)

        def forward(self, tokens):
            h = self.tok_embeddings(tokens)
            for blk in self.layers.values():
                h = blk(h, self.rope_cos, self.rope_sin)
            return self.output(self.norm(h))

    _classes.update(RMSNorm=RMSNorm, Attention=Attention, FeedForward=FeedForward, Block=Block,
                    Transformer=Transformer, apply_rope=apply_rope, rope_tables=rope_tables)
    return _classes


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
