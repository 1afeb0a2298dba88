"""Every plot function draws what it says: axes, the number of points per series, the chosen plan marked."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cloudfit import explore, plot
from cloudfit.plan import recommend
from cloudfit.workload import make_workload


def _gid(ax, gid):
    return [a for a in ax.get_children() if a.get_gid() == gid]


@pytest.fixture(scope="module")
def world():
    w = make_workload(model="resnet50", epochs=90, dataset_size=1281167, deadline="24h", max_nodes=8)
    space = explore.space_for(w)
    return w, space, recommend(w, space=space)


def test_pareto_marks_the_chosen_plan_and_the_limits(world, tmp_path):
    w, _, plan = world
    fig = plot.pareto(plan)
    ax = fig.axes[0]
    (star,) = _gid(ax, "chosen")
    assert np.allclose(star.get_offsets(), [[plan.chosen.hours, plan.chosen.cost_usd]])
    n_front = len(_gid(ax, "pareto-feasible")[0].get_offsets()) + len(_gid(ax, "pareto-infeasible")[0].get_offsets())
    assert n_front == len(plan.pareto)
    assert len(_gid(ax, "alternatives")[0].get_offsets()) == len(plan.alternatives)
    assert ax.get_xlabel() == "expected hours" and ax.get_ylabel() == "expected cost (USD)"
    assert ax.yaxis.get_major_formatter()(20.0, 0) == "$20"  # plain dollars, not 2×10¹
    assert any(line.get_xdata()[0] == w.deadline_hours for line in ax.get_lines() if "deadline" in str(line.get_label()))
    out = plot.save(fig, tmp_path / "p.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cost_vs_deadline_draws_one_point_per_feasible_deadline(world):
    w, space, _ = world
    sweep = explore.deadline_sweep(w, [0.05, 1, 4, 12, 24, 48], space=space)
    fig = plot.cost_vs_deadline(sweep, chosen_deadline_hours=24)
    ax = fig.axes[0]
    for mode in ("spot", "on-demand"):
        (line,) = _gid(ax, mode)
        want = sweep[(sweep["mode"] == mode) & sweep["feasible"]]
        assert len(line.get_xdata()) == len(want) and list(line.get_xdata()) == sorted(want["deadline_hours"])
        # a later deadline never costs more
        assert np.all(np.diff(np.asarray(line.get_ydata())) <= 1e-9)
    assert not sweep[sweep.deadline_hours == 0.05].feasible.any()  # 3 minutes: nothing fits
    assert len(_gid(ax, "deadline")) == 1 and ax.get_xlabel() == "deadline (hours)"


def test_spot_risk_plots_every_config_and_marks_the_chosen(world):
    w, space, plan = world
    risk = explore.risk_frame(w, space=space)
    fig = plot.spot_risk(risk, confidence=w.confidence, chosen=plan.chosen)
    ax = fig.axes[0]
    assert len(_gid(ax, "spot")[0].get_offsets()) == int(risk.spot.sum())
    assert len(_gid(ax, "on-demand")[0].get_offsets()) == int((~risk.spot).sum())
    (star,) = _gid(ax, "chosen")
    assert np.allclose(star.get_offsets(), [[plan.chosen.cost_usd, plan.chosen.p_on_time]])
    assert _gid(ax, "confidence")[0].get_ydata()[0] == pytest.approx(0.9)
    assert ax.get_ylabel() == "P(finishing by the deadline)"


def test_predicted_vs_measured_one_series_per_group_with_bands():
    df = pd.DataFrame({"measured": [100.0, 200, 400, 800], "predicted": [110.0, 180, 420, 700],
                       "low": [80.0, 150, 300, 600], "high": [140.0, 260, 500, 900], "group": ["A", "A", "B", "B"]})
    fig = plot.predicted_vs_measured(df)
    ax = fig.axes[0]
    for g in ("A", "B"):
        (pts,) = _gid(ax, f"points:{g}")
        assert list(pts.get_xdata()) == list(df[df.group == g].measured)
        assert list(pts.get_ydata()) == list(df[df.group == g].predicted)
        # the band: one vertical bar per point, from low to high
        (bars,) = _gid(ax, f"band:{g}")
        segs = bars.get_segments()
        part = df[df.group == g]
        assert [(s[0][0], s[0][1], s[1][1]) for s in segs] == list(zip(part.measured, part.low, part.high))
    (ident,) = _gid(ax, "identity")
    assert list(ident.get_xdata()) == list(ident.get_ydata())
    assert ax.get_xscale() == "log" and ax.get_xlabel() == "measured samples/s"
    assert ax.get_ylabel() == "predicted samples/s"
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == ["A", "B", "predicted = measured"]


def test_predicted_vs_measured_without_bands_draws_no_bars():
    df = pd.DataFrame({"measured": [100.0, 200, 400], "predicted": [110.0, 180, 420]})
    ax = plot.predicted_vs_measured(df, group=None).axes[0]
    assert len(_gid(ax, "points:all")[0].get_xdata()) == 3
    assert not _gid(ax, "band:all")


def test_plots_leave_the_callers_matplotlib_backend_alone(world, tmp_path):
    """A notebook's inline backend must survive a plot call (pyplot figures would stop showing)."""
    import matplotlib

    _, _, plan = world
    before = matplotlib.get_backend()
    matplotlib.use("svg")  # any backend other than Agg
    try:
        fig = plot.pareto(plan)
        plot.save(fig, tmp_path / "p.png")
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(before)
