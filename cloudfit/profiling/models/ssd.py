"""SSD300 with a VGG-16 backbone (Liu et al. 2016) laid out as ``torchvision.models.detection.ssd300_vgg16``
(35,641,826 parameters at 91 COCO classes): conv4_3 (L2-normalised, learned scale) and fc7 (atrous
conv6 + 1×1 conv7) plus four extra stages feed 3×3 class/box heads over 8,732 default boxes.

Training loss follows torchvision's ``SSD.compute_loss``: smooth-L1 on boxes of matched anchors plus
cross-entropy with 3:1 hard-negative mining, normalised by the number of matched anchors. Anchor
matching (IoU between ground-truth and default boxes) is data preparation, so synthetic batches carry
already-matched per-anchor labels and box offsets; the loss is written with masks instead of boolean
indexing so it also runs on the meta device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from cloudfit.profiling.models.vgg import vgg16_features

IN_CHANNELS = [512, 1024, 512, 256, 256, 256]
ANCHORS_PER_LOCATION = [4, 6, 6, 6, 4, 4]
FEATURE_SIZES = [38, 19, 10, 5, 3, 1]
NUM_ANCHORS = sum(a * s * s for a, s in zip(ANCHORS_PER_LOCATION, FEATURE_SIZES))  # 8732
NEG_TO_POS = 3.0


def _xavier(m: nn.Module) -> None:
    for layer in m.modules():
        if isinstance(layer, nn.Conv2d):
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)


class SSD300(nn.Module):
    """``forward(images) -> (cls_logits [N, 8732, C], bbox_regression [N, 8732, 4])``."""

    def __init__(self, num_classes: int = 91) -> None:
        super().__init__()
        backbone = vgg16_features()
        pools = [i for i, layer in enumerate(backbone) if isinstance(layer, nn.MaxPool2d)]
        backbone[pools[2]].ceil_mode = True  # 75 → 38, the paper's conv4_3 size
        self.features = nn.Sequential(*backbone[: pools[3]])  # up to conv4_3
        self.scale_weight = nn.Parameter(torch.ones(512) * 20)
        fc = nn.Sequential(
            nn.MaxPool2d(kernel_size=3, stride=1, padding=1),  # modified pool5
            nn.Conv2d(512, 1024, kernel_size=3, padding=6, dilation=6), nn.ReLU(inplace=True),  # atrous fc6
            nn.Conv2d(1024, 1024, kernel_size=1), nn.ReLU(inplace=True),  # fc7
        )
        extra = [
            (1024, 256, 512, dict(padding=1, stride=2)),  # conv8_2: 10×10
            (512, 128, 256, dict(padding=1, stride=2)),  # conv9_2: 5×5
            (256, 128, 256, {}),  # conv10_2: 3×3
            (256, 128, 256, {}),  # conv11_2: 1×1
        ]
        stages = [nn.Sequential(*backbone[pools[3]:-1], fc)]
        for cin, mid, cout, kw in extra:
            stages.append(nn.Sequential(nn.Conv2d(cin, mid, kernel_size=1), nn.ReLU(inplace=True),
                                        nn.Conv2d(mid, cout, kernel_size=3, **kw), nn.ReLU(inplace=True)))
        self.extra = nn.ModuleList(stages)
        _xavier(self.extra)
        self.num_classes = num_classes
        self.cls_heads = nn.ModuleList(nn.Conv2d(c, num_classes * a, 3, padding=1)
                                       for c, a in zip(IN_CHANNELS, ANCHORS_PER_LOCATION))
        self.box_heads = nn.ModuleList(nn.Conv2d(c, 4 * a, 3, padding=1) for c, a in zip(IN_CHANNELS, ANCHORS_PER_LOCATION))
        _xavier(self.cls_heads)
        _xavier(self.box_heads)

    @staticmethod
    def _flatten(x: torch.Tensor, k: int) -> torch.Tensor:
        n, _, h, w = x.shape  # (N, A*K, H, W) -> (N, H*W*A, K)
        return x.view(n, -1, k, h, w).permute(0, 3, 4, 1, 2).reshape(n, -1, k)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.features(images)
        maps = [self.scale_weight.view(1, -1, 1, 1) * F.normalize(x)]
        for stage in self.extra:
            x = stage(x)
            maps.append(x)
        cls = torch.cat([self._flatten(h(m), self.num_classes) for h, m in zip(self.cls_heads, maps)], 1)
        box = torch.cat([self._flatten(h(m), 4) for h, m in zip(self.box_heads, maps)], 1)
        return cls, box


def make_batch(batch_size: int, device, num_classes: int = 91, foreground: float = 0.03):
    """Images 3×300×300 plus matched targets: about 3% of anchors hold an object (COCO-like)."""
    images = torch.randn(batch_size, 3, 300, 300, device=device)
    is_fg = torch.rand(batch_size, NUM_ANCHORS, device=device) < foreground
    labels = torch.randint(1, num_classes, (batch_size, NUM_ANCHORS), device=device) * is_fg
    boxes = torch.randn(batch_size, NUM_ANCHORS, 4, device=device)
    return images, labels, boxes


def loss(model: nn.Module, batch) -> torch.Tensor:
    images, labels, boxes = batch
    cls_logits, bbox = model(images)
    fg = labels > 0
    box_loss = (F.smooth_l1_loss(bbox.float(), boxes, reduction="none").sum(-1) * fg).sum()
    c = cls_logits.size(-1)
    cls_loss = F.cross_entropy(cls_logits.float().reshape(-1, c), labels.reshape(-1), reduction="none").view_as(labels)
    # Hard-negative mining: keep the 3×(positives) background anchors with the highest loss.
    num_neg = NEG_TO_POS * fg.sum(1, keepdim=True)
    negative = cls_loss.detach().masked_fill(fg, float("-inf"))
    _, order = negative.sort(1, descending=True)
    hard_bg = order.sort(1)[1] < num_neg
    n = fg.sum().clamp(min=1)
    return (box_loss + (cls_loss * (fg | hard_bg)).sum()) / n
