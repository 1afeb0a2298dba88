"""Run a trainer under torchrun (real gloo ranks on CPU) or as one process, and read what it leaves."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from cloudfit import runtime


def _env(extra: dict | None = None) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1", **(extra or {}))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "CLOUDFIT_CHECKPOINT_DIR"):
        env.pop(k, None)
    return env


class Trainer:
    """One family's trainer in ``tmp``: its checkpoints, metrics lines and progress file there."""

    def __init__(self, name: str, tmp: Path, base: list[str] | None = None) -> None:
        self.name, self.tmp = name, tmp
        self.family = runtime.load_family(name)
        self.base = self.family.smoke_args if base is None else base
        self.module = runtime.FAMILIES[name]
        self.ckpt = tmp / "ckpt"

    def argv(self, *args: str) -> list[str]:
        return [*self.base, "--checkpoint-dir", str(self.ckpt), "--metrics-file",
                str(self.tmp / "metrics.jsonl"), "--progress-file", str(self.tmp / "progress.json"), *args]

    def torchrun(self, *args: str, nproc: int = 2, max_restarts: int = 0, env: dict | None = None,
                 launcher: str = "torch.distributed.run") -> subprocess.Popen:
        """The trainer under torchrun (``launcher="cloudfit.runtime.torchrun"``: cloudfit's, as its launches run it)."""
        cmd = [sys.executable, "-m", launcher, "--standalone", f"--nproc-per-node={nproc}",
               f"--max-restarts={max_restarts}", "--monitor-interval=0.2", "-m", self.module, *self.argv(*args)]
        log = open(self.tmp / f"torchrun-{time.monotonic_ns()}.log", "w")
        return subprocess.Popen(cmd, env=_env(env), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def one_process(self, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", self.module, *self.argv(*args)], capture_output=True, text=True,
                              env=_env(env), timeout=240)

    def start(self, *args: str, env: dict | None = None) -> subprocess.Popen:
        """The trainer as one plain process, running (its output in a log :meth:`logs` reads)."""
        log = open(self.tmp / f"process-{time.monotonic_ns()}.log", "w")
        return subprocess.Popen([sys.executable, "-m", self.module, *self.argv(*args)], env=_env(env), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)

    def finish(self, proc: subprocess.Popen, timeout: float = 240) -> int:
        return finish(proc, timeout)

    def logs(self) -> str:
        return logs(self.tmp)

    def metrics(self) -> list[dict]:
        return metrics(self.tmp)

    def progress(self) -> dict:
        return json.loads((self.tmp / "progress.json").read_text())

    def wait_until(self, proc: subprocess.Popen, ok, what: str, timeout: float = 120) -> None:
        """Poll (no fixed sleep) until ``ok()``; fail if the job ends first."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if ok():
                return
            assert proc.poll() is None, f"the job ended before {what}:\n{self.logs()}"
            time.sleep(0.02)
        raise AssertionError(f"no {what} in {timeout} s:\n{self.logs()}")

    def kill_one_rank(self, proc: subprocess.Popen) -> None:
        kill_one_rank(proc, self.module)


def finish(proc: subprocess.Popen, timeout: float = 240) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise


def logs(tmp: Path) -> str:
    """Every torchrun (and plain process) log of the test, whole (a line said early must not fall out of a tail)."""
    return "\n".join(p.read_text() for p in sorted([*tmp.glob("torchrun-*.log"), *tmp.glob("process-*.log")]))


def metrics(tmp: Path) -> list[dict]:
    path = tmp / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def kill_one_rank(proc: subprocess.Popen, module: str) -> int:
    """SIGKILL one worker of a torchrun job (as a preempted VM loses it); its pid."""
    workers = [c for c in psutil.Process(proc.pid).children(recursive=True) if module in " ".join(c.cmdline())]
    assert workers, "no worker processes found"
    workers[-1].send_signal(signal.SIGKILL)
    return workers[-1].pid
