"""Output helpers shared by the commands: JSON to stdout alone, tables via rich, errors to stderr."""

from __future__ import annotations

import json
import sys
from typing import Any


#: Set by a command (``recommend``) whose process may end without the interpreter's teardown: it starts
#: no thread or child process and has written its files (atomically) before it returns. See ``quick_exit``.
QUICK_EXIT = False


def quick_exit(code: Any) -> None:
    """End the process with exit status ``code`` (``SystemExit.code``: None or an int) at once: flush
    stdout and stderr, run the ``atexit`` handlers, then ``os._exit`` — skipping the interpreter's
    teardown (freeing every module and object: ~25 ms of a `recommend` on this machine, ~17 ms even for
    `python -c "import typer, rich, numpy"`). Returns (and the caller exits as usual) when the code is
    another kind, a thread still runs, or a stream cannot be flushed (a closed pipe keeps its message)."""
    import atexit
    import os
    import threading

    if not (code is None or type(code) is int) or threading.active_count() > 1:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        return
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        return
    os._exit((code or 0) & 0xFF)


def print_json(obj: Any) -> None:
    """Write ``obj`` as JSON to stdout and nothing else (so ``| jq`` always works)."""
    from cloudfit.types import to_jsonable

    sys.stdout.write(json.dumps(to_jsonable(obj), indent=2, allow_nan=False) + "\n")
    sys.stdout.flush()


def console(stderr: bool = False):
    """A rich Console on stdout (or stderr), created on first use so ``--help`` stays light."""
    import os

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Piped or captured output would otherwise be cut to 80 columns and squash the tables.
    width = None if stream.isatty() or os.environ.get("COLUMNS") else 160
    # emoji=False: a ":name:" in data (a path, a zone) stays as it is; rich would also import its emoji table
    return Console(stderr=stderr, highlight=False, soft_wrap=False, width=width, emoji=False)


def error_line(message: str) -> None:
    """One line on stderr: ``cloudfit: error: <message>``."""
    text = " ".join(str(message).split()) or "unknown error"
    sys.stderr.write(f"cloudfit: error: {text}\n")
    sys.stderr.flush()


def money(x: float | None) -> str:
    if x is None:
        return "—"
    return f"${x:,.2f}" if x < 1000 else f"${x:,.0f}"


def hours_apart(hours: list[float]) -> list[str]:
    """``format_hours`` of each, with as many more decimals (up to 3) as it takes for different hours to read
    differently: a Pareto front's "4.0 min, 4.2 min, 4.4 min", not "4 min" three times."""
    from cloudfit.units import format_hours

    scale = {"s": (3600, 0), "min": (60, 0), "h": (1, 1), "d": (1 / 24, 1)}  # format_hours' units and decimals
    units = [format_hours(h).rsplit(" ", 1)[1] for h in hours]
    out = [format_hours(h) for h in hours]
    for unit in set(units):  # each unit's decimals on their own: "44.1 min … 1.8 h", not "1.81 h"
        mine = [i for i, u in enumerate(units) if u == unit]
        factor, digits = scale[unit]
        for extra in range(4):
            text = {i: f"{hours[i] * factor:.{digits + extra}f} {unit}" for i in mine}
            if len(set(text.values())) == len({hours[i] for i in mine}):
                break
        for i in mine:
            out[i] = text[i]
    return out


def distinct(plan, k: int) -> list:
    """(index in ``plan.candidates()``, estimate), best first, one per (machine type, nodes, spot, region)."""
    seen, out = set(), []
    for i, e in enumerate(plan.candidates()):
        c = e.config
        key = (c.offering.machine_type, c.nodes, c.spot, c.offering.region)
        if key in seen:
            continue
        seen.add(key)
        out.append((i, e))
        if len(out) == k:
            break
    return out


def limits_and_goal(w) -> str:
    """"deadline 24.0 h at 90% and P90 cost ≤ $300.00, the cost × time knee": a recommend table title's tail."""
    from cloudfit.units import format_hours

    limits = []
    if w.deadline_hours is not None:
        limits.append(f"deadline {format_hours(w.deadline_hours)} at {w.confidence:.0%}")
    if w.budget_usd is not None:  # what must fit the budget is the cost quantile at the confidence (Problem)
        limits.append(f"P{w.confidence * 100:g} cost ≤ {money(w.budget_usd)}")
    goal = {"cost": "minimising cost", "time": "the cost × time knee", "fastest": "minimising time"}.get(w.objective, w.objective)
    return f"{' and '.join(limits)}, {goal}"


def write_outputs(plan, out, sky, plot) -> None:
    """The files ``recommend`` was asked for: plan.json, a SkyPilot task, a Pareto plot (each atomic)."""
    if out is not None:
        from cloudfit.plan.io import save_plan

        save_plan(plan, out)
    if sky is not None:
        from cloudfit.executors.skypilot import emit

        emit(plan, sky)  # the YAML, the wheel its nodes install, the checkpoint key file
    if plot is not None:
        from cloudfit import plot as plotting

        plotting.save(plotting.pareto(plan), plot)
