"""Shared fixtures. Every test gets its own $CLOUDFIT_HOME so nothing touches ~/.cloudfit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("cloudfit-home")
    monkeypatch.setenv("CLOUDFIT_HOME", str(home))
    monkeypatch.delenv("CLOUDFIT_CATALOG", raising=False)
    monkeypatch.delenv("CLOUDFIT_COMPUTE_ENDPOINT", raising=False)
    # optuna and torch are slow with many threads on 2 cores (DESIGN.md known traps)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return home


# The signals that stop a test run (`timeout`, a CI runner's cancel, Ctrl-C, a closed terminal).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@pytest.fixture(autouse=True)
def _no_rendezvous_left_behind():
    """A one-process trainer run in the pytest process sets $MASTER_ADDR/$MASTER_PORT (setdefault, for its
    one-rank group): left there, every later test's processes inherit that port and collide on it
    (EADDRINUSE). Each test starts without them and leaves none."""
    names = ("MASTER_ADDR", "MASTER_PORT")
    saved = {k: os.environ.pop(k, None) for k in names}
    yield
    for k, v in saved.items():
        os.environ.pop(k, None)
        if v is not None:
            os.environ[k] = v


#: stop signals received this session (``_terminated``)
_STOPS: list[str] = []


def _terminated(signum, frame):
    _STOPS.append(signal.Signals(signum).name)
    raise KeyboardInterrupt(f"{signal.Signals(signum).name} received")


def pytest_sessionstart(session):
    """SIGTERM (`timeout`, a CI runner's cancel) stops the run like Ctrl-C: the running test's teardown and
    `finally` blocks run (its launched processes are killed), pytest prints what ran and exits 2 — instead of
    dying at once and leaving those processes behind. Ctrl-C is recorded the same way."""
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminated)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _terminated)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A stop that the code under test swallowed (the CLI run in-process turns the interrupt into exit 130, and
    the test fails instead) still stops the run, after that test."""
    yield
    if _STOPS:
        item.session.shouldstop = f"{_STOPS[0]} received during {item.nodeid}"


@pytest.fixture(autouse=True)
def _signal_handlers_restored():
    """A test that leaves a stop-signal handler of its own (a trainer's stop request, a launcher's
    SIGTERM-as-Ctrl-C, SIG_IGN) in the pytest process makes the whole run ignore SIGTERM/SIGINT: fail it,
    and put the handler back so the tests after it are not blamed too."""
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    yield
    left = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    changed = [signal.Signals(s).name for s in STOP_SIGNALS if left[s] != before[s]]
    for s in STOP_SIGNALS:
        if left[s] != before[s]:
            signal.signal(s, before[s])
    if changed:
        pytest.fail(f"the test left its own handler for {', '.join(changed)} installed "
                    f"({', '.join(repr(left[signal.Signals[n]]) for n in changed)}): restore it", pytrace=False)


@pytest.fixture
def cli():
    """Invoke the typer app in-process: ``cli("catalog", "gpus", "--json")`` → click Result."""
    from typer.testing import CliRunner

    from cloudfit.cli.main import app

    runner = CliRunner()

    def invoke(*args: str, input: str | None = None):
        return runner.invoke(app, list(args), input=input, catch_exceptions=False)

    return invoke


def run_cloudfit(*args: str, env: dict | None = None, timeout: float = 120, cwd: str | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m cloudfit …`` as a real subprocess; returns the CompletedProcess (text)."""
    e = dict(os.environ)
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-m", "cloudfit", *args], capture_output=True, text=True,
                          env=e, timeout=timeout, cwd=cwd)
