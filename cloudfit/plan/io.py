"""plan.json: the one hand-off between ``recommend`` and ``launch``.

A plan file is ``{"schema_version": 1, "workload": …, "chosen": …, "alternatives": […],
"pareto": […], "provenance": {…}}`` where every estimate carries its full ClusterConfig (offering
included), so ``launch`` needs nothing but the file. Writes are atomic.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cloudfit.errors import PlanError
from cloudfit.types import Estimate, Plan, Workload

SCHEMA_VERSION = 1


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    d = plan.to_dict()
    d["schema_version"] = SCHEMA_VERSION
    return d


def plan_from_dict(d: Any, *, source: str = "plan") -> Plan:
    """Parse a plan dict; ``PlanError`` (one line, naming ``source``) on anything malformed."""
    if not isinstance(d, dict):
        raise PlanError(f"{source}: not a plan (expected a JSON object)")
    version = d.get("schema_version")
    if version is None:
        raise PlanError(f"{source}: not a plan (no schema_version)")
    if not isinstance(version, int) or version > SCHEMA_VERSION or version < 1:
        raise PlanError(
            f"{source}: plan schema_version {version!r} is not supported by this cloudfit "
            f"(reads version {SCHEMA_VERSION}); upgrade cloudfit or re-run `cloudfit recommend`"
        )
    try:
        return Plan(
            workload=Workload.from_dict(d["workload"]),
            chosen=Estimate.from_dict(d["chosen"]),
            alternatives=tuple(Estimate.from_dict(e) for e in d.get("alternatives", [])),
            pareto=tuple(Estimate.from_dict(e) for e in d.get("pareto", [])),
            provenance=dict(d.get("provenance", {})),
            explanation=str(d.get("explanation", "")),
            sensitivity=str(d.get("sensitivity", "")),
            schema_version=version,
            layout=_layout(d.get("layout"), source),
        )
    except KeyError as e:
        raise PlanError(f"{source}: plan is missing field {e.args[0]!r}") from None
    except (TypeError, ValueError, AttributeError) as e:
        raise PlanError(f"{source}: plan has a malformed field ({e})") from None


def _layout(v: Any, source: str) -> dict | None:
    """The optional large-model layout block (``Plan.layout``): a JSON object with the layout text."""
    if v is None:
        return None
    if not isinstance(v, dict) or not isinstance(v.get("text"), str):
        raise PlanError(f"{source}: plan field 'layout' must be an object with the layout 'text'")
    return v


def load_plan(path: str | Path) -> Plan:
    """Read and validate a plan file."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise PlanError(f"{p}: no such plan file") from None
    except OSError as e:
        raise PlanError(f"{p}: cannot read plan ({e.strerror or e})") from None
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise PlanError(f"{p}: corrupt plan (invalid JSON at line {e.lineno}: {e.msg})") from None
    return plan_from_dict(d, source=str(p))


def write_json_atomic(obj: Any, path: str | Path) -> None:
    """Write JSON so that readers see either the old file or the whole new one, never half."""
    from cloudfit.atomic import atomic_open

    with atomic_open(path, encoding="utf-8") as fh:
        json.dump(obj, fh, indent=2, allow_nan=False)
        fh.write("\n")


def save_plan(plan: Plan, path: str | Path) -> None:
    """Write ``plan`` to ``path`` atomically."""
    write_json_atomic(plan_to_dict(plan), path)
