"""Pictures (matplotlib, Agg backend): each function returns a Figure; ``save`` writes a PNG atomically.

Used by ``cloudfit recommend --plot`` and the notebooks. Imports matplotlib lazily.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

    from cloudfit.types import Plan


def _figure(figsize=(7.0, 4.5)) -> "Figure":
    # A bare Figure on an Agg canvas: no pyplot, so no GUI backend is started and the caller's
    # backend (a notebook's inline one, say) is left alone; notebooks still display it.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _plain_log_ticks(ax, which: str, fmt: str = "{:g}") -> None:
    """Tick labels of a log axis as plain numbers ($40, 0.5) rather than 4×10¹; on a short range
    (under ~30×) the 2× and 5× minor ticks are labelled too. Call after plotting."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    axis = ax.xaxis if which == "x" else ax.yaxis
    lo, hi = ax.get_xlim() if which == "x" else ax.get_ylim()
    f = FuncFormatter(lambda v, _: fmt.format(v) if v > 0 else "")
    axis.set_major_formatter(f)
    if lo > 0 and hi / lo < 30:
        axis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
        axis.set_minor_formatter(f)


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
    _plain_log_ticks(ax, "x")
    _plain_log_ticks(ax, "y", "${:,.4g}")
    ax.set_xlabel("expected hours")
    ax.set_ylabel("expected cost (USD)")
    ax.set_title(f"{w.model}: cost × time")
    ax.legend(fontsize=8, loc="best")
    return fig


def cost_vs_deadline(sweep, *, chosen_deadline_hours: float | None = None) -> "Figure":
    """Cheapest expected cost against the deadline, one line for spot and one for on-demand.

    ``sweep`` is a DataFrame from :func:`cloudfit.explore.deadline_sweep`. Lines carry gids ``spot``
    and ``on-demand``; deadlines no configuration meets are left out of the lines.
    """
    fig = _figure()
    ax = fig.add_subplot()
    styles = {"spot": ("tab:orange", "o"), "on-demand": ("tab:blue", "s")}
    for mode, (color, marker) in styles.items():
        part = sweep[(sweep["mode"] == mode) & sweep["feasible"]].sort_values("deadline_hours")
        ax.plot(part["deadline_hours"], part["cost_usd"], color=color, marker=marker, ms=4, label=mode, gid=mode)
    if chosen_deadline_hours is not None:
        ax.axvline(chosen_deadline_hours, color="tab:red", ls="--", lw=1, label=f"deadline {chosen_deadline_hours:g} h",
                   gid="deadline")
    ax.set_xscale("log")
    _plain_log_ticks(ax, "x")
    ax.set_xlabel("deadline (hours)")
    ax.set_ylabel("cheapest expected cost (USD)")
    ax.set_title("What a deadline costs")
    ax.legend(fontsize=8)
    return fig


def spot_risk(risk, *, confidence: float | None = None, chosen=None) -> "Figure":
    """P(finishing on time) against expected cost for every config (its cheapest zone).

    ``risk`` is a DataFrame from :func:`cloudfit.explore.risk_frame`; ``chosen`` an Estimate to mark.
    Gids: ``spot``, ``on-demand``, ``confidence``, ``chosen``.
    """
    fig = _figure()
    ax = fig.add_subplot()
    for is_spot, name, color in ((True, "spot", "tab:orange"), (False, "on-demand", "tab:blue")):
        part = risk[risk["spot"] == is_spot]
        ax.scatter(part["cost_usd"], part["p_on_time"], s=8, alpha=0.6, color=color, label=name, gid=name)
    if confidence is not None:
        ax.axhline(confidence, color="0.3", ls="--", lw=1, label=f"required {confidence:.0%}", gid="confidence")
    if chosen is not None:
        ax.scatter([chosen.cost_usd], [chosen.p_on_time], s=220, marker="*", color="tab:red", edgecolors="black",
                   label=f"chosen: {_label(chosen)}", zorder=3, gid="chosen")
    ax.set_xscale("log")
    _plain_log_ticks(ax, "x", "${:,.4g}")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("expected cost (USD)")
    ax.set_ylabel("P(finishing by the deadline)")
    ax.set_title("Spot risk: cheaper, but will it finish on time?")
    ax.legend(fontsize=8, loc="lower right")
    return fig


def predicted_vs_measured(frame, *, predicted: str = "predicted", measured: str = "measured", low: str | None = "low",
                          high: str | None = "high", group: str | None = "group", title: str = "") -> "Figure":
    """Predicted against measured samples/s (log–log) with the 10–90% band as error bars.

    ``frame`` is a DataFrame such as :func:`cloudfit.perf.evaluate.to_frame` returns. One point
    series per value of ``group`` (gid ``points:<group>``, its bands ``band:<group>``; without a
    band column there are no bars), the identity line (gid ``identity``) and ±25% guides (gid
    ``guide``).
    """
    import numpy as np
    from matplotlib import colormaps

    fig = _figure(figsize=(6.0, 5.5))
    ax = fig.add_subplot()
    groups = [(None, frame)] if group is None or group not in frame else list(frame.groupby(group, sort=True))
    palette = colormaps["tab10" if len(groups) <= 10 else "tab20"].colors
    for k, (name, part) in enumerate(groups):
        x, y = part[measured].to_numpy(float), part[predicted].to_numpy(float)
        yerr = None
        if low and high and low in part and high in part:
            yerr = np.vstack([np.maximum(y - part[low].to_numpy(float), 0), np.maximum(part[high].to_numpy(float) - y, 0)])
        cont = ax.errorbar(x, y, yerr=yerr, fmt="o", ms=3, lw=0.6, alpha=0.7, color=palette[k % len(palette)],
                           label=None if name is None else str(name))
        key = "all" if name is None else name
        cont.lines[0].set_gid(f"points:{key}")
        for bars in cont.lines[2]:
            bars.set_gid(f"band:{key}")
    lo = float(min(frame[measured].min(), frame[predicted].min())) * 0.8
    hi = float(max(frame[measured].max(), frame[predicted].max())) * 1.25
    ax.plot([lo, hi], [lo, hi], color="black", lw=1, gid="identity", label="predicted = measured")
    for f in (0.75, 1.25):
        ax.plot([lo, hi], [lo * f, hi * f], color="0.6", lw=0.8, ls=":", gid="guide")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured samples/s")
    ax.set_ylabel("predicted samples/s")
    ax.set_title(title or "Predicted vs measured throughput (dotted: ±25%)")
    if group is not None and group in frame:
        ax.legend(fontsize=7, ncol=2)
    return fig


#: Image formats ``save`` writes, by file suffix (matplotlib's Agg, SVG and PDF backends; no GIF).
FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}


def image_format(path: str | Path) -> str:
    """The format a path's suffix asks for; ``UsageError`` for any other suffix (e.g. ``.gif``)."""
    from cloudfit.errors import UsageError

    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise UsageError(f"cannot write {Path(path).name}: the plot is written as .png, .svg or .pdf")
    return fmt


def save(fig: "Figure", path: str | Path, dpi: int = 120) -> Path:
    """Write ``fig`` in the format its suffix names (PNG, SVG or PDF), atomically (no half-written
    image on a crash)."""
    from cloudfit.atomic import atomic_open

    fmt = image_format(path)
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, dpi=dpi, format=fmt)
    return Path(path)
