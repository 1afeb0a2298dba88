"""The ``status`` table, fitted to the terminal: the cluster name (what ``down NAME`` needs) and the
money are never cut; the least useful columns go first."""

from __future__ import annotations

import time

from cloudfit.cli.render import money
from cloudfit.cli.table import Column, fit, print_table


def render_clusters(rows: list[dict], con, title: str, *, wide: bool = False) -> None:
    cols = [Column("name"), Column("backend", keep=2), Column("status"), Column("reason", keep=4),
            Column("spend", "right"), Column("budget", "right", keep=5), Column("config", keep=3),
            Column("started", keep=1)]
    body = [[r["name"], r["backend"], r["status"], r["reason"] or "—", money(r["spend_usd"]), money(r["budget_usd"]),
             r["config"] or "—", time.strftime("%m-%d %H:%M", time.localtime(r["created_at"]))] for r in rows]
    t, dropped = fit(title, cols, body, con.width, wide=wide)
    print_table(con, t)
    if dropped:
        con.print(f"[dim](left out at {con.width} columns: {', '.join(dropped)}; `status NAME` or --json show them)[/dim]")


def headline(name: str, row: dict) -> str:
    """``NAME (backend): running`` / ``NAME (local): ended: completed`` (not "ended, ended: …")."""
    status, reason = row["status"], row["reason"]
    if reason:
        status = f"{status}: {reason}" if status == "ended" else f"{status}, ended: {reason}"
    return f"[bold]{name}[/bold] ({row['backend']}): {status}"
