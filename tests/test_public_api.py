"""The public library surface: ``cloudfit.__all__`` resolves, stays light on import, and works end to end."""

from __future__ import annotations

import subprocess
import sys

import cloudfit
from tests.conftest import REPO

PUBLIC = {"__version__", "make_workload", "Workload", "Plan", "Estimate", "ClusterConfig", "Offering", "Profile",
          "Measurement", "CloudfitError", "UsageError", "InfeasibleError", "recommend", "load_plan", "save_plan",
          "load_profile", "save_profile", "predict", "predict_many", "HardwareQuery", "active_search",
          "launch", "prepare_launch", "TokenWorkload", "token_workload",
          "catalog", "search"}


def test_all_is_the_public_surface_and_every_name_resolves():
    assert set(cloudfit.__all__) == PUBLIC
    for name in cloudfit.__all__:
        assert getattr(cloudfit, name) is not None, name
    assert callable(cloudfit.catalog.load) and callable(cloudfit.recommend)
    assert set(cloudfit.__all__) <= set(dir(cloudfit))


def test_unknown_names_are_attribute_errors():
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        cloudfit.nope  # noqa: B018


def test_import_cloudfit_imports_nothing_heavy():
    code = ("import sys, cloudfit; heavy = [m for m in ('numpy', 'optuna', 'torch', 'xgboost', 'cloudfit.perf', "
            "'cloudfit.search') if m in sys.modules]; print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_recommend_round_trips_through_a_plan_file(tmp_path):
    w = cloudfit.make_workload(model="resnet50", samples=5e7, deadline="24h", max_nodes=4)
    plan = cloudfit.recommend(w)
    assert isinstance(plan, cloudfit.Plan) and plan.chosen.p_on_time >= w.confidence
    cloudfit.save_plan(plan, tmp_path / "plan.json")
    back = cloudfit.load_plan(tmp_path / "plan.json")
    assert back.chosen.config.label() == plan.chosen.config.label() and back.workload == w
