"""Text output without importing rich's console, for output that is not a terminal.

Importing ``rich.console`` and ``rich.table`` costs ~20 ms — a seventh of a whole ``cloudfit recommend`` on
the 2-core machine (bench/RESULTS_recommend_speed.md). When the output is a pipe or a file, rich writes no
styles at all, and what it writes for cloudfit's tables (fixed-width, never-wrapped cells, see
``cloudfit.cli.table``) and lines (``[dim]`` markup, word-wrapped at the width) is plain text that this
module writes itself, byte for byte the same (tests/cli/test_plain_output.py renders both ways and
compares). Anything it cannot promise to write the same — other markup, control or wide characters,
tabs, a terminal, colours forced by the environment, Jupyter, Windows — goes to a rich Console made on
first use, print call by print call (rich renders each call on its own, so mixing them is safe).

rich's own word-wrapping (``rich._wrap.divide_line``, which imports only ``rich.cells``) is used as is.
"""

from __future__ import annotations

import os
import sys

#: The two box styles ``cloudfit.cli.table`` uses: rich's HEAVY_HEAD (with edges) and SIMPLE_HEAD (without).
_HEAVY = {"top": "┏━┳┓", "head": "┃┃┃", "head_row": "┡━╇┩", "row": "│││", "bottom": "└─┴┘"}


def eligible(stream) -> bool:
    """Whether rich would write ``stream`` without any style or control code (so plain text is the same)."""
    env = os.environ
    if sys.platform == "win32" or "IPython" in sys.modules:
        return False
    if getattr(sys.stdin, "__module__", "").startswith("idlelib"):
        return False
    if env.get("TTY_COMPATIBLE", "") not in ("", "0") or env.get("FORCE_COLOR"):
        return False
    try:
        return not stream.isatty()
    except (AttributeError, ValueError):
        return False


def _plain_ok(text: str) -> bool:
    """Text rich would render as these very characters: no markup, no control or wide characters."""
    from rich.cells import cell_len

    return "[" not in text and "]" not in text and text.isprintable() and cell_len(text) == len(text)


def _markup(text: str) -> str | None:
    """``text`` with cloudfit's one markup (a whole line in ``[dim]…[/dim]``) removed; None when it holds
    anything else rich would treat as markup."""
    if text.startswith("[dim]") and text.endswith("[/dim]"):
        text = text[5:-6]
    return text if _plain_ok(text) else None


def wrap(text: str, width: int) -> list[str]:
    """rich's ``Text.wrap`` for one line of plain text (justify "default", overflow "fold")."""
    from rich._wrap import divide_line

    offsets = divide_line(text, width, fold=True)
    bounds = [0, *offsets, len(text)]
    lines = []
    for a, b in zip(bounds, bounds[1:]):
        line = text[a:b]
        if len(line) > width:  # Text.rstrip_end: trailing blanks beyond the width go
            blanks = len(line) - len(line.rstrip())
            line = line[: len(line) - min(blanks, len(line) - width)]
        lines.append(line[:width])  # Text.truncate (fold): cells beyond the width are cut
    return lines


def table_lines(spec) -> list[str] | None:
    """The lines rich prints for ``spec`` (a ``cloudfit.cli.table.TableSpec``), or None where it could differ."""
    texts = [h for h in spec.headers] + [c for r in spec.rows for c in r]
    if spec.title and _plain_ok(spec.title) is False:
        return None
    if not all(_plain_ok(t) for t in texts) or any(j not in ("left", "right") for j in spec.justify):
        return None
    w = spec.widths
    if not w or any(len(t) > x for r in [spec.headers, *spec.rows] for t, x in zip(r, w)):
        return None

    def cells(row):
        return [t.rjust(x) if j == "right" else t.ljust(x) for t, x, j in zip(row, w, spec.justify)]

    out = []
    total = spec.width
    if spec.title:
        out += [line.ljust(total) for line in wrap(spec.title, total)]
    if spec.compact:  # SIMPLE_HEAD, no edges and no padding at them: " " between columns, a rule under the head
        def line(row):
            return "   ".join(cells(row))
        out += [line(spec.headers), "─" * total, *(line(r) for r in spec.rows)]
        return out
    def edge(b):
        return b[0] + b[2].join(b[1] * (x + 2) for x in w) + b[3]

    def line(row, v):
        return v[0] + v[1].join(f" {c} " for c in cells(row)) + v[2]
    out += [edge(_HEAVY["top"]), line(spec.headers, _HEAVY["head"]), edge(_HEAVY["head_row"])]
    out += [line(r, _HEAVY["row"]) for r in spec.rows]
    out.append(edge(_HEAVY["bottom"]))
    return out


class PlainConsole:
    """The part of rich's Console that ``recommend`` uses — ``width``, ``print`` and tables through
    ``cloudfit.cli.table.print_table`` — writing plain text to ``sys.stdout`` (looked up at each call, as
    rich does) and handing anything it cannot write the same to a rich Console with the same settings."""

    def __init__(self, width: int):
        self.width = width
        self._rich = None

    def rich(self):
        if self._rich is None:
            from rich.console import Console

            self._rich = Console(highlight=False, soft_wrap=False, width=self.width, emoji=False)
        return self._rich

    def write_lines(self, lines: list[str]) -> None:
        sys.stdout.write("".join(line + "\n" for line in lines))

    def print(self, text: str = "") -> None:
        plain = _markup(text) if isinstance(text, str) else None
        if plain is None:
            self.rich().print(text)
            return
        self.write_lines(wrap(plain, self.width) if plain else [""])


def console():
    """A PlainConsole when rich would write stdout without styles and its width is known; else None."""
    if not eligible(sys.stdout):
        return None
    columns = os.environ.get("COLUMNS")
    if columns is None:
        return PlainConsole(160)
    if columns.isdigit() and int(columns) > 0:
        return PlainConsole(int(columns))
    return None
