"""Parsing of the units users type: durations (``12h``, ``90m``, ``1.5d``) and money (``300``, ``$300``)."""

from __future__ import annotations

import math
import re

from cloudfit.errors import UsageError

#: Standard normal 90% quantile: every calibrated band in cloudfit is 10–90%, and every P90 is mean·e^(Z90·σ).
Z90 = 1.2815515655446004

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(s|sec|m|min|h|hr|hours?|d|days?)?\s*$", re.I)
_PER_HOUR = {"s": 1 / 3600, "sec": 1 / 3600, "m": 1 / 60, "min": 1 / 60, "h": 1.0, "hr": 1.0, "hour": 1.0,
             "hours": 1.0, "d": 24.0, "day": 24.0, "days": 24.0}


def parse_hours(text: str, what: str = "deadline") -> float:
    """``"12h"`` → 12.0; ``"90m"`` → 1.5; ``"2d"`` → 48.0. The unit is required (``"24"`` could be hours,
    minutes or days: ``UsageError``). Must be > 0."""
    m = _DURATION.match(str(text))
    if not m:
        raise UsageError(f"cannot read {what} {text!r}: use a number with a unit, e.g. 12h, 90m or 2d")
    if m.group(2) is None:
        raise UsageError(f"the {what} {text!r} has no unit: write {m.group(1)}h, {m.group(1)}m or {m.group(1)}d")
    hours = float(m.group(1)) * _PER_HOUR[m.group(2).lower()]
    if not hours > 0 or not math.isfinite(hours):
        raise UsageError(f"the {what} must be positive, got {text!r}")
    return hours


def parse_usd(text: str, what: str = "budget") -> float:
    """``"300"``, ``"$300"``, ``"1,200.50"`` → dollars. Must be > 0."""
    t = str(text).strip().replace(",", "").lstrip("$").strip()
    try:
        usd = float(t)
    except ValueError:
        raise UsageError(f"cannot read {what} {text!r}: give US dollars, e.g. 300 or $300") from None
    if not usd > 0 or not math.isfinite(usd):
        raise UsageError(f"the {what} must be positive, got {text!r}")
    return usd


def format_hours(h: float) -> str:
    """Hours for people: seconds under 2 minutes, minutes under an hour, then hours, then days."""
    if h < 2 / 60:
        return f"{h * 3600:.0f} s"
    if h < 1:
        return f"{h * 60:.0f} min"
    if h < 48:
        return f"{h:.1f} h"
    return f"{h / 24:.1f} d"
