"""Device-independent model statistics, counted without doing the arithmetic.

One training step (forward, loss, backward; no optimizer) runs under ``FakeTensorMode``: tensors carry
shapes, dtypes and strides but no data, so bert-large or gpt2-medium at full batch take seconds and no
memory. A ``TorchDispatchMode`` above it sees every ATen op and records, per op class
(:mod:`cloudfit.profiling.opclass`) and per phase (forward / backward):

* FLOPs: matmul, conv and attention ops by PyTorch's formulas (``torch.utils.flop_counter``) — a
  multiply-add counts as 2 FLOPs, as accelerator peak TFLOPS do. Pointwise and normalisation ops count
  one FLOP per output element (an estimate; they are bound by memory traffic, not arithmetic). Other ops
  (copies, gathers, pooling, losses) count none.
* bytes moved: every input and output tensor an op touches, read or written once (views and metadata
  ops move nothing; a gather/embedding reads only the rows it returns).

``scaled_dot_product_attention`` is counted as the fused memory-efficient kernel a GPU runs (see
:func:`_fused_attention`), never materialising the L×L score matrix. Saved activations are the distinct
storages autograd keeps for backward (parameters excluded), at fp32. A model whose forward needs real
values (``.item()``, data-dependent shapes) cannot be counted this way and gets a ProfileError.

``ModelStats.flops_per_sample`` is the matmul + conv + attention FLOPs of forward + backward per sample
(what papers quote and what peak TFLOPS price); ``op_classes`` adds the memory-bound classes with their
bytes. All per-sample numbers are totals at ``batch_size`` divided by ``batch_size``.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

from cloudfit.errors import ProfileError
from cloudfit.profiling.opclass import TENSOR_CLASSES, classify
from cloudfit.errors import one_line
from cloudfit.profiling.zoo import ZooModel
from cloudfit.types import OP_CLASSES, ModelStats, OpClassStats

# Ops that only allocate (no kernel runs): not counted in ``kernels_per_step``.
_ALLOCATIONS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                          "_local_scalar_dense"})
# Ops that index into a larger tensor: they read about as many bytes as they return, not the whole input.
_GATHERS = frozenset({"embedding", "index_select", "gather", "index", "take", "_embedding_bag"})


def model_stats(zm: ZooModel, batch_size: int | None = None) -> ModelStats:
    """Parameters, FLOPs, gradient bytes, activation bytes and op-class split of one training step."""
    b = zm.default_batch_size if batch_size is None else batch_size
    if isinstance(b, bool) or not isinstance(b, int) or b < 1:
        raise ProfileError(f"batch size must be a positive integer, got {b!r}")
    params = list(zm.model.parameters())  # unique: tied weights count once
    n_params = sum(p.numel() for p in params)
    trainable = sum(p.numel() for p in params if p.requires_grad)
    if n_params == 0:
        raise ProfileError(f"{zm.name} has no parameters to train")
    try:
        counter, saved_bytes = _count_fake(zm, b)
    except ProfileError:
        raise
    except Exception as e:  # an op with no fake kernel, or data-dependent Python control flow
        raise ProfileError(f"cannot count {zm.name} without running it ({type(e).__name__}: {one_line(e)}); "
                           "make the model's forward free of .item()/data-dependent shapes") from e
    fwd_tensor = sum(counter.flops["forward"][c] for c in TENSOR_CLASSES)
    total_tensor = fwd_tensor + sum(counter.flops["backward"][c] for c in TENSOR_CLASSES)
    if total_tensor <= 0:
        raise ProfileError(f"{zm.name}: counted no matmul/conv/attention FLOPs in a training step")
    op_classes = {
        c: OpClassStats(flops=(counter.flops["forward"][c] + counter.flops["backward"][c]) / b,
                        bytes=(counter.bytes["forward"][c] + counter.bytes["backward"][c]) / b)
        for c in OP_CLASSES
    }
    return ModelStats(
        parameters=n_params,
        flops_per_sample=total_tensor / b,
        forward_flops_per_sample=fwd_tensor / b,
        gradient_bytes=4 * trainable,
        activation_bytes_per_sample=saved_bytes / b,
        op_classes=op_classes,
        batch_size=b,
        input=zm.input,
        task=zm.task,
        kernels_per_step=counter.kernels,
    )


def _count_fake(zm: ZooModel, batch_size: int):
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    model = zm.model
    was_training = model.training
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    with fake_mode:
        swaps: dict[str, Any] = {}
        for name, p in model.named_parameters():
            swaps[name] = torch.empty(p.shape, dtype=p.dtype, device="cpu").requires_grad_(p.requires_grad)
        for name, buf in model.named_buffers():
            swaps[name] = torch.empty(buf.shape, dtype=buf.dtype, device="cpu")
    counter = _Counter()
    saved = _SavedActivations()
    from torch.nn.utils.stateless import _reparametrize_module

    model.train()
    try:
        with fake_mode, _reparametrize_module(model, swaps, tie_weights=True), _fused_attention():
            saved.exclude(list(model.parameters()) + list(model.buffers()))
            try:
                batch = zm.make_batch(batch_size, "cpu")
            except Exception as e:  # a user's make_batch: say which function failed, not the forward's rules
                raise ProfileError(f"{zm.name}: make_batch(batch_size, device) failed "
                                   f"({type(e).__name__}: {one_line(e)})") from e
            with counter:
                with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
                    loss = zm.loss(model, batch)
                if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                    raise ProfileError(f"{zm.name}: loss(model, batch) must return a scalar tensor")
                if not loss.requires_grad:
                    raise ProfileError(f"{zm.name}: the loss does not depend on any trainable parameter")
                counter.phase = "backward"
                loss.backward()
    finally:
        model.train(was_training)
    return counter, saved.total


class _SavedActivations:
    """saved_tensors_hooks that add up the distinct storages autograd keeps for backward."""

    def __init__(self) -> None:
        self._excluded: set[int] = set()
        self._seen: set[int] = set()
        self.total = 0

    def exclude(self, tensors) -> None:
        for t in tensors:
            with contextlib.suppress(Exception):
                self._excluded.add(t.untyped_storage()._cdata)

    def pack(self, t):
        try:
            st = t.untyped_storage()
            key = st._cdata
            if key not in self._excluded and key not in self._seen:
                self._seen.add(key)
                self.total += st.nbytes()
        except Exception:  # sparse / nested tensors: fall back to the logical size
            self.total += t.numel() * t.element_size()
        return t

    @staticmethod
    def unpack(t):
        return t


def _formulas() -> dict:
    import torch
    from torch.utils import flop_counter as fc

    registry = dict(getattr(fc, "flop_registry", None) or getattr(fc, "FLOP_REGISTRY", {}))
    aten = torch.ops.aten

    def cpu_flash(q, k, v, *args, out_val=None, **kwargs):
        return fc.sdpa_flop_count(q.shape, k.shape, v.shape)

    def cpu_flash_backward(grad_out, q, k, v, *args, out_val=None, **kwargs):
        return fc.sdpa_backward_flop_count(grad_out.shape, q.shape, k.shape, v.shape)

    def conv_backward(grad_out, x, w, _bias, _stride, _padding, _dilation, transposed, _out_pad, _groups,
                      output_mask, out_val=None, **kwargs):
        # Each of grad-input and grad-weight costs what the forward conv does. (torch's own formula
        # ignores groups for grad-weight, overcounting depthwise convs by the channel count.)
        spatial = (x.shape if transposed else grad_out.shape)[2:]
        forward = 2 * x.shape[0] * math.prod(spatial) * math.prod(w.shape)
        return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))

    registry[aten.convolution_backward] = conv_backward
    # The CPU fused attention kernels are missing from torch's table; same arithmetic as the GPU ones.
    if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu"):
        registry.setdefault(aten._scaled_dot_product_flash_attention_for_cpu, cpu_flash)
        registry.setdefault(aten._scaled_dot_product_flash_attention_for_cpu_backward, cpu_flash_backward)
    return registry


@contextlib.contextmanager
def _fused_attention():
    """Route ``F.scaled_dot_product_attention`` to the memory-efficient fused kernel while counting.

    On a GPU, PyTorch runs attention (with dropout, in training) as one fused flash/memory-efficient
    kernel that never stores the L×L score matrix; on a CPU with dropout it falls back to the math
    path, which does. Counting the fused kernel gives GPU-like bytes and saved activations. Callers
    look the function up on ``torch.nn.functional`` at call time (transformers, nn.MultiheadAttention),
    so swapping the attribute reaches them. Anything the fused kernel rejects takes the original path.
    """
    import torch
    import torch.nn.functional as F

    original = F.scaled_dot_product_attention

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        try:
            if query.dim() != 4 or (attn_mask is not None and is_causal):
                raise ValueError("not a fused-kernel call")
            if enable_gqa and key.size(1) != query.size(1):
                rep = query.size(1) // key.size(1)
                key, value = key.repeat_interleave(rep, 1), value.repeat_interleave(rep, 1)
            bias = None
            if attn_mask is not None:
                bias = attn_mask.to(query.dtype) if attn_mask.is_floating_point() else torch.zeros(
                    attn_mask.shape, dtype=query.dtype, device=query.device).masked_fill(~attn_mask, float("-inf"))
                bias = bias.expand(query.size(0), query.size(1), query.size(2), key.size(2))
            return torch.ops.aten._scaled_dot_product_efficient_attention(
                query, key, value, bias, True, dropout_p, is_causal, scale=scale)[0]
        except Exception:
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                            scale=scale, enable_gqa=enable_gqa)

    F.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


def _tensor_bytes(t) -> int:
    """Bytes of memory a tensor spans (a broadcast/expanded tensor is read once, not per element)."""
    n = t.numel()
    if n == 0:
        return 0
    try:
        span = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if st > 0)
        return min(n, span) * t.element_size()
    except Exception:
        return n * t.element_size()


def _make_counter_cls():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    formulas = _formulas()
    metadata_ops = {torch.ops.prim.device.default, torch.ops.aten.size.default, torch.ops.aten.stride.default,
                    torch.ops.aten.sym_size.default, torch.ops.aten.sym_stride.default,
                    torch.ops.aten.storage_offset.default, torch.ops.aten.sym_storage_offset.default,
                    torch.ops.aten.numel.default, torch.ops.aten.sym_numel.default, torch.ops.aten.dim.default,
                    torch.ops.aten.is_contiguous.default, torch.ops.aten.is_contiguous.memory_format}

    class Counter(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.phase = "forward"
            self.flops = {ph: dict.fromkeys(OP_CLASSES, 0.0) for ph in ("forward", "backward")}
            self.bytes = {ph: dict.fromkeys(OP_CLASSES, 0.0) for ph in ("forward", "backward")}
            self.kernels = 0  # ops that launch work on a device (not views, metadata or allocations)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func in metadata_ops:
                return func(*args, **kwargs)
            packet = func._overloadpacket
            if packet not in formulas:  # a composite op reaching us: count its parts, as FlopCounterMode does
                with self:
                    r = func.decompose(*args, **kwargs)
                if r is not NotImplemented:
                    return r
            out = func(*args, **kwargs)
            if not func.is_view:
                self._record(func, packet, args, kwargs, out)
            return out

        def _record(self, func, packet, args, kwargs, out) -> None:
            outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
            if not outs:
                return
            cls = classify(packet.__name__)
            if packet in formulas:
                flops = float(formulas[packet](*args, **kwargs, out_val=out))
            elif cls in ("elementwise", "normalization"):
                flops = float(sum(t.numel() for t in outs))
            else:
                flops = 0.0
            out_bytes = sum(_tensor_bytes(t) for t in outs)
            if packet.__name__ in _GATHERS:
                ins = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor) and not t.is_floating_point()]
                moved = 2 * out_bytes + sum(_tensor_bytes(t) for t in ins)
            else:
                ins = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
                moved = out_bytes + sum(_tensor_bytes(t) for t in ins)
            self.flops[self.phase][cls] += flops
            self.bytes[self.phase][cls] += moved
            if packet.__name__ not in _ALLOCATIONS:
                self.kernels += 1

    return Counter


_COUNTER_CLS = None


def _Counter():
    global _COUNTER_CLS
    if _COUNTER_CLS is None:
        _COUNTER_CLS = _make_counter_cls()
    return _COUNTER_CLS()
