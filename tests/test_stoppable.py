"""The test suite stops when told to (issue 34): `timeout -s TERM`, a CI runner's cancel and Ctrl-C end a
pytest run within seconds. Before, a trainer run inside the pytest process left SIGTERM ignored after its
SIGTERM stop, and the run went on for many minutes after the TERM. tests/conftest.py now fails any test
that leaves a stop-signal handler behind; these run pytest itself, as a subprocess, on tiny test files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO

# test 1: a real trainer in this process, stopped by a SIGTERM at a step boundary (exit 143, checkpoint written)
# test 2: a long test, during which the run is sent SIGTERM / SIGINT
_TRAIN_THEN_SLEEP = r'''
import os, signal, threading, time
from pathlib import Path

def test_a_trainer_stopped_by_sigterm(tmp_path):
    from cloudfit import train
    metrics = tmp_path / "metrics.jsonl"

    def send():
        while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=send, daemon=True).start()
    rc = train.main(["--model", "mlp", "--steps", "100000", "--checkpoint-dir", str(tmp_path / "ck"),
                     "--metrics-file", str(metrics), "--progress-every-s", "0"])
    assert rc == 143

def test_a_long_one():
    Path(os.environ["SLEEPING"]).touch()
    try:
        time.sleep(120)
    finally:
        Path(os.environ["SLEEPING"] + ".cleaned").touch()
'''


def _pytest(tmp_path: Path, body: str, *args: str) -> subprocess.Popen:
    """pytest on ``body``; ``-p tests.conftest`` among ``args`` adds the suite's own checks."""
    (tmp_path / "test_tiny.py").write_text(body)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "SLEEPING": str(tmp_path / "sleeping"), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, "test_tiny.py"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _stopped_within(p: subprocess.Popen, tmp_path: Path, sig: int) -> tuple[float, str]:
    deadline = time.monotonic() + 300  # the start and the trainer, however busy the machine
    while not (tmp_path / "sleeping").exists():
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()[0]
        time.sleep(0.05)
    t0 = time.monotonic()
    p.send_signal(sig)
    try:
        out, _ = p.communicate(timeout=60)  # the sleeping test has 120 s left: ending sooner is the signal's doing
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError(f"pytest ran on for 60 s after {signal.Signals(sig).name}: {p.communicate()[0]}")
    return time.monotonic() - t0, out


def test_sigterm_stops_pytest_after_a_trainer_caught_one_in_process(tmp_path):
    """Without the suite's conftest: the trainer itself gives the handlers back."""
    p = _pytest(tmp_path, _TRAIN_THEN_SLEEP)
    took, out = _stopped_within(p, tmp_path, signal.SIGTERM)
    assert p.returncode == -signal.SIGTERM and took < 60, out  # TERM's default: the process ends at once


def test_with_the_suites_conftest_sigterm_stops_like_ctrl_c_and_tears_down(tmp_path):
    """The suite's own run (tests/conftest.py): the test's `finally` runs, pytest reports and exits 2."""
    p = _pytest(tmp_path, _TRAIN_THEN_SLEEP, "-p", "tests.conftest")
    took, out = _stopped_within(p, tmp_path, signal.SIGTERM)
    assert p.returncode == 2 and "SIGTERM received" in out and "1 passed" in out and took < 60, out
    assert (tmp_path / "sleeping.cleaned").exists()


def test_sigint_stops_pytest_after_a_trainer_caught_a_sigterm(tmp_path):
    p = _pytest(tmp_path, _TRAIN_THEN_SLEEP)
    took, out = _stopped_within(p, tmp_path, signal.SIGINT)
    assert p.returncode == 2 and "KeyboardInterrupt" in out and "1 passed" in out, out  # pytest's interrupted run


def test_a_test_that_leaves_a_stop_signal_handler_fails(tmp_path):
    leaky = ("import signal\n"
             "def test_leaks():\n    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
             "def test_tidy():\n    old = signal.signal(signal.SIGHUP, lambda *a: None)\n    signal.signal(signal.SIGHUP, old)\n"
             "START = signal.getsignal(signal.SIGTERM)\n"
             "def test_after_it():\n    assert signal.getsignal(signal.SIGTERM) == START\n")
    p = _pytest(tmp_path, leaky, "-rE", "-p", "tests.conftest")
    out, _ = p.communicate(timeout=300)
    assert p.returncode == 1, out
    assert "ERROR test_tiny.py::test_leaks" in out and "left its own handler for SIGTERM" in out, out
    assert "3 passed, 1 error" in out, out  # the leak is put back: the test after it is not blamed
