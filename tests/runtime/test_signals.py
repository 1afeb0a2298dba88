"""A machine taken away (SIGTERM: ``sky cancel``/``sky down``, a spot preemption's systemd shutdown,
``docker stop``, Kubernetes) or a Ctrl-C (SIGINT) is a stop request like the stop file: every rank
stops at the same step, writes a verified checkpoint there, says ``stopped`` with the signal as the
reason, and exits 143 / 130 as a plain process (0 under torchrun). The resumed run goes on from that
step: no step lost, none done twice. Real processes, real signals."""

from __future__ import annotations

import signal
import time

import psutil
import pytest

from cloudfit.runtime import control
from cloudfit.runtime.checkpoint import MARKER, complete_checkpoints
from tests.runtime.ranks import Trainer


def _lines(t: Trainer) -> int:
    """Whole metrics lines written so far (a line being written is not counted)."""
    path = t.tmp / "metrics.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


def _stopped_at(t: Trainer, reason: str, world: int) -> int:
    """The step the run stopped at, checked: progress says so, a verified-on-resume checkpoint is there."""
    prog = t.progress()
    step = prog["step"]
    assert prog["state"] == "stopped" and prog["stop_reason"] == reason and prog["world_size"] == world, prog
    assert prog["checkpoint_step"] == step and complete_checkpoints(t.ckpt)[0][0] == step, complete_checkpoints(t.ckpt)
    path = complete_checkpoints(t.ckpt)[0][1]
    assert (path / MARKER).is_file() and len(list(path.glob("*.distcp"))) >= world
    assert [m["step"] for m in t.metrics()] == list(range(1, step + 1)), t.logs()
    return step


def _resumes_from(t: Trainer, step: int, rc: int) -> None:
    """The run after the stop: from ``step`` on, each step once (the checkpoint verified and loaded)."""
    assert rc == 0, t.logs()
    prog = t.progress()
    assert prog["state"] == "completed" and prog["resumed_from_step"] == step and prog["step"] == step + 3
    assert prog["eval_loss_at_resume"] == pytest.approx(prog["eval_loss_at_save"], abs=1e-5)  # the weights came back
    assert [m["step"] for m in t.metrics()] == list(range(1, step + 4))


@pytest.mark.parametrize("name, sig", [("cnn", signal.SIGTERM), ("cnn", signal.SIGINT), ("llm", signal.SIGTERM)])
def test_a_signal_to_a_plain_process_checkpoints_at_the_step_and_exits_128_plus_it(tmp_path, name, sig):
    t = Trainer(name, tmp_path)
    p = t.start("--steps", "100000")  # no cadence checkpoint comes: the stop's is the only one
    t.wait_until(p, lambda: _lines(t) >= 3, "3 steps")
    p.send_signal(sig)
    if sig == signal.SIGTERM:  # repeated SIGTERMs (some land while it checkpoints) change nothing
        while p.poll() is None:
            p.send_signal(sig)
            time.sleep(0.005)
    reason = control.STOP_SIGNALS[sig]
    assert t.finish(p, timeout=60) == control.STOP_EXIT[reason] == 128 + sig, t.logs()
    step = _stopped_at(t, reason, world=1)
    assert step >= 3 and not [d for d in t.ckpt.glob("step-*") if not (d / MARKER).is_file()]  # nothing torn
    r = t.one_process("--steps", str(step + 3))
    _resumes_from(t, step, r.returncode)


@pytest.mark.slow
@pytest.mark.parametrize("who", ["the agent and every worker", "rank 1 only"])
def test_sigterm_under_torchrun_stops_every_rank_at_one_step_and_resumes(tmp_path, who):
    """A cgroup-wide kill (systemd at a spot preemption, ``sky cancel``) signals torchrun's agent and the
    workers: each worker gets SIGTERM directly and again from the agent. A signal to one rank alone
    stops them all too (the per-step all-reduce); the agent, not signalled, sees every rank exit 0."""
    t = Trainer("cnn", tmp_path)
    p = t.torchrun("--steps", "100000")
    t.wait_until(p, lambda: _lines(t) >= 3, "3 steps")
    workers = [c for c in psutil.Process(p.pid).children(recursive=True) if t.module in " ".join(c.cmdline())]
    assert len(workers) == 2
    if who == "rank 1 only":  # again and again until it leaves: some land in the all-reduce, some in the save
        [rank1] = [w for w in workers if w.environ().get("RANK") == "1"]
        while p.poll() is None and rank1.is_running():
            try:
                rank1.send_signal(signal.SIGTERM)
            except psutil.NoSuchProcess:
                break
            time.sleep(0.005)
        assert t.finish(p, timeout=60) == 0, t.logs()
    else:
        for proc in [psutil.Process(p.pid), *workers]:
            proc.send_signal(signal.SIGTERM)
        # the agent forwards SIGTERM, waits for its workers, and re-raises its SignalException (exit 1)
        assert t.finish(p, timeout=60) == 1 and "Received 15 death signal" in t.logs(), t.logs()
    step = _stopped_at(t, "sigterm", world=2)
    assert "forcefully exiting" not in t.logs() and "exitcode" not in t.logs(), t.logs()  # no SIGKILL, no failed rank
    p = t.torchrun("--steps", str(step + 3))
    _resumes_from(t, step, t.finish(p, timeout=120))


def test_the_handler_records_the_first_signal_ignores_a_repeated_sigterm_and_a_second_ctrl_c_interrupts():
    import argparse
    import os

    before = {s: signal.getsignal(s) for s in control.STOP_SIGNALS}
    stop = control.Stop(argparse.Namespace(stop_file=None, stop_at=None))
    try:
        stop.catch_signals()
        assert stop.reason() is None
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before the next bytecode
        assert stop.reason() == "sigterm"
        os.kill(os.getpid(), signal.SIGTERM)  # the same request again: nothing happens
        assert stop.reason() == "sigterm"
        with pytest.raises(KeyboardInterrupt):  # a person pressing Ctrl-C after the stop began
            os.kill(os.getpid(), signal.SIGINT)
        stop.release_signals(leaving=True)
        assert signal.getsignal(signal.SIGINT) is before[signal.SIGINT]
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN  # leaving after a SIGTERM stop: a repeat is ignored
        signal.signal(signal.SIGTERM, before[signal.SIGTERM])
        first_int = control.Stop(argparse.Namespace(stop_file=None, stop_at=None))
        first_int.catch_signals()
        os.kill(os.getpid(), signal.SIGINT)
        assert first_int.reason() == "sigint"
        first_int.release_signals(leaving=True)
        assert {s: signal.getsignal(s) for s in control.STOP_SIGNALS} == before
    finally:
        stop.release_signals()
        for s, h in before.items():
            signal.signal(s, h)


def test_a_caller_that_goes_on_gets_its_handlers_back_after_a_sigterm_stop(tmp_path):
    """Issue 34: a trainer run inside a process that goes on (a test, a notebook) left SIGTERM ignored after
    a SIGTERM stop, and pytest then ran on through `timeout`'s TERM. Only the trainer's own process
    (``python -m``, ``leaving``) keeps ignoring a repeat while it exits."""
    import argparse
    import os

    before = {s: signal.getsignal(s) for s in control.STOP_SIGNALS}
    stop = control.Stop(argparse.Namespace(stop_file=None, stop_at=None))
    try:
        stop.catch_signals()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.reason() == "sigterm"
        stop.release_signals()
        assert {s: signal.getsignal(s) for s in control.STOP_SIGNALS} == before
    finally:
        for s, h in before.items():
            signal.signal(s, h)
