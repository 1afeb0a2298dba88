"""cloudfit.cli.plain writes what rich writes to a pipe, byte for byte, or hands the call to rich."""

from __future__ import annotations

import io
import random
import sys

import pytest
from rich.console import Console

from cloudfit.cli import plain
from cloudfit.cli.table import Column, fit, fit_distinct, print_table

WORDS = ["a", "an", "GPU", "us-east4-a", "a3-highgpu-8g", "$37.62", "—", "×", "(1,764–2,835)", "supercalifragilistic" * 3,
         "spot,", "P(on", "time)", "100%", "x" * 45, "", " "]


#: rich's output on a pipe, then on terminals of each colour system (the attributes are the same in all)
SYSTEMS = [dict(), dict(force_terminal=True, color_system="standard"), dict(force_terminal=True, color_system="256"),
           dict(force_terminal=True, color_system="truecolor"), dict(force_terminal=True, no_color=True)]


def _rich_text(width: int, draw, system=None) -> str:
    buf = io.StringIO()
    draw(Console(file=buf, width=width, highlight=False, soft_wrap=False, emoji=False, **(system or {})))
    return buf.getvalue()


def _plain_text(width: int, draw, monkeypatch, system=None) -> str:
    buf = io.StringIO()
    monkeypatch.setattr(sys, "stdout", buf)
    con = plain.PlainConsole(width, styled=bool(system))
    if system:  # what rich is handed is drawn on a terminal too
        con._rich = Console(highlight=False, soft_wrap=False, width=width, emoji=False, **system)
    draw(con)
    monkeypatch.undo()
    return buf.getvalue()


def _same(width, draw, monkeypatch, what):
    for system in SYSTEMS:
        assert _plain_text(width, draw, monkeypatch, system) == _rich_text(width, draw, system), (what, system)


def _sentence(rnd: random.Random) -> str:
    return "".join(rnd.choice(WORDS) + rnd.choice([" ", "  ", ", ", ""]) for _ in range(rnd.randint(0, 40)))


def test_lines_are_wrapped_as_rich_wraps_them(monkeypatch):
    rnd = random.Random(7)
    for _ in range(400):
        text, width = _sentence(rnd), rnd.choice([10, 20, 37, 60, 80, 160])
        if rnd.random() < 0.3:
            text = f"[dim]{text}[/dim]"
        _same(width, lambda con: con.print(text), monkeypatch, (text, width))


def test_tables_are_drawn_as_rich_draws_them(monkeypatch):
    rnd = random.Random(3)
    for _ in range(300):
        n = rnd.randint(1, 7)
        cols = [Column(rnd.choice(["#", "zone", "exp. $", "samples/s (10–90%)", "x" * rnd.randint(1, 15)]),
                       rnd.choice(["left", "right"]), keep=rnd.choice([None, 1, 2, 3])) for _ in range(n)]
        rows = [[rnd.choice(WORDS[:-2]) or "0" for _ in range(n)] for _ in range(rnd.randint(0, 6))]
        title = rnd.choice([None, "", _sentence(rnd).strip() or None])
        width = rnd.choice([30, 40, 60, 80, 100, 139, 160])
        t, _ = fit(title, cols, rows, width, wide=rnd.random() < 0.2)
        _same(width, lambda con: print_table(con, t), monkeypatch, (title, cols, rows, width))


def test_what_plain_cannot_promise_goes_to_rich(monkeypatch):
    """Markup, wide or control characters: rich renders them (its output is the reference)."""
    for text in ["[bold]x[/bold] y", "a [dim]b[/dim]", "日本語のテキスト " * 8, "tab\there", "bell\a", "two\nlines",
                 "\\[dim] escaped"]:
        _same(40, lambda con: con.print(text), monkeypatch, text)
    cols = [Column("name"), Column("value", "right")]
    for rows in ([["日本", "1"]], [["[bold]x", "2"]], [["a\tb", "3"]]):
        t, _ = fit("t", cols, rows, 80)
        assert plain.table_lines(t) is None
        _same(80, lambda con: print_table(con, t), monkeypatch, rows)


def test_a_rich_table_handed_to_a_plain_console_is_drawn_by_rich(monkeypatch):
    from cloudfit.cli.table import _build

    t = _build("wide", [Column("name"), Column("v", "right")], [["x" * 70, "1"]], [0, 1], False)
    _same(40, lambda con: print_table(con, t), monkeypatch, "rich table")


def test_distinct_rows_table_is_the_same(monkeypatch):
    cols = [Column("#", "right", keep=3), Column("zone", keep=1), Column("machine type"), Column("cost", "right")]
    rows = [[str(i), f"us-east{i % 3}-a", "a3-highgpu-8g", f"${i % 2 * 10:,.2f}"] for i in range(1, 9)]
    t, dropped, hidden = fit_distinct("a title", cols, rows, 30)
    assert dropped and hidden
    _same(30, lambda con: print_table(con, t), monkeypatch, "distinct")


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self._tty = tty

    def isatty(self):
        return self._tty


@pytest.mark.parametrize("env, tty, styled", [({}, False, False), ({}, True, True), ({"FORCE_COLOR": "1"}, False, True),
                                              ({"FORCE_COLOR": ""}, False, False), ({"TTY_COMPATIBLE": "1"}, False, True),
                                              ({"TTY_COMPATIBLE": "0"}, True, False), ({"TERM": "dumb"}, True, None),
                                              ({"TERM": "dumb"}, False, False), ({"COLUMNS": "97"}, True, True)])
def test_styles_where_rich_would_write_them(monkeypatch, env, tty, styled):
    """settings() follows rich's own rules: the Console made for the same stream agrees (or it declines)."""
    for k in ("FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    stream = _Stream(tty)
    got = plain.settings(stream)
    if styled is None:
        assert got is None
        return
    width, is_styled = got
    assert is_styled is styled
    monkeypatch.setattr(sys, "stdout", stream)
    from cloudfit.cli.render import console

    con = console()
    assert con.width == width and (con.color_system is not None) is styled


@pytest.mark.parametrize("columns, width", [(None, 160), ("97", 97), ("0", None), ("wide", None)])
def test_the_width_is_rich_s(monkeypatch, columns, width):
    monkeypatch.setattr(sys, "stdout", _Stream(False))
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    con = plain.console()
    assert (con.width if con else None) == width
    if con is not None:
        from cloudfit.cli.render import console

        assert console().width == width


def test_recommend_output_is_the_same_through_plain_and_rich(monkeypatch):
    from cloudfit.cli.recommend import _distinct, _render
    from cloudfit.cli.recommend_llm import _distinct as _distinct_llm
    from cloudfit.cli.recommend_llm import _render as _render_llm
    from cloudfit.llm import zoo
    from cloudfit.plan import recommend
    from cloudfit.plan.llm import LLMJob, recommend_llm
    from cloudfit.workload import make_workload

    plan = recommend(make_workload(model="resnet50", epochs=90, dataset_size=1_281_167, deadline="24h"))
    for width in (60, 100, 160):
        _same(width, lambda con: _render(plan, _distinct(plan, 5), None, None, None, con=con), monkeypatch, width)
    job = LLMJob(zoo.get("llama3-8b"), 1e11, 8192)
    llm = recommend_llm(make_workload(model="llama3-8b", samples=1e11 / 8192, deadline="7d", precision="bf16"), job)
    shown = _distinct_llm(llm, 5)
    for width in (80, 160):
        _same(width, lambda con: _render_llm(llm, shown, 8192, None, None, None, con=con), monkeypatch, width)
