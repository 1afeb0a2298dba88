"""Shared by the perf tests: one `cloudfit model fit` for the session (a full fit is ~10-30 s on 2 cores)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest


@pytest.fixture(scope="session")
def cli_fitted_model(tmp_path_factory) -> SimpleNamespace:
    """``cloudfit model fit --out m.json --json`` run once in-process: ``.exit_code``, ``.stdout``, ``.output``,
    ``.path`` (read-only for the tests: copy before changing it)."""
    from typer.testing import CliRunner

    from cloudfit.cli.main import app

    tmp = tmp_path_factory.mktemp("model-fit")
    out = tmp / "m.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CLOUDFIT_HOME", str(tmp / "home"))
        mp.setenv("OMP_NUM_THREADS", "1")
        r = CliRunner().invoke(app, ["model", "fit", "--out", str(out), "--json"], catch_exceptions=False)
    return SimpleNamespace(exit_code=r.exit_code, stdout=r.stdout, output=r.output, path=Path(out))
