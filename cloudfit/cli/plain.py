"""Text output without importing rich's console.

Importing ``rich.console`` and ``rich.table`` costs ~20 ms — a seventh of a whole ``cloudfit recommend`` on
the 2-core machine (bench/RESULTS_recommend_speed.md). What rich writes for cloudfit's tables (fixed-width,
never-wrapped cells, see ``cloudfit.cli.table``) and lines (``[dim]`` markup, word-wrapped at the width) is
plain text — on a terminal, with three attributes (italic title, bold header, dim lines) — that this module
writes itself, byte for byte the same (tests/cli/test_plain_output.py renders both ways, on a pipe and on a
terminal with each colour system, and compares). Anything it cannot promise to write the same — other
markup, control or wide characters, tabs, a dumb terminal, Jupyter, Windows — goes to a rich Console made
on first use, print call by print call (rich renders each call on its own, so mixing them is safe).

rich's own word-wrapping (``rich._wrap.divide_line``, which imports only ``rich.cells``) is used as is.
"""

from __future__ import annotations

import os
import sys

#: The two box styles ``cloudfit.cli.table`` uses: rich's HEAVY_HEAD (with edges) and SIMPLE_HEAD (without).
_HEAVY = {"top": "┏━┳┓", "head": "┃┃┃", "head_row": "┡━╇┩", "row": "│││", "bottom": "└─┴┘"}


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _is_terminal(tty: bool) -> bool:
    """rich's ``Console.is_terminal`` for a stream that ``tty`` says is (not) a terminal (no IDLE, no Jupyter:
    ``settings`` rules those out)."""
    env = os.environ
    compatible = env.get("TTY_COMPATIBLE", "")
    if compatible in ("0", "1"):
        return compatible == "1"
    if env.get("FORCE_COLOR") is not None:
        return env["FORCE_COLOR"] != ""
    return tty


def settings(stream) -> tuple[int, bool] | None:
    """(width, styled) of the Console ``cloudfit.cli.render.console`` would make for ``stream``, where this
    module writes the same; None where it does not promise to (then rich writes it)."""
    env = os.environ
    if sys.platform == "win32" or "IPython" in sys.modules or getattr(sys.stdin, "__module__", "").startswith("idlelib"):
        return None
    tty = _isatty(stream)
    styled = _is_terminal(tty)
    if styled and env.get("TERM", "").lower() in ("dumb", "unknown"):
        return None  # rich then also reports 80 columns whatever it was given
    columns = env.get("COLUMNS")
    if columns is None and not tty:
        return 160, styled  # render.console's width for piped output
    if columns is not None:
        return (int(columns), styled) if columns.isdigit() and int(columns) > 0 else None
    width = None
    for fd in (0, 1, 2):  # rich's Console.size
        try:
            width = os.get_terminal_size(fd)[0]
        except (AttributeError, ValueError, OSError):
            continue
        break
    return (width or 80), styled


def _plain_ok(text: str) -> bool:
    """Text rich would render as these very characters: no markup, no control or wide characters."""
    from rich.cells import cell_len

    return "[" not in text and "]" not in text and text.isprintable() and cell_len(text) == len(text)


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


def _s(code: str, text: str, styled: bool) -> str:
    """``text`` in one SGR attribute, as rich writes a styled segment on a terminal."""
    return f"\x1b[{code}m{text}\x1b[0m" if styled and text else text


def table_lines(spec, styled: bool = False) -> list[str] | None:
    """The lines rich prints for ``spec`` (a ``cloudfit.cli.table.TableSpec``), or None where it could differ."""
    texts = [*spec.headers, *(c for r in spec.rows for c in r)]
    if (spec.title and not _plain_ok(spec.title)) or not all(_plain_ok(t) for t in texts):
        return None
    w = spec.widths
    if not w or any(j not in ("left", "right") for j in spec.justify) or (styled and not all(spec.headers)):
        return None
    if any(len(t) > x for r in [spec.headers, *spec.rows] for t, x in zip(r, w)):
        return None

    def cells(row):
        return [t.rjust(x) if j == "right" else t.ljust(x) for t, x, j in zip(row, w, spec.justify)]

    def bold(t):
        return _s("1", t, styled)

    out = []
    total = spec.width
    if spec.title:
        out += [_s("3", line.ljust(total), styled) for line in wrap(spec.title, total)]
    if spec.compact:  # SIMPLE_HEAD without edges or padding at them: " " between columns, a rule under the head
        n = len(w)
        head = " ".join((bold(" ") if i else "") + bold(c) + (bold(" ") if i < n - 1 else "")
                        for i, c in enumerate(cells(spec.headers)))
        return out + [head, "─" * total, *("   ".join(cells(r)) for r in spec.rows)]

    def edge(b):
        return b[0] + b[2].join(b[1] * (x + 2) for x in w) + b[3]

    head = "┃" + "┃".join(bold(" ") + bold(c) + bold(" ") for c in cells(spec.headers)) + "┃"
    out += [edge(_HEAVY["top"]), head, edge(_HEAVY["head_row"])]
    out += ["│" + "│".join(f" {c} " for c in cells(r)) + "│" for r in spec.rows]
    out.append(edge(_HEAVY["bottom"]))
    return out


class PlainConsole:
    """The part of rich's Console that ``recommend`` uses — ``width``, ``print`` and tables through
    ``cloudfit.cli.table.print_table`` — writing to ``sys.stdout`` (looked up at each call, as rich does),
    with rich's attributes when ``styled``, and handing anything it cannot write the same to a rich
    Console with the same settings."""

    def __init__(self, width: int, styled: bool = False):
        self.width = width
        self.styled = styled
        self._rich = None

    def rich(self):
        if self._rich is None:
            from rich.console import Console

            self._rich = Console(highlight=False, soft_wrap=False, width=self.width, emoji=False)
        return self._rich

    def write_lines(self, lines: list[str]) -> None:
        sys.stdout.write("".join(line + "\n" for line in lines))
        sys.stdout.flush()

    def print(self, text: str = "") -> None:
        dim = isinstance(text, str) and text.startswith("[dim]") and text.endswith("[/dim]")
        plain = (text[5:-6] if dim else text) if isinstance(text, str) else None
        if plain is None or not _plain_ok(plain):
            self.rich().print(text)
            return
        self.write_lines([_s("2", line, dim and self.styled) for line in wrap(plain, self.width)])


def console():
    """A PlainConsole where it writes what rich would write on stdout, else None."""
    got = settings(sys.stdout)
    return PlainConsole(*got) if got else None
