"""Library objects as pandas DataFrames."""

from __future__ import annotations

import pytest

from cloudfit.plan import recommend
from cloudfit.profiling.io import load_profile, resolve_profile
from cloudfit.workload import make_workload


def test_plan_to_frame_ranks_the_candidates():
    plan = recommend(make_workload(model="resnet50", samples=5e7, deadline="12h", max_nodes=4))
    df = plan.to_frame()
    assert list(df["rank"]) == list(range(1, len(plan.candidates()) + 1))
    assert df.iloc[0]["zone"] == plan.chosen.config.offering.zone and df.iloc[0]["cost_usd"] == plan.chosen.cost_usd
    assert {"machine_type", "accelerator", "nodes", "spot", "samples_per_second", "low", "high", "hours", "cost_usd",
            "cost_p90_usd", "p_on_time"} <= set(df.columns)
    front = plan.to_frame("pareto")
    assert len(front) == len(plan.pareto) and front["hours"].is_monotonic_increasing and "feasible" in front
    with pytest.raises(ValueError):
        plan.to_frame("nope")


def test_profile_frames():
    p = load_profile(resolve_profile("resnet50"))
    m = p.to_frame()
    assert len(m) == len(p.measurements) and m.iloc[0]["samples_per_second"] == p.measurements[0].samples_per_second
    assert "step_median_s" in m.columns
    s = p.stats_frame()
    assert s.iloc[0]["parameters"] == 25_557_032


def test_evaluation_records_to_frame():
    from cloudfit.perf import evaluate, fit

    prep = fit.prepare()
    # a small slice keeps the test fast: two held-out accelerators' worth of folds is enough to check the shape
    report = evaluate.run(schemes=("accelerator",), inner=False, keep_records=True, prep=prep)
    df = evaluate.to_frame(report, "accelerator", "anchored")
    assert len(df) > 100 and {"group", "measured", "predicted", "ape", "svr", "tflops-ratio"} <= set(df.columns)
    assert (df["ape"] - (df["predicted"] - df["measured"]).abs() / df["measured"]).abs().max() < 1e-12
    with pytest.raises(ValueError, match="no records"):
        evaluate.to_frame(report, "model")
