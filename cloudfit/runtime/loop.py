"""The training loop every family shares.

``main(family, argv)``: parse (the family's flags and the shared ones), join the ranks, build the
family's job, resume from the newest checkpoint (verified, re-sharded), then step: after every step
one small all-reduce carries the mean loss and the ranks' agreement on stopping, checkpointing and
pending uploads. Checkpoint at the cadence, at a stop request and at the end; write progress and
metrics lines; leave. A stop request is the stop file, ``--stop-at``, or a SIGTERM/SIGINT on any rank
(:mod:`cloudfit.runtime.control`): every rank stops at the same step, after a verified checkpoint.

Exit codes: 0 (completed; and any stop under torchrun, the reason in the progress file), 2 (bad
input, a checkpoint that does not verify), 4/5 (a plain process stopped by the stop file /
``--stop-at``), 143/130 (a plain process stopped by SIGTERM / SIGINT: 128 + the signal, the shell's
"terminated by it", which supervisors such as SkyPilot treat as a kill, not a failure; the checkpoint
is written). Why: :data:`cloudfit.runtime.control.STOP_EXIT`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from cloudfit.runtime import control, integrity
from cloudfit.runtime.checkpoint import Store
from cloudfit.runtime.family import BadInput, Family
from cloudfit.runtime.progress import Progress, Rate


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit 2 (raised as :class:`BadInput`)."""

    def error(self, message: str) -> None:
        raise BadInput(message)


def parse(family: Family, argv: list[str] | None) -> argparse.Namespace:
    a = family.parser().parse_args(argv)
    control.check_shared_args(a)
    return family.check(a)


def main(family: Family, argv: list[str] | None = None) -> int:
    import faulthandler

    try:  # a rank that dies of a signal (e.g. SIGSEGV in a collective) leaves its Python stacks in the log
        faulthandler.enable()
    except (OSError, ValueError):  # stderr is no file (captured, in a notebook)
        pass
    rank = int(os.environ.get("RANK", 0))
    args = None
    try:
        args = parse(family, argv)
        key = integrity.checkpoint_key()
        # argv None: the process's own command line — it leaves when this returns (see Stop.release_signals)
        return _Run(family, args, key, leaving=argv is None).run()
    except BadInput as e:
        said = f"{family.prog}: {e}"
        e.__traceback__ = e.__context__ = None  # drop the failed run's frames: its model holds the process group
    import gc

    gc.collect()  # free that model (and DDP's reducer) while the group lives: freed after it, gloo's teardown can hang
    if rank == 0:
        print(said, file=sys.stderr, flush=True)
        _refused(said, args)
    _abandon_group()
    from cloudfit.runtime.ranks import exit_now, torchrun_env

    if torchrun_env()[0]:  # under torchrun: exit 2, not a SIGABRT in the teardown
        exit_now(control.EXIT_BAD_INPUT)
    return control.EXIT_BAD_INPUT


def _refused(said: str, args: argparse.Namespace | None) -> None:
    """Rank 0 records the refusal in the progress file (state ``refused``, ``error`` its one line), where a
    launcher reads why the job ended: a refusal is final, nothing restarts it (``cloudfit.runtime.torchrun``)."""
    import json

    from cloudfit.runtime.progress import PROGRESS_SCHEMA, write_json_atomic

    where = getattr(args, "progress_file", None) or os.environ.get("CLOUDFIT_PROGRESS_FILE")
    ckpt = getattr(args, "checkpoint_dir", None) or os.environ.get("CLOUDFIT_CHECKPOINT_DIR")
    if not where and not ckpt:
        return
    path = Path(where) if where else Path(ckpt) / "progress.json"
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        old = {}
    try:
        write_json_atomic(path, {**(old if isinstance(old, dict) else {}), "schema_version": PROGRESS_SCHEMA,
                                 "state": "refused", "error": said, "updated_at": time.time()})
    except OSError:  # a folder that cannot be written: the line on stderr is all there is
        pass


def _abandon_group() -> None:
    """Leave the process group after a refusal (every rank refuses together: the decisions are collective)."""
    if "torch" in sys.modules:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


class _Run:
    def __init__(self, family: Family, args: argparse.Namespace, key: bytes, *, leaving: bool = False) -> None:
        self.family, self.args, self.key, self.leaving = family, args, key, leaving

    def run(self) -> int:
        import torch

        from cloudfit.runtime.ranks import join, leave

        self.ranks = r = join()
        self._same_key()
        torch.manual_seed(self.args.seed)  # the same initial weights on every rank
        self.job = self.family.build(self.args, r)
        self.store = Store(self.args, r, self.key)
        self.cadence, self.stop = control.Cadence(self.args), control.Stop(self.args)
        self.stop.catch_signals()  # from here on a SIGTERM/SIGINT is a stop request, honoured at a step boundary
        try:
            self._resume()
            try:
                reason = self._loop()
            finally:
                self.progress.close()
        finally:
            self.stop.release_signals(leaving=self.leaving)
        leave(r)
        return control.STOP_EXIT[reason] if reason else control.EXIT_OK

    def _same_key(self) -> None:
        import torch.distributed as dist

        prints: list[Any] = [None] * self.ranks.world
        dist.all_gather_object(prints, integrity.fingerprint(self.key))
        if len(set(prints)) > 1:
            raise BadInput(f"the ranks hold different checkpoint keys: set ${integrity.ENV_KEY} on every node")

    def _resume(self) -> None:
        job, a, r = self.job, self.args, self.ranks
        found = self.store.newest()
        prior: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        t_restore = None
        if found is not None:
            step, path, prior = found
            if job.check_resume is not None:
                job.check_resume(prior, path)
            t0 = time.perf_counter()
            self.store.load(job, path, prior)
            t_restore = time.perf_counter() - t0
            if job.eval_loss is not None:
                extra = {"eval_loss_at_save": prior.get("eval_loss"), "eval_loss_at_resume": job.eval_loss()}
        self.start = int(prior.get("step", 0))
        self.resumes = int(prior.get("resumes", -1)) + 1 if found is not None else 0
        self.seen = {"samples_seen": int(prior.get("samples_seen", 0)), "tokens_seen": int(prior.get("tokens_seen", 0))}
        path = Path(a.progress_file) if a.progress_file else Path(a.checkpoint_dir) / "progress.json"
        self.progress = Progress(path, a.progress_every_s, Path(a.metrics_file) if a.metrics_file else None,
                                 r.rank == 0, {
            "trainer": self.family.prog, **job.describe, "step": self.start, "total_steps": a.steps,
            "world_size": r.world, "device": str(r.device), "restart": r.restart, "resumes": self.resumes,
            "resumed_from_step": self.start, "resumed_from_layout": prior.get("layout"),
            "restore_seconds": t_restore, "checkpoint_step": self.start if found is not None else None,
            "checkpoint_seconds": None, "checkpoint_write_s": None, "checkpoint_bytes": None,
            "samples_per_second": None, "tokens_per_second": None, "loss": None, **self.seen,
            "notes": job.notes, "key_fingerprint": integrity.fingerprint(self.key), **self.cadence.fields(), **extra})

    def _agree(self, loss_share: float) -> tuple[float, str | None, bool, bool]:
        """One all-reduce: the step's mean loss, a stop request (and why), a checkpoint due, an upload busy."""
        import torch
        import torch.distributed as dist

        reason = self.stop.reason()
        due = self.ranks.rank == 0 and self.cadence.by_clock()
        t = torch.tensor([loss_share, due, self.store.busy(), *(reason == r for r in control.STOP_REASONS)],
                         dtype=torch.float64, device=self.ranks.device)
        dist.all_reduce(t)
        v = t.tolist()
        why = next((r for r, n in zip(control.STOP_REASONS, v[3:]) if n > 0), None)  # any rank's: all stop
        return v[0], why, v[1] > 0, v[2] > 0

    def _loop(self) -> str | None:
        job, a, r, p = self.job, self.args, self.ranks, self.progress
        p.report(force=True)
        step, rate = self.start, Rate(self.start)
        reason = None
        sync = (lambda: __import__("torch").cuda.synchronize()) if r.cuda else None
        while step < a.steps:
            share = job.step(step)
            step += 1
            self.seen["samples_seen"] += job.samples_per_step
            self.seen["tokens_seen"] += job.tokens_per_step or 0
            loss, why, due, busy = self._agree(share)
            per_s = rate.per_second(step, job.tokens_per_step or job.samples_per_step, sync)
            p.line(step=step, loss=loss, world_size=r.world, restart=r.restart, resumes=self.resumes, **job.line)
            if job.tokens_per_step:
                speed = {"tokens_per_second": per_s,
                         "samples_per_second": None if per_s is None else per_s * job.samples_per_step / job.tokens_per_step}
            else:
                speed = {"samples_per_second": per_s}
            p.report(step=step, loss=loss, **speed, **self.seen)
            if self.store.pending is not None and not busy:
                self._sealed()
            if why and step < a.steps:
                reason = why
                break
            if step < a.steps and not busy and self.store.pending is None and (due or self.cadence.by_step(step)):
                self._checkpoint(step)
        if self.store.pending is not None:
            self._sealed()
        if p.fields.get("checkpoint_step") != step:
            self._checkpoint(step)
            if self.store.pending is not None:
                self._sealed()
        p.report(force=True, step=step, state="stopped" if reason else "completed", stop_reason=reason)
        return reason

    def _marker(self, step: int) -> dict[str, Any]:
        return {"step": step, "resumes": self.resumes, "world_size": self.ranks.world, **self.seen, **self.job.marker}

    def _checkpoint(self, step: int) -> None:
        self.store.save(self.job, step, self._marker(step))
        if self.store.local is None:
            self._sealed()

    def _sealed(self) -> None:
        ev = self.job.eval_loss() if self.job.eval_loss is not None else None
        step = self.store.seal(ev)
        if step is None:
            self.progress.report(force=True, upload_error=self.store.upload_error)
            return
        write_s = self.store.last_write_s or 0.0
        self.cadence.written(write_s)
        size = self.store.size(step) if self.ranks.rank == 0 else None
        self.progress.report(force=True, checkpoint_step=step, checkpoint_seconds=write_s,
                             checkpoint_write_s=round(write_s, 4), checkpoint_bytes=size, **self.cadence.fields())
