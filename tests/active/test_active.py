"""Active search with the replay backend: starting point, surrogate, stopping rules, budget, resume, failures."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from cloudfit.errors import UsageError
from cloudfit.executors.replay import ReplayExecutor, load_replay_table, worlds_from_measurements
from cloudfit.active import active_search
from cloudfit.workload import make_workload


@pytest.fixture(scope="module")
def world():
    ws = [w for w in worlds_from_measurements() if w["name"].startswith("resnet50@64 fp32")]
    return ws[0]


def _workload(world, **kw):
    med = float(np.median(list(world["table"].values())))
    kw.setdefault("deadline", "40h")
    kw.setdefault("precision", world["precision"])
    return make_workload(model="resnet50", samples=med * 3600 * 10, batch_size=world["batch"], max_nodes=8, **kw)


def _run(world, ex=None, workload=None, **kw):
    ex = ex or ReplayExecutor(world["table"], probe_seconds=600)
    kw.setdefault("probe_budget_usd", 100.0)
    r = active_search(workload or _workload(world), executor=ex, profile=world["profile"],
                      restrict_to=world["points"], **kw)
    return r, ex


def _space(world, w=None):
    from cloudfit import catalog
    from cloudfit.active.surrogate import restrict
    from cloudfit.search.space import build_space

    return restrict(build_space(w or _workload(world), world["profile"], catalog.load()), world["points"])


def test_first_probe_is_the_models_prediction_and_probes_join_the_profile(world):
    from cloudfit.plan import recommend

    w = _workload(world)
    predicted = recommend(w, space=_space(world, w)).chosen.config
    r, ex = _run(world, max_trials=3, ei_stop=False)
    first = r.trials[0]
    assert first.point == (predicted.offering.accelerator, predicted.offering.accelerators_per_node, predicted.nodes)
    assert len(ex.runs) == 3 == len(r.trials)
    probes = [m for m in r.profile.measurements if m.source == "probe"]
    assert [m.samples_per_second for m in probes] == [t.samples_per_second for t in r.trials if t.status == "ok"]
    assert all(m.batch_size_per_device == world["batch"] and m.precision == world["precision"] for m in probes)
    # a probed point is planned with its measured throughput and no band
    chosen = r.plan.chosen
    measured = {t.point: t.samples_per_second for t in r.trials}
    key = (chosen.config.offering.accelerator, chosen.config.offering.accelerators_per_node, chosen.config.nodes)
    if key in measured:
        assert chosen.samples_per_second == pytest.approx(measured[key]) and chosen.low == chosen.high
    assert r.plan.provenance["searcher"] == "active"
    assert r.plan.provenance["active_search"]["probes"] == 3
    # later probes were chosen on predictions the earlier probes had moved (the refit)
    from cloudfit.active.choose import best_per_point
    from cloudfit.search.problem import Problem

    space = _space(world, w)
    prior, _ = best_per_point(space, Problem.of(w))
    assert first.predicted_samples_per_second == pytest.approx(space.samples_per_second[prior[first.point][2]])
    for t in r.trials[1:]:
        assert t.predicted_samples_per_second != pytest.approx(space.samples_per_second[prior[t.point][2]], rel=1e-3)


def test_a_probe_moves_the_predictions_of_related_points_and_narrows_their_bands(world):
    from cloudfit.active.surrogate import gp_corrected

    space = _space(world)
    keys, inv = space.point_ids("hardware")
    probed = ("V100", 1, 1)
    pred = {k: float(np.exp(np.log(space.samples_per_second[inv == j]).mean())) for j, k in enumerate(keys)}
    slow = gp_corrected(space, {probed: pred[probed] / 2})  # measured at half the prediction
    fast = gp_corrected(space, {probed: pred[probed] * 2})
    for j, k in enumerate(keys):
        if k == probed:
            continue
        sel = inv == j
        assert (slow.samples_per_second[sel] < space.samples_per_second[sel]).all()
        assert (fast.samples_per_second[sel] > space.samples_per_second[sel]).all()
    same = [j for j, k in enumerate(keys) if k[0] == "V100" and k != probed]
    other = [j for j, k in enumerate(keys) if k[0] != "V100"]
    shift = lambda js: np.mean([np.log(space.samples_per_second[inv == j] / slow.samples_per_second[inv == j]).mean() for j in js])  # noqa: E731
    assert shift(same) > shift(other) > 0  # the same accelerator learns more from the probe
    # a probe as predicted narrows every band (the model's own spread is the prior)
    exact = gp_corrected(space, {probed: pred[probed]})
    assert (exact.log_sigma <= space.log_sigma + 1e-12).all() and (exact.log_sigma < space.log_sigma).any()


def test_stops_at_max_trials_and_counts_probe_spend(world):
    r, ex = _run(world, max_trials=2, ei_stop=False)
    assert r.stop_reason == "max-trials" and len(r.trials) == 2
    assert r.probe_spend_usd == pytest.approx(sum(t.probe_cost_usd for t in r.trials)) and r.probe_spend_usd > 0
    assert r.total_expected_usd == pytest.approx(r.probe_spend_usd + r.plan.chosen.cost_usd)
    for t, spec in zip(r.trials, ex.runs):
        assert t.probe_cost_usd == pytest.approx(spec.configs[0].price_per_hour * 600 / 3600)
        assert spec.budget_usd == pytest.approx(t.probe_cost_usd)  # each probe's guard caps it at its cost
        assert spec.labels["cloudfit-purpose"] == "probe" and not spec.configs[0].spot


def test_probe_budget_is_never_exceeded(world):
    one = _run(world, max_trials=1, ei_stop=False)[0].trials[0].probe_cost_usd
    budget = one * 1.5  # the first probe fits, a second of at least its price would not
    r, ex = _run(world, max_trials=10, ei_stop=False, probe_budget_usd=budget)
    assert r.probe_spend_usd <= budget + 1e-9
    assert r.stop_reason == "probe-budget" and 1 <= len(r.trials) < 10
    r, ex = _run(world, max_trials=10, ei_stop=False, probe_budget_usd=one * 0.99)  # not even one probe
    assert r.stop_reason == "probe-budget" and r.trials == () and ex.runs == [] and r.probe_spend_usd == 0


def test_expected_improvement_stop_weighs_the_probe_cost(world):
    short, _ = _run(world, max_trials=10, probe_seconds=60)
    long, _ = _run(world, max_trials=10, probe_seconds=4 * 3600)  # a probe costs 4 h of the VM
    full, _ = _run(world, max_trials=10, ei_stop=False)
    assert long.stop_reason == "expected-improvement"
    assert len(long.trials) < len(short.trials) <= len(full.trials) == 10
    assert short.stop_reason in ("expected-improvement", "exhausted")


def test_probe_spend_comes_out_of_the_training_budget(world):
    from cloudfit.plan import recommend

    free = recommend(_workload(world), space=_space(world)).chosen
    budget = free.cost_p90_usd * 1.5
    w = _workload(world, budget=budget)
    r, _ = _run(world, workload=w, max_trials=3, ei_stop=False)
    assert r.probe_spend_usd > 0
    assert r.plan.workload.budget_usd == pytest.approx(budget - r.probe_spend_usd)
    assert r.plan.chosen.cost_p90_usd <= budget - r.probe_spend_usd
    assert r.plan.provenance["active_search"]["budget_before_probes_usd"] == budget


def test_no_probe_that_would_leave_the_budget_unable_to_pay_for_a_plan(world):
    from cloudfit.search.problem import cost_quantile

    w0 = _workload(world)
    space = _space(world, w0)
    a = space.assess(w0)
    on_time = np.asarray(a.p_on_time) >= w0.confidence
    need = float(np.min((cost_quantile(a, w0.confidence) + a.reserve_usd)[on_time]))
    one = _run(world, max_trials=1, ei_stop=False)[0].trials[0].probe_cost_usd
    w = _workload(world, budget=need + 0.5 * one)  # a plan fits, but not after that probe
    r, ex = _run(world, workload=w, max_trials=5, ei_stop=False)
    assert r.stop_reason == "budget" and ex.runs == [] and r.plan.chosen.cost_usd > 0


def test_a_config_missing_from_the_table_is_a_failed_probe_not_a_measurement(world):
    table = dict(world["table"])
    r0, _ = _run(world, max_trials=1, ei_stop=False)
    first = r0.trials[0]
    del table[(*first.point, world["batch"], world["precision"])]
    r, _ = _run(world, ReplayExecutor(table, probe_seconds=600), max_trials=3, ei_stop=False)
    t = r.trials[0]
    assert t.status == "failed" and "not in the replay table" in t.reason and t.probe_cost_usd == 0
    assert t.samples_per_second is None
    assert all(m.samples_per_second != first.samples_per_second for m in r.profile.measurements)
    assert first.point not in {x.point for x in r.trials[1:]}  # not retried


def test_resume_after_interruption_does_not_probe_again(world, tmp_path):
    import optuna

    storage = f"sqlite:///{tmp_path / 'study.db'}"
    r1, ex1 = _run(world, max_trials=2, ei_stop=False, storage=storage, study_name="s")
    assert len(ex1.runs) == 2
    r2, ex2 = _run(world, max_trials=4, ei_stop=False, storage=storage, study_name="s")
    assert len(ex2.runs) == 2 and len(r2.trials) == 4  # two read back, two new
    assert r2.trials[:2] == r1.trials
    assert {t.point for t in r2.trials[2:]}.isdisjoint({t.point for t in r1.trials})
    assert r2.probe_spend_usd == pytest.approx(sum(t.probe_cost_usd for t in r2.trials))
    study = optuna.load_study(study_name="s", storage=storage)
    probes = [t for t in study.trials if "probe" in t.user_attrs]
    assert len(probes) == 4 and all(t.state == optuna.trial.TrialState.COMPLETE for t in probes)
    # another workload's probes must not be mixed in
    with pytest.raises(UsageError, match="another --study-name"):
        _run(world, workload=_workload(world, precision="fp16"), max_trials=5, storage=storage, study_name="s")


class _Interrupting(ReplayExecutor):
    """Replay, but the probe number ``at`` (0-based) is interrupted by ``exc`` mid-run."""

    def __init__(self, table, at: int, exc: BaseException) -> None:
        super().__init__(table, probe_seconds=600)
        self.at, self.exc = at, exc

    def run(self, spec, on_event=None):
        if len(self.runs) == self.at:
            self.runs.append(spec)
            raise self.exc
        return super().run(spec, on_event)


_HANGS = """
import sys, time
from cloudfit.executors.replay import ReplayExecutor
from tests.active import test_active as T

class Hangs(ReplayExecutor):
    def run(self, spec, on_event=None):
        if len(self.runs) == 1:
            time.sleep(600)  # the second probe never returns: the test kills us here
        return super().run(spec, on_event)

w = [w for w in T.worlds_from_measurements() if w["name"].startswith("resnet50@64 fp32")][0]
T._run(w, Hangs(w["table"], probe_seconds=600), max_trials=3, ei_stop=False, storage=sys.argv[1], study_name="i")
"""


def _kill_mid_probe(storage: str) -> None:
    """Run a search in another process and SIGKILL it during its second probe (nothing of it runs after)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import optuna

    from tests.conftest import REPO

    proc = subprocess.Popen([sys.executable, "-c", _HANGS, storage], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                trials = optuna.load_study(study_name="i", storage=storage).trials
            except KeyError:  # not created yet
                trials = []
            # the second probe is running: a trial RUNNING with its pending record but no probe record yet
            # (the first trial, RUNNING between its probe record and the tell, is not it)
            if any(t.state == optuna.trial.TrialState.RUNNING and "pending" in t.user_attrs
                   and "probe" not in t.user_attrs for t in trials) and \
                    sum("probe" in t.user_attrs for t in trials) == 1:
                break
            assert proc.poll() is None, "the search ended before it was killed"
            time.sleep(0.1)
        else:
            raise AssertionError("the second probe never started")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


@pytest.mark.parametrize("how", ["ctrl-c", "kill -9"])
def test_an_interrupted_probe_is_failed_charged_and_retried_on_resume(world, tmp_path, how):
    import optuna

    storage = f"sqlite:///{tmp_path / 'i.db'}"
    if how == "ctrl-c":
        ex = _Interrupting(world["table"], at=1, exc=KeyboardInterrupt())
        with pytest.raises(KeyboardInterrupt):
            _run(world, ex, max_trials=3, ei_stop=False, storage=storage, study_name="i")
        cut = ex.runs[1].configs
    else:
        _kill_mid_probe(storage)
        cut = None
    r, ex2 = _run(world, max_trials=3, ei_stop=False, storage=storage, study_name="i")
    t = r.trials[1]
    assert t.status == "failed" and t.reason.startswith("interrupted") and t.retryable
    assert len(ex2.runs) == 1 and r.trials[2].point == t.point  # retried; the first probe not redone
    # the replay backend keeps no record of spend: an interrupted probe is charged its whole cap
    assert t.probe_cost_usd == pytest.approx(ex2.runs[0].budget_usd) and t.probe_cost_usd > 0
    if cut is not None:
        assert ex2.runs[0].configs == cut
    assert r.probe_spend_usd == pytest.approx(sum(x.probe_cost_usd for x in r.trials))
    states = [x.state for x in optuna.load_study(study_name="i", storage=storage).trials if "pending" in x.user_attrs]
    assert states.count(optuna.trial.TrialState.FAIL) == 1 and optuna.trial.TrialState.RUNNING not in states


def test_a_probe_recorded_but_never_told_counts_on_resume(world, tmp_path):
    """A kill between recording a probe and telling the study leaves a RUNNING trial with its record:
    the probe happened, so the resume counts it (not probed again, not charged twice) and tells it."""
    import optuna

    r0, _ = _run(world, max_trials=1, ei_stop=False)
    rec = r0.trials[0].__dict__
    storage = f"sqlite:///{tmp_path / 'u.db'}"
    study = optuna.create_study(study_name="u", storage=storage, direction="minimize")
    t = study.ask()
    pending = {k: rec[k] for k in ("accelerator", "accelerators_per_node", "nodes", "machine_type", "zone",
                                   "predicted_samples_per_second", "probe_cost_usd", "run")}
    t.set_user_attr("pending", {**pending, "number": t.number})
    t.set_user_attr("probe", {**rec, "number": t.number})
    r, ex = _run(world, max_trials=2, ei_stop=False, storage=storage, study_name="u")
    assert r.trials[0].status == "ok" and r.trials[0].point == r0.trials[0].point
    assert len(ex.runs) == 1 and r.trials[1].point != r.trials[0].point  # the recorded probe is not run again
    assert r.probe_spend_usd == pytest.approx(sum(x.probe_cost_usd for x in r.trials))
    states = [x.state for x in optuna.load_study(study_name="u", storage=storage).trials]
    assert optuna.trial.TrialState.RUNNING not in states and states[0] == optuna.trial.TrialState.COMPLETE


def test_failed_probe_is_recorded_as_fail_in_the_study(world, tmp_path):
    import optuna

    r0, _ = _run(world, max_trials=1, ei_stop=False)
    first = r0.trials[0]
    table = {k: v for k, v in world["table"].items() if k[:3] != first.point}
    storage = f"sqlite:///{tmp_path / 'f.db'}"
    _run(world, ReplayExecutor(table, probe_seconds=600), max_trials=1, ei_stop=False, storage=storage, study_name="f")
    (t,) = [t for t in optuna.load_study(study_name="f", storage=storage).trials if "probe" in t.user_attrs]
    assert t.state == optuna.trial.TrialState.FAIL and t.user_attrs["probe"]["status"] == "failed"
    assert "not in the replay table" in t.user_attrs["probe"]["reason"]


def test_bad_inputs(world, tmp_path):
    with pytest.raises(UsageError, match="probe-budget"):
        _run(world, probe_budget_usd=0)
    with pytest.raises(UsageError, match="probe-budget"):
        _run(world, probe_budget_usd=math.inf)
    with pytest.raises(UsageError, match="max-trials"):
        _run(world, max_trials=0)
    with pytest.raises(UsageError, match="surrogate"):
        _run(world, surrogate="magic")
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
