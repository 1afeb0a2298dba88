"""The flags every family shares, the checkpoint cadence, and the stop signals.

Checkpoints come every ``--checkpoint-every`` steps and/or every ``--checkpoint-interval-s`` seconds
of training (the Young/Daly interval the plan priced; rank 0's clock, the ranks agree each step).
With ``--hazard-per-hour`` (the cluster's revocation rate) the interval is re-estimated after each
write from the write time measured (``cloudfit.spot.checkpointing.young_daly_s``). A checkpoint is
also taken at a stop request and at the end.

A stop request is ``--stop-file`` appearing (the launcher's budget guard), ``--stop-at`` (a Unix
time: the launch's time limit) passing, or a SIGTERM or SIGINT reaching any rank: the ranks agree at
the next step (the per-step all-reduce, so every rank stops at the same step), checkpoint, and end
with state ``stopped`` and ``stop_reason`` ``stop-file``, ``stop-at``, ``sigterm`` or ``sigint``.

Signals. SIGTERM is how a machine is taken away: SkyPilot's ``sky cancel``/``sky down``, a GCP spot
preemption (systemd's SIGTERM in the ~30 s before the VM stops), ``docker stop``, Kubernetes; torchrun's
agent, on SIGTERM/SIGINT/SIGHUP/SIGQUIT, sends the same signal to its workers (each in its own session)
and SIGKILLs them 30 s later. SIGINT (Ctrl-C; torchrun forwards it too) is handled the same way, so an
interrupted run keeps its work. The handler only records the signal (a Python handler runs between
bytecodes in the main thread: no I/O there); the loop sees it at the step boundary. A repeated SIGTERM
is the same request — under a cgroup-wide kill (systemd, ``sky cancel``) a worker gets it twice, once
directly and once forwarded by torchrun — and is ignored: the stop is one step plus one checkpoint
away. A second SIGINT (a person pressing Ctrl-C again) raises ``KeyboardInterrupt`` at once. Neither a
second signal nor the SIGKILL that follows can corrupt a checkpoint: the shards of a step go into
their own folder, and the signed ``COMPLETE.json`` is written last, atomically, after every rank's
files are in place; a folder without it is ignored on resume and pruned later. The handlers are
installed once the process group is joined and restored when the run ends (not in a non-main thread,
where Python cannot install them) — except that after a SIGTERM stop, SIGTERM stays ignored while the
process leaves (a repeat must not turn exit 143 into a death by the signal).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from cloudfit.runtime.family import BadInput

#: Exit codes of a trainer run as a plain process: 0 completed, 2 bad input (or a checkpoint that does
#: not verify), 4 stopped by the stop file, 5 stopped by ``--stop-at``, 143 stopped by SIGTERM and 130
#: by SIGINT (checkpoint written). 143 = 128 + 15 and 130 = 128 + 2 are the shell's codes for "ended by
#: that signal": a supervisor (SkyPilot, Kubernetes, systemd, a CI runner) reads them as "terminated",
#: not "failed" nor "finished", which is true — the run was told to go and left a checkpoint to resume
#: from; they cannot be confused with the launcher's 1–5. Under torchrun a stopped rank exits 0 whatever
#: the reason (torchrun restarts a worker group whose rank exits non-zero; an agent that was itself
#: signalled exits 0 under ``cloudfit.runtime.torchrun`` once every worker did, 1 under plain torchrun): the
#: reason is the progress file's ``stop_reason``, which the launcher turns into its own exit code
#: (``cloudfit launch``'s table). Exit 2 is final under ``cloudfit.runtime.torchrun``: never restarted.
EXIT_OK, EXIT_BAD_INPUT, EXIT_BUDGET, EXIT_TIMEOUT = 0, 2, 4, 5
EXIT_SIGINT, EXIT_SIGTERM = 128 + signal.SIGINT, 128 + signal.SIGTERM
STOP_EXIT = {"stop-file": EXIT_BUDGET, "stop-at": EXIT_TIMEOUT, "sigterm": EXIT_SIGTERM, "sigint": EXIT_SIGINT}
#: The signals that become a stop request, and their ``stop_reason``.
STOP_SIGNALS = {signal.SIGTERM: "sigterm", signal.SIGINT: "sigint"}
#: The stop reasons in the order they win when the ranks saw different ones (a machine going away first).
STOP_REASONS = ("sigterm", "sigint", "stop-file", "stop-at")


def control_args(progress_file: str | None, stop_file: str | None, stop_at: float | None) -> list[str]:
    """The progress and stop flags every trainer takes (``--progress-file``, ``--stop-file``, ``--stop-at``)."""
    args = ["--progress-file", progress_file] if progress_file else []
    if stop_file:
        args += ["--stop-file", stop_file]
    if stop_at is not None:
        args += ["--stop-at", f"{stop_at:.0f}"]
    return args


def add_shared_args(p: argparse.ArgumentParser, *, interval_s: float | None, progress_every_s: float) -> None:
    """Add the runtime's flags to a family's parser (``interval_s``, ``progress_every_s``: its defaults)."""
    c = p.add_argument_group("checkpoints, progress and stopping (every family)")
    c.add_argument("--steps", type=int, required=True, help="total optimizer steps (across restarts)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--checkpoint-dir", default=os.environ.get("CLOUDFIT_CHECKPOINT_DIR"),
                   required="CLOUDFIT_CHECKPOINT_DIR" not in os.environ,
                   help="shared by all ranks (default: $CLOUDFIT_CHECKPOINT_DIR)")
    c.add_argument("--checkpoint-every", type=int, default=None, help="steps between checkpoints")
    c.add_argument("--checkpoint-interval-s", type=float, default=interval_s,
                   help="seconds of training between checkpoints (the plan's Young/Daly interval)")
    c.add_argument("--hazard-per-hour", type=float, default=0.0,
                   help="cluster revocation rate: re-estimate the interval from each measured write (0: keep it)")
    c.add_argument("--local-checkpoint-dir", default=os.environ.get("CLOUDFIT_LOCAL_CHECKPOINT_DIR"),
                   help="write here first, then upload to --checkpoint-dir in the background")
    c.add_argument("--keep", type=int, default=2, help="complete checkpoints kept")
    c.add_argument("--progress-file", default=os.environ.get("CLOUDFIT_PROGRESS_FILE"),
                   help="default: $CLOUDFIT_PROGRESS_FILE, else CHECKPOINT_DIR/progress.json")
    c.add_argument("--progress-every-s", "--progress-interval-s", dest="progress_every_s", type=float,
                   default=progress_every_s, help="write the progress file at most this often")
    c.add_argument("--metrics-file", default=None, help="JSON lines, one per step (rank 0)")
    c.add_argument("--stop-file", default=os.environ.get("CLOUDFIT_STOP_FILE"),
                   help="stop gracefully when this file exists (default: $CLOUDFIT_STOP_FILE)")
    c.add_argument("--stop-at", type=float, default=None, help="stop gracefully at this Unix time")


def check_shared_args(a: argparse.Namespace) -> None:
    for k in ("steps", "keep"):
        if getattr(a, k) < 1:
            raise BadInput(f"--{k} must be ≥ 1 (got {getattr(a, k)})")
    if a.checkpoint_every is not None and a.checkpoint_every < 1:
        raise BadInput(f"--checkpoint-every must be ≥ 1 (got {a.checkpoint_every})")
    if a.checkpoint_interval_s is not None and not a.checkpoint_interval_s > 0:
        raise BadInput(f"--checkpoint-interval-s must be > 0 (got {a.checkpoint_interval_s})")
    if not (a.progress_every_s >= 0 and a.hazard_per_hour >= 0 and math.isfinite(a.hazard_per_hour)):
        raise BadInput("--progress-every-s and --hazard-per-hour must be ≥ 0")
    if a.stop_at is not None and not math.isfinite(a.stop_at):
        raise BadInput(f"--stop-at must be a Unix time (got {a.stop_at})")


class Cadence:
    """When to checkpoint: every K steps and/or every ``interval_s`` seconds of training."""

    def __init__(self, a: argparse.Namespace) -> None:
        self.every, self.hazard = a.checkpoint_every, a.hazard_per_hour
        self.interval_s = a.checkpoint_interval_s
        self.last = time.monotonic()

    def by_clock(self) -> bool:
        """Rank 0's opinion (the ranks agree on it): the interval has passed since the last write."""
        return self.interval_s is not None and time.monotonic() - self.last >= self.interval_s

    def by_step(self, step: int) -> bool:
        return bool(self.every) and step % self.every == 0

    def written(self, write_s: float) -> None:
        from cloudfit.spot.checkpointing import young_daly_s

        if self.interval_s is not None and not self.every and self.hazard > 0:
            self.interval_s = young_daly_s(self.hazard, write_s)  # re-estimated from the measured write
        self.last = time.monotonic()

    def fields(self) -> dict[str, Any]:
        return {"checkpoint_interval_s": None if self.interval_s is None else round(self.interval_s, 3)}


class Stop:
    """The stop requests this rank sees: a SIGTERM or SIGINT caught, ``--stop-file`` exists, ``--stop-at`` passed."""

    def __init__(self, a: argparse.Namespace) -> None:
        self.file = Path(a.stop_file) if a.stop_file else None
        self.at = a.stop_at
        self.signal: int | None = None  # the first stop signal caught
        self._saved: dict[int, Any] = {}

    def catch_signals(self) -> None:
        """Turn SIGTERM and SIGINT into a stop request (main thread only; :meth:`release_signals` undoes it)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in STOP_SIGNALS:
            self._saved[sig] = signal.signal(sig, self._caught)

    def release_signals(self, *, leaving: bool = False) -> None:
        """Put back the handlers :meth:`catch_signals` replaced. ``leaving``: the process exits next (the
        trainer is its ``python -m`` entry) — then, once a SIGTERM stopped the run, SIGTERM stays ignored:
        the checkpoint is written, and a repeat arriving in the teardown must not turn the exit code into a
        death by the signal. A caller that goes on (a test, a notebook) gets its own handlers back."""
        while self._saved:
            sig, old = self._saved.popitem()
            stopping = leaving and sig == signal.SIGTERM and self.signal == signal.SIGTERM
            signal.signal(sig, signal.SIG_IGN if stopping else old)

    def _caught(self, signum: int, frame: Any) -> None:
        # Only records it (no I/O, no lock): the loop acts at the next step boundary.
        if self.signal is None:
            self.signal = signum
        elif signum == signal.SIGINT:  # Ctrl-C again: out at once (a torn checkpoint has no marker)
            raise KeyboardInterrupt
        # a repeated SIGTERM is the same request (delivered twice under a cgroup-wide kill): nothing to do

    def reason(self) -> str | None:
        if self.signal is not None:
            return STOP_SIGNALS[self.signal]
        if self.file is not None and self.file.exists():
            return "stop-file"
        if self.at is not None and time.time() >= self.at:
            return "stop-at"
        return None
