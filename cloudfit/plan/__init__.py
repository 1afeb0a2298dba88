"""Plans: ``recommend(workload) -> Plan``, their explanation, plan.json I/O and SkyPilot export.

- ``planner``: recommend, the one entry point (a ``Workload`` in samples or a ``TokenWorkload`` in tokens)
- ``rank``: ranked alternatives, Pareto front (shared by both planners)
- ``llm``: the large-model planner (cluster and parallel layout)
- ``explain``: why this plan, what a looser limit buys, why nothing fits
- ``io``: plan.json reader and writer (schema version)
- ``skypilot``: SkyPilot task export

Names are resolved lazily so that reading a plan does not import the search stack (numpy).
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "load_plan": "io", "plan_from_dict": "io", "plan_to_dict": "io", "save_plan": "io",
    "load_workload_profile": "planner", "pareto_front": "rank", "recommend": "planner",
    "TokenWorkload": "llm", "token_workload": "llm",
    "skypilot_task": "skypilot",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(f"cloudfit.plan.{_WHERE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'cloudfit.plan' has no attribute {name!r}")
