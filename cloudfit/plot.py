"""Pictures (matplotlib, Agg backend): each function returns a Figure; ``save`` writes a PNG atomically.

Used by ``cloudfit recommend --plot`` and the notebooks. Imports matplotlib lazily.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

    from cloudfit.types import Plan


def _figure(figsize=(7.0, 4.5)) -> "Figure":
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout="constrained")


def _label(e) -> str:
    c, o = e.config, e.config.offering
    n = f"{c.nodes}× " if c.nodes > 1 else ""
    return f"{n}{o.accelerators_per_node}×{o.accelerator}{' spot' if c.spot else ''}"


def pareto(plan: "Plan") -> "Figure":
    """Cost × time Pareto front of a plan, feasible points filled, the chosen plan marked with a star.

    Artists carry gids for tests and tooling: ``pareto-feasible``, ``pareto-infeasible``, ``chosen``,
    ``alternatives``.
    """
    fig = _figure()
    ax = fig.add_subplot()
    front = list(plan.pareto)
    feas = [e for e in front if e.feasible]
    infeas = [e for e in front if not e.feasible]
    ax.plot([e.hours for e in front], [e.cost_usd for e in front], color="0.7", lw=1, zorder=1)
    ax.scatter([e.hours for e in feas], [e.cost_usd for e in feas], s=28, color="tab:blue",
               label="Pareto front (meets limits)", zorder=2, gid="pareto-feasible")
    ax.scatter([e.hours for e in infeas], [e.cost_usd for e in infeas], s=28, facecolors="none",
               edgecolors="tab:blue", label="Pareto front (misses limits)", zorder=2, gid="pareto-infeasible")
    alts = list(plan.alternatives)
    ax.scatter([e.hours for e in alts], [e.cost_usd for e in alts], s=12, marker="x", color="tab:gray",
               label="ranked alternatives", zorder=2, gid="alternatives")
    c = plan.chosen
    ax.scatter([c.hours], [c.cost_usd], s=220, marker="*", color="tab:red", edgecolors="black",
               label=f"chosen: {_label(c)}", zorder=3, gid="chosen")
    w = plan.workload
    if w.deadline_hours is not None:
        ax.axvline(w.deadline_hours, color="tab:red", ls="--", lw=1, label=f"deadline {w.deadline_hours:g} h")
    if w.budget_usd is not None:
        ax.axhline(w.budget_usd, color="tab:green", ls="--", lw=1, label=f"budget ${w.budget_usd:,.0f}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("expected hours")
    ax.set_ylabel("expected cost (USD)")
    ax.set_title(f"{w.model}: cost × time")
    ax.legend(fontsize=8, loc="best")
    return fig


def save(fig: "Figure", path: str | Path, dpi: int = 120) -> Path:
    """Write ``fig`` as a PNG, atomically (no half-written image on a crash)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.stem}.", suffix=".png", dir=p.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=dpi, format="png")
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p
