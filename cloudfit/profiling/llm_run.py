"""``cloudfit profile run --model llama3-8b``: a short real run of a large model on the device at hand.

It trains what ``cloudfit launch`` trains — the Llama-style decoder of ``cloudfit.llm_model`` (RMSNorm, rotary,
grouped-query ``scaled_dot_product_attention``, SwiGLU), each block wrapped by FSDP2's ``fully_shard`` with the
trainer's mixed-precision policy (bf16 parameters, fp32 reductions) and its activation checkpointing (``ac``:
none | selective | full, ``llm_model``'s own policy) and AdamW as ``cloudfit.train_llm`` sets them up, on random
tokens (the kernels' time does not depend on the token values; importing the trainer here would close an import
cycle, ``tests/test_layering.py``) — at the model's real width, sequence length and micro-batch, with only a
few layers (1–4). It runs twice, 1 layer and ``layers`` layers deep (0 and 1 when ``layers`` is 1: the
embedding and head alone), and times a few steps of each after a warm-up; the difference is one layer:

- ``forward_backward_s``: forward + backward of one layer and one micro-batch;
- ``embedding_head_s``: the rest of forward + backward (embedding, final norm, LM head, loss);
- ``optimizer_s``: AdamW's step over ``layers`` layers (+ embedding and head);
- ``memory_per_layer_gib`` / ``fixed_memory_gib``: the allocator's peak per layer and for the rest (CUDA only).

On a CPU the same code runs at a shrunk width (``llm_model.shrink``: the layer types and ratios of the model,
head size 16) in fp32 — what the tests use; such a profile records the format and the code path, and anchors no
GPU prediction. On CUDA it records the device name and maps it to the catalog's accelerator. Several GPUs are
not used (one process; collective bandwidth is left for a multi-GPU run, not measured here).

Heavy imports (torch) happen inside ``run``.
"""

from __future__ import annotations

import math
import socket
import time
from dataclasses import replace
from typing import Callable

from cloudfit.errors import UsageError

CPU_DEFAULTS = {"seq_len": 256, "micro_batch": 1, "layers": 2, "steps": 5, "warmup": 2}
GPU_DEFAULTS = {"seq_len": 8192, "micro_batch": 1, "layers": 4, "steps": 5, "warmup": 2}
GIB = 1024.0 ** 3


def llama_config(shape, *, shrink: bool, layers: int):
    """``llm_model.LlamaConfig`` of an ``LLMShape`` (``layers`` deep; shrunk in width on a CPU)."""
    from cloudfit import llm_model

    if shape.mlp != "swiglu" or shape.norm != "rms" or shape.bias or shape.learned_positions:
        raise UsageError(f"{shape.name}: profile run trains the Llama-style decoder cloudfit launches (SwiGLU, RMSNorm, "
                         "rotary, no biases); this shape is not one — add a measurement with `profile add` instead")
    cfg = llm_model.LlamaConfig(shape.hidden, layers, shape.heads, shape.kv_heads, shape.vocab, shape.ffn_hidden,
                                tie_embeddings=shape.tied_embeddings, name=shape.name)
    if shrink:
        cfg = llm_model.shrink(cfg, layers=layers, kv_heads=min(2, shape.kv_heads), head_dim=16, vocab=512)
    return cfg


def run_shape(shape, cfg):
    """The ``LLMShape`` that actually ran (width and depth of ``cfg``)."""
    return replace(shape, hidden=cfg.dim, layers=cfg.layers, heads=cfg.heads, kv_heads=cfg.kv_heads,
                   ffn_hidden=cfg.ffn_dim, vocab=cfg.vocab, name=shape.name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _process_group(device) -> bool:
    """A one-rank process group (FSDP2 needs one); True when this call created it."""
    import os

    import torch.distributed as dist

    if dist.is_initialized():
        return False
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(_free_port())
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1)
    return True


def _timed_model(cfg, *, device, seq_len: int, micro_batch: int, ac: str, bf16: bool, steps: int, warmup: int,
                 tick: Callable[[], None]) -> dict:
    """Build ``cfg`` like the trainer (FSDP2 per block, checkpointing, AdamW) and time ``steps`` steps."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from cloudfit import llm_model

    model = llm_model.build(cfg, max_seq_len=seq_len, seed=0, device=device)
    for blk in model.layers.values():
        blk.ac = ac
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
    blocks = list(model.layers.values())
    for i, blk in enumerate(blocks):
        fully_shard(blk, mp_policy=mp, reshard_after_forward=i < len(blocks) - 1)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.0, eps=1e-8)
    gen = torch.Generator().manual_seed(0)
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    fb, op = [], []
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    for step in range(warmup + steps):
        toks = torch.randint(0, cfg.vocab, (micro_batch, seq_len + 1), generator=gen)
        x, y = toks[:, :-1].to(device), toks[:, 1:].to(device)
        sync()
        t0 = time.perf_counter()
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, cfg.vocab), y.reshape(-1))
        loss.backward()
        sync()
        t1 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        t2 = time.perf_counter()
        value = float(loss.detach())
        if not math.isfinite(value):
            raise UsageError(f"profile run: the loss is {value} at step {step}")
        if step >= warmup:
            fb.append(t1 - t0)
            op.append(t2 - t1)
        tick()
    peak = torch.cuda.max_memory_allocated(device) / GIB if cuda else None
    del model, opt
    if cuda:
        torch.cuda.empty_cache()
    return {"fb": sorted(fb)[len(fb) // 2], "opt": sorted(op)[len(op) // 2], "peak_gib": peak}


def gpu_accelerator(raw: str) -> str:
    """The hardware tables' name of a CUDA device (``NVIDIA H100 80GB HBM3`` → ``H100``); UsageError before any
    work when cloudfit has no specs for it (its profile could anchor nothing)."""
    from cloudfit.llm import hardware as lhw
    from cloudfit.profiling.device import canonical_device_name

    name = canonical_device_name(raw)
    try:
        return lhw.get(name).name
    except (KeyError, UsageError):  # UnknownAcceleratorError is both
        raise UsageError(f"profile run: {raw!r} ({name}) is not in cloudfit's GPU tables; its timings could anchor "
                         "no prediction") from None


def _collective_worker(rank: int, n: int, port: int, numel: int, iters: int, cuda: bool, queue) -> None:
    """One rank of ``measure_collectives``: time all-gather and reduce-scatter of a ``numel``-element bf16 buffer
    (each rank's shard numel ÷ n), the medians of ``iters`` after one warm-up; rank 0 reports bus GB/s."""
    import os

    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=n)
    try:
        dtype = torch.bfloat16 if cuda else torch.float32  # gloo reduces bf16 slowly; the bytes are what count
        shard = torch.ones(numel // n, dtype=dtype, device=dev)
        full = torch.empty(shard.numel() * n, dtype=dtype, device=dev)
        sync = torch.cuda.synchronize if cuda else (lambda: None)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        times: dict[str, list[float]] = {"all_gather": [], "reduce_scatter": []}
        for i in range(iters + 1):
            for name, op in (("all_gather", lambda: gather(full, shard)), ("reduce_scatter", lambda: scatter(shard, full))):
                dist.barrier()
                sync()
                t0 = time.perf_counter()
                op()
                sync()
                if i:
                    times[name].append(time.perf_counter() - t0)
        if rank == 0:
            nbytes = full.numel() * full.element_size()
            queue.put({k: (n - 1) / n * nbytes / sorted(v)[len(v) // 2] / 1e9 for k, v in times.items()}
                      | {"ranks": n, "bytes": nbytes})
    finally:
        dist.destroy_process_group()


def measure_collectives(layer_parameters: int, *, ranks: int, cuda: bool, iters: int = 5) -> dict:
    """Bus bandwidth (GB/s) of FSDP's per-layer collectives over ``ranks`` local ranks (GPUs, or gloo ranks on a
    CPU): all-gather of one layer's bf16 weights and reduce-scatter of its gradients, at that layer's size."""
    import torch.multiprocessing as mp

    if ranks < 2:
        raise UsageError(f"--ranks must be at least 2 to time collectives, got {ranks}")
    numel = max(ranks, (layer_parameters // ranks) * ranks)
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_collective_worker, args=(ranks, _free_port(), numel, iters, cuda, queue), nprocs=ranks,
                       start_method="spawn")
    return queue.get()


def check_options(*, layers: int, seq_len: int, micro_batch: int, steps: int, warmup: int, ac: str) -> None:
    if not 1 <= layers <= 4:
        raise UsageError(f"--layers must be 1 to 4 (a few layers of the real width), got {layers}")
    for name, v, lo in (("--seq-len", seq_len, 2), ("--batch-size", micro_batch, 1), ("--steps", steps, 1),
                        ("--warmup", warmup, 0)):
        if v < lo:
            raise UsageError(f"{name} must be at least {lo}, got {v}")
    if ac not in ("none", "selective", "full"):
        raise UsageError(f"--ac must be none, selective or full, got {ac!r}")


def run(shape, *, device: str = "auto", layers: int | None = None, seq_len: int | None = None,
        micro_batch: int | None = None, steps: int | None = None, warmup: int | None = None, ac: str = "selective",
        ranks: int | None = None, progress: Callable[[int, int], None] | None = None):
    """Profile ``shape`` (an ``LLMShape``) on ``device``; returns an ``LLMMeasurement`` with ``layers`` filled.
    ``ranks``: time FSDP's collectives over that many local ranks (default on CUDA: every visible GPU when there
    are several; on a CPU only when asked, over gloo)."""
    import datetime as dt
    import platform

    import torch

    from cloudfit.profiling.device import device_name, select_device
    from cloudfit.types import LLMMeasurement

    dev = select_device(device)
    cuda = dev.type == "cuda"
    accelerator = gpu_accelerator(device_name(dev)) if cuda else "cpu"
    d = GPU_DEFAULTS if cuda else CPU_DEFAULTS
    layers, seq_len, micro_batch = layers or d["layers"], seq_len or d["seq_len"], micro_batch or d["micro_batch"]
    steps, warmup = steps or d["steps"], d["warmup"] if warmup is None else warmup
    check_options(layers=layers, seq_len=seq_len, micro_batch=micro_batch, steps=steps, warmup=warmup, ac=ac)
    bf16 = cuda
    total = 2 * (steps + warmup)  # 1 and ``layers`` layers deep (or 0 and 1)
    done = [0]

    def tick() -> None:
        done[0] += 1
        if progress:
            progress(done[0], total)

    created = _process_group(dev)

    def timed(n: int) -> dict:
        return _timed_model(llama_config(shape, shrink=not cuda, layers=n), device=dev, seq_len=seq_len,
                            micro_batch=micro_batch, ac=ac, bf16=bf16, steps=steps, warmup=warmup, tick=tick)

    try:
        res = {1: _fits(timed, 1, shape, seq_len, micro_batch)}
        while layers > 1:  # as many layers as fit, up to the asked number
            try:
                res[layers] = timed(layers)
                break
            except torch.cuda.OutOfMemoryError:
                torch.cuda.empty_cache()
                layers -= 1
        if layers == 1:  # the embedding and head alone, so that one layer's time is not theirs too
            res[0] = timed(0)
    finally:
        if created:
            import torch.distributed as dist

            dist.destroy_process_group()
    if ranks is None and cuda and torch.cuda.device_count() > 1:
        ranks = torch.cuda.device_count()
    coll = None
    if ranks:
        coll = measure_collectives(llama_config_params(shape, cuda), ranks=ranks, cuda=cuda)
    m = _measurement(shape, res, layers=layers, seq_len=seq_len, micro_batch=micro_batch, steps=steps,
                        warmup=warmup, ac=ac, cuda=cuda, bf16=bf16, dev=dev, LLMMeasurement=LLMMeasurement,
                        names=(device_name(dev), accelerator),
                        torch_version=torch.__version__, host=platform.node(),
                        now=dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat())
    return m if coll is None else replace(m, layers={**m.layers, "collectives_gbs": coll})


def llama_config_params(shape, cuda: bool) -> int:
    """Parameters of one block of the shape that runs (real width on a GPU, shrunk on a CPU)."""
    return llama_config(shape, shrink=not cuda, layers=1).parameters() - llama_config(shape, shrink=not cuda,
                                                                                       layers=0).parameters()


def _fits(timed, n: int, shape, seq_len: int, micro_batch: int) -> dict:
    """``timed(n)``, or one UsageError line when even ``n`` layers do not fit on the GPU."""
    import torch

    try:
        return timed(n)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        raise UsageError(f"profile run: one layer of {shape.name} at seq {seq_len} × micro-batch {micro_batch} does "
                         "not fit on this GPU; lower --seq-len or --batch-size, or use --ac full") from None


def _measurement(shape, res, *, layers, seq_len, micro_batch, steps, warmup, ac, cuda, bf16, dev, LLMMeasurement,
                 names, torch_version, host, now):
    one, deep = res[1], res[layers]
    shallow, n = (res[0], 1) if layers == 1 else (one, layers - 1)  # the runs one ``n`` layers apart
    per_layer = max((deep["fb"] - shallow["fb"]) / n, 1e-9)
    head = max(one["fb"] - per_layer, 0.0)
    mem_layer = mem_fixed = None
    if deep["peak_gib"] is not None:
        mem_layer = max((deep["peak_gib"] - shallow["peak_gib"]) / n, 0.0)
        mem_fixed = max(one["peak_gib"] - mem_layer, 0.0)
    cfg = llama_config(shape, shrink=not cuda, layers=layers)
    step = deep["fb"] + deep["opt"]
    layer_info = {"layers_run": layers, "steps": steps, "warmup": warmup, "forward_backward_s": per_layer,
                  "embedding_head_s": head, "optimizer_s": deep["opt"], "step_s": step,
                  "memory_per_layer_gib": mem_layer, "fixed_memory_gib": mem_fixed, "collectives_gbs": None,
                  "shape": run_shape(shape, cfg).to_dict(), "shrunk": not cuda}
    raw, acc = names
    return LLMMeasurement(
        accelerator=acc, gpus_per_node=1, nodes=1, precision="bf16" if bf16 else "fp32", seq_len=seq_len,
        batch_size=micro_batch, layout=f"mb={micro_batch},ac={ac}", framework="cloudfit",
        tokens_per_second=micro_batch * seq_len / step, memory_gib=deep["peak_gib"], source="measured",
        note=f"cloudfit profile run: {layers} of {shape.layers} layers" + (" at a shrunk width (CPU)" if not cuda else ""),
        layers=layer_info, device_name=raw, torch_version=torch_version, host=host, measured_at=now)
