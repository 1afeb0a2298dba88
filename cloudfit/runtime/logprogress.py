"""A stack's log as cloudfit's progress file: what the budget guard and the deadline rule read for a job that is
not cloudfit's trainer (torchtitan, Megatron, Accelerate, a user's command).

cloudfit's own trainers write ``progress.json`` themselves (``cloudfit.runtime.progress``). Another stack only
prints; ``LogProgress`` reads its log lines through the stack's parser (``Stack.parse_line``: ``Progress`` and
``CheckpointSaved`` events) into the same fields — ``step``, ``total_steps``, ``tokens_per_second`` (the whole
job's), ``samples_per_second`` (sequences/s = tokens/s ÷ seq_len), ``loss``, ``memory_gib``, ``mfu``,
``checkpoint_step`` (the newest checkpoint the log reported: the deadline rule counts from it) — so
``cloudfit.executors.deadline.DeadlineWatch`` and ``status`` work unchanged.

Where it runs: in the launcher for the local backend (``LogProgress.read_new`` on every poll of the run's log),
and on a node of a cloud backend as ``python -m cloudfit.runtime.logprogress --stack NAME --log FILE --progress
FILE …`` beside the job (the startup script starts it; the watcher reports the file as before).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from cloudfit.runtime.progress import PROGRESS_SCHEMA, write_json_atomic

#: Bytes of a log read per poll at most (a chatty stack must not stall the launcher's loop).
MAX_READ = 4 * 1024 * 1024


class LogProgress:
    """Progress of one job from its stack's log lines."""

    def __init__(self, stack, *, total_steps: int, gpus: int, seq_len: int | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        # a stack whose lines need the job to give tokens/s (Megatron: step time and batch) reads them bound to it
        self.stack = stack.bind(int(seq_len)) if seq_len and hasattr(stack, "bind") else stack
        self.gpus, self.seq_len = max(1, int(gpus)), seq_len
        self.fields: dict[str, Any] = {"schema_version": PROGRESS_SCHEMA, "state": "running",
                                       "total_steps": int(total_steps), "source": f"log:{stack.name}",
                                       **(extra or {})}
        self.offset = 0
        self.partial = b""
        self.events = 0

    def feed(self, line: str):
        """One log line: the event it held (``Progress`` / ``CheckpointSaved``) or None; the fields updated."""
        from cloudfit.stacks.base import CheckpointSaved, Progress

        try:
            ev = self.stack.parse_line(line)
        except Exception:  # a parser must never take the guard down with it: the line is skipped
            return None
        f = self.fields
        if isinstance(ev, Progress):
            f["step"] = max(int(ev.step), int(f.get("step") or 0)) if "step" in f else int(ev.step)
            tps = ev.job_tokens_per_second(self.gpus)
            if tps:
                f["tokens_per_second"] = float(tps)
                if self.seq_len:
                    f["samples_per_second"] = float(tps) / self.seq_len
            for k in ("loss", "memory_gib", "mfu", "tflops"):
                v = getattr(ev, k)
                if v is not None:
                    f[k] = float(v)
        elif isinstance(ev, CheckpointSaved):  # a step the line does not state: the last step seen
            f["checkpoint_step"] = int(ev.step) if ev.step >= 0 else int(f.get("step") or 0)
            if ev.path:
                f["checkpoint_path"] = str(ev.path)
        if ev is not None:
            self.events += 1
            f["updated_at"] = time.time()
        return ev

    def feed_lines(self, lines) -> dict[str, Any]:
        for line in lines:
            self.feed(line)
        return self.progress()

    def read_new(self, path: str | Path) -> dict[str, Any]:
        """Parse what was appended to ``path`` since the last call (whole lines only) and return the progress."""
        try:
            with open(path, "rb") as fh:
                size = fh.seek(0, 2)
                if size < self.offset:  # truncated / replaced: start over
                    self.offset, self.partial = 0, b""
                fh.seek(self.offset)
                data = fh.read(MAX_READ)
        except OSError:
            return self.progress()
        self.offset += len(data)
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()
        for raw in lines:
            self.feed(raw.decode("utf-8", "replace").rstrip("\r"))
        return self.progress()

    def progress(self) -> dict[str, Any]:
        return dict(self.fields) if self.events else {}

    def finish(self, exit_code: int, stopped: bool) -> dict[str, Any]:
        """The end state: completed (exit 0, all steps), stopped (asked to stop), exited (exit 0 on its own
        before the plan's steps: the command's own step count ended it, not cloudfit), else as it was."""
        f = self.fields
        if stopped:
            f["state"] = "stopped"
        elif exit_code == 0:
            f["state"] = "completed" if int(f.get("step") or 0) >= int(f["total_steps"]) or not self.events else "exited"
        return dict(f)


def main(argv: list[str] | None = None) -> int:
    """Follow a log until the job's process ends (``--pid``) or forever, rewriting the progress file."""
    ap = argparse.ArgumentParser(prog="python -m cloudfit.runtime.logprogress")
    ap.add_argument("--stack", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--progress", required=True)
    ap.add_argument("--total-steps", type=int, required=True)
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--seq-len", type=int, default=None)
    ap.add_argument("--every-s", type=float, default=5.0)
    ap.add_argument("--once", action="store_true", help="parse what is there, write, exit")
    a = ap.parse_args(argv)
    from cloudfit import stacks

    import os

    lp = LogProgress(stacks.get(a.stack), total_steps=a.total_steps, gpus=a.gpus, seq_len=a.seq_len)
    last: dict[str, Any] = {}
    parent = os.getppid()
    while True:
        p = lp.read_new(a.log)
        if p and p != last:
            write_json_atomic(Path(a.progress), p)
            last = p
        if a.once or os.getppid() != parent:  # the startup script that started it is gone: so is the job
            return 0
        time.sleep(a.every_s)


if __name__ == "__main__":  # pragma: no cover - run on the nodes
    raise SystemExit(main())
