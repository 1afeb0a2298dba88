"""``recommend``'s view of what is unknown: the † on unmeasured GPUs, its footnote, the runner-up on measured
rows, the pessimistic re-rank and the probe that would measure (``cloudfit.plan.unknown`` computes them)."""

from __future__ import annotations

from typing import Any, Callable

from cloudfit.plan.unknown import MARK, lines


def _unknown(plan) -> dict[str, Any]:
    return (plan.provenance or {}).get("unknown") or {}


def is_measured(plan, accelerator: str) -> bool | None:
    """Whether the plan's model family was measured on ``accelerator`` (None: the plan does not say)."""
    m = _unknown(plan).get("measured") or {}
    return m.get(accelerator)


def with_measured(plan, rows: list[dict]) -> list[dict]:
    """``recommend --json`` candidates, each with ``"measured": true|false`` (when the plan says)."""
    return [{**r, "measured": is_measured(plan, r["accelerator"])} for r in rows]


def gpu_marks(plan) -> Callable[[Any], str]:
    """offering → "†" after an unmeasured GPU's name, "" otherwise."""
    return lambda o: MARK if is_measured(plan, o.accelerator) is False else ""


def risk_title(plan) -> str:
    """The table title's tail under ``--risk p90``."""
    return ", on the 10% speed (--risk p90)" if _unknown(plan).get("risk") == "p90" else ""


def unknown_lines(plan, shown: list) -> list[str]:
    """The footnote of the † (when a shown row has one), then what #1 rests on and how to measure it."""
    from rich.markup import escape

    u = _unknown(plan)
    out = []
    if any(is_measured(plan, e.config.offering.accelerator) is False for e in shown):
        out.append(f"{MARK} no {escape(u.get('family', 'model'))} measurement on this GPU: spec-based")
    return out + [escape(x) for x in lines(u)]
