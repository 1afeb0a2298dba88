"""The active-search loop: resume, surrogate, choose, probe, record — until a stop rule applies."""

from __future__ import annotations

import math
import os
from dataclasses import replace
from typing import Any, Callable

from cloudfit.active.choose import (ACQUISITIONS, acquire, any_feasible, ask_sampler, best_per_point, closest,
                                    distribution, lookahead, point_value, probe_config)
from cloudfit.active.probe import ProbeInterrupted, ProbeRequest, pending_record, probe_spec, run_probe
from cloudfit.active.record import PROBE_SECONDS, ActiveResult, Point, Trial, point_key, point_of, with_probe
from cloudfit.active.resume import check_measures, open_study, resume
from cloudfit.active.surrogate import SURROGATES, Surrogate
from cloudfit.errors import InfeasibleError, UsageError
from cloudfit.search.problem import Problem
from cloudfit.types import Profile, Workload


def active_search(
    workload: Workload,
    *,
    executor: Any,
    probe_budget_usd: float,
    profile: Profile | None = None,
    catalog: Any = None,
    max_trials: int = 10,
    probe_seconds: float = PROBE_SECONDS,
    probe_steps: int = 50,
    checkpoint_dir: str | None = None,
    storage: str | None = None,
    study_name: str | None = None,
    seed: int = 0,
    restrict_to: set[Point] | None = None,
    use_measurements: bool = True,
    surrogate: str = "gp",
    ei_stop: bool = True,
    acquisition: str = "ei",
    on_trial: Callable[[Trial], None] | None = None,
) -> ActiveResult:
    """Search with probe runs; returns the final plan, every trial and the probe spend.

    ``executor`` is any Executor instance (``ReplayExecutor``, ``LocalExecutor``, ``GcpExecutor``),
    made by the caller; probes on gcp need ``checkpoint_dir`` (gs://BUCKET/PATH; each probe writes
    under its own name). ``restrict_to`` limits the space to these hardware points (a replay world).
    ``use_measurements=False`` records probes without letting them change predictions (a local CPU
    rehearsal says nothing of a GPU). ``surrogate``: ``"gp"`` (model + Gaussian-process correction
    on the probes) or ``"anchor"`` (the model re-anchored on the probes only). ``ei_stop=False``
    keeps probing until another rule stops (benchmarks trace whole trajectories so). ``on_trial`` is
    called after every probe.
    """
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import optuna

    from cloudfit import catalog as catalog_mod
    from cloudfit.plan import load_workload_profile

    if not (probe_budget_usd > 0 and math.isfinite(probe_budget_usd)):
        raise UsageError(f"--probe-budget must be a positive number of USD, got {probe_budget_usd!r}")
    if acquisition not in ACQUISITIONS:
        raise UsageError(f"acquisition must be 'ei' or 'tpe', got {acquisition!r}")
    if surrogate not in SURROGATES:
        raise UsageError(f"surrogate must be 'gp' or 'anchor', got {surrogate!r}")
    if max_trials < 1:
        raise UsageError(f"--max-trials must be at least 1, got {max_trials}")
    if not (probe_seconds > 0 and math.isfinite(probe_seconds)):
        raise UsageError(f"the probe length must be positive, got {probe_seconds!r} s")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cat = catalog if isinstance(catalog, catalog_mod.Catalog) else catalog_mod.load(catalog)
    base_profile = profile or load_workload_profile(workload)
    batch = int(workload.batch_size_per_device or base_profile.stats.batch_size)

    name = study_name or f"cloudfit-{workload.model}"
    study = open_study(name, storage, seed)
    check_measures(study, name, storage, workload, batch)
    state = resume(study, executor, base_profile, batch, workload.precision, use_measurements)
    model = Surrogate(workload, base_profile, cat, kind=surrogate, allowed=restrict_to,
                      use_measurements=use_measurements)
    run = _Run(workload, state, model)
    for number, point in state.untold:  # probes recorded by a search killed before it told the study
        study.tell(number, run.value_of(point))

    history: list[dict[str, Any]] = []
    stop = "max-trials"
    plan = None
    while True:
        space = run.space()
        wl_now = run.remaining()
        plan = _plan(wl_now, space)
        history.append({"trials": len(state.trials), "probe_spend_usd": state.spent,
                        "chosen": None if plan is None else plan.chosen.row()})
        if len(state.trials) >= max_trials:
            stop = "max-trials"
            break
        if wl_now is None:
            stop = "budget"
            break
        problem = Problem.of(wl_now)
        best_pts, _ = best_per_point(space, problem)
        probed = set(state.measured) | state.failed
        open_pts = {k for k in best_pts if k not in probed}
        target: Point | None = point_of(plan.chosen.config) if plan is not None else None
        trial = None
        if plan is None:  # nothing predicted to meet the limits: probe what comes closest, the model may be wrong
            target = closest(lookahead(space, problem, math.inf, open_pts), space, problem, open_pts)
            if target is None:
                stop = "exhausted"
                break
        elif target in probed:
            incumbent = plan.chosen.cost_usd if problem.objective == "cost" else plan.chosen.hours
            value_per_unit = 1.0 if problem.objective == "cost" else plan.chosen.config.price_per_hour
            look = lookahead(space, problem, incumbent, open_pts)
            target = acquire(look, space, value_per_unit, probe_seconds, ei_stop)
            if target is None and not ei_stop:  # tracing: the open point most likely to be feasible
                target = closest(look, space, problem, open_pts)
            if target is None:
                stop = "expected-improvement" if open_pts else "exhausted"
                break
            if acquisition == "tpe":  # optuna's sampler picks instead of the lookahead
                trial, picked = ask_sampler(study, distribution(best_pts), probed, state.measured, space, problem)
                target = picked or target
        config = probe_config(space, target)
        cap = config.price_per_hour * probe_seconds / 3600  # the probe's own budget: its guard stops it there
        stop_now = None
        if state.spent + cap > probe_budget_usd + 1e-12:
            stop_now = "probe-budget"
        elif workload.budget_usd is not None and plan is not None and not any_feasible(space, run.remaining(cap)):
            stop_now = "budget"  # the probe would leave too little of the budget to train with
        if stop_now:
            if trial is not None:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            stop = stop_now
            break
        if trial is None:  # the model's pick (or the lookahead's): enqueued, so the study starts from it
            study.enqueue_trial({"point": point_key(target)}, skip_if_exists=False)
            trial = study.ask({"point": distribution(best_pts)})
        req = ProbeRequest(number=trial.number, point=target, config=config, cap_usd=cap,
                           predicted_samples_per_second=float(space.samples_per_second[best_pts[target][2]]),
                           workload=workload, batch=batch, steps=probe_steps, seconds=probe_seconds,
                           checkpoint_dir=checkpoint_dir)
        spec = probe_spec(req)
        base = pending_record(req, spec.name)
        trial.set_user_attr("pending", base)  # a process killed mid-probe leaves this for the resume
        try:
            tr = run_probe(executor, req, spec, base)
        except ProbeInterrupted as cut:  # Ctrl-C (the executor tore the probe down) or an error: record, re-raise
            trial.set_user_attr("probe", cut.trial.__dict__)
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            raise cut.__cause__ from None
        run.add(tr)
        # The study's value is computed before the probe is recorded, and recording and telling follow
        # each other: a kill in between leaves a RUNNING trial with its record, which resume tells.
        value = run.value_of(target) if tr.status == "ok" else None
        trial.set_user_attr("probe", tr.__dict__)
        if value is not None:
            study.tell(trial, value)
        else:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        if on_trial:
            on_trial(tr)
    spend = state.spent
    if plan is None:
        raise InfeasibleError(f"no configuration meets the limits, after {len(state.trials)} probe(s) "
                              f"(${spend:.2f} spent on probes); relax the deadline or budget")
    plan = replace(plan, provenance={**plan.provenance, "searcher": "active", "active_search": {
        "study": name, "probes": len(state.trials), "probes_ok": sum(t.status == "ok" for t in state.trials),
        "probe_spend_usd": spend, "stop_reason": stop, "surrogate": surrogate,
        "budget_before_probes_usd": workload.budget_usd}})
    return ActiveResult(plan=plan, profile=state.profile, trials=tuple(state.trials), probe_spend_usd=spend,
                        stop_reason=stop, history=tuple(history))


class _Run:
    """The search's state between rounds: the resumed probes, the surrogate and the budget left."""

    def __init__(self, workload: Workload, state, model: Surrogate) -> None:
        self.workload, self.state, self.model = workload, state, model
        self.batch = int(workload.batch_size_per_device or model.base_profile.stats.batch_size)

    def space(self):
        """The surrogate's space given every probe so far."""
        return self.model.space(self.state.measured, self.state.profile)

    def remaining(self, extra: float = 0.0) -> Workload | None:
        """The workload under its budget minus the probe spend (None: nothing left to train with)."""
        w = self.workload
        if w.budget_usd is None:
            return w
        left = w.budget_usd - self.state.spent - extra
        return replace(w, budget_usd=left) if left > 0 else None

    def add(self, tr: Trial) -> None:
        """Count a finished probe: its spend, and its measurement if it measured."""
        s = self.state
        s.trials.append(tr)
        if tr.status == "ok":
            s.measured[tr.point] = float(tr.samples_per_second)
            if self.model.use_measurements:
                s.profile = with_probe(s.profile, tr, self.batch, self.workload.precision)
        else:
            s.failed.add(tr.point)

    def value_of(self, point: Point) -> float:
        """What optuna is told for a probed point, under the budget left."""
        return point_value(self.space(), Problem.of(self.remaining() or self.workload), point)


def _plan(workload: Workload | None, space):
    """``recommend`` on the surrogate's space; None if nothing is predicted to meet the limits."""
    from cloudfit.plan import recommend

    if workload is None:
        return None
    try:
        return recommend(workload, space=space)
    except InfeasibleError:
        return None  # the model sees nothing that meets the limits: probes may show otherwise
