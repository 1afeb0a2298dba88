"""cloudfit's own trainer: data-parallel training of a zoo (or your) model on synthetic data.

    torchrun --nproc-per-node 2 -m cloudfit.train --model mlp --steps 500 --checkpoint-dir ckpt

Run under ``torchrun`` (or ``python -m torch.distributed.run``) it joins the process group the
launcher set up (NCCL on GPUs, gloo on CPUs) and wraps the model in DistributedDataParallel; run
plainly it trains in one process. Every ``--checkpoint-every`` steps rank 0 writes
``ckpt-<step>.pt`` atomically (the two newest are kept); at start every rank resumes from the
newest readable checkpoint, so a restarted job (a killed rank, a preempted VM) continues where it
stopped. The checkpoint folder must be shared by all ranks (one machine, or a bucket mounted on
every VM).

Stopping early: when ``--stop-file`` appears or ``--stop-at`` (a Unix time) passes, the ranks agree
at the next step, rank 0 checkpoints, and everything exits 0 with state ``stopped``. Rank 0 keeps
``--progress-file`` (JSON) up to date: step, samples/s, loss, restarts, state.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from cloudfit.atomic import atomic_open

PROGRESS_SCHEMA = 1
_CKPT = re.compile(r"^ckpt-(\d{9})\.pt$")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m cloudfit.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="zoo model name, or path/to/file.py:factory")
    p.add_argument("--model-option", action="append", default=[], metavar="KEY=VALUE",
                   help="zoo build option (repeatable), e.g. image_size=32")
    p.add_argument("--steps", type=int, required=True, help="total optimizer steps (across restarts)")
    p.add_argument("--batch-size", type=int, default=None, help="batch per rank (default: the model's)")
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--progress-file", default=os.environ.get("CLOUDFIT_PROGRESS_FILE"),
                   help="default: $CLOUDFIT_PROGRESS_FILE, else CHECKPOINT_DIR/progress.json")
    p.add_argument("--stop-file", default=os.environ.get("CLOUDFIT_STOP_FILE"),
                   help="stop gracefully when this file exists (default: $CLOUDFIT_STOP_FILE)")
    p.add_argument("--stop-at", type=float, default=None, help="stop gracefully at this Unix time")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "fp16", "bf16"])
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.steps < 1 or a.checkpoint_every < 1 or (a.batch_size is not None and a.batch_size < 1):
        p.error("--steps, --checkpoint-every and --batch-size must be positive")
    return a


def _options(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"cloudfit.train: --model-option {pair!r} is not KEY=VALUE")
        low = value.lower()
        out[key] = True if low == "true" else False if low == "false" else int(value) if value.lstrip("-").isdigit() else value
    return out


def build_model(name: str, options: dict[str, Any]):
    from cloudfit.profiling import zoo

    if name.endswith(".py") or ".py:" in name:
        return zoo.load_user_model(name)
    return zoo.build(name, **options)


# ------------------------------------------------------------------------------ files

def write_json_atomic(path: Path, obj: Any) -> None:
    with atomic_open(path) as fh:
        json.dump(obj, fh)


def checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every checkpoint file in ``folder``, newest first."""
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), folder / n) for n in os.listdir(folder) if (m := _CKPT.match(n))]
    return sorted(found, reverse=True)


def save_checkpoint(folder: Path, step: int, state: dict[str, Any], keep: int = 2) -> Path:
    import torch

    path = folder / f"ckpt-{step:09d}.pt"
    with atomic_open(path, "wb") as fh:  # a resuming rank sees the whole checkpoint or none of it
        torch.save(state, fh)
    for _, old in checkpoints(folder)[keep:]:
        old.unlink(missing_ok=True)
    return path


def newest_readable(folder: Path):
    """``(step, state)`` of the newest checkpoint that loads, or ``(0, None)``."""
    import torch

    for step, path in checkpoints(folder):
        try:
            return step, torch.load(path, map_location="cpu", weights_only=False)
        except Exception:  # a torn or corrupt file: fall back to the one before
            continue
    return 0, None


# ------------------------------------------------------------------------------ training

def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    import torch.distributed as dist

    distributed = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        if args.precision == "tf32":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
    else:
        device = torch.device("cpu")
    if distributed:
        dist.init_process_group("nccl" if cuda else "gloo")

    ckpt_dir = Path(args.checkpoint_dir)
    progress_path = Path(args.progress_file) if args.progress_file else ckpt_dir / "progress.json"
    stop_file = Path(args.stop_file) if args.stop_file else None

    torch.manual_seed(args.seed)  # same initial weights on every rank (DDP also broadcasts rank 0's)
    zm = build_model(args.model, _options(args.model_option))
    model = zm.model.to(device)
    batch = args.batch_size or zm.default_batch_size
    if zm.optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr or 1e-4)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=args.lr or 0.01, momentum=0.9)

    # Resume: rank 0 chooses the checkpoint, every rank loads that same file.
    start, state = newest_readable(ckpt_dir) if rank == 0 else (0, None)
    if distributed:
        t = torch.tensor([start], dtype=torch.long, device=device)
        dist.broadcast(t, 0)
        start = int(t.item())
        if rank != 0 and start:
            path = ckpt_dir / f"ckpt-{start:09d}.pt"
            if not path.exists():
                raise SystemExit(f"cloudfit.train: rank {rank} cannot see {path}: the checkpoint folder must be shared")
            state = torch.load(path, map_location="cpu", weights_only=False)
    samples_seen = 0
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        samples_seen = int(state.get("samples_seen", 0))
    resumed_from = start

    from cloudfit.profiling.runner import backward_and_step

    ddp = model
    if distributed:
        from torch.nn.parallel import DistributedDataParallel as DDP

        ddp = DDP(model, device_ids=[local_rank] if cuda else None)
    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(args.precision) if cuda else None
    scaler = torch.amp.GradScaler("cuda") if amp_dtype == torch.float16 else None

    progress: dict[str, Any] = {
        "schema_version": PROGRESS_SCHEMA, "state": "running", "model": zm.name, "step": start,
        "total_steps": args.steps, "world_size": world, "batch_size_per_rank": batch, "restart": restart,
        "resumed_from_step": resumed_from, "checkpoint_step": start, "samples_per_second": None,
        "loss": None, "samples_seen": samples_seen, "device": str(device),
    }

    def report(**kw: Any) -> None:
        if rank == 0:
            progress.update(kw, updated_at=time.time())
            write_json_atomic(progress_path, progress)

    def checkpoint(step: int) -> None:
        if rank == 0:
            save_checkpoint(ckpt_dir, step, {"step": step, "model": model.state_dict(), "optimizer": opt.state_dict(),
                                             "samples_seen": samples_seen, "world_size": world, "model_name": zm.name})
            report(checkpoint_step=step)

    report()
    warm_steps, t_warm, last_report = 3, None, 0.0
    step = start
    stopped = False
    flag = torch.zeros(1, device=device)
    while step < args.steps:
        # Every rank may see a stop request (its own stop file); they agree before stepping.
        want_stop = (stop_file is not None and stop_file.exists()) or (args.stop_at is not None and time.time() >= args.stop_at)
        if distributed:
            flag.fill_(1.0 if want_stop else 0.0)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            want_stop = bool(flag.item())
        if want_stop:
            stopped = True
            break
        torch.manual_seed(args.seed * 1_000_003 + rank * 7919 + step)  # the same data after a resume
        data = zm.make_batch(batch, device)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = zm.loss(ddp, data)
        opt.zero_grad(set_to_none=True)
        backward_and_step(loss, opt, scaler)
        step += 1
        samples_seen += batch * world
        if step - start == warm_steps:
            if cuda:
                torch.cuda.synchronize()
            t_warm = time.perf_counter()
        if step % args.checkpoint_every == 0 and step < args.steps:
            checkpoint(step)
        now = time.perf_counter()
        if rank == 0 and now - last_report >= 1.0:
            last_report = now
            sps = None
            if t_warm is not None and now > t_warm and step - start > warm_steps:
                sps = (step - start - warm_steps) * batch * world / (now - t_warm)
            report(step=step, loss=float(loss.detach()), samples_per_second=sps, samples_seen=samples_seen)

    checkpoint(step)
    sps = progress.get("samples_per_second")
    if t_warm is not None and step - start > warm_steps:
        sps = (step - start - warm_steps) * batch * world / max(time.perf_counter() - t_warm, 1e-9)
    report(step=step, state="stopped" if stopped else "completed", samples_per_second=sps, samples_seen=samples_seen)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
        # gloo's threads sometimes abort during interpreter teardown ("terminate called without an
        # active exception"), which torchrun would count as a failed rank and restart; the work is
        # saved, so leave without running the C++ static destructors.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
