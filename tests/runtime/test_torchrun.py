"""``python -m cloudfit.runtime.torchrun`` (what every cloudfit launch runs): torchrun whose refusals are final
and whose signal stop is not a failure. Real torchrun agents, real gloo ranks on CPU.

Measured on the 2-core machine (issue 34), a planted checkpoint under ``--max-restarts=3``: plain torchrun
refused it on every attempt (4 attempts, 46 s, exit 1 and its error report); this wrapper once (11 s, exit 2)."""

from __future__ import annotations

import signal

import psutil
import pytest

from cloudfit.runtime import control, integrity, torchrun
from cloudfit.runtime.checkpoint import complete_checkpoints
from tests.runtime.ranks import Trainer

KEY = "5a" * 32
WRAPPER = "cloudfit.runtime.torchrun"


@pytest.mark.slow
def test_a_refused_checkpoint_ends_the_job_after_one_attempt_with_exit_2(tmp_path):
    """Before: torchrun restarted the refusing worker group up to --max-restarts times and exited 1."""
    t = Trainer("cnn", tmp_path)
    env = {integrity.ENV_KEY: KEY}
    assert t.one_process("--steps", "1", env=env).returncode == 0
    [(_, path)] = complete_checkpoints(t.ckpt)
    shard = next(path.glob("*.distcp"))
    shard.write_bytes(b"\0" + shard.read_bytes()[1:])  # planted
    p = t.torchrun("--steps", "3", env=env, max_restarts=3, launcher=WRAPPER)
    assert t.finish(p, timeout=120) == torchrun.FINAL_EXIT, t.logs()
    logs = t.logs()
    line = f"cloudfit.train: checkpoint file {shard}: signature does not verify: refused (nothing in it was loaded)"
    assert [s for s in logs.splitlines() if "signature does not verify" in s] == [line], logs  # one attempt
    assert "will restart worker group" not in logs and "Traceback" not in logs, logs
    assert "not restarted" in logs
    prog = t.progress()  # what a launcher reads: the state and the rank's own line
    assert prog["state"] == "refused" and prog["error"] == line


@pytest.mark.slow  # 14–21 s on the loaded 2-core machine
def test_sigterm_to_the_agent_and_every_worker_exits_0_without_a_traceback(tmp_path):
    """Before: the agent re-raised the forwarded SIGTERM (exit 1, a traceback) though every rank stopped cleanly."""
    t = Trainer("cnn", tmp_path)
    p = t.torchrun("--steps", "100000", launcher=WRAPPER)
    t.wait_until(p, lambda: (t.tmp / "metrics.jsonl").exists() and
                 (t.tmp / "metrics.jsonl").read_text().count("\n") >= 2, "2 steps")
    workers = [c for c in psutil.Process(p.pid).children(recursive=True) if t.module in " ".join(c.cmdline())
               and WRAPPER not in " ".join(c.cmdline())]
    assert len(workers) == 2
    for proc in [psutil.Process(p.pid), *workers]:  # a cgroup-wide kill: systemd at a preemption, `sky cancel`
        proc.send_signal(signal.SIGTERM)
    assert t.finish(p, timeout=60) == control.EXIT_OK, t.logs()
    logs = t.logs()
    assert "Traceback" not in logs and "stopped by SIGTERM; every rank exited 0" in logs, logs
    prog = t.progress()
    assert prog["state"] == "stopped" and prog["stop_reason"] == "sigterm"
    assert complete_checkpoints(t.ckpt)[0][0] == prog["step"] == prog["checkpoint_step"]


def test_the_wrapper_hooks_exist_in_this_torch():
    """The wrapper patches two methods of torch's agent; a torch without them would silently be plain torchrun."""
    assert torchrun._patch() and torchrun.PATCHED
