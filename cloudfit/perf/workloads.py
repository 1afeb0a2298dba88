"""The workloads behind the public measurements, defined so ``model_stats`` can count them.

The training data (``data/measurements.csv``) ties each measurement to a workload here. Zoo models are
built through :func:`cloudfit.profiling.zoo.build` with the options the source used; workloads that
are not zoo models are written below after the source's own code (file and commit in each docstring).
Only ``scripts/build_measurements.py`` imports this module (it needs torch); the stats it produces are
stored in ``data/workload_stats.json`` so fitting and evaluating the model never build a network.

Names are labels for people and for grouping folds; the performance model never sees them.
"""

from __future__ import annotations

import functools
from typing import Any, Callable


# --------------------------------------------------------------------------------------------
# Tensor2Tensor CIFAR models (CM-DARE: github.com/cake-lab/CM-DARE, T2T 1.x resnet.py / shake_shake.py)


def _t2t_resnet_cifar(layers: tuple[int, ...]):
    """T2T ``resnet_cifar_15/32``: resnet_v2 with pre-activation residual blocks, filters 16/16/32/64,
    the ImageNet stem (7×7 stride-2 conv + 3×3 stride-2 max-pool) kept on 32×32 inputs, a 1×1
    projection shortcut on the first block of every group, then mean-pool + dense to 10 classes.
    Its forward FLOPs (4.86 M per image for ResNet-15) match CM-DARE's ``speed_data_supertable.csv``."""
    import torch
    from torch import nn

    class PreActBlock(nn.Module):
        def __init__(self, cin, cout, stride, project):
            super().__init__()
            self.bn1, self.bn2 = nn.BatchNorm2d(cin), nn.BatchNorm2d(cout)
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)) if project else None

        def forward(self, x):
            x = torch.relu(self.bn1(x))
            short = self.proj(x) if self.proj is not None else x
            y = self.conv1(x)
            y = self.conv2(torch.relu(self.bn2(y)))
            return y + short

    filters = (16, 16, 32, 64)
    mods: list[nn.Module] = [nn.Conv2d(3, filters[0], 7, 2, 3, bias=False), nn.BatchNorm2d(filters[0]), nn.ReLU(),
                             nn.MaxPool2d(3, 2, 1)]
    cin = filters[0]
    for g, (n, stride) in enumerate(zip(layers, (1, 2, 2))):
        cout = filters[g + 1]
        for i in range(n):
            mods.append(PreActBlock(cin, cout, stride if i == 0 else 1, project=(i == 0)))
            cin = cout
    mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10)]
    return nn.Sequential(*mods)


def _t2t_shakeshake(depth: int, width: int):
    """T2T ``shakeshake_small`` (26 layers, hidden 32) / ``_big`` (hidden 96) and CM-DARE's other widths
    and depth 32: 3×3 16-filter stem + BN, three groups of (depth−2)/6 blocks at widths 16k/32k/64k
    (k = width/16), each block two branches [ReLU, conv3×3, BN, ReLU, conv3×3, BN] mixed by random
    weights, a two-path 1×1 skip where the width changes, final ReLU, mean-pool + dense to 10."""
    import torch
    from torch import nn
    import torch.nn.functional as F

    class Branch(nn.Sequential):
        def __init__(self, cin, cout, stride):
            super().__init__(nn.ReLU(), nn.Conv2d(cin, cout, 3, stride, 1), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, 1, 1), nn.BatchNorm2d(cout))

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.b1, self.b2 = Branch(cin, cout, stride), Branch(cin, cout, stride)
            self.stride = stride
            self.skip = None
            if cin != cout:
                self.p1 = nn.Conv2d(cin, cout // 2, 1)
                self.p2 = nn.Conv2d(cin, cout // 2, 1)
                self.bn = nn.BatchNorm2d(cout)
                self.skip = True

        def forward(self, x):
            a = torch.rand(x.size(0), 1, 1, 1, device=x.device, dtype=x.dtype)
            y = a * self.b1(x) + (1 - a) * self.b2(x)
            if self.skip is None:
                return x + y
            s1 = self.p1(F.avg_pool2d(x, 1, self.stride))
            s2 = self.p2(F.avg_pool2d(F.pad(x, (0, 1, 0, 1))[:, :, 1:, 1:], 1, self.stride))
            return self.bn(torch.cat([s1, s2], 1)) + y

    k, n = width // 16, (depth - 2) // 6
    mods: list[nn.Module] = [nn.Conv2d(3, 16, 3, 1, 1), nn.BatchNorm2d(16)]
    cin = 16
    for g, stride in enumerate((1, 2, 2)):
        cout = 16 * k * 2 ** g
        for i in range(n):
            mods.append(Block(cin, cout, stride if i == 0 else 1))
            cin = cout
    mods += [nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10)]
    return nn.Sequential(*mods)


# --------------------------------------------------------------------------------------------
# Gavel's PyTorch workloads (github.com/stanford-futuredata/gavel, workloads/pytorch/*)


def _lstm_lm():
    """``language_modeling/main.py`` defaults: word-level 2-layer LSTM, emsize = nhid = 200,
    dropout 0.2, untied, Wikitext-2 vocabulary (33,278 words), bptt 35 → one sample = 35 tokens."""
    from torch import nn

    class RNNModel(nn.Module):
        def __init__(self, ntoken=33278, ninp=200, nhid=200, nlayers=2, dropout=0.2):
            super().__init__()
            self.drop = nn.Dropout(dropout)
            self.encoder = nn.Embedding(ntoken, ninp)
            self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
            self.decoder = nn.Linear(nhid, ntoken)

        def forward(self, tokens):  # (seq, batch)
            out, _ = self.rnn(self.drop(self.encoder(tokens)))
            return self.decoder(self.drop(out))

    def make_batch(b, device):
        import torch

        x = torch.randint(0, 33278, (35, b), device=device)
        return x, torch.randint(0, 33278, (35, b), device=device)

    def loss(model, batch):
        import torch.nn.functional as F

        x, y = batch
        return F.cross_entropy(model(x).reshape(-1, 33278), y.reshape(-1))

    return RNNModel(), make_batch, loss


# Multi30k de→en after the repository's preprocess (words seen ≥ 5 times): ~5k-word vocabularies;
# sentences average ~13 words, batches pad to their longest (~30 tokens with BOS/EOS). Approximate.
_M30K_VOCAB, _M30K_LEN = 5000, 30


def _translation_transformer():
    """``translation/train.py`` defaults: Transformer d_model 512, FFN 2048, 8 heads, 6+6 layers,
    separate (untied) source/target embeddings and output projection, Adam; Multi30k shapes above."""
    import torch
    from torch import nn

    class Seq2Seq(nn.Module):
        def __init__(self, d=512):
            super().__init__()
            self.src = nn.Embedding(_M30K_VOCAB, d)
            self.tgt = nn.Embedding(_M30K_VOCAB, d)
            self.core = nn.Transformer(d, 8, 6, 6, 2048, 0.1, batch_first=True)
            self.proj = nn.Linear(d, _M30K_VOCAB, bias=False)

        def forward(self, s, t):
            mask = nn.Transformer.generate_square_subsequent_mask(t.size(1), device=t.device)
            return self.proj(self.core(self.src(s), self.tgt(t), tgt_mask=mask, tgt_is_causal=True))

    def make_batch(b, device):
        return (torch.randint(1, _M30K_VOCAB, (b, _M30K_LEN), device=device),
                torch.randint(1, _M30K_VOCAB, (b, _M30K_LEN), device=device),
                torch.randint(1, _M30K_VOCAB, (b, _M30K_LEN), device=device))

    def loss(model, batch):
        import torch.nn.functional as F

        s, t, y = batch
        return F.cross_entropy(model(s, t).reshape(-1, _M30K_VOCAB), y.reshape(-1))

    return Seq2Seq(), make_batch, loss


_ML20M_ITEMS = 20108  # MovieLens-20M items after the VAE-CF preprocessing recoder's script follows


def _recoder():
    """``recommendation/scripts/ml-20m/train.py``: recoder ``DynamicAutoencoder(hidden_layers=[200],
    activation tanh, noise 0.5)`` over 20,108 items with a logistic loss; one sample = one user's
    interaction vector. (Negative sampling trims the output layer to the batch's items; at the batch
    sizes Gavel ran, 512–8192 users, that is nearly every item, so the full layer is counted.)"""
    import torch
    from torch import nn

    model = nn.Sequential(nn.Dropout(0.5), nn.Linear(_ML20M_ITEMS, 200), nn.Tanh(), nn.Linear(200, _ML20M_ITEMS))

    def make_batch(b, device):
        x = (torch.rand(b, _ML20M_ITEMS, device=device) < 0.01).float()
        return x, x

    def loss(m, batch):
        import torch.nn.functional as F

        x, y = batch
        return F.binary_cross_entropy_with_logits(m(x), y)

    return model, make_batch, loss


def _cyclegan():
    """``cyclegan/cyclegan.py`` (after eriklindernoren/PyTorch-GAN): two ResNet generators (9 residual
    blocks, instance norm) and two PatchGAN discriminators on 256×256 images, batch 1; one training
    step = the generator update (6 generator and 2 discriminator passes) + both discriminator updates
    (4 discriminator passes on real and buffered fake images)."""
    import torch
    from torch import nn

    def res_block(c):
        return nn.Sequential(nn.ReflectionPad2d(1), nn.Conv2d(c, c, 3), nn.InstanceNorm2d(c), nn.ReLU(),
                             nn.ReflectionPad2d(1), nn.Conv2d(c, c, 3), nn.InstanceNorm2d(c))

    class Residual(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.block = res_block(c)

        def forward(self, x):
            return x + self.block(x)

    def generator():
        m: list[nn.Module] = [nn.ReflectionPad2d(3), nn.Conv2d(3, 64, 7), nn.InstanceNorm2d(64), nn.ReLU()]
        c = 64
        for _ in range(2):
            m += [nn.Conv2d(c, 2 * c, 3, 2, 1), nn.InstanceNorm2d(2 * c), nn.ReLU()]
            c *= 2
        m += [Residual(c) for _ in range(9)]
        for _ in range(2):
            m += [nn.Upsample(scale_factor=2), nn.Conv2d(c, c // 2, 3, 1, 1), nn.InstanceNorm2d(c // 2), nn.ReLU()]
            c //= 2
        m += [nn.ReflectionPad2d(3), nn.Conv2d(c, 3, 7), nn.Tanh()]
        return nn.Sequential(*m)

    def discriminator():
        m: list[nn.Module] = []
        for cin, cout, norm in ((3, 64, False), (64, 128, True), (128, 256, True), (256, 512, True)):
            m += [nn.Conv2d(cin, cout, 4, 2, 1)] + ([nn.InstanceNorm2d(cout)] if norm else []) + [nn.LeakyReLU(0.2)]
        m += [nn.ZeroPad2d((1, 0, 1, 0)), nn.Conv2d(512, 1, 4, padding=1)]
        return nn.Sequential(*m)

    class CycleGAN(nn.Module):
        def __init__(self):
            super().__init__()
            self.g_ab, self.g_ba, self.d_a, self.d_b = generator(), generator(), discriminator(), discriminator()

    def make_batch(b, device):
        return torch.randn(b, 3, 256, 256, device=device), torch.randn(b, 3, 256, 256, device=device)

    def loss(m, batch):
        import torch.nn.functional as F

        a, b = batch
        ident = F.l1_loss(m.g_ba(a), a) + F.l1_loss(m.g_ab(b), b)
        fake_b, fake_a = m.g_ab(a), m.g_ba(b)
        gan = m.d_b(fake_b).square().mean() + m.d_a(fake_a).square().mean()
        cycle = F.l1_loss(m.g_ba(fake_b), a) + F.l1_loss(m.g_ab(fake_a), b)
        d = (m.d_a(a).square().mean() + m.d_a(fake_a.detach()).square().mean()
             + m.d_b(b).square().mean() + m.d_b(fake_b.detach()).square().mean())
        return gan + 10 * cycle + 5 * ident + d

    return CycleGAN(), make_batch, loss


# --------------------------------------------------------------------------------------------
# Sailor (github.com/eth-easl/sailor): Megatron-DeepSpeed GPT with OPT-350M's shape


def _megatron_gpt_opt350m():
    """``Planner/simulations/configs/training_config_opt_350.json``: type gpt2, hidden 1024, 24 layers,
    16 heads, vocabulary 50,272, sequence 2,048, Adam. Megatron's GPT layer is GPT-2's (12h²+13h
    parameters per layer, 12,596,224 as Sailor's ``llm_info.json`` lists), with tied embeddings;
    built as a ``transformers`` GPT2LMHeadModel from that config (nothing downloaded)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=50272, n_positions=2048, n_embd=1024, n_layer=24, n_head=16)
    cfg._attn_implementation = "sdpa"
    model = GPT2LMHeadModel(cfg)
    model.loss_type = "ForCausalLM"

    def make_batch(b, device):
        import torch

        ids = torch.randint(0, 50272, (b, 2048), device=device)
        return {"input_ids": ids, "labels": ids}

    return model, make_batch, lambda m, batch: m(**batch).loss


# --------------------------------------------------------------------------------------------
# Registry

# name → (zoo name and options) or (builder, input description, task)
_ZOO: dict[str, tuple[str, dict[str, Any]]] = {
    "gavel-resnet18-cifar10": ("resnet18", {"image_size": 32, "num_classes": 10, "cifar_stem": True}),
    "resnet50": ("resnet50", {}),
    "resnet152": ("resnet152", {}),
    "inception_v3": ("inception_v3", {}),
    "vgg16": ("vgg16", {}),
    "alexnet": ("alexnet", {}),
    "bert-base": ("bert-base", {}),  # SQuAD fine-tuning, 384 tokens (DeepLearningExamples' run_squad)
    "bert-large": ("bert-large", {}),
    "ncf": ("ncf", {}),
}
_OWN: dict[str, tuple[Callable[[], tuple[Any, Any, Any]], str, str]] = {
    "t2t-resnet-cifar15": (lambda: _images(_t2t_resnet_cifar((2, 2, 2))), "3x32x32 image", "image classification (CIFAR-10)"),
    "t2t-resnet-cifar32": (lambda: _images(_t2t_resnet_cifar((5, 5, 5))), "3x32x32 image", "image classification (CIFAR-10)"),
    "gavel-lstm-wikitext2": (_lstm_lm, "35 tokens", "language modelling (Wikitext-2)"),
    "gavel-transformer-multi30k": (_translation_transformer, f"{_M30K_LEN}+{_M30K_LEN} token sentence pair",
                                   "translation (Multi30k)"),
    "gavel-recoder-ml20m": (_recoder, f"{_ML20M_ITEMS} item interactions", "recommendation (MovieLens-20M)"),
    "gavel-cyclegan": (_cyclegan, "two 3x256x256 images", "image-to-image translation (monet2photo)"),
    "megatron-gpt-opt350m": (_megatron_gpt_opt350m, "2048 tokens", "causal language modelling"),
}
for _depth, _widths in ((26, (16, 32, 48, 64, 80, 96)), (32, (32, 64))):
    for _w in _widths:
        _OWN[f"t2t-shakeshake{_depth}-2x{_w}d"] = (
            functools.partial(lambda d, w: _images(_t2t_shakeshake(d, w)), _depth, _w), "3x32x32 image",
            "image classification (CIFAR-10)")


def _images(model):
    from cloudfit.profiling import zoo

    return model, functools.partial(zoo.image_batch, image_size=32, num_classes=10), zoo.classification_loss


def names() -> list[str]:
    return sorted(set(_ZOO) | set(_OWN))


def build(name: str):
    """A ``ZooModel`` for workload ``name`` with parameters on the meta device (counting only)."""
    import torch

    from cloudfit.profiling import zoo

    if name in _ZOO:
        zname, opts = _ZOO[name]
        return zoo.build(zname, device="meta", **opts)
    builder, inp, task = _OWN[name]
    with torch.device("meta"):
        model, make_batch, loss = builder()
    model.train()
    return zoo.ZooModel(name=name, model=model, make_batch=make_batch, loss=loss, default_batch_size=32,
                        task=task, input=inp, source=(builder.__doc__ or "").strip().split("\n")[0])


def stats_key(workload: str, batch: int) -> str:
    return f"{workload}@{int(batch)}"


def compute_all(pairs: list[tuple[str, int]]) -> dict[str, Any]:
    """Stats of every (workload, batch per device) pair as plain JSON (``data/workload_stats.json``).

    Counted at each measured batch size: per-sample numbers include per-step work (weight gradients,
    dense embedding gradients) divided by the batch, which matters at NCF's millions of samples per step.
    """
    from cloudfit.perf.data import stats_to_dict
    from cloudfit.profiling.stats import model_stats

    out = {}
    built: dict[str, Any] = {}
    for name, batch in sorted(pairs):
        zm = built.get(name)
        if zm is None:
            zm = built[name] = build(name)
        out[stats_key(name, batch)] = stats_to_dict(model_stats(zm, int(batch)))
    return {"schema_version": 2, "workloads": out,
            "note": "per-sample counts at each measured batch size, from cloudfit.profiling.stats.model_stats; "
                    "rebuild with scripts/build_measurements.py"}
