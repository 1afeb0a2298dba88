"""cloudfit: pick the cloud cluster to train a deep-learning model on, then launch it.

The public library surface, importable from here::

    import cloudfit
    w = cloudfit.make_workload(model="resnet50", samples=1e8, deadline="24h")
    plan = cloudfit.recommend(w)                 # a Plan: chosen cluster, alternatives, Pareto front
    cloudfit.save_plan(plan, "plan.json"); cloudfit.load_plan("plan.json")
    cloudfit.predict(profile, query)             # the performance model; cloudfit.catalog.load() offerings
    cloudfit.launch(plan, cloudfit.executors.get_executor("local"))   # run it, as `cloudfit launch` does

The library never prints: it returns values and raises ``cloudfit.errors.CloudfitError``. Names are
resolved on first use, so ``import cloudfit`` imports nothing heavy (numpy, torch, xgboost, optuna,
google-cloud are imported only where used). Layers, bottom to top (tests/test_layering.py):
types/errors/units/atomic/resources/workload → catalog → profiling, perf, spot → search → plan,
executors → active, launcher → cli.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: Public name → the module that defines it.
_WHERE = {
    # workloads and the value types
    "make_workload": "cloudfit.workload",
    "Workload": "cloudfit.types", "Plan": "cloudfit.types", "Estimate": "cloudfit.types",
    "ClusterConfig": "cloudfit.types", "Offering": "cloudfit.types", "Profile": "cloudfit.types",
    "Measurement": "cloudfit.types",
    # errors
    "CloudfitError": "cloudfit.errors", "UsageError": "cloudfit.errors", "InfeasibleError": "cloudfit.errors",
    # plans
    "recommend": "cloudfit.plan.planner", "load_plan": "cloudfit.plan.io", "save_plan": "cloudfit.plan.io",
    # large models: a workload in tokens (cloudfit.recommend plans it, cluster and parallel layout)
    "TokenWorkload": "cloudfit.plan.llm", "token_workload": "cloudfit.plan.llm",
    # profiles and the performance model
    "load_profile": "cloudfit.profiling.io", "save_profile": "cloudfit.profiling.io",
    "predict": "cloudfit.perf", "predict_many": "cloudfit.perf", "HardwareQuery": "cloudfit.perf",
    # launching a plan on an executor the caller makes (what `cloudfit launch` runs)
    "launch": "cloudfit.launcher", "prepare_launch": "cloudfit.launcher",
    # active search (probe runs through an executor the caller makes)
    "active_search": "cloudfit.active",
}
#: Public subpackages: ``cloudfit.catalog.load()``, ``cloudfit.search.get_searcher(...)``.
_PACKAGES = ("catalog", "search")

__all__ = ["__version__", *sorted(_WHERE), *_PACKAGES]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
    elif name in _PACKAGES:
        value = importlib.import_module(f"cloudfit.{name}")
    else:
        raise AttributeError(f"module 'cloudfit' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
