"""The preemption model: fitted hazards, exact properties of assess(), and agreement with simulate()."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cloudfit import spot
from cloudfit.errors import UnknownAcceleratorError, UsageError

REPO = Path(__file__).resolve().parents[2]
OV = spot.DEFAULT_OVERHEADS
GB = 1e9


def _assess(W, *, sig=0.0, n=1, sp=True, lam=0.05, price=1.0, ckpt=1.5 * GB, deadline=None, ov=None):
    W, sig, n, sp, lam, price = np.broadcast_arrays(np.asarray(W, float), np.asarray(sig, float), np.asarray(n),
                                                   np.asarray(sp, bool), np.asarray(lam, float),
                                                   np.asarray(price, float))
    return spot.assess(compute_hours=W, log_sigma=sig, nodes=n, spot=sp, hazard_per_node_hour=lam,
                       price_per_hour=price, checkpoint_bytes=ckpt, deadline_hours=deadline, overheads=ov)


# --------------------------------------------------------------------------------------------
# Fitted parameters


def test_fit_is_reproducible_from_shipped_raw_data():
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "fit_spot.py"), "--check"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_fitted_lifetimes_match_the_cmdare_paper():
    p = json.loads((REPO / "cloudfit" / "data" / "spot_hazards.json").read_text())
    assert p["schema_version"] == 1
    acc = p["gcp"]["accelerators"]
    # CM-DARE: 31% of K80, 20% of P100, 10% of V100 revoked before the 24 h cap
    assert acc["K80"]["revoked_before_cap"] == pytest.approx(0.31, abs=0.01)
    assert acc["P100"]["revoked_before_cap"] == pytest.approx(0.20, abs=0.01)
    assert acc["V100"]["revoked_before_cap"] == pytest.approx(0.10, abs=0.01)
    for e in acc.values():  # rate = revocations / exposure, inside its own interval
        assert e["rate_per_node_hour"] == pytest.approx(e["revocations"] / e["exposure_node_hours"], rel=1e-5)
        lo, hi = e["interval_90"]
        assert lo < e["rate_per_node_hour"] < hi
    fb = p["gcp"]["fallback"]
    assert fb["revocations"] == sum(e["revocations"] for e in acc.values())


def test_hazard_lookup_region_accelerator_and_fallback():
    p = spot.load_params()["gcp"]
    v100 = p["accelerators"]["V100"]
    got = spot.hazards(["V100", "V100", "V100", "H100", "A100", "CPU"],
                       ["europe-west4", "europe-west4-a", "southamerica-east1", "us-central1-a", "asia-east1", "us-east1-b"])
    assert got[0] == v100["regions"]["europe-west4"]["rate_per_node_hour"]
    assert got[1] == got[0]  # a zone name maps to its region's entry
    # a user's spelling is resolved by hazard_info; hazards() takes the catalog's canonical names only
    assert spot.hazard_info("nvidia-tesla-v100", "europe-west4-a").rate_per_node_hour == got[0]
    with pytest.raises(UnknownAcceleratorError, match="canonical"):
        spot.hazards(["nvidia-tesla-v100"], ["europe-west4"])
    assert got[2] == v100["rate_per_node_hour"]  # region without data: the accelerator's rate
    assert got[3] == got[4] == p["fallback"]["rate_per_node_hour"]  # no data for H100/A100: pooled
    assert got[5] == p["CPU"]["regions"]["us-east1"]["rate_per_node_hour"]
    info = spot.hazard_info("H100", "us-central1")
    assert info.source == "fallback" and "pooled" in info.detail
    assert spot.hazard_info("K80", "us-central1").source == "region"
    with pytest.raises(UnknownAcceleratorError):
        spot.hazards(["Z9000"], ["us-central1"])


def test_region_rates_are_shrunk_between_their_own_count_and_the_accelerator_rate():
    acc = spot.load_params()["gcp"]["accelerators"]
    for e in acc.values():
        for r in e["regions"].values():
            lo, hi = sorted((r["mle"], e["rate_per_node_hour"]))
            assert lo <= r["rate_per_node_hour"] <= hi
            assert r["rate_per_node_hour"] > 0  # never a free lunch from zero observed revocations


# --------------------------------------------------------------------------------------------
# Checkpoint interval


def test_checkpoint_interval_is_the_exact_optimum_and_tends_to_young():
    C = 30 / 3600
    for lam in (1e-4, 0.01, 0.3, 5.0, 80.0):
        tau = spot.optimal_interval_hours(np.array([lam]), C)[0]
        grid = tau * np.exp(np.linspace(-1, 1, 20001))
        cost = np.expm1(lam * (grid + C)) / (lam * grid)  # Daly: expected wall per compute hour (× e^{ΛR})
        assert grid[np.argmin(cost)] == pytest.approx(tau, rel=1e-3)
    young = math.sqrt(2 * C / 1e-4)
    assert spot.optimal_interval_hours(np.array([1e-4]), C)[0] == pytest.approx(young, rel=0.01)
    assert np.isinf(spot.optimal_interval_hours(np.array([0.0]), C)[0])


# --------------------------------------------------------------------------------------------
# Exact properties of assess()


def test_more_nodes_or_higher_hazard_never_lowers_expected_hours():
    W = np.array([0.5, 3.0, 40.0])
    for sig in (0.0, 0.2):
        lams = np.geomspace(1e-4, 2.0, 60)
        for w in W:
            h = _assess(np.full(lams.size, w), sig=sig, lam=lams).hours
            assert np.all(np.diff(h) >= -1e-12 * h[1:])
            nodes = np.arange(1, 65)
            hn = _assess(np.full(nodes.size, w), sig=sig, n=nodes, lam=0.02).hours
            assert np.all(np.diff(hn) >= -1e-12 * hn[1:])
            assert hn[-1] > hn[0]


def test_cluster_hazard_is_nodes_times_node_hazard():
    a = _assess([5.0], n=8, lam=0.03)
    b = _assess([5.0], n=1, lam=0.24)
    assert a.hours[0] == pytest.approx(b.hours[0], rel=1e-12)
    assert a.hours_p90[0] == pytest.approx(b.hours_p90[0], rel=1e-9)


def test_on_demand_pays_no_preemption_cost():
    W = np.array([1.0, 7.0, 90.0])
    a = _assess(W, sp=False, lam=0.4, n=16, deadline=100.0)
    C = OV.checkpoint_s(1.5 * GB) / 3600
    assert np.all(a.expected_preemptions == 0)
    np.testing.assert_allclose(a.hours, OV.start_on_demand_s / 3600 + W + C, rtol=1e-12)
    np.testing.assert_allclose(a.hours_p90, a.hours, rtol=1e-12)  # no uncertainty at all: σ = 0
    np.testing.assert_array_equal(a.p_on_time, [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(a.checkpoint_interval_h, W)  # only the final save
    same = _assess(W, sp=False, lam=0.0, n=16, deadline=100.0)
    np.testing.assert_array_equal(a.hours, same.hours)  # the hazard of an on-demand row is irrelevant


def test_zero_hazard_is_compute_plus_checkpoint_overhead():
    W = np.array([0.2, 2.0, 20.0, 200.0])
    a = _assess(W, lam=0.0, n=64)
    C = OV.checkpoint_s(1.5 * GB) / 3600
    np.testing.assert_allclose(a.hours, OV.start_spot_s / 3600 + W + C, rtol=1e-12)
    np.testing.assert_allclose(a.overhead_hours, OV.start_spot_s / 3600 + C, rtol=1e-9)
    assert np.all(a.expected_preemptions == 0)


def test_no_deadline_means_certain_and_looser_deadlines_never_lower_p_on_time():
    W = np.array([1.0, 1.0, 10.0, 10.0, 50.0])
    sig = np.array([0.0, 0.2, 0.0, 0.15, 0.3])
    n = np.array([1, 4, 8, 1, 32])
    assert np.all(_assess(W, sig=sig, n=n, lam=0.05).p_on_time == 1.0)
    prev = np.zeros(W.size)
    for d in np.geomspace(0.5, 400, 80):
        p = _assess(W, sig=sig, n=n, lam=0.05, deadline=d).p_on_time
        assert np.all((p >= 0) & (p <= 1))
        assert np.all(p >= prev - 1e-12)
        prev = p
    assert np.all(prev > 0.999)


def test_costs_are_price_times_hours_and_p90_is_above_the_median():
    price = np.array([3.0, 40.0])
    a = _assess([10.0, 10.0], sig=0.2, n=[1, 8], lam=0.05, price=price)
    np.testing.assert_allclose(a.cost_usd, price * a.hours)
    np.testing.assert_allclose(a.cost_p90_usd, price * a.hours_p90)
    assert np.all(a.hours_p90 > 10.0)


def test_grouped_evaluation_equals_row_by_row():
    rng = np.random.default_rng(3)
    base_W = rng.uniform(0.3, 80, 40)
    k = rng.integers(0, 40, 3000)  # many rows share (W, σ, nodes, hazard): the fast path groups them
    W, sig = base_W[k], (k % 4) * 0.07
    n, sp, lam = 1 + k % 9, (k % 3) > 0, np.where(k % 2 == 0, 0.01, 0.2)
    price = rng.uniform(1, 50, k.size)
    big = _assess(W, sig=sig, n=n, sp=sp, lam=lam, price=price, deadline=30.0)
    for i in rng.choice(k.size, 25, replace=False):
        one = spot.assess_one(W[i], log_sigma=sig[i], nodes=int(n[i]), spot=bool(sp[i]), hazard_per_node_hour=lam[i],
                              price_per_hour=price[i], checkpoint_bytes=1.5 * GB, deadline_hours=30.0)
        assert one.hours == pytest.approx(big.hours[i], rel=1e-12)
        assert one.hours_p90 == pytest.approx(big.hours_p90[i], rel=1e-9)
        assert one.p_on_time == pytest.approx(big.p_on_time[i], abs=1e-9)
        assert one.cost_usd == pytest.approx(big.cost_usd[i], rel=1e-12)


def test_assess_one_looks_up_the_hazard():
    a = spot.assess_one(10.0, nodes=4, accelerator="V100", region="europe-west4-a", checkpoint_bytes=GB)
    lam = spot.hazard_info("V100", "europe-west4").rate_per_node_hour
    b = spot.assess_one(10.0, nodes=4, hazard_per_node_hour=lam, checkpoint_bytes=GB)
    assert a == b
    with pytest.raises(UsageError):
        spot.assess_one(10.0, spot=True)


@pytest.mark.parametrize("kwargs", [
    {"W": [-1.0]}, {"W": [np.nan]}, {"lam": [-0.1]}, {"sig": [-0.1]}, {"n": [0]}, {"deadline": 0.0},
    {"ckpt": -5.0}, {"W": [1.0, 2.0], "n": [1, 2, 3]},
])
def test_bad_inputs_raise_usage_errors(kwargs):
    base = {"W": [1.0]}
    base.update(kwargs)
    W = base.pop("W")
    with pytest.raises(UsageError):
        if "n" in base and len(base["n"]) != len(W):
            spot.assess(compute_hours=np.array(W), log_sigma=0.0, nodes=np.array(base["n"]), spot=True,
                        hazard_per_node_hour=0.1, price_per_hour=1.0, checkpoint_bytes=0.0, deadline_hours=None)
        else:
            _assess(W, **base)


def test_importing_spot_stays_light():
    code = "import sys, cloudfit.spot; bad = [m for m in ('scipy', 'pandas', 'torch', 'sklearn') if m in sys.modules]; print(bad)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "[]", r.stdout + r.stderr


# --------------------------------------------------------------------------------------------
# The simulator and the analytic model agree


def test_simulator_without_revocations_is_deterministic_bookkeeping():
    s = spot.simulate(compute_hours=5.0, hazard_per_node_hour=0.0, nodes=4, checkpoint_bytes=GB,
                      checkpoint_interval_h=1.2, runs=10)
    C = OV.checkpoint_s(GB) / 3600
    np.testing.assert_allclose(s.hours, OV.start_spot_s / 3600 + 5.0 + 5 * C)  # ceil(5 / 1.2) = 5 saves
    assert np.all(s.preemptions == 0)
    a = spot.simulate(compute_hours=3.0, hazard_per_node_hour=0.2, nodes=4, runs=300, seed=7)
    b = spot.simulate(compute_hours=3.0, hazard_per_node_hour=0.2, nodes=4, runs=300, seed=7)
    np.testing.assert_array_equal(a.hours, b.hours)


def test_simulated_node_clocks_superpose_to_n_times_lambda():
    many = spot.simulate(compute_hours=4.0, hazard_per_node_hour=0.05, nodes=8, checkpoint_bytes=GB, runs=4000, seed=1)
    one = spot.simulate(compute_hours=4.0, hazard_per_node_hour=0.4, nodes=1, checkpoint_bytes=GB, runs=4000, seed=2)
    assert many.preemptions.mean() == pytest.approx(one.preemptions.mean(), rel=0.08)
    assert many.mean() == pytest.approx(one.mean(), rel=0.02)


@pytest.mark.parametrize("W,n,lam,sig", [
    (1.0, 1, 0.5, 0.0),
    (10.0, 4, 0.05, 0.15),
    (10.0, 16, 0.2, 0.0),
    (30.0, 64, 0.01, 0.1),
    (100.0, 1, 0.01, 0.0),
])
def test_analytic_matches_simulation(W, n, lam, sig):
    s = spot.simulate(compute_hours=W, hazard_per_node_hour=lam, nodes=n, log_sigma=sig,
                      checkpoint_bytes=1.5 * GB, runs=3000, seed=11)
    a = spot.assess_one(W, nodes=n, hazard_per_node_hour=lam, log_sigma=sig, checkpoint_bytes=1.5 * GB)
    assert a.hours == pytest.approx(s.mean(), rel=0.03)
    assert a.hours_p90 == pytest.approx(s.quantile(0.9), rel=0.06)
    assert a.expected_preemptions == pytest.approx(s.preemptions.mean(), rel=0.1, abs=0.05)
    for q in (0.5, 0.9):
        d = s.quantile(q)
        p = spot.assess_one(W, nodes=n, hazard_per_node_hour=lam, log_sigma=sig, checkpoint_bytes=1.5 * GB,
                            deadline_hours=d).p_on_time
        assert p == pytest.approx(s.p_on_time(d), abs=0.07)


def test_extreme_inputs_give_numbers_not_nans_or_warnings():
    rng = np.random.default_rng(5)
    N = 4000
    W = np.exp(rng.uniform(np.log(1e-4), np.log(1e4), N))
    sig = rng.choice([0, 1e-9, 0.3, 2.0], N)
    n = rng.integers(1, 200, N)
    lam = rng.choice([0, 1e-9, 0.01, 3, 20], N)
    with np.errstate(all="raise"):
        for ckpt in (0.0, 1e11):
            a = _assess(W, sig=sig, n=n, sp=rng.random(N) < 0.7, lam=lam, price=rng.uniform(0, 100, N), ckpt=ckpt,
                        deadline=10.0)
            for f in ("hours", "hours_p90", "p_on_time", "cost_usd", "cost_p90_usd", "expected_preemptions"):
                assert not np.isnan(getattr(a, f)).any(), f
            assert np.all((a.p_on_time >= 0) & (a.p_on_time <= 1))
            assert np.all(a.hours >= W) and np.all(a.hours_p90 >= W)
            assert np.all(a.p_on_time[~np.isfinite(a.hours)] == 0)
