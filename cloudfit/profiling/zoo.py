"""The model zoo: real PyTorch training workloads built locally with random weights.

Importing this module is cheap (no torch): the metadata below is what ``cloudfit models`` lists.
``build(name, **options)`` imports torch and the definition and returns a :class:`ZooModel`:
the module, a function making one synthetic batch, and the training loss.

Where the definitions come from
    * BERT and GPT-2: Hugging Face ``transformers`` (``BertForQuestionAnswering``, ``GPT2LMHeadModel``)
      built from configs — never downloaded.
    * transformer-base: ``torch.nn.Transformer`` plus embeddings/positions/tied output written here.
    * CNNs (ResNet, VGG, Inception, MobileNet, DenseNet, AlexNet, SSD300): written by hand in plain
      torch, layer for layer as torchvision lays them out (parameter counts match torchvision's),
      because torchvision does not import beside the CPU-only torch 2.13 this project pins (its
      compiled ops need CUDA torch libraries) and timm depends on torchvision.
    * GNMT and NCF: written by hand after NVIDIA DeepLearningExamples / MLPerf, which are training
      scripts rather than installable libraries.

Options ``build()`` accepts, per model (``info(name)["options"]`` lists them with defaults):
    image_size   CNN classifiers: square input side (ResNet/VGG/MobileNet/DenseNet/AlexNet ≥ 32, Inception ≥ 75)
    num_classes  classifiers and ssd300 (ssd300 counts background, COCO = 91)
    cifar_stem   resnet18…152: 3×3 stride-1 first conv and no max-pool (CIFAR-10 ResNet-18 benchmarks);
                 e.g. ``build("resnet18", image_size=32, num_classes=10, cifar_stem=True)``
    aux_logits   inception_v3: train the auxiliary classifier too (torchvision's default)
    depth        resnet32: 6n+2 (20, 32, 44, 56, 110 …)
    seq_len      NLP models: tokens per sample (bert ≤ 512, gpt2 ≤ 1024; transformer-base and gnmt:
                 source and target length of a sentence pair)
    hidden       mlp: hidden width
``build(name, device="meta")`` creates the parameters on the meta device (no memory, no init time):
what :func:`cloudfit.profiling.stats.model_stats` needs for counting.

Synthetic batches and losses follow the workload's usual training objective (cross-entropy for
classifiers, SQuAD span loss for BERT, next-token loss for GPT-2, label-smoothed cross-entropy for
translation, BCE for NCF, SSD's multibox loss with hard-negative mining).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from cloudfit.errors import ProfileError, one_line

if TYPE_CHECKING:  # pragma: no cover
    import torch


@dataclass
class ZooModel:
    """A model ready to train: ``loss(model, make_batch(batch_size, device))`` is one training step's loss.

    ``loss`` calls ``model(...)`` only, so it works on a wrapped model too (DistributedDataParallel).
    """

    name: str
    model: "torch.nn.Module"
    make_batch: Callable[[int, "torch.device | str"], Any]
    loss: Callable[["torch.nn.Module", Any], "torch.Tensor"]
    default_batch_size: int  # typical per-GPU training batch (the profile's stats.batch_size)
    task: str
    input: str  # one sample, e.g. "3x224x224 image" or "384 tokens"
    cpu_batch_size: int | None = None  # smaller default for timed runs on a CPU
    optimizer: str = "sgd"  # "sgd" (momentum 0.9) or "adamw": what the workload is usually trained with
    options: dict[str, Any] = field(default_factory=dict)
    source: str = ""


# --------------------------------------------------------------------------------------------
# Metadata (no torch here)

_HAND = "hand-written in plain torch"
_TV_WHY = ("layer for layer as torchvision lays it out (same parameter count); torchvision does not import "
           "beside the CPU-only torch 2.13 this project pins, and timm needs torchvision")
_CNN_OPTS = {"image_size": 224, "num_classes": 1000}


@dataclass(frozen=True)
class _Spec:
    task: str
    input: str  # formatted with the options
    default_batch_size: int
    cpu_batch_size: int
    options: dict[str, Any]
    definition: str  # "library" or "hand-written"
    source: str  # where the definition comes from, and why
    reference: str
    optimizer: str = "sgd"


def _resnet_spec(depth: int, gpu_bs: int, cpu_bs: int) -> _Spec:
    return _Spec("image classification", "3x{image_size}x{image_size} image", gpu_bs, cpu_bs,
                 {**_CNN_OPTS, "cifar_stem": False}, "hand-written",
                 f"{_HAND}, {_TV_WHY}", f"He et al. 2015, ResNet-{depth} (torchvision resnet{depth}, v1.5)")


_SPECS: dict[str, _Spec] = {
    "resnet18": _resnet_spec(18, 256, 16),
    "resnet50": _resnet_spec(50, 256, 8),
    "resnet101": _resnet_spec(101, 256, 4),
    "resnet152": _resnet_spec(152, 128, 4),
    "vgg16": _Spec("image classification", "3x{image_size}x{image_size} image", 128, 4, dict(_CNN_OPTS), "hand-written",
                   f"{_HAND}, {_TV_WHY}", "Simonyan & Zisserman 2014, VGG-16 (configuration D)"),
    "inception_v3": _Spec("image classification", "3x{image_size}x{image_size} image", 128, 8,
                          {"image_size": 299, "num_classes": 1000, "aux_logits": True}, "hand-written",
                          f"{_HAND}, {_TV_WHY}; trained with the auxiliary classifier (loss + 0.4 × aux loss)",
                          "Szegedy et al. 2015, Inception-v3"),
    "mobilenet_v2": _Spec("image classification", "3x{image_size}x{image_size} image", 256, 16, dict(_CNN_OPTS),
                          "hand-written", f"{_HAND}, {_TV_WHY}", "Sandler et al. 2018, MobileNetV2 (width 1.0)"),
    "densenet121": _Spec("image classification", "3x{image_size}x{image_size} image", 128, 8, dict(_CNN_OPTS),
                         "hand-written", f"{_HAND}, {_TV_WHY}", "Huang et al. 2017, DenseNet-121"),
    "bert-base": _Spec("question answering (SQuAD)", "{seq_len} tokens", 32, 2, {"seq_len": 384}, "library",
                       "transformers BertForQuestionAnswering from a BertConfig (bert-base-uncased shape; no download)",
                       "Devlin et al. 2018, BERT-base", "adamw"),
    "bert-large": _Spec("question answering (SQuAD)", "{seq_len} tokens", 32, 1, {"seq_len": 384}, "library",
                        "transformers BertForQuestionAnswering from a BertConfig (bert-large-uncased shape; no download)",
                        "Devlin et al. 2018, BERT-large", "adamw"),
    "gpt2": _Spec("causal language modelling", "{seq_len} tokens", 8, 1, {"seq_len": 1024}, "library",
                  "transformers GPT2LMHeadModel from a GPT2Config (gpt2 shape; no download)",
                  "Radford et al. 2019, GPT-2 small (124 M)", "adamw"),
    "gpt2-medium": _Spec("causal language modelling", "{seq_len} tokens", 4, 1, {"seq_len": 1024}, "library",
                         "transformers GPT2LMHeadModel from a GPT2Config (gpt2-medium shape; no download)",
                         "Radford et al. 2019, GPT-2 medium (355 M)", "adamw"),
    "transformer-base": _Spec("translation (WMT en-de)", "{seq_len}+{seq_len} token sentence pair", 128, 8,
                              {"seq_len": 64}, "library",
                              "torch.nn.Transformer (encoder/decoder stacks) + shared embedding, sinusoidal positions "
                              "and tied output projection written here", "Vaswani et al. 2017, Transformer base", "adamw"),
    "gnmt": _Spec("translation (WMT en-de)", "{seq_len}+{seq_len} token sentence pair", 128, 8, {"seq_len": 50},
                  "hand-written", "hand-written with torch.nn.LSTM after NVIDIA DeepLearningExamples' GNMT v2 "
                  "(MLPerf translation); no installable library provides it", "Wu et al. 2016, GNMT", "adamw"),
    "ncf": _Spec("recommendation (MovieLens-20M)", "one (user, item) pair", 65536, 4096, {}, "hand-written",
                 "hand-written after NVIDIA DeepLearningExamples' NeuMF (MLPerf recommendation); "
                 "no installable library provides it", "He et al. 2017, Neural Collaborative Filtering (NeuMF)", "adamw"),
    "ssd300": _Spec("object detection (COCO)", "3x300x300 image", 32, 2, {"num_classes": 91}, "hand-written",
                    f"{_HAND} as torchvision's ssd300_vgg16 lays it out (same parameter count); torchvision does not "
                    "import beside the CPU-only torch 2.13 this project pins. Anchor matching is left to data "
                    "preparation: batches carry matched per-anchor targets",
                    "Liu et al. 2016, SSD300 (VGG-16 backbone)"),
    "alexnet": _Spec("image classification", "3x{image_size}x{image_size} image", 512, 32, dict(_CNN_OPTS),
                     "hand-written", f"{_HAND}, {_TV_WHY}", "Krizhevsky 2014, AlexNet (one-weird-trick variant)"),
    "resnet32": _Spec("image classification (CIFAR-10)", "3x32x32 image", 128, 64, {"depth": 32, "num_classes": 10},
                      "hand-written", "hand-written in plain torch after He et al.'s CIFAR ResNet (6n+2 layers; "
                      "not in torchvision)", "He et al. 2015, §4.2 CIFAR-10 ResNet-32"),
    "mlp": _Spec("classification (tiny, for tests and demos)", "784 features", 64, 64,
                 {"hidden": 256, "num_classes": 10}, "hand-written", "hand-written: a 3-layer perceptron that trains "
                 "in seconds on a CPU", "—"),
}

# Bounds each option must respect (inclusive); booleans are checked by type.
_INT_BOUNDS: dict[str, tuple[int, int]] = {
    "image_size": (32, 4096),
    "num_classes": (1, 1_000_000),
    "seq_len": (1, 1_000_000),
    "depth": (8, 1202),
    "hidden": (1, 1_000_000),
}
_BOOL_OPTIONS = {"cifar_stem", "aux_logits"}
_MAX_SEQ = {"bert-base": 512, "bert-large": 512, "gpt2": 1024, "gpt2-medium": 1024, "transformer-base": 1024}


def names() -> list[str]:
    """Zoo model names, in listing order."""
    return list(_SPECS)


def _spec(name: str) -> _Spec:
    try:
        return _SPECS[name]
    except KeyError:
        raise ProfileError(f"unknown model {name!r} (zoo: {', '.join(_SPECS)}; or pass --model-file path.py:factory)") from None


def info(name: str) -> dict[str, Any]:
    """What the zoo knows about ``name`` without building it."""
    s = _spec(name)
    return {
        "name": name,
        "task": s.task,
        "input": s.input.format(**s.options),
        "default_batch_size": s.default_batch_size,
        "cpu_batch_size": s.cpu_batch_size,
        "options": dict(s.options),
        "optimizer": s.optimizer,
        "definition": s.definition,
        "source": s.source,
        "reference": s.reference,
    }


def _resolve_options(name: str, s: _Spec, options: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - set(s.options))
    if unknown:
        accepted = ", ".join(s.options) or "none"
        raise ProfileError(f"{name} does not take option(s) {', '.join(unknown)} (accepted: {accepted})")
    opts = {**s.options, **options}
    for key, value in opts.items():
        if key in _BOOL_OPTIONS:
            if not isinstance(value, bool):
                raise ProfileError(f"{name}: option {key} must be true or false, got {value!r}")
            continue
        lo, hi = _INT_BOUNDS[key]
        if key == "seq_len" and name in _MAX_SEQ:
            hi = _MAX_SEQ[name]
        if key == "image_size" and name == "inception_v3":
            lo = 75
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ProfileError(f"{name}: option {key} must be an integer in [{lo}, {hi}], got {value!r}")
    if name == "resnet32" and (opts["depth"] - 2) % 6:
        raise ProfileError(f"resnet32: depth must be 6n+2 (20, 32, 44, 56, 110 …), got {opts['depth']}")
    return opts


def build(name: str, *, device: "str | torch.device | None" = None, **options: Any) -> ZooModel:
    """Build zoo model ``name`` with random weights (never downloads anything).

    ``device``: where to create the parameters (default CPU); ``"meta"`` allocates nothing, for counting.
    ``options``: see the module docstring; unknown names or bad values raise ``ProfileError``.
    """
    s = _spec(name)
    opts = _resolve_options(name, s, options)
    import torch

    try:
        with torch.device(device or "cpu"):
            model, make_batch, loss = _BUILDERS[name](name, **opts)
    except ProfileError:
        raise
    except (RuntimeError, ValueError) as e:
        raise ProfileError(f"cannot build {name} on {device or 'cpu'}: {one_line(e)}") from e
    model.train()
    tag = "" if opts == s.options else " (" + ", ".join(f"{k}={v}" for k, v in opts.items() if s.options[k] != v) + ")"
    return ZooModel(
        name=name,
        model=model,
        make_batch=make_batch,
        loss=loss,
        default_batch_size=s.default_batch_size,
        task=s.task,
        input=s.input.format(**opts),
        cpu_batch_size=s.cpu_batch_size,
        optimizer=s.optimizer,
        options=opts,
        source=s.source + tag,
    )


# --------------------------------------------------------------------------------------------
# Builders (torch imported lazily)


def image_batch(batch_size: int, device, *, image_size: int = 224, num_classes: int = 1000):
    """Random images and class labels: ``(x [B,3,H,W], y [B])``."""
    import torch

    x = torch.randn(batch_size, 3, image_size, image_size, device=device)
    return x, torch.randint(0, num_classes, (batch_size,), device=device)


def classification_loss(model, batch):
    """Cross-entropy; a ``(logits, aux_logits)`` output (Inception-v3) adds 0.4 × the auxiliary loss."""
    import torch.nn.functional as F

    x, y = batch
    out = model(x)
    if isinstance(out, tuple):
        main, aux = out
        return F.cross_entropy(main.float(), y) + 0.4 * F.cross_entropy(aux.float(), y)
    return F.cross_entropy(out.float(), y)


def _images(model, opts):
    mb = functools.partial(image_batch, image_size=opts.get("image_size", 32), num_classes=opts["num_classes"])
    return model, mb, classification_loss


def _b_resnet(name, image_size, num_classes, cifar_stem):
    from cloudfit.profiling.models.resnet import resnet

    return _images(resnet(int(name[6:]), num_classes=num_classes, cifar_stem=cifar_stem), locals())


def _b_resnet32(name, depth, num_classes):
    from cloudfit.profiling.models.resnet import CifarResNet

    return _images(CifarResNet(depth, num_classes), {"image_size": 32, "num_classes": num_classes})


def _b_vgg16(name, image_size, num_classes):
    from cloudfit.profiling.models.vgg import VGG16

    return _images(VGG16(num_classes), locals())


def _b_inception(name, image_size, num_classes, aux_logits):
    from cloudfit.profiling.models.inception import InceptionV3

    return _images(InceptionV3(num_classes, aux_logits=aux_logits), locals())


def _b_mobilenet(name, image_size, num_classes):
    from cloudfit.profiling.models.mobilenet import MobileNetV2

    return _images(MobileNetV2(num_classes), locals())


def _b_densenet(name, image_size, num_classes):
    from cloudfit.profiling.models.densenet import DenseNet

    return _images(DenseNet(num_classes=num_classes), locals())


def _b_alexnet(name, image_size, num_classes):
    from cloudfit.profiling.models.small import AlexNet

    return _images(AlexNet(num_classes), locals())


def _b_mlp(name, hidden, num_classes):
    from cloudfit.profiling.models import small

    return small.MLP(784, hidden, num_classes), functools.partial(small.mlp_batch, num_classes=num_classes), classification_loss


def _b_bert(name, seq_len):
    from cloudfit.profiling.models import hf

    return hf.bert_qa(name), functools.partial(hf.qa_batch, seq_len=seq_len), hf.hf_loss


def _b_gpt2(name, seq_len):
    from cloudfit.profiling.models import hf

    return hf.gpt2_lm(name), functools.partial(hf.lm_batch, seq_len=seq_len), hf.hf_loss


def _b_transformer(name, seq_len):
    from cloudfit.profiling.models import transformer as t

    return t.TransformerBase(max_len=max(1024, seq_len + 1)), functools.partial(t.make_batch, seq_len=seq_len), t.loss


def _b_gnmt(name, seq_len):
    from cloudfit.profiling.models import gnmt

    return gnmt.GNMT(), functools.partial(gnmt.make_batch, seq_len=seq_len), gnmt.loss


def _b_ncf(name):
    from cloudfit.profiling.models import ncf

    return ncf.NeuMF(), ncf.make_batch, ncf.loss


def _b_ssd(name, num_classes):
    from cloudfit.profiling.models import ssd

    if num_classes < 2:
        raise ProfileError("ssd300: num_classes counts the background class and must be at least 2")
    return ssd.SSD300(num_classes), functools.partial(ssd.make_batch, num_classes=num_classes), ssd.loss


_BUILDERS: dict[str, Callable[..., tuple[Any, Any, Any]]] = {
    "resnet18": _b_resnet, "resnet50": _b_resnet, "resnet101": _b_resnet, "resnet152": _b_resnet,
    "vgg16": _b_vgg16, "inception_v3": _b_inception, "mobilenet_v2": _b_mobilenet, "densenet121": _b_densenet,
    "bert-base": _b_bert, "bert-large": _b_bert, "gpt2": _b_gpt2, "gpt2-medium": _b_gpt2,
    "transformer-base": _b_transformer, "gnmt": _b_gnmt, "ncf": _b_ncf, "ssd300": _b_ssd,
    "alexnet": _b_alexnet, "resnet32": _b_resnet32, "mlp": _b_mlp,
}
assert set(_BUILDERS) == set(_SPECS)


# --------------------------------------------------------------------------------------------
# Your own model


def default_loss(model, batch):
    """The loss used for a ``--model-file`` model that brings none.

    * ``batch`` is a dict → ``out = model(**batch)``; a 2-tuple/list → ``(inputs, targets)`` with
      ``out = model(inputs)`` (or ``model(*inputs)`` if ``inputs`` is a tuple); anything else →
      ``out = model(batch)``.
    * ``out`` has a ``.loss`` (Hugging Face models given labels) or is a dict with ``"loss"`` → that.
    * With targets: integer targets → cross-entropy on the logits (``out``, ``out.logits`` or ``out[0]``,
      flattened over sequence positions when needed); floating targets → mean squared error.
    * Without targets: ``out.float().mean()`` (of the first tensor if ``out`` is a tuple).
    """
    import torch
    import torch.nn.functional as F

    targets = None
    if isinstance(batch, dict):
        out = model(**batch)
    elif isinstance(batch, (tuple, list)) and len(batch) == 2:
        inputs, targets = batch
        out = model(*inputs) if isinstance(inputs, (tuple, list)) else model(inputs)
    else:
        out = model(batch)
    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, dict):
        loss = out.get("loss")
    if isinstance(loss, torch.Tensor):
        return loss
    logits = getattr(out, "logits", None)
    if logits is None:
        logits = out
        while isinstance(logits, (tuple, list)):
            logits = logits[0]
        if isinstance(logits, dict):
            logits = next(iter(logits.values()))
    if not isinstance(logits, torch.Tensor):
        raise ProfileError(f"the model returned {type(out).__name__}; return a tensor, or give factory() a loss")
    if targets is None:
        return logits.float().mean()
    if not isinstance(targets, torch.Tensor):
        raise ProfileError("batch targets must be a tensor; or give factory() a loss")
    if targets.is_floating_point():
        return F.mse_loss(logits.float(), targets.float())
    if logits.dim() == targets.dim() + 1:
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))
    return F.cross_entropy(logits.float(), targets)


def load_user_model(spec: str) -> ZooModel:
    """Load ``path/to/file.py:factory`` (``:factory`` may be omitted; the function is then ``factory``).

    ``factory()`` returns ``(model, make_batch)``, ``(model, make_batch, loss)`` or a dict with keys
    ``model``, ``make_batch`` and optionally ``loss``, ``batch_size``, ``task``, ``input``, ``optimizer``.
    ``make_batch(batch_size, device)`` returns one synthetic batch on ``device``; ``loss(model, batch)``
    returns a scalar (default: :func:`default_loss`). The profile's name is the file's stem.
    """
    head, _, tail = spec.rpartition(":")
    if tail.isidentifier() and len(head) > 1:  # len > 1: "C:" alone is a Windows drive, not a file
        path_s, fn_name = head, tail
    else:
        path_s, fn_name = spec, "factory"
    path = Path(path_s).expanduser()
    if not path.is_file():
        raise ProfileError(f"model file {path} not found (expected path/to/file.py:factory)")
    mod_name = f"_cloudfit_user_model_{abs(hash(str(path.resolve())))}"
    try:
        mod_spec = importlib.util.spec_from_file_location(mod_name, path)
        if mod_spec is None or mod_spec.loader is None:
            raise ProfileError(f"cannot import {path}: not a Python file")
        module = importlib.util.module_from_spec(mod_spec)
        folder = str(path.resolve().parent)
        sys.path.insert(0, folder)  # let it import its neighbours
        try:
            mod_spec.loader.exec_module(module)
        finally:
            if folder in sys.path:
                sys.path.remove(folder)
    except ProfileError:
        raise
    except BaseException as e:  # SyntaxError, ImportError, anything the user's module raises
        if isinstance(e, KeyboardInterrupt):
            raise
        raise ProfileError(f"importing {path} failed: {type(e).__name__}: {one_line(e)}") from e
    factory = getattr(module, fn_name, None)
    if not callable(factory):
        raise ProfileError(f"{path} has no function {fn_name}() (expected path/to/file.py:factory)")
    try:
        made = factory()
    except Exception as e:
        raise ProfileError(f"{path}:{fn_name}() raised {type(e).__name__}: {one_line(e)}") from e
    return _from_factory(made, path, fn_name)


def _from_factory(made: Any, path: Path, fn_name: str) -> ZooModel:
    import torch

    extra: dict[str, Any] = {}
    if isinstance(made, dict):
        extra = dict(made)
        parts = (extra.pop("model", None), extra.pop("make_batch", None), extra.pop("loss", None))
    elif isinstance(made, (tuple, list)) and len(made) in (2, 3):
        parts = (made[0], made[1], made[2] if len(made) == 3 else None)
    else:
        raise ProfileError(f"{path}:{fn_name}() must return (model, make_batch[, loss]) or a dict, got {type(made).__name__}")
    model, make_batch, loss = parts
    if not isinstance(model, torch.nn.Module):
        raise ProfileError(f"{path}:{fn_name}(): the model must be a torch.nn.Module, got {type(model).__name__}")
    if not callable(make_batch):
        raise ProfileError(f"{path}:{fn_name}(): make_batch must be callable as make_batch(batch_size, device)")
    if loss is not None and not callable(loss):
        raise ProfileError(f"{path}:{fn_name}(): loss must be callable as loss(model, batch)")
    batch_size = extra.get("batch_size", 32)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ProfileError(f"{path}:{fn_name}(): batch_size must be a positive integer, got {batch_size!r}")
    model.train()
    return ZooModel(
        name=path.stem,
        model=model,
        make_batch=make_batch,
        loss=loss or default_loss,
        default_batch_size=batch_size,
        task=str(extra.get("task", "custom")),
        input=str(extra.get("input", "")),
        cpu_batch_size=None,
        optimizer=str(extra.get("optimizer", "sgd")),
        source=f"user model {path}:{fn_name}",
    )


