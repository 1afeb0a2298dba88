"""Which op class an ATen operator belongs to, for the roofline split (``cloudfit.types.OP_CLASSES``).

matmul         mm / addmm / bmm / baddbmm / linear … (dense GEMMs: tensor-core work) and fused
               recurrent layers (cuDNN/oneDNN LSTM/GRU kernels)
conv           convolutions and their backward
attention      fused scaled-dot-product attention kernels (flash / memory-efficient / cuDNN / CPU)
normalization  batch/layer/group/RMS norm, vector norms and softmax (reductions over a feature axis)
elementwise    pointwise ops (PyTorch's ``pointwise`` tag: add, mul, relu, gelu, tanh …), dropout and
               the optimizers' ``_foreach_*`` updates
other          everything else: embedding lookups, pooling, concatenation, copies, reductions, losses …

Names may be spelled as the profiler does (``aten::addmm``), as op packets print (``aten.addmm``) or bare.
"""

from __future__ import annotations

import functools

MATMUL = frozenset({
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "mv", "addmv", "dot", "vdot", "_int_mm",
    "_scaled_mm", "_addmm_activation", "mkldnn_linear", "_mkldnn_linear", "linear_backward", "mkldnn_linear_backward",
    "_weight_int8pack_mm", "_grouped_mm", "einsum", "bilinear",
})
ATTENTION_MARKS = ("attention", "scaled_dot_product", "flash_attn")
NORM_MARKS = ("batch_norm", "layer_norm", "group_norm", "instance_norm", "rms_norm", "softmax", "norm")
ELEMENTWISE = frozenset({"dropout", "native_dropout", "native_dropout_backward", "bernoulli", "bernoulli_",
                         "feature_dropout", "alpha_dropout"})
# Whole recurrent layers (cuDNN / oneDNN / MIOpen kernels): GEMM-bound, so they price as matmul.
RNN_LAYERS = frozenset({"_cudnn_rnn", "_cudnn_rnn_backward", "mkldnn_rnn_layer", "mkldnn_rnn_layer_backward",
                        "miopen_rnn", "miopen_rnn_backward", "lstm", "gru", "rnn_tanh", "rnn_relu"})
TENSOR_CLASSES = ("matmul", "conv", "attention")  # priced against the accelerator's peak FLOPS


def _bare(name: str) -> str:
    for sep in ("::", "."):
        if sep in name:
            name = name.split(sep, 1)[1]
    return name.split(".", 1)[0]  # drop an overload suffix ("add.Tensor")


@functools.lru_cache(maxsize=4096)
def classify(name: str) -> str:
    """The op class of ATen op ``name`` (see the module docstring)."""
    op = _bare(name)
    base = op.rstrip("_")
    if op in MATMUL or base in MATMUL or op in RNN_LAYERS:
        return "matmul"
    if "conv" in op and "convert" not in op:
        return "conv"
    if any(m in op for m in ATTENTION_MARKS):
        return "attention"
    if not op.startswith("normal") and any(m in op for m in NORM_MARKS):
        return "normalization"
    if op in ELEMENTWISE or base in ELEMENTWISE or op.startswith("_foreach_") or op.startswith("_fused_adam"):
        return "elementwise"
    if _is_pointwise(op):
        return "elementwise"
    return "other"


@functools.lru_cache(maxsize=4096)
def _is_pointwise(op: str) -> bool:
    try:
        import torch

        packet = getattr(torch.ops.aten, op)
        return any(torch.Tag.pointwise in getattr(packet, ov).tags for ov in packet.overloads())
    except Exception:  # not an aten op (a profiler range, a custom op): not known to be pointwise
        return False
