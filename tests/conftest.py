"""Shared fixtures. Every test gets its own $CLOUDFIT_HOME so nothing touches ~/.cloudfit."""

from __future__ import annotations

import os
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
