"""A missing optional extra: one line naming what to install, in every command (issue 27: a 40-line
ModuleNotFoundError traceback in five commands, only one of which said what to install)."""

from __future__ import annotations

import os

import pytest

from tests.conftest import run_cloudfit
from tests.executors.plans import offering, write_plan
from cloudfit.types import ClusterConfig


def _blocked(tmp_path, module: str) -> dict[str, str]:
    """An environment where ``import module`` fails as if the extra were not installed."""
    pkg = tmp_path / "blocked" / module
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"raise ModuleNotFoundError(\"No module named '{module}'\", name='{module}')\n")
    return {"PYTHONPATH": f"{tmp_path / 'blocked'}:{os.environ.get('PYTHONPATH', '')}"}


@pytest.mark.parametrize("module, extra, args", [
    ("optuna", "fit", ["recommend", "--model", "resnet50", "--samples", "1e6", "--deadline", "10h", "--search", "bayes"]),
    ("torch", "profile", ["profile", "run", "mlp", "--out", "{tmp}/p.json"]),
    ("matplotlib", "plot", ["recommend", "--model", "resnet50", "--samples", "1e6", "--deadline", "10h",
                            "--plot", "{tmp}/p.png"]),
    ("google", "gcp", ["launch", "{plan}", "--backend", "gcp", "--yes", "--project", "p",
                       "--checkpoint-dir", "gs://bkt/ckpt"]),
])
def test_a_missing_extra_is_one_line_naming_it(tmp_path, module, extra, args):
    plan = write_plan(tmp_path / "plan.json", [ClusterConfig(offering(price=None), 1, True)], budget_usd=5)
    args = [a.replace("{tmp}", str(tmp_path)).replace("{plan}", str(plan)) for a in args]
    r = run_cloudfit(*args, env=_blocked(tmp_path, module), cwd=str(tmp_path))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    [line] = r.stderr.strip().splitlines()
    assert module in line and f'pip install "cloudfit[{extra}]"' in line
