"""VGG-16 (configuration "D", Simonyan & Zisserman 2014) laid out as ``torchvision.models.vgg16``
(138,357,544 parameters at 1000 classes), and its feature stack, which SSD300 reuses."""

from __future__ import annotations

import torch
from torch import nn

# Output channels of each 3×3 conv; "M" is a 2×2 max-pool.
VGG16_CFG: list[int | str] = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]


def vgg16_features() -> nn.Sequential:
    layers: list[nn.Module] = []
    cin = 3
    for v in VGG16_CFG:
        if v == "M":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
        else:
            layers += [nn.Conv2d(cin, int(v), kernel_size=3, padding=1), nn.ReLU(inplace=True)]
            cin = int(v)
    return nn.Sequential(*layers)


class VGG16(nn.Module):
    def __init__(self, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        self.features = vgg16_features()
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(inplace=True), nn.Dropout(dropout),
            nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(dropout),
            nn.Linear(4096, num_classes),
        )
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))
