"""Transformer-base for translation (Vaswani et al. 2017): ``torch.nn.Transformer`` with d_model 512,
8 heads, 6+6 layers, FFN 2048, dropout 0.1, post-LN, plus what the library leaves out: a
37,000-token shared source/target embedding scaled by √d_model, sinusoidal positions, an output
projection tied to the embedding, and label-smoothed (0.1) cross-entropy. About 63 M parameters
(the paper's 65 M)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class TransformerBase(nn.Module):
    """``forward(src, tgt_in)`` with (batch, seq) token tensors → logits (batch, tgt_len, vocab)."""

    def __init__(self, vocab_size: int = 37000, d_model: int = 512, heads: int = 8, layers: int = 6,
                 ffn: int = 2048, dropout: float = 0.1, max_len: int = 1024) -> None:
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=0)
        nn.init.normal_(self.embedding.weight, 0.0, d_model ** -0.5)
        self.transformer = nn.Transformer(d_model, heads, layers, layers, ffn, dropout, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        pos = torch.arange(max_len).unsqueeze(1)
        div = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("positions", pe, persistent=False)

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens) * math.sqrt(self.d_model) + self.positions[: tokens.size(1)]
        return self.dropout(x)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        t = tgt_in.size(1)
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=tgt_in.device)
        y = self.transformer(self._embed(src), self._embed(tgt_in), tgt_mask=mask, tgt_is_causal=True)
        return F.linear(y, self.embedding.weight)  # output projection tied to the embedding


def make_batch(batch_size: int, device, seq_len: int = 64, vocab_size: int = 37000):
    src = torch.randint(4, vocab_size, (batch_size, seq_len), device=device)
    tgt = torch.randint(4, vocab_size, (batch_size, seq_len + 1), device=device)
    return src, tgt


def loss(model: nn.Module, batch) -> torch.Tensor:
    src, tgt = batch
    logits = model(src, tgt[:, :-1])
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1), label_smoothing=0.1)
