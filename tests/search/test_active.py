"""Active search with the replay backend: stopping rules, resume, failed probes, probe spend."""

from __future__ import annotations

import csv

import pytest

from cloudfit.errors import UsageError
from cloudfit.executors.replay import ReplayExecutor, load_replay_table, worlds_from_measurements
from cloudfit.search.active import active_search
from cloudfit.workload import make_workload


@pytest.fixture(scope="module")
def world():
    ws = [w for w in worlds_from_measurements() if w["name"].startswith("resnet50@64 fp32")]
    return ws[0]


def _workload(world, **kw):
    import numpy as np

    med = float(np.median(list(world["table"].values())))
    return make_workload(model="resnet50", samples=med * 3600 * 10, deadline="40h", batch_size=world["batch"],
                         precision=world["precision"], max_nodes=8, **kw)


def _run(world, ex=None, **kw):
    ex = ex or ReplayExecutor(world["table"], probe_seconds=600)
    kw.setdefault("probe_budget_usd", 100.0)
    r = active_search(_workload(world), executor=ex, profile=world["profile"], restrict_to=world["points"], **kw)
    return r, ex


def test_first_probe_is_the_models_prediction_and_probes_refit_the_profile(world):
    from cloudfit.plan import recommend
    from cloudfit.search.active import _restrict
    from cloudfit import catalog
    from cloudfit.search.space import build_space

    w = _workload(world)
    space = _restrict(build_space(w, world["profile"], catalog.load()), world["points"])
    predicted = recommend(w, space=space).chosen.config
    r, ex = _run(world, max_trials=3, ei_stop=False)
    first = r.trials[0]
    assert (first.accelerator, first.accelerators_per_node, first.nodes) == (
        predicted.offering.accelerator, predicted.offering.accelerators_per_node, predicted.nodes)
    assert len(ex.runs) == 3 == len(r.trials)
    probes = [m for m in r.profile.measurements if m.source == "probe"]
    assert [m.samples_per_second for m in probes] == [t.samples_per_second for t in r.trials if t.status == "ok"]
    # each probed point is planned with its measured throughput
    chosen = r.plan.chosen
    key = (chosen.config.offering.accelerator, chosen.config.offering.accelerators_per_node, chosen.config.nodes)
    measured = {(t.accelerator, t.accelerators_per_node, t.nodes): t.samples_per_second for t in r.trials}
    if key in measured:
        assert chosen.samples_per_second == pytest.approx(measured[key]) and chosen.low == chosen.high


def test_stops_at_max_trials_and_counts_probe_spend(world):
    r, ex = _run(world, max_trials=2, ei_stop=False)
    assert r.stop_reason == "max-trials" and len(r.trials) == 2
    assert r.probe_spend_usd == pytest.approx(sum(t.probe_cost_usd for t in r.trials)) and r.probe_spend_usd > 0
    assert r.total_expected_usd == pytest.approx(r.probe_spend_usd + r.plan.chosen.cost_usd)
    for t, spec in zip(r.trials, ex.runs):
        assert t.probe_cost_usd == pytest.approx(spec.configs[0].price_per_hour * 600 / 3600)


def test_probe_budget_is_never_exceeded(world):
    one = _run(world, max_trials=1, ei_stop=False)[0].trials[0].probe_cost_usd
    budget = one * 1.5  # the first probe fits, a second of the same price would not
    r, ex = _run(world, max_trials=10, ei_stop=False, probe_budget_usd=budget)
    assert r.probe_spend_usd <= budget + 1e-9
    assert r.stop_reason == "probe-budget"


def test_expected_improvement_stop_ends_before_the_trial_limit(world):
    r, _ = _run(world, max_trials=10, ei_stop=True)
    assert r.stop_reason in ("expected-improvement", "exhausted") and len(r.trials) < 10
    full, _ = _run(world, max_trials=10, ei_stop=False)
    assert len(full.trials) >= len(r.trials)


def test_a_config_missing_from_the_table_is_a_failed_probe_not_a_measurement(world):
    table = dict(world["table"])
    r0, _ = _run(world, max_trials=1, ei_stop=False)
    first = r0.trials[0]
    key = (first.accelerator, first.accelerators_per_node, first.nodes, world["batch"], world["precision"])
    del table[key]
    r, _ = _run(world, ReplayExecutor(table, probe_seconds=600), max_trials=3, ei_stop=False)
    t = r.trials[0]
    assert t.status == "failed" and "not in the replay table" in t.reason and t.probe_cost_usd == 0
    assert all(m.samples_per_second != first.samples_per_second for m in r.profile.measurements)
    later = {(x.accelerator, x.accelerators_per_node, x.nodes) for x in r.trials[1:]}
    assert (first.accelerator, first.accelerators_per_node, first.nodes) not in later  # not retried


def test_resume_after_interruption_does_not_probe_again(world, tmp_path):
    import optuna

    storage = f"sqlite:///{tmp_path / 'study.db'}"
    r1, ex1 = _run(world, max_trials=2, ei_stop=False, storage=storage, study_name="s")
    assert len(ex1.runs) == 2
    r2, ex2 = _run(world, max_trials=4, ei_stop=False, storage=storage, study_name="s")
    assert len(ex2.runs) == 2 and len(r2.trials) == 4  # two read back, two new
    assert r2.trials[:2] == r1.trials
    assert r2.probe_spend_usd == pytest.approx(sum(t.probe_cost_usd for t in r2.trials))
    study = optuna.load_study(study_name="s", storage=storage)
    probes = [t for t in study.trials if "probe" in t.user_attrs]
    assert len(probes) == 4 and all(t.state == optuna.trial.TrialState.COMPLETE for t in probes)


def test_failed_probe_is_recorded_as_fail_in_the_study(world, tmp_path):
    import optuna

    r0, _ = _run(world, max_trials=1, ei_stop=False)
    first = r0.trials[0]
    table = {k: v for k, v in world["table"].items() if k[:3] != (first.accelerator, first.accelerators_per_node, first.nodes)}
    storage = f"sqlite:///{tmp_path / 'f.db'}"
    _run(world, ReplayExecutor(table, probe_seconds=600), max_trials=1, ei_stop=False, storage=storage, study_name="f")
    (t,) = [t for t in optuna.load_study(study_name="f", storage=storage).trials if "probe" in t.user_attrs]
    assert t.state == optuna.trial.TrialState.FAIL and t.user_attrs["probe"]["status"] == "failed"


def test_bad_inputs(world, tmp_path):
    with pytest.raises(UsageError, match="probe-budget"):
        _run(world, probe_budget_usd=0)
    with pytest.raises(UsageError, match="max-trials"):
        _run(world, max_trials=0)
    bad = tmp_path / "bad.csv"
    bad.write_text("accelerator,nodes\nA100,1\n")
    with pytest.raises(UsageError, match="lacks column"):
        load_replay_table(bad)
    bad.write_text("accelerator,accelerators_per_node,nodes,batch_size_per_device,precision,samples_per_second\n"
                   "A100,1,1,64,fp16,-3\n")
    with pytest.raises(UsageError, match=r"bad.csv:2: samples_per_second must be positive"):
        load_replay_table(bad)


def write_table(path, world):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["accelerator", "accelerators_per_node", "nodes", "batch_size_per_device", "precision",
                    "samples_per_second"])
        for (a, c, n, b, p), v in world["table"].items():
            w.writerow([a, c, n, b, p, v])
    return path
