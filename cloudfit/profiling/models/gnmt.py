"""GNMT v2 (Wu et al. 2016) as in NVIDIA DeepLearningExamples' PyTorch GNMT / MLPerf translation:
4-layer LSTM encoder (first layer bidirectional, residual connections from the third layer),
4-layer LSTM decoder whose first layer feeds a normalised Bahdanau attention whose context is
concatenated to the input of every later layer; hidden 1024, shared 32,320-token embedding,
label-smoothed cross-entropy. About 160 M parameters.

Synthetic sentences are full length (no padding), so the encoder skips pack_padded_sequence; the
arithmetic is the same as a packed batch of equal-length sentences.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class BahdanauAttention(nn.Module):
    """score(q, k) = g · vᵀ/‖v‖ · tanh(W_q q + W_k k + b), softmax over source positions."""

    def __init__(self, size: int, init: float = 0.1) -> None:
        super().__init__()
        self.linear_q = nn.Linear(size, size, bias=False)
        self.linear_k = nn.Linear(size, size, bias=False)
        self.linear_att = nn.Parameter(torch.empty(size).uniform_(-init, init))
        self.normalize_scalar = nn.Parameter(torch.full((1,), 1.0 / math.sqrt(size)))
        self.normalize_bias = nn.Parameter(torch.zeros(size))
        nn.init.uniform_(self.linear_q.weight, -init, init)
        nn.init.uniform_(self.linear_k.weight, -init, init)

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        # query (b, t_q, n), keys (b, t_k, n) -> context (b, t_q, n)
        q = self.linear_q(query).unsqueeze(2)
        k = self.linear_k(keys).unsqueeze(1)
        v = self.linear_att / self.linear_att.norm() * self.normalize_scalar
        scores = torch.tanh(q + k + self.normalize_bias).matmul(v)  # (b, t_q, t_k)
        return torch.bmm(F.softmax(scores, dim=-1), keys)


class GNMT(nn.Module):
    """``forward(src, tgt_in)`` with (seq, batch) token tensors → logits (tgt_len, batch, vocab)."""

    def __init__(self, vocab_size: int = 32320, hidden: int = 1024, layers: int = 4, dropout: float = 0.2,
                 init: float = 0.1) -> None:
        super().__init__()
        h = hidden
        self.embedding = nn.Embedding(vocab_size, h, padding_idx=0)  # shared by encoder and decoder
        nn.init.uniform_(self.embedding.weight, -init, init)
        self.enc = nn.ModuleList([nn.LSTM(h, h, bidirectional=True), nn.LSTM(2 * h, h)]
                                 + [nn.LSTM(h, h) for _ in range(layers - 2)])
        self.dec_att_rnn = nn.LSTM(h, h)
        self.attention = BahdanauAttention(h, init)
        self.dec = nn.ModuleList(nn.LSTM(2 * h, h) for _ in range(layers - 1))
        self.classifier = nn.Linear(h, vocab_size)
        self.dropout = nn.Dropout(dropout)
        for lstm in [*self.enc, self.dec_att_rnn, *self.dec]:
            for p in lstm.parameters():
                nn.init.uniform_(p, -init, init)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        x = self.dropout(self.embedding(src))
        x, _ = self.enc[0](x)
        x, _ = self.enc[1](self.dropout(x))
        for i in range(2, len(self.enc)):
            x = x + self.enc[i](self.dropout(x))[0]
        context = x.transpose(0, 1)  # (b, t_k, n)

        y = self.embedding(tgt_in)
        y, _ = self.dec_att_rnn(y)
        attn = self.attention(y.transpose(0, 1), context).transpose(0, 1)  # (t_q, b, n)
        y = self.dropout(y)
        y, _ = self.dec[0](torch.cat((y, attn), dim=2))
        for i in range(1, len(self.dec)):
            y = y + self.dec[i](torch.cat((self.dropout(y), attn), dim=2))[0]
        return self.classifier(y)


def make_batch(batch_size: int, device, seq_len: int = 50, vocab_size: int = 32320):
    src = torch.randint(4, vocab_size, (seq_len, batch_size), device=device)
    tgt = torch.randint(4, vocab_size, (seq_len + 1, batch_size), device=device)
    return src, tgt


def loss(model: nn.Module, batch) -> torch.Tensor:
    src, tgt = batch
    logits = model(src, tgt[:-1])
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), tgt[1:].reshape(-1), label_smoothing=0.1)
