"""Tables that fit the terminal: columns are dropped (least useful first) instead of truncated.

rich shrinks a table that is wider than the console by cutting cells to "$86…" and "8×H1…". Here
every cell is ``no_wrap`` and the table is measured at its natural width; while it is wider than
the console, the column with the lowest ``keep`` rank goes (columns without a rank always stay).
If even the essential columns do not fit, the table is printed at its natural width (the
terminal wraps the lines; no number is cut).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

#: At or above this width (or with --wide) commands show every column.
WIDE_COLUMNS = 140


@dataclass(frozen=True)
class Column:
    header: str
    justify: str = "left"
    keep: int | None = None  # drop order when the table is too wide: lowest first; None = never dropped


def _build(title: str | None, cols: Sequence[Column], rows: Sequence[Sequence[str]], keep_idx: list[int], compact: bool):
    from rich import box
    from rich.table import Table

    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD,
              pad_edge=not compact, show_edge=not compact)
    for i in keep_idx:
        c = cols[i]
        t.add_column(c.header, justify=c.justify, no_wrap=True)  # type: ignore[arg-type]
    for r in rows:
        t.add_row(*(r[i] for i in keep_idx))
    return t


def natural_width(table) -> int:
    """Columns the table needs so that no cell is cut."""
    from rich.console import Console

    from rich.measure import Measurement

    con = Console(width=10_000)
    return Measurement.get(con, con.options, table).maximum


def fit(title: str | None, cols: Sequence[Column], rows: Sequence[Sequence[str]], width: int, *, wide: bool = False):
    """A rich Table of ``rows`` no wider than ``width`` (dropping columns by ``keep``), or every column
    when ``wide`` or ``width >= WIDE_COLUMNS``. Returns (table, names of the dropped columns)."""
    idx = list(range(len(cols)))
    if wide or width >= WIDE_COLUMNS:
        return _build(title, cols, rows, idx, compact=False), []
    for compact in (False, True):
        t = _build(title, cols, rows, idx, compact)
        if natural_width(t) <= width:
            return t, []
    droppable = sorted((c.keep, i) for i, c in enumerate(cols) if c.keep is not None)
    dropped = []
    for _, i in droppable:
        idx.remove(i)
        dropped.append(cols[i].header)
        t = _build(title, cols, rows, idx, compact=True)
        if natural_width(t) <= width:
            return t, dropped
    return t, dropped


def print_table(con, table) -> None:
    """Print ``table`` on ``con``; one wider than the console is printed at its natural width (the
    terminal wraps the lines) instead of having its cells cut."""
    need = natural_width(table)
    if need <= con.width:
        con.print(table)
        return
    from rich.console import Console

    wide = Console(file=con.file, width=need, highlight=False, soft_wrap=False, record=getattr(con, "record", False),
                   color_system=con.color_system or None, force_terminal=con.is_terminal)
    wide.print(table)
    if getattr(con, "record", False):  # keep what was printed in the caller's record (tests export it)
        con._record_buffer.extend(wide._record_buffer)
