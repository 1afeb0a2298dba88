"""torch.profiler over cloudfit's own LLM training step (``cloudfit.train_llm``: the same model, FSDP2 wrapping,
AdamW and step function its trainer runs), on one GPU: where a step's time goes, eager and with each block under
``torch.compile``.

Usage (on a GPU machine): ``python bench/device/llm_step_profile.py --shape llama3-1b --seq-len 2048
--micro-batch 2 --ac selective --out DIR [--compile]``. On a CPU it runs a shrunk model (a check of the script).
Writes ``DIR/llm_step_<variant>.json`` (step times, the kernel time per class, the top kernels) and
``DIR/llm_step_<variant>.txt`` (torch.profiler's table); prints one summary line per variant.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

#: kernel name → class, first match wins (CUDA kernel names of cuBLAS/CUTLASS, flash attention, NCCL, foreach)
CLASSES = (
    ("loss", re.compile(r"SoftMax|log_softmax|nll_loss|cross_entropy", re.I)),  # the 128K-vocabulary loss
    ("attention", re.compile(r"flash|fmha|attention|sdpa", re.I)),
    ("matmul", re.compile(r"gemm|sm90_xmma|sm80_xmma|cutlass|cublas|nvjet|matmul|wgmma", re.I)),
    ("nccl", re.compile(r"nccl", re.I)),
    ("optimizer", re.compile(r"multi_tensor|adam|foreach|_amp_", re.I)),
    ("copy/cast", re.compile(r"copy|memcpy|memset|cast|to_copy|convert", re.I)),
    ("norm", re.compile(r"norm|rsqrt", re.I)),
)
#: GPU-timeline ranges that are annotations, not kernels (torch.profiler puts ``Optimizer.step#AdamW.step`` on the
#: device timeline too: counted, it doubles the optimizer's time)
ANNOTATION = re.compile(r"#|^FSDP::|^ProfilerStep")


def classify(name: str) -> str:
    for cls, pat in CLASSES:
        if pat.search(name):
            return cls
    return "elementwise/other"


def build(argv: list[str]):
    """The trainer's own job (``cloudfit.train_llm``: ``--compile`` compiles each block before FSDP2 wraps it)."""
    from cloudfit import train_llm
    from cloudfit.runtime.ranks import join

    a = train_llm.parse_args(argv)
    r = join()
    return a, r, train_llm.FAMILY.build(a, r)


def run(args: argparse.Namespace, compiled: bool) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    tmp = tempfile.mkdtemp(prefix="llmprof")
    argv = ["--steps", "1000", "--checkpoint-dir", tmp, "--seq-len", str(args.seq_len),
            "--micro-batch", str(args.micro_batch), "--ac", args.ac]
    argv += ["--shape", args.shape, "--precision", "bf16"] if cuda else \
        ["--shape", args.shape, "--shrink", "--layers", "2", "--precision", "fp32"]
    a, r, job = build(argv + (["--compile"] if compiled else []))
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    t0 = time.perf_counter()
    step = 0
    for _ in range(args.warmup):
        job.step(step)
        step += 1
    sync()
    warm_s = time.perf_counter() - t0
    times = []
    for _ in range(args.steps):
        t = time.perf_counter()
        job.step(step)
        sync()
        times.append(time.perf_counter() - t)
        step += 1
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        t = time.perf_counter()
        for _ in range(args.profile_steps):
            job.step(step)
            step += 1
        sync()
        prof_wall = time.perf_counter() - t
    events = prof.key_averages()
    dev = "self_device_time_total" if cuda else "self_cpu_time_total"
    kernels: dict[str, float] = {}
    if cuda:
        for e in prof.events():  # device-side kernels only: what the GPU was busy with
            if str(getattr(e, "device_type", "")).endswith("CUDA") and not ANNOTATION.search(e.name):
                kernels[e.name] = kernels.get(e.name, 0.0) + (e.time_range.end - e.time_range.start)  # µs
    by_class: dict[str, float] = {}
    for name, us in kernels.items():
        by_class[classify(name)] = by_class.get(classify(name), 0.0) + us
    busy_us = sum(kernels.values())
    cfg = a.model_config
    tokens = job.tokens_per_step
    med = sorted(times)[len(times) // 2]
    # 6·N·tokens for the dense weights (+ the recompute of selective AC is not counted: model FLOPs, as MFU is)
    n_params = cfg.parameters()
    attn = 12 * cfg.layers * cfg.dim * a.seq_len * tokens // 2  # causal: half of 12·L·d·s per token
    flops = 6 * n_params * tokens + attn
    peak = {"H100": 989e12, "H200": 989e12, "A100": 312e12}.get(_gpu(), None) if cuda else None
    out = {
        "variant": "compile" if compiled else "eager", "shape": args.shape if cuda else f"{args.shape} (shrunk)",
        "gpu": _gpu() if cuda else "cpu", "torch": torch.__version__, "seq_len": a.seq_len,
        "micro_batch": args.micro_batch, "ac": args.ac, "tokens_per_step": tokens, "parameters": n_params,
        "warmup_s": round(warm_s, 2), "step_s": [round(x, 4) for x in times], "step_median_s": round(med, 4),
        "tokens_per_second": round(tokens / med, 1), "model_flops_per_step": flops,
        "mfu": None if not peak else round(flops / med / peak, 4),
        "profiled_steps": args.profile_steps, "profiled_wall_s": round(prof_wall, 4),
        "gpu_busy_fraction": None if not cuda else round(busy_us / 1e6 / prof_wall, 4),
        "kernel_s_per_step_by_class": {k: round(v / 1e6 / args.profile_steps, 5)
                                       for k, v in sorted(by_class.items(), key=lambda kv: -kv[1])},
        "top_kernels": [{"name": n[:120], "s_per_step": round(us / 1e6 / args.profile_steps, 5)}
                        for n, us in sorted(kernels.items(), key=lambda kv: -kv[1])[:25]],
        "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
    }
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / f"llm_step_{out['variant']}.json").write_text(json.dumps(out, indent=1))
    (outdir / f"llm_step_{out['variant']}.txt").write_text(events.table(sort_by=dev, row_limit=40, max_name_column_width=70))
    return out


def _gpu() -> str:
    import torch

    name = torch.cuda.get_device_name(0)
    for k in ("H200", "H100", "A100"):
        if k in name:
            return k
    return name


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="llama3-1b")
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--ac", default="selective")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--profile-steps", type=int, default=3)
    p.add_argument("--compile", action="store_true", help="each block under torch.compile (else eager)")
    p.add_argument("--out", default="llm_profile")
    args = p.parse_args()
    o = run(args, args.compile)
    print(f"{o['variant']}: {o['shape']} on {o['gpu']} seq {o['seq_len']} mb {o['micro_batch']} ac {o['ac']}: "
          f"step {o['step_median_s']} s, {o['tokens_per_second']:,.0f} tokens/s, MFU {o['mfu']}, GPU busy "
          f"{o['gpu_busy_fraction']}, peak {o['peak_memory_gib']} GiB, warm-up {o['warmup_s']} s; per step by class: "
          + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in o["kernel_s_per_step_by_class"].items()), flush=True)
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
