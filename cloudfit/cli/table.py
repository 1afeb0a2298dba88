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


@dataclass(frozen=True)
class TableSpec:
    """What ``fit`` chose: the title, the columns kept (headers, justification, widths: the widest cell's)
    and their cells; drawn by rich (``_rich_table``)."""
    title: str | None
    headers: tuple
    justify: tuple
    widths: tuple
    rows: tuple
    compact: bool
    width: int  # the columns ``widths`` need with their padding and rules (``_width``)


def _build(title: str | None, cols: Sequence[Column], rows: Sequence[Sequence[str]], keep_idx: list[int], compact: bool):
    return _rich_table(_spec(title, cols, rows, keep_idx, compact))


def _rich_table(spec: TableSpec):
    from rich import box
    from rich.table import Table

    t = Table(title=spec.title, title_justify="left", box=box.SIMPLE_HEAD if spec.compact else box.HEAVY_HEAD,
              pad_edge=not spec.compact, show_edge=not spec.compact)
    for h, j, w in zip(spec.headers, spec.justify, spec.widths):
        # a fixed width (the widest cell's): rich then need not measure every cell again
        t.add_column(h, justify=j, no_wrap=True, width=w)  # type: ignore[arg-type]
    for r in spec.rows:
        t.add_row(*r)
    return t


def natural_width(table) -> int:
    """Columns the table needs so that no cell is cut."""
    from rich.console import Console

    from rich.measure import Measurement

    con = Console(width=10_000)
    return Measurement.get(con, con.options, table).maximum


def _width(cols: Sequence[Column], rows: Sequence[Sequence[str]], idx: list[int], compact: bool) -> int:
    """The width ``_build`` gives these columns (computed, not rendered: this runs on every recommend)."""
    w = _cell_widths(cols, rows, idx)
    n = len(w)
    if compact:  # SIMPLE_HEAD without edges: a blank rule between columns, padding inside, none at the edges
        return sum(w) + 3 * n - 3
    return sum(w) + 2 * n + n + 1  # padding each side and n + 1 vertical rules


def _cell_widths(cols: Sequence[Column], rows: Sequence[Sequence[str]], idx: list[int]) -> list[int]:
    """Terminal cells of the widest entry (header included) of each column ``idx``."""
    from rich.cells import cell_len

    return [max([cell_len(cols[i].header)] + [cell_len(r[i]) for r in rows]) for i in idx]


def fit(title: str | None, cols: Sequence[Column], rows: Sequence[Sequence[str]], width: int, *, wide: bool = False,
        take_back: bool = False):
    """The table of ``rows`` (a ``TableSpec``) no wider than ``width`` (dropping columns by ``keep``, lowest
    first; ``take_back``: then taking back, most useful first, those that fit again once a wider one went), or
    every column when ``wide`` or ``width >= WIDE_COLUMNS``. Returns (table, names of the dropped columns)."""
    idx = list(range(len(cols)))
    if wide or width >= WIDE_COLUMNS:
        return _spec(title, cols, rows, idx, False), []
    for compact in (False, True):
        if _width(cols, rows, idx, compact) <= width:
            return _spec(title, cols, rows, idx, compact), []
    droppable = sorted((c.keep, i) for i, c in enumerate(cols) if c.keep is not None)
    gone = []
    for _, i in droppable:
        idx.remove(i)
        gone.append(i)
        if _width(cols, rows, idx, True) <= width:
            break
    for i in reversed(gone[:-1] if take_back else []):  # the wide column dropped last may leave room for one before
        trial = sorted(idx + [i])
        if _width(cols, rows, trial, True) <= width:
            idx = trial
            gone.remove(i)
    return _spec(title, cols, rows, idx, True), [cols[i].header for i in gone]


def fit_distinct(title: str | None, cols: Sequence[Column], rows: Sequence[Sequence[str]], width: int, *,
                 wide: bool = False, ignore: Sequence[str] = ("#",)):
    """``fit``, then rows that look the same once columns are dropped (the same cluster in another zone
    when "zone" went) are shown once: the first of them stays, and a "#" column numbers the rows shown
    1, 2, 3 (not 1, 3, 5). Returns (table, dropped, rows hidden)."""
    t, dropped = fit(title, cols, rows, width, wide=wide)
    if not dropped:
        return t, dropped, 0
    keep = [rows[j] for j in distinct_rows(cols, rows, dropped, ignore)]
    if len(keep) == len(rows):
        return t, dropped, 0
    numbered = [i for i, c in enumerate(cols) if c.header == "#"]
    keep = [[str(n) if i in numbered else x for i, x in enumerate(r)] for n, r in enumerate(keep, 1)]
    t, dropped = fit(title, cols, keep, width, wide=wide)
    return t, dropped, len(rows) - len(keep)


def distinct_rows(cols: Sequence[Column], rows: Sequence[Sequence[str]], dropped: Sequence[str],
                  ignore: Sequence[str] = ("#",)) -> list[int]:
    """Indices of the rows ``fit_distinct`` shows once ``dropped`` are gone: the first of each look-alike group."""
    shown = [i for i, c in enumerate(cols) if c.header not in dropped and c.header not in ignore]
    seen, keep = set(), []
    for j, r in enumerate(rows):
        key = tuple(r[i] for i in shown)
        if key not in seen:
            seen.add(key)
            keep.append(j)
    return keep


def _spec(title, cols, rows, idx, compact) -> TableSpec:
    return TableSpec(title, tuple(cols[i].header for i in idx), tuple(cols[i].justify for i in idx),
                     tuple(_cell_widths(cols, rows, idx)), tuple(tuple(r[i] for i in idx) for r in rows), compact,
                     _width(cols, rows, idx, compact))


def print_table(con, table) -> None:
    """Print ``table`` (a ``TableSpec`` or a rich Table) on ``con`` (a rich Console); one wider than the
    console is printed at its natural width (the terminal wraps the lines) instead of having its cells cut."""
    if isinstance(table, TableSpec):
        need, table = table.width, _rich_table(table)
    else:
        need = natural_width(table)
    if need <= con.width:
        con.print(table)
        return
    from rich.segment import Segments

    # drawn at the width it needs and written uncropped (rich's public rendering API: no second Console)
    con.print(Segments(con.render(table, con.options.update_width(need))), crop=False)
