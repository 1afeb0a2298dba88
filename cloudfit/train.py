"""cloudfit's trainer for the model zoo (and your model): data-parallel (DDP) training on synthetic data.

    torchrun --nproc-per-node 2 -m cloudfit.train --model mlp --steps 500 --checkpoint-dir ckpt

This module is the ``cnn`` family of :mod:`cloudfit.runtime`: it builds the model, wraps it in
DistributedDataParallel (NCCL on GPUs, gloo on CPUs) and runs a step; the runtime does the rest —
resume from the newest checkpoint (DCP folders ``CKPT/step-<9 digits>/``, signed; a checkpoint
whose signature does not verify is refused), checkpoints every ``--checkpoint-interval-s`` seconds
(the Young/Daly interval the plan priced, re-estimated from the measured write with
``--hazard-per-hour``) or every ``--checkpoint-every`` steps, ``--local-checkpoint-dir`` with
background uploads, ``--progress-file`` / ``--metrics-file``, and the stop requests (``--stop-file``,
``--stop-at``, SIGTERM, SIGINT: checkpoint, state ``stopped``; exit codes in :mod:`cloudfit.runtime.loop`).
Run plainly it trains in one process.

Data is synthetic: a fresh random batch each step (seeded by seed, rank and step, so a resumed run
sees the batches it would have seen); with ``--data-pool N`` the batches cycle through N fixed ones
per rank (a finite data set the model can learn: the loss goes down).
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path
from typing import Any

from cloudfit.errors import ProfileError
from cloudfit.runtime import main as run_family
from cloudfit.runtime.checkpoint import complete_checkpoints
from cloudfit.runtime.control import add_shared_args, control_args  # noqa: F401  (re-exported for the launchers)
from cloudfit.runtime.family import BadInput, Job
from cloudfit.runtime.progress import PROGRESS_SCHEMA, write_json_atomic  # noqa: F401
from cloudfit.runtime.ranks import torchrun_env  # noqa: F401

PROG = "cloudfit.train"


def checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every complete checkpoint in ``folder``, newest first."""
    return complete_checkpoints(Path(folder))


def _options(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise BadInput(f"--model-option {pair!r} is not KEY=VALUE")
        low = value.lower()
        out[key] = True if low == "true" else False if low == "false" else int(value) if value.lstrip("-").isdigit() else value
    return out


def build_model(name: str, options: dict[str, Any]):
    from cloudfit.profiling import zoo

    if name.endswith(".py") or ".py:" in name:
        return zoo.load_user_model(name)
    return zoo.build(name, **options)


class CNN:
    """The ``cnn`` family: a zoo (or user) model, replicated with DDP."""

    name, prog = "cnn", PROG
    smoke_args = ["--model", "mlp", "--batch-size", "16", "--data-pool", "2", "--lr", "0.05",
                  "--progress-every-s", "0"]
    smoke_steps = 200  # a few seconds on 2 CPU ranks

    def parser(self) -> argparse.ArgumentParser:
        from cloudfit.runtime.loop import Parser

        p = Parser(prog=f"python -m {PROG}", description=__doc__.split("\n\n")[0])
        p.add_argument("--model", required=True, help="zoo model name, or path/to/file.py:factory")
        p.add_argument("--model-option", action="append", default=[], metavar="KEY=VALUE",
                       help="zoo build option (repeatable), e.g. image_size=32")
        p.add_argument("--batch-size", type=int, default=None, help="batch per rank (default: the model's)")
        p.add_argument("--data-pool", type=int, default=None, help="cycle through N fixed batches per rank")
        p.add_argument("--lr", type=float, default=None)
        p.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "fp16", "bf16"])
        add_shared_args(p, interval_s=600.0, progress_every_s=30.0)
        return p

    def check(self, a: argparse.Namespace) -> argparse.Namespace:
        for k in ("batch_size", "data_pool"):
            if getattr(a, k) is not None and getattr(a, k) < 1:
                raise BadInput(f"--{k.replace('_', '-')} must be ≥ 1 (got {getattr(a, k)})")
        if a.lr is not None and not a.lr > 0:
            raise BadInput(f"--lr must be > 0 (got {a.lr})")
        a.options = _options(a.model_option)
        return a

    def build(self, a: argparse.Namespace, r: Any) -> Job:
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        from cloudfit.profiling.runner import backward_and_step

        if r.cuda and a.precision == "tf32":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        try:
            zm = build_model(a.model, a.options)
        except ProfileError as e:  # a zoo option out of range, a user file that does not load
            raise BadInput(f"--model {a.model}: {e}") from None
        model = DDP(zm.model.to(r.device), device_ids=[r.local_rank] if r.cuda else None)
        batch = a.batch_size or zm.default_batch_size
        if zm.optimizer == "adamw":
            opt = torch.optim.AdamW(model.parameters(), lr=a.lr or 1e-4)
        else:
            opt = torch.optim.SGD(model.parameters(), lr=a.lr or 0.01, momentum=0.9)
        amp = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.precision) if r.cuda else None
        scaler = torch.amp.GradScaler("cuda") if amp == torch.float16 else None

        def step(i: int) -> float:
            draw = i % a.data_pool if a.data_pool else i
            torch.manual_seed(a.seed * 1_000_003 + r.rank * 7919 + draw)  # the same data after a resume
            data = zm.make_batch(batch, r.device)
            with torch.autocast(r.device.type, dtype=amp, enabled=amp is not None):
                loss = zm.loss(model, data)
            opt.zero_grad(set_to_none=True)
            backward_and_step(loss, opt, scaler)
            return float(loss.detach()) / r.world

        def eval_loss() -> float:
            """The loss on one fixed batch (the same on every rank): equal at a save and at its resume."""
            torch.manual_seed(a.seed + 1)
            data = zm.make_batch(batch, r.device)
            model.eval()
            with torch.no_grad():
                loss = float(zm.loss(model, data))
            model.train()
            return loss

        return Job(model=model, optimizer=opt, step=step, samples_per_step=batch * r.world, eval_loss=eval_loss,
                   describe={"model": zm.name, "batch_size_per_rank": batch}, marker={"model_name": zm.name},
                   check_resume=_same_model(zm.name))


def _same_model(name: str):
    def check(marker: dict[str, Any], path: Path) -> None:
        if marker.get("model_name") not in (None, name):
            raise BadInput(f"{path} holds model {marker.get('model_name')}, not {name}: use another --checkpoint-dir")
    return check


FAMILY = CNN()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The trainer's arguments, checked (:class:`BadInput` when wrong)."""
    from cloudfit.runtime.loop import parse

    return parse(FAMILY, argv)


main = partial(run_family, FAMILY)  # main(argv=None) → exit code


if __name__ == "__main__":
    sys.exit(main())
