"""Counted model statistics against the literature and against hand arithmetic."""

from __future__ import annotations

import pytest

from cloudfit.errors import ProfileError
from cloudfit.profiling import zoo
from cloudfit.profiling.stats import model_stats
from cloudfit.types import OP_CLASSES


@pytest.fixture(scope="module")
def resnet50():
    return model_stats(zoo.build("resnet50", device="meta"))


def test_resnet50_matches_the_literature(resnet50):
    s = resnet50
    assert s.parameters / 1e6 == pytest.approx(25.6, rel=0.01)
    # 4.1 G multiply-accumulates per 224×224 image = 8.2 GFLOPs forward (multiply-add = 2 FLOPs)
    assert s.forward_flops_per_sample / 1e9 == pytest.approx(8.2, rel=0.02)
    # backward ≈ 2× forward (grad-input and grad-weight); the first conv needs no grad-input
    assert 2.9 <= s.flops_per_sample / s.forward_flops_per_sample <= 3.0
    assert s.gradient_bytes == 4 * s.parameters
    assert s.batch_size == 256 and s.input == "3x224x224 image"
    assert set(s.op_classes) == set(OP_CLASSES)
    assert s.op_classes["conv"].flops == pytest.approx(s.flops_per_sample, rel=0.01)  # a conv net
    assert s.op_classes["attention"].flops == 0
    # saved activations of a ResNet-50 at fp32: tens of MB per image, not KB nor GB
    assert 40e6 < s.activation_bytes_per_sample < 200e6


@pytest.mark.parametrize("name, millions", [("bert-base", 110), ("bert-large", 335), ("gpt2", 124)])
def test_transformer_parameter_counts(name, millions):
    s = model_stats(zoo.build(name, device="meta"), batch_size=1)
    assert s.parameters / 1e6 == pytest.approx(millions, rel=0.02)
    # ~6 FLOPs per parameter per token for fwd+bwd of the dense layers, plus attention
    tokens = 384 if name.startswith("bert") else 1024
    assert s.flops_per_sample == pytest.approx(3 * s.forward_flops_per_sample, rel=0.05)
    assert s.op_classes["attention"].flops > 0 and s.op_classes["matmul"].flops > 4 * s.parameters * tokens * 0.7


def test_gpt2_attention_is_counted_as_a_fused_kernel():
    # Fused (flash / memory-efficient) attention never stores the L×L scores: saved activations stay
    # well below what the math path would keep (12 layers × 12 heads × 1024² × 4 B ≈ 600 MB of probabilities alone).
    s = model_stats(zoo.build("gpt2", device="meta"), batch_size=1)
    seq = 1024
    qk = 12 * 2 * 2 * seq * seq * 64 * 12  # layers × (QKᵀ and PV) × 2 FLOPs × L² × head dim × heads
    assert s.op_classes["attention"].flops == pytest.approx(qk * (1 + 2.5), rel=0.01)  # fwd + bwd (2.5× fwd)
    assert s.activation_bytes_per_sample < 2.0e9


def test_depthwise_convolution_backward_is_not_overcounted():
    # torch's formula ignores groups for grad-weight; ours must keep backward ≈ 2× forward.
    s = model_stats(zoo.build("mobilenet_v2", device="meta"), batch_size=8)
    assert s.forward_flops_per_sample / 1e9 == pytest.approx(0.60, rel=0.03)  # 300 M MACs
    assert 2.9 <= s.flops_per_sample / s.forward_flops_per_sample <= 3.0


def test_mlp_flops_match_hand_arithmetic():
    zm = zoo.build("mlp")  # real weights this time: the count must not touch them
    before = [p.detach().clone() for p in zm.model.parameters()]
    s = model_stats(zm, batch_size=10)
    layers = [(784, 256), (256, 256), (256, 10)]
    fwd = sum(2 * i * o for i, o in layers)
    # backward: grad-weight for every layer, grad-input for all but the first
    bwd = sum(2 * i * o for i, o in layers) + sum(2 * i * o for i, o in layers[1:])
    assert s.forward_flops_per_sample == fwd
    assert s.flops_per_sample == fwd + bwd
    assert s.parameters == sum(i * o + o for i, o in layers) and s.batch_size == 10
    for p, b in zip(zm.model.parameters(), before):
        assert p.device.type == "cpu" and p.grad is None and (p.detach() == b).all()


def test_stats_are_per_sample_and_batch_independent_for_flops():
    zm = zoo.build("resnet18", device="meta")
    a, b = model_stats(zm, batch_size=2), model_stats(zm, batch_size=64)
    assert a.flops_per_sample == pytest.approx(b.flops_per_sample, rel=1e-9)
    assert a.activation_bytes_per_sample == pytest.approx(b.activation_bytes_per_sample, rel=0.01)


def test_data_dependent_model_gets_a_clear_error():
    import torch

    class Branchy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x) if x.sum().item() > 0 else -self.lin(x)

    zm = zoo.ZooModel("branchy", Branchy(), lambda b, d: torch.randn(b, 4, device=d), lambda m, x: m(x).mean(), 4, "t", "")
    with pytest.raises(ProfileError, match="cannot count branchy without running it"):
        model_stats(zm)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_batch_size(bad):
    with pytest.raises(ProfileError, match="batch size must be a positive integer"):
        model_stats(zoo.build("mlp", device="meta"), batch_size=bad)


def test_kernels_per_step_counts_work_not_views():
    mlp = model_stats(zoo.build("mlp", device="meta"), batch_size=8)
    # 3 linear layers: forward addmm ×3 + relu ×2 + loss; backward mm for every weight and input,
    # bias sums, relu backward, the loss's backward: tens, not hundreds (views and allocations excluded)
    assert 10 <= mlp.kernels_per_step <= 40
    big = model_stats(zoo.build("resnet50", device="meta"), batch_size=2)
    assert big.kernels_per_step > 5 * mlp.kernels_per_step
    # per step, not per sample: the batch does not change how many kernels run
    assert model_stats(zoo.build("mlp", device="meta"), batch_size=512).kernels_per_step == mlp.kernels_per_step
