"""Inception-v3 (Szegedy et al. 2015) laid out as ``torchvision.models.inception_v3`` with its
auxiliary classifier, as trained (27,161,264 parameters at 1000 classes); 299×299 inputs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class _ConvBN(nn.Module):
    def __init__(self, cin: int, cout: int, **kw) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, bias=False, **kw)
        self.bn = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)), inplace=True)


class _A(nn.Module):
    def __init__(self, cin: int, pool_features: int) -> None:
        super().__init__()
        self.b1 = _ConvBN(cin, 64, kernel_size=1)
        self.b5 = nn.Sequential(_ConvBN(cin, 48, kernel_size=1), _ConvBN(48, 64, kernel_size=5, padding=2))
        self.b3 = nn.Sequential(_ConvBN(cin, 64, kernel_size=1), _ConvBN(64, 96, kernel_size=3, padding=1),
                                _ConvBN(96, 96, kernel_size=3, padding=1))
        self.pool = _ConvBN(cin, pool_features, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.pool(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([self.b1(x), self.b5(x), self.b3(x), p], 1)


class _B(nn.Module):
    def __init__(self, cin: int) -> None:
        super().__init__()
        self.b3 = _ConvBN(cin, 384, kernel_size=3, stride=2)
        self.b3dbl = nn.Sequential(_ConvBN(cin, 64, kernel_size=1), _ConvBN(64, 96, kernel_size=3, padding=1),
                                   _ConvBN(96, 96, kernel_size=3, stride=2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b3(x), self.b3dbl(x), F.max_pool2d(x, kernel_size=3, stride=2)], 1)


class _C(nn.Module):
    def __init__(self, cin: int, c7: int) -> None:
        super().__init__()
        self.b1 = _ConvBN(cin, 192, kernel_size=1)
        self.b7 = nn.Sequential(
            _ConvBN(cin, c7, kernel_size=1),
            _ConvBN(c7, c7, kernel_size=(1, 7), padding=(0, 3)),
            _ConvBN(c7, 192, kernel_size=(7, 1), padding=(3, 0)),
        )
        self.b7dbl = nn.Sequential(
            _ConvBN(cin, c7, kernel_size=1),
            _ConvBN(c7, c7, kernel_size=(7, 1), padding=(3, 0)),
            _ConvBN(c7, c7, kernel_size=(1, 7), padding=(0, 3)),
            _ConvBN(c7, c7, kernel_size=(7, 1), padding=(3, 0)),
            _ConvBN(c7, 192, kernel_size=(1, 7), padding=(0, 3)),
        )
        self.pool = _ConvBN(cin, 192, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.pool(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([self.b1(x), self.b7(x), self.b7dbl(x), p], 1)


class _D(nn.Module):
    def __init__(self, cin: int) -> None:
        super().__init__()
        self.b3 = nn.Sequential(_ConvBN(cin, 192, kernel_size=1), _ConvBN(192, 320, kernel_size=3, stride=2))
        self.b7x3 = nn.Sequential(
            _ConvBN(cin, 192, kernel_size=1),
            _ConvBN(192, 192, kernel_size=(1, 7), padding=(0, 3)),
            _ConvBN(192, 192, kernel_size=(7, 1), padding=(3, 0)),
            _ConvBN(192, 192, kernel_size=3, stride=2),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b3(x), self.b7x3(x), F.max_pool2d(x, kernel_size=3, stride=2)], 1)


class _E(nn.Module):
    def __init__(self, cin: int) -> None:
        super().__init__()
        self.b1 = _ConvBN(cin, 320, kernel_size=1)
        self.b3_1 = _ConvBN(cin, 384, kernel_size=1)
        self.b3_2a = _ConvBN(384, 384, kernel_size=(1, 3), padding=(0, 1))
        self.b3_2b = _ConvBN(384, 384, kernel_size=(3, 1), padding=(1, 0))
        self.b3dbl_1 = _ConvBN(cin, 448, kernel_size=1)
        self.b3dbl_2 = _ConvBN(448, 384, kernel_size=3, padding=1)
        self.b3dbl_3a = _ConvBN(384, 384, kernel_size=(1, 3), padding=(0, 1))
        self.b3dbl_3b = _ConvBN(384, 384, kernel_size=(3, 1), padding=(1, 0))
        self.pool = _ConvBN(cin, 192, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b3 = self.b3_1(x)
        b3 = torch.cat([self.b3_2a(b3), self.b3_2b(b3)], 1)
        d = self.b3dbl_2(self.b3dbl_1(x))
        d = torch.cat([self.b3dbl_3a(d), self.b3dbl_3b(d)], 1)
        p = self.pool(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([self.b1(x), b3, d, p], 1)


class _Aux(nn.Module):
    def __init__(self, cin: int, num_classes: int) -> None:
        super().__init__()
        self.conv0 = _ConvBN(cin, 128, kernel_size=1)
        self.conv1 = _ConvBN(128, 768, kernel_size=5)
        self.fc = nn.Linear(768, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(self.conv0(F.avg_pool2d(x, kernel_size=5, stride=3)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1))


class InceptionV3(nn.Module):
    """Returns ``(logits, aux_logits)`` in training mode with ``aux_logits=True``, else logits."""

    def __init__(self, num_classes: int = 1000, aux_logits: bool = True, dropout: float = 0.5) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            _ConvBN(3, 32, kernel_size=3, stride=2),
            _ConvBN(32, 32, kernel_size=3),
            _ConvBN(32, 64, kernel_size=3, padding=1),
            nn.MaxPool2d(kernel_size=3, stride=2),
            _ConvBN(64, 80, kernel_size=1),
            _ConvBN(80, 192, kernel_size=3),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )
        self.mixed_5_6 = nn.Sequential(
            _A(192, 32), _A(256, 64), _A(288, 64), _B(288),
            _C(768, 128), _C(768, 160), _C(768, 160), _C(768, 192),
        )
        self.aux = _Aux(768, num_classes) if aux_logits else None
        self.mixed_7 = nn.Sequential(_D(768), _E(1280), _E(2048))
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(2048, num_classes)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(m.weight, mean=0.0, std=0.1, a=-2, b=2)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor):
        x = self.mixed_5_6(self.stem(x))
        aux = self.aux(x) if (self.aux is not None and self.training) else None
        x = self.mixed_7(x)
        x = torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1)
        logits = self.fc(self.dropout(x))
        return (logits, aux) if aux is not None else logits
