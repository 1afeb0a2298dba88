"""The Llama-style decoder's torch modules (imported on first use by :func:`cloudfit.llm_model.build`,
so ``import cloudfit.llm_model`` stays light): RMSNorm, rotary embeddings, grouped-query attention,
the SwiGLU MLP, a block with activation checkpointing, the model with pipeline stages."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# the config type is cloudfit.llm_model.LlamaConfig (named in annotations only: the package imports this module)


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
        self.cp_group = None  # context parallel: this rank holds one chunk of the sequence

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        # -1: under tensor parallelism each rank holds heads/tp query and kv_heads/tp KV heads
        q = self.wq(x).view(b, s, -1, self.head_dim)
        k = self.wk(x).view(b, s, -1, self.head_dim)
        v = self.wv(x).view(b, s, -1, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        mask, causal = None, True
        if self.cp_group is not None:
            # all-gather context parallelism (Llama 3's): gather every chunk's keys and values
            # (rotated at their own positions); the backward reduce-scatters their gradients
            import torch.distributed as dist
            import torch.distributed._functional_collectives as fc

            gather = getattr(fc, "all_gather_single_autograd", None) or fc.all_gather_tensor_autograd
            # gathered along dim 0 (the sequence, moved first), what every version supports
            k = gather(k.transpose(0, 1).contiguous(), gather_dim=0, group=self.cp_group).transpose(0, 1)
            v = gather(v.transpose(0, 1).contiguous(), gather_dim=0, group=self.cp_group).transpose(0, 1)
            q_pos = dist.get_rank(self.cp_group) * s + torch.arange(s, device=x.device)
            mask = torch.arange(k.shape[1], device=x.device)[None, :] <= q_pos[:, None]  # (s, S)
            causal = False
        rep = q.shape[2] // k.shape[2]
        if rep > 1:  # grouped-query attention: each KV head serves `rep` query heads
            k = k.repeat_interleave(rep, dim=2)
            v = v.repeat_interleave(rep, dim=2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           attn_mask=mask, is_causal=causal)
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
        if self.tok_embeddings is not None:
            nn.init.normal_(self.tok_embeddings.weight, std=1.0 if not self.cfg.tie_embeddings else std)
        for key, blk in self.layers.items():
            depth_std = std / (2 * (int(key) + 1)) ** 0.5
            for lin in (blk.attention.wq, blk.attention.wk, blk.attention.wv, blk.feed_forward.w1):
                nn.init.trunc_normal_(lin.weight, std=std)
            for lin in (blk.attention.wo, blk.feed_forward.w2, blk.feed_forward.w3):
                nn.init.trunc_normal_(lin.weight, std=depth_std)
            blk.attention_norm.reset_parameters()
            blk.ffn_norm.reset_parameters()
        if self.norm is not None:
            self.norm.reset_parameters()
        if self.output is not None and not self.cfg.tie_embeddings:
            nn.init.trunc_normal_(self.output.weight, std=self.cfg.dim ** -0.5)

    def forward(self, tokens):
        # a pipeline stage lacks the embeddings (not first) or the head (not last): it takes and
        # returns hidden states
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        cos, sin = self.rope_cos, self.rope_sin
        cp = self.context_parallel_group
        if cp is not None:  # this rank's chunk of the sequence sits at an offset
            import torch.distributed as dist

            off = dist.get_rank(cp) * h.shape[1]
            cos, sin = cos[off:off + h.shape[1]], sin[off:off + h.shape[1]]
        for blk in self.layers.values():
            h = blk(h, cos, sin)
        if self.norm is not None:
            h = self.norm(h)
        return self.output(h) if self.output is not None else h

    @property
    def context_parallel_group(self):
        for blk in self.layers.values():
            return blk.attention.cp_group
        return None

    def enable_context_parallel(self, group) -> None:
        for blk in self.layers.values():
            blk.attention.cp_group = group

    def keep_stage(self, stage: int, stages: int) -> list[int]:
        """Cut this model down to pipeline stage ``stage`` of ``stages``: its share of the blocks
        (the earlier stages take the extra ones), embeddings on the first, norm and head on the
        last. Parameter names stay the full model's (``layers.<i>``), so a DCP checkpoint of
        the stages reads back into any other split. Returns the kept block indices."""
        n = len(self.layers)
        per, extra = divmod(n, stages)
        lo = stage * per + min(stage, extra)
        hi = lo + per + (1 if stage < extra else 0)
        kept = list(range(lo, hi))
        for i in range(n):
            if i not in kept:
                del self.layers[str(i)]
        if stage > 0:
            self.tok_embeddings = None
        if stage < stages - 1:
            self.norm = None
            self.output = None
        return kept
