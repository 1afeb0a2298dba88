"""Output helpers shared by the commands: JSON to stdout alone, tables via rich, errors to stderr."""

from __future__ import annotations

import json
import sys
from typing import Any


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
    return Console(stderr=stderr, highlight=False, soft_wrap=False, width=width)


def error_line(message: str) -> None:
    """One line on stderr: ``cloudfit: error: <message>``."""
    text = " ".join(str(message).split()) or "unknown error"
    sys.stderr.write(f"cloudfit: error: {text}\n")
    sys.stderr.flush()


def money(x: float | None) -> str:
    if x is None:
        return "—"
    return f"${x:,.2f}" if x < 1000 else f"${x:,.0f}"
