"""cloudfit's own trainer: data-parallel training of a zoo (or your) model on synthetic data.

    torchrun --nproc-per-node 2 -m cloudfit.train --model mlp --steps 500 --checkpoint-dir ckpt

Run under ``torchrun`` (or ``python -m torch.distributed.run``) it joins the process group the
launcher set up (NCCL on GPUs, gloo on CPUs) and wraps the model in DistributedDataParallel; run
plainly it trains in one process.

Checkpoints are time-based: rank 0 writes one every ``--checkpoint-interval-s`` seconds of training,
the Young/Daly interval the plan priced, and after each write re-computes the interval from the
write time it measured and the cluster's revocation rate ``--hazard-per-hour``
(``cloudfit.spot.checkpointing``). ``--checkpoint-every K`` checkpoints every K steps instead.
With ``--local-checkpoint-dir`` (or ``$CLOUDFIT_LOCAL_CHECKPOINT_DIR``) rank 0 writes to local disk
and a background thread uploads the file to ``--checkpoint-dir`` (a bucket mounted on every VM):
no rank waits on FUSE. Files are ``ckpt-<step>.pt``, written atomically, the two newest kept; at
start every rank resumes from the newest readable checkpoint, loaded with ``weights_only=True``
(a file planted in a shared bucket cannot run code). The checkpoint folder must be shared by all
ranks (one machine, or a bucket mounted on every VM).

Stopping early: when ``--stop-file`` appears or ``--stop-at`` (a Unix time) passes, the ranks agree
at the next step, rank 0 checkpoints, and everything exits 0 with state ``stopped`` (0, not an error
code, because torchrun restarts a worker group whose rank exits non-zero; ``cloudfit launch`` turns
the stop into its exit code: 4 for the budget, 5 for the timeout). Rank 0 writes ``--progress-file``
(JSON: step, samples/s, loss, restarts, checkpoint interval, state) at most every
``--progress-every-s`` seconds, and once more at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import threading
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
    p.add_argument("--checkpoint-every", type=int, default=None, help="checkpoint every K steps (default: by time)")
    p.add_argument("--checkpoint-interval-s", type=float, default=600.0,
                   help="seconds of training between checkpoints before the first write is measured")
    p.add_argument("--hazard-per-hour", type=float, default=0.0,
                   help="cluster revocation rate for re-estimating the Young/Daly interval (0: keep the interval)")
    p.add_argument("--local-checkpoint-dir", default=os.environ.get("CLOUDFIT_LOCAL_CHECKPOINT_DIR"),
                   help="write here first, then upload to --checkpoint-dir in the background")
    p.add_argument("--progress-every-s", type=float, default=30.0, help="write the progress file at most this often")
    p.add_argument("--progress-file", default=os.environ.get("CLOUDFIT_PROGRESS_FILE"),
                   help="default: $CLOUDFIT_PROGRESS_FILE, else CHECKPOINT_DIR/progress.json")
    p.add_argument("--stop-file", default=os.environ.get("CLOUDFIT_STOP_FILE"),
                   help="stop gracefully when this file exists (default: $CLOUDFIT_STOP_FILE)")
    p.add_argument("--stop-at", type=float, default=None, help="stop gracefully at this Unix time")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "fp16", "bf16"])
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.steps < 1 or (a.checkpoint_every is not None and a.checkpoint_every < 1) or (
            a.batch_size is not None and a.batch_size < 1):
        p.error("--steps, --checkpoint-every and --batch-size must be positive")
    if not (a.checkpoint_interval_s > 0 and a.progress_every_s >= 0 and a.hazard_per_hour >= 0):
        p.error("--checkpoint-interval-s must be positive, --progress-every-s and --hazard-per-hour non-negative")
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


def load_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint's state, unpickled with ``weights_only=True``: tensors, numbers, strings and
    containers only — a crafted file in a shared bucket cannot run code on the VMs."""
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def newest_readable(folder: Path):
    """``(step, state)`` of the newest checkpoint that loads, or ``(0, None)``."""
    for step, path in checkpoints(folder):
        try:
            return step, load_checkpoint(path)
        except Exception:  # a torn, corrupt or unsafe file: fall back to the one before
            continue
    return 0, None


class Uploader:
    """Copies checkpoints written to local disk into the shared folder on a background thread
    (atomically: a temporary name, then a rename), one at a time; keeps the two newest there."""

    def __init__(self, shared: Path, keep: int = 2) -> None:
        self.shared, self.keep = shared, keep
        self.thread: threading.Thread | None = None
        self.error: str | None = None
        self.last_s: float | None = None  # seconds the last upload took

    def busy(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def start(self, local: Path) -> None:
        self.wait()

        def copy() -> None:
            t0 = time.perf_counter()
            try:
                self.shared.mkdir(parents=True, exist_ok=True)
                tmp = self.shared / f".{local.name}.part"
                shutil.copyfile(local, tmp)
                os.replace(tmp, self.shared / local.name)
                for _, old in checkpoints(self.shared)[self.keep:]:
                    old.unlink(missing_ok=True)
                self.last_s = time.perf_counter() - t0
            except OSError as e:  # the next checkpoint tries again; the error is reported in progress
                self.error = f"upload of {local.name} failed: {e}"

        self.thread = threading.Thread(target=copy, name="cloudfit-upload", daemon=True)
        self.thread.start()

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()
            self.thread = None


# ------------------------------------------------------------------------------ training

def control_args(progress_file: str | None, stop_file: str | None, stop_at: float | None) -> list[str]:
    """The progress and stop flags both trainers take (``--progress-file``, ``--stop-file``, ``--stop-at``)."""
    args = ["--progress-file", progress_file] if progress_file else []
    if stop_file:
        args += ["--stop-file", stop_file]
    if stop_at is not None:
        args += ["--stop-at", f"{stop_at:.0f}"]
    return args


def torchrun_env() -> tuple[bool, int, int, int, int]:
    """(launched by torchrun?, rank, world size, local rank, elastic restart count) from the environment."""
    distributed = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    return (distributed, int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    import torch.distributed as dist

    distributed, rank, world, local_rank, restart = torchrun_env()
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
            state = load_checkpoint(path)
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

    from cloudfit.spot.checkpointing import young_daly_s

    interval_s = float(args.checkpoint_interval_s)
    progress: dict[str, Any] = {
        "schema_version": PROGRESS_SCHEMA, "state": "running", "model": zm.name, "step": start,
        "total_steps": args.steps, "world_size": world, "batch_size_per_rank": batch, "restart": restart,
        "resumed_from_step": resumed_from, "checkpoint_step": start, "samples_per_second": None,
        "loss": None, "samples_seen": samples_seen, "device": str(device),
        "checkpoint_interval_s": None if args.checkpoint_every else interval_s, "checkpoint_write_s": None,
    }
    local_dir = Path(args.local_checkpoint_dir) if args.local_checkpoint_dir else None
    if local_dir is not None and local_dir.resolve() == ckpt_dir.resolve():
        local_dir = None
    uploader = Uploader(ckpt_dir) if local_dir is not None else None
    last_write = time.monotonic()  # training time since the last checkpoint counts from here
    last_report = -float("inf")

    def report(force: bool = False, **kw: Any) -> None:
        nonlocal last_report
        if rank != 0:
            return
        progress.update(kw)
        now = time.monotonic()
        if force or now - last_report >= args.progress_every_s:  # a FUSE write costs: at most every N s
            last_report = now
            progress["updated_at"] = time.time()
            if uploader is not None and uploader.error:
                progress["upload_error"] = uploader.error
            write_json_atomic(progress_path, progress)

    def checkpoint(step: int, final: bool = False) -> None:
        nonlocal interval_s, last_write
        if rank != 0:
            return
        t0 = time.perf_counter()
        state = {"step": step, "model": model.state_dict(), "optimizer": opt.state_dict(),
                 "samples_seen": samples_seen, "world_size": world, "model_name": zm.name}
        if uploader is None:
            save_checkpoint(ckpt_dir, step, state)
            write_s = time.perf_counter() - t0
        else:
            path = save_checkpoint(local_dir, step, state, keep=1)
            uploader.start(path)
            if final:
                uploader.wait()  # the last checkpoint must be in the shared folder before exiting
            # C for Young/Daly: the local write plus the previous upload (what makes a checkpoint durable)
            write_s = time.perf_counter() - t0 + (uploader.last_s or 0.0)
        if not args.checkpoint_every and args.hazard_per_hour > 0:
            interval_s = young_daly_s(args.hazard_per_hour, write_s)  # re-estimated from the measured write
        last_write = time.monotonic()
        progress.update(checkpoint_step=step, checkpoint_write_s=round(write_s, 4),
                        checkpoint_interval_s=None if args.checkpoint_every else round(interval_s, 3))

    report(force=True)
    warm_steps, t_warm, last_sps = 3, None, 0.0
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
        if step < args.steps and (
                step % args.checkpoint_every == 0 if args.checkpoint_every
                else time.monotonic() - last_write >= interval_s and not (uploader and uploader.busy())):
            checkpoint(step)
        now = time.perf_counter()
        if rank == 0 and now - last_sps >= 1.0:
            last_sps = now
            sps = None
            if t_warm is not None and now > t_warm and step - start > warm_steps:
                sps = (step - start - warm_steps) * batch * world / (now - t_warm)
            report(step=step, loss=float(loss.detach()), samples_per_second=sps, samples_seen=samples_seen)

    checkpoint(step, final=True)
    sps = progress.get("samples_per_second")
    if t_warm is not None and step - start > warm_steps:
        sps = (step - start - warm_steps) * batch * world / max(time.perf_counter() - t_warm, 1e-9)
    report(force=True, step=step, state="stopped" if stopped else "completed", samples_per_second=sps,
           samples_seen=samples_seen)
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
