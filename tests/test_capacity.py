"""Start-up that grows with the cluster, the capacity prior, outlier prices, --max-gpus, price dates."""

from __future__ import annotations

import numpy as np
import pytest

from cloudfit.spot import capacity


def test_startup_grows_with_nodes_and_includes_install():
    s = capacity.startup_seconds(np.array([1, 2, 8, 64]), False, {True: 87.27, False: 71.01})
    assert np.all(np.diff(s) > 0)
    assert s[0] == pytest.approx(71.01 + capacity.INSTALL_S)  # one VM: its start and the install
    assert s[-1] - s[0] > 60  # node 0 first, the slowest of 64 starts, 63 inserts
    spot = capacity.startup_seconds(np.array([1]), True, {True: 87.27, False: 71.01})
    assert spot[0] > s[0]


def test_capacity_prior_falls_with_fleet_size_and_rises_with_zones():
    p = capacity.p_obtainable(np.array([1, 8, 16, 64, 456]), True)
    assert p[0] == p[1] == 1.0 and np.all(np.diff(p[1:]) < 0)
    assert p[-1] < 0.5
    assert capacity.p_launch(456, True, 2) > capacity.p_launch(456, True, 1)
    # fits the traces' ratio: 16 one-GPU VMs vs one GPU (0.42 / 0.72)
    assert (16.0 ** -capacity.CAPACITY_EXPONENT) == pytest.approx(0.42 / 0.72, rel=0.05)


def test_big_fleets_carry_stockout_risk_in_time_and_p_on_time():
    mean, p90, factor = capacity.wait_terms(np.array([8, 456]), np.array([True, True]), np.array([0.05, 0.05]), 0.1)
    assert mean[0] == 0 and mean[1] > 0.3 and factor[0] == 1 and factor[1] < 0.8


def test_recommend_space_includes_wait_and_max_gpus(tmp_path):
    from cloudfit import catalog
    from cloudfit.profiling.io import load_profile, resolve_profile
    from cloudfit.search.space import build_space
    from cloudfit.workload import make_workload

    w = make_workload(model="resnet50", samples=1e8, deadline="24h", spot="never", max_gpus=16)
    space = build_space(w, load_profile(resolve_profile("resnet50")), catalog.load())
    assert np.all(space.gpus_per_node * space.nodes <= 16)
    assert any("--max-gpus" in k for k in space.excluded)
    a = space.assess(w)
    assert np.all(a.wait_hours[space.gpus_per_node * space.nodes <= 8] == 0)
    assert np.any(a.wait_hours > 0)


def test_outlier_spot_prices_are_flagged_and_left_out():
    from cloudfit import catalog
    from cloudfit.catalog.outliers import spot_outliers
    from cloudfit.plan import recommend
    from cloudfit.workload import make_workload

    cat = catalog.load()
    flags = spot_outliers(cat.offerings)
    flagged = {(o.machine_type, o.zone) for o, f in zip(cat.offerings, flags) if f}
    assert ("a3-highgpu-8g", "europe-north1-c") in flagged and ("a3-highgpu-8g", "us-central1-a") not in flagged
    w = make_workload(model="bert-base", epochs=2, dataset_size=88_000, budget="10", spot="only", accelerators=["H100"])
    plan = recommend(w, catalog=cat)
    assert all(e.config.offering.zone != "europe-north1-c" for e in plan.candidates())
    allowed = recommend(make_workload(model="bert-base", epochs=2, dataset_size=88_000, budget="10", spot="only",
                                      accelerators=["H100"], allow_outlier_prices=True), catalog=cat)
    assert allowed.chosen.config.offering.zone == "europe-north1-c"


def test_every_plan_names_its_prices_date(tmp_path):
    from cloudfit.catalog.dates import price_date, write_meta

    assert "2026-11-22" in price_date("catalogs/gcp.csv")
    csv = tmp_path / "c.csv"
    csv.write_text("x")
    assert "file dated" in price_date(csv)
    write_meta(csv, source="test", prices_as_of="2027-01-02")
    assert price_date(csv).startswith("2027-01-02")


def test_the_grouped_whole_space_assessment_equals_row_by_row():
    """The capacity wait is computed once per price group on the whole-space path: same numbers as row by row."""
    from cloudfit import catalog
    from cloudfit.profiling.io import load_profile, resolve_profile
    from cloudfit.search import Problem
    from cloudfit.search.space import build_space
    from cloudfit.workload import make_workload

    w = make_workload(model="gpt2", samples=2e7, budget="500")
    sp = build_space(w, load_profile(resolve_profile("gpt2")), catalog.load())
    a, b = sp.assess(Problem.of(w)), sp.assess(Problem.of(w), np.arange(len(sp)))
    assert np.any(np.asarray(a.wait_hours) > 0)
    for f in ("hours", "hours_p90", "cost_usd", "p_on_time", "wait_hours"):
        np.testing.assert_allclose(np.asarray(getattr(a, f)), np.asarray(getattr(b, f)), rtol=1e-9, atol=1e-12)
