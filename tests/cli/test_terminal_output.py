"""What a report writes is what rich draws, no wider than the terminal: on a pipe (at $COLUMNS, else 160
columns) and on a terminal (rich's styles around the same text). rich draws every table; cloudfit uses only
rich's public modules (it once kept a copy of rich's renderer, ``cli/plain.py``, that reached into
``rich._wrap``)."""

from __future__ import annotations

import ast
import io
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cloudfit

PACKAGE = Path(__file__).resolve().parents[2] / "cloudfit"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
CNN = ["recommend", "--model", "resnet50", "--epochs", "90", "--dataset-size", "1281167", "--deadline", "24h"]
LLM = ["recommend", "--model", "llama3-8b", "--tokens", "1e11", "--seq-len", "8192", "--deadline", "7d"]


def test_no_copy_of_rich_and_no_private_rich_module():
    assert not (PACKAGE / "cli" / "plain.py").exists()
    bad = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) and node.module else []
            bad += [f"{path.name}:{node.lineno} {n}" for n in names
                    if n.split(".")[0] == "rich" and any(p.startswith("_") for p in n.split(".")[1:])]
    assert not bad, bad


@pytest.mark.parametrize("columns", [None, "80", "100"])
@pytest.mark.parametrize("args", [CNN, LLM], ids=["cnn", "llm"])
def test_the_report_is_no_wider_than_the_terminal(cli, monkeypatch, args, columns):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    r = cli(*args)
    assert r.exit_code == 0, r.output
    width = int(columns or 160)  # piped output without $COLUMNS: 160 columns (render.console)
    lines = r.stdout.splitlines()
    assert max(len(line) for line in lines) <= width
    assert "…" not in r.stdout
    assert any(line.startswith(("┃ # ┃", "#   ")) for line in lines)  # the table is there


@pytest.mark.parametrize("args", [CNN, LLM], ids=["cnn", "llm"])
def test_a_terminal_shows_the_same_text_with_styles(args):
    """On a terminal (TTY_COMPATIBLE=1: rich's own switch) the report carries rich's styles — italic title,
    bold header, dim lines — around the very text a pipe gets."""
    env = {"COLUMNS": "80", "TERM": "xterm-256color", "NO_COLOR": ""}
    piped = run_cloudfit(*args, env={**env, "TTY_COMPATIBLE": "0"})
    styled = run_cloudfit(*args, env={**env, "TTY_COMPATIBLE": "1"})
    assert piped.returncode == styled.returncode == 0, piped.stderr + styled.stderr
    assert "\x1b[" not in piped.stdout
    assert "\x1b[3m" in styled.stdout and "\x1b[1m" in styled.stdout and "\x1b[2m" in styled.stdout
    assert ANSI.sub("", styled.stdout) == piped.stdout


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self._tty = tty

    def isatty(self):
        return self._tty


@pytest.mark.parametrize("columns, tty, width", [(None, False, 160), ("97", False, 97), ("97", True, 97),
                                                 ("wide", False, 80)])
def test_the_width(monkeypatch, columns, tty, width):
    """Piped without $COLUMNS: 160 (tables are not squashed to 80); else rich's own rule ($COLUMNS, or the
    terminal's size; 80 when neither says)."""
    from cloudfit.cli.render import console

    monkeypatch.setattr(sys, "stdout", _Stream(tty))
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.setattr("os.get_terminal_size", lambda *a: (_ for _ in ()).throw(OSError()))
    assert console().width == width
