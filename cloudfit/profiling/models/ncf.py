"""NeuMF / NCF (He et al. 2017) as in NVIDIA DeepLearningExamples' PyTorch NCF and MLPerf
recommendation on MovieLens-20M: 138,493 users, 26,744 items, GMF factors 64, MLP 256-256-128-64,
dropout 0.5, binary cross-entropy on (user, item, clicked) samples. About 31.8 M parameters,
almost all of them embedding rows."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class NeuMF(nn.Module):
    def __init__(self, users: int = 138493, items: int = 26744, mf_dim: int = 64,
                 mlp_sizes: tuple[int, ...] = (256, 256, 128, 64), dropout: float = 0.5) -> None:
        super().__init__()
        self.mf_user = nn.Embedding(users, mf_dim)
        self.mf_item = nn.Embedding(items, mf_dim)
        self.mlp_user = nn.Embedding(users, mlp_sizes[0] // 2)
        self.mlp_item = nn.Embedding(items, mlp_sizes[0] // 2)
        self.mlp = nn.ModuleList(nn.Linear(a, b) for a, b in zip(mlp_sizes[:-1], mlp_sizes[1:]))
        self.final = nn.Linear(mlp_sizes[-1] + mf_dim, 1)
        self.dropout = dropout
        for e in (self.mf_user, self.mf_item, self.mlp_user, self.mlp_item):
            nn.init.normal_(e.weight, 0.0, 0.01)
        for layer in self.mlp:
            nn.init.xavier_uniform_(layer.weight)
        nn.init.uniform_(self.final.weight, -(3.0 / self.final.in_features) ** 0.5, (3.0 / self.final.in_features) ** 0.5)

    def forward(self, user: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
        mf = self.mf_user(user) * self.mf_item(item)
        x = torch.cat((self.mlp_user(user), self.mlp_item(item)), dim=1)
        for layer in self.mlp:
            x = F.dropout(F.relu(layer(x)), p=self.dropout, training=self.training)
        return self.final(torch.cat((mf, x), dim=1)).squeeze(1)


def make_batch(batch_size: int, device, users: int = 138493, items: int = 26744):
    user = torch.randint(0, users, (batch_size,), device=device)
    item = torch.randint(0, items, (batch_size,), device=device)
    clicked = (torch.rand(batch_size, device=device) < 0.2).float()  # 1 positive : 4 sampled negatives
    return user, item, clicked


def loss(model: nn.Module, batch) -> torch.Tensor:
    user, item, clicked = batch
    return F.binary_cross_entropy_with_logits(model(user, item).float(), clicked)
