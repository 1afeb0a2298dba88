"""Active search: a few short, paid probe runs chosen by Bayesian optimisation, starting from the model.

The study (optuna, ask/tell) searches hardware points — (machine shape, nodes); zones and spot only
change the price, so they are priced exactly, never probed. Each round:

1. the performance model, anchored on every probe so far, ranks the whole space (``recommend``);
   probed points use their measured throughput with no uncertainty;
2. if the current winner's hardware point has not been probed, probe it (``enqueue_trial``: the
   search starts from the model's prediction, not from random points); otherwise probe the unprobed
   point of largest expected improvement under the model's band (the model is the surrogate;
   ``acquisition="tpe"`` lets optuna's seeded TPE sampler pick instead);
3. the probe runs through an executor (replay, local or gcp) on the point's cheapest offering; its
   throughput is appended to the profile as a ``probe`` measurement, which re-anchors every
   prediction (the refit); a failed probe (stockout, preemption, missing from a replay table) is
   recorded as a FAIL trial with its reason, never as a measurement.

Stopping (first that applies): ``max_trials`` probes; the next probe would overrun the probe budget;
the expected improvement of the best unprobed point (over the model's band) is worth less than the
probe's cost (for the time objective, hours saved are valued at the current plan's price per hour).
With an optuna storage (``sqlite:///study.db``) an interrupted search resumes: completed probes are
read back from the study, not run again. Probe spend is reported with the plan's expected cost.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from cloudfit.errors import InfeasibleError, UsageError
from cloudfit.search.problem import Problem, score
from cloudfit.types import ClusterConfig, Measurement, Plan, Profile, Workload

PROBE_SECONDS = 600.0
#: Normal quantiles for the expected-improvement integral (deterministic, no sampling noise).
_Z = np.array([-2.326, -1.645, -1.282, -0.842, -0.524, -0.253, 0.0, 0.253, 0.524, 0.842, 1.282, 1.645, 2.326])
_ZW = np.array([0.01, 0.04, 0.05, 0.1, 0.1, 0.1, 0.2, 0.1, 0.1, 0.1, 0.05, 0.04, 0.01])

Point = tuple[str, int, int]  # (accelerator, accelerators per node, nodes): what a probe measures


@dataclass(frozen=True)
class Trial:
    number: int
    accelerator: str
    accelerators_per_node: int
    nodes: int
    machine_type: str
    zone: str
    status: str  # ok | failed
    samples_per_second: float | None
    predicted_samples_per_second: float
    probe_cost_usd: float
    reason: str = ""


@dataclass(frozen=True)
class ActiveResult:
    plan: Plan
    profile: Profile  # with every probe's measurement
    trials: tuple[Trial, ...]
    probe_spend_usd: float
    stop_reason: str  # max-trials | probe-budget | expected-improvement | exhausted (no open point could help)
    history: tuple[dict[str, Any], ...] = field(default_factory=tuple)  # the plan after each trial

    @property
    def total_expected_usd(self) -> float:
        return self.probe_spend_usd + self.plan.chosen.cost_usd

    def to_dict(self) -> dict[str, Any]:
        from cloudfit.planio import plan_to_dict

        return {"stop_reason": self.stop_reason, "probe_spend_usd": self.probe_spend_usd,
                "plan_expected_cost_usd": self.plan.chosen.cost_usd, "total_expected_usd": self.total_expected_usd,
                "trials": [t.__dict__ for t in self.trials], "history": list(self.history),
                "chosen": self.plan.chosen.row(), "plan": plan_to_dict(self.plan)}


def _point(c: ClusterConfig) -> Point:
    return (c.offering.accelerator, c.offering.accelerators_per_node, c.nodes)


def _with_measured(space, measured: dict[Point, float]):
    """The space with measured points' throughput in place of predictions (zero uncertainty)."""
    if not measured:
        return space
    offs = space.catalog.offerings
    acc = np.array([offs[int(i)].accelerator for i in range(len(offs))], dtype=object)[space.offering]
    per = np.array([offs[int(i)].accelerators_per_node for i in range(len(offs))])[space.offering]
    sps, low, high = space.samples_per_second.copy(), space.low.copy(), space.high.copy()
    for (a, c, n), v in measured.items():
        sel = (acc == a) & (per == c) & (space.nodes == n)
        sps[sel] = low[sel] = high[sel] = v
    return replace(space, samples_per_second=sps, low=low, high=high, _full={})


def _restrict(space, allowed: set[Point] | None):
    if allowed is None:
        return space
    offs = space.catalog.offerings
    keep = np.array([(offs[int(o)].accelerator, offs[int(o)].accelerators_per_node, int(n)) in allowed
                     for o, n in zip(space.offering, space.nodes)], dtype=bool)
    if not keep.any():
        from cloudfit.errors import InfeasibleError

        raise InfeasibleError("no catalog configuration matches a row of the replay table")
    cols = {k: getattr(space, k)[keep] for k in ("offering", "shape", "nodes", "spot", "price_per_hour",
                                                 "samples_per_second", "low", "high", "hazard_per_node_hour")}
    return replace(space, **cols, _full={})


def _best_per_point(space, problem: Problem):
    """For every hardware point: (best objective value, feasible?, candidate id, $/h) under the space."""
    a = space.assess(problem.deadline_hours)
    feasible, primary, _ = score(a, problem)
    offs = space.catalog.offerings
    out: dict[Point, tuple[float, bool, int]] = {}
    for i in np.lexsort((primary, ~feasible)):  # feasible first, then best value
        o = offs[int(space.offering[i])]
        k = (o.accelerator, o.accelerators_per_node, int(space.nodes[i]))
        if k not in out:
            out[k] = (float(primary[i]), bool(feasible[i]), int(i))
    return out, a


def expected_improvement(space, problem: Problem, incumbent: float, probed: set[Point]) -> tuple[float, Point | None]:
    """Largest expected improvement (objective units) over ``incumbent`` of an unprobed point.

    A point's objective scales as 1/throughput (cost ∝ hours ∝ 1/samples/s, overheads aside); its
    throughput is lognormal with the model's band. Points infeasible even at their optimistic (90%)
    throughput are skipped.
    """
    best_pts, a = _best_per_point(space, problem)
    opt = replace(space, samples_per_second=space.high, low=space.high, _full={})
    opt_pts, _ = _best_per_point(opt, problem)
    sigma = space.log_sigma
    best_ei, arg = 0.0, None
    for k, (v, _, i) in best_pts.items():
        if k in probed or not opt_pts.get(k, (0, False))[1]:
            continue
        vals = v * np.exp(-sigma[i] * _Z)  # faster than predicted → cheaper/sooner
        ei = float(np.sum(_ZW * np.maximum(incumbent - vals, 0.0)))
        if ei > best_ei:
            best_ei, arg = ei, k
    return best_ei, arg


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
    storage: str | None = None,
    study_name: str | None = None,
    seed: int = 0,
    restrict_to: set[Point] | None = None,
    use_measurements: bool = True,
    ei_stop: bool = True,
    acquisition: str = "ei",
    on_trial: Callable[[Trial], None] | None = None,
) -> ActiveResult:
    """Search with probe runs; returns the final plan, every trial and the probe spend.

    ``executor`` is any Executor (``ReplayExecutor``, ``LocalExecutor``, ``GcpExecutor``). ``restrict_to``
    limits the space to these hardware points (a replay world). ``use_measurements=False`` records
    probes without letting them re-anchor predictions (a local CPU rehearsal says nothing of a GPU).
    ``acquisition``: once the model's own winner is probed, the next point is the one of largest
    expected improvement under the re-anchored model (``"ei"``, default) or optuna's TPE pick (``"tpe"``).
    """
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import optuna

    from cloudfit import catalog as catalog_mod
    from cloudfit.executors.base import probe_spec
    from cloudfit.plan import load_workload_profile, recommend
    from cloudfit.search.space import build_space
    from cloudfit.workload import validate_workload

    validate_workload(workload)
    if not (probe_budget_usd > 0 and math.isfinite(probe_budget_usd)):
        raise UsageError(f"--probe-budget must be a positive number of USD, got {probe_budget_usd!r}")
    if acquisition not in ("ei", "tpe"):
        raise UsageError(f"acquisition must be 'ei' or 'tpe', got {acquisition!r}")
    if max_trials < 1:
        raise UsageError(f"--max-trials must be at least 1, got {max_trials}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cat = catalog if isinstance(catalog, catalog_mod.Catalog) else catalog_mod.load(catalog)
    base_profile = profile or load_workload_profile(workload)
    problem = Problem.of(workload)
    batch = workload.batch_size_per_device or base_profile.stats.batch_size

    study = optuna.create_study(study_name=study_name or f"cloudfit-{workload.model}", storage=storage,
                                load_if_exists=True, direction="minimize",
                                sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=3))
    # Resume: completed and failed probes come back from the storage.
    trials: list[Trial] = []
    measured: dict[Point, float] = {}
    failed: set[Point] = set()
    prof = base_profile
    spend = 0.0
    for t in study.trials:
        rec = t.user_attrs.get("probe")
        if not rec:
            continue
        tr = Trial(**rec)
        trials.append(tr)
        spend += tr.probe_cost_usd
        if tr.status == "ok":
            measured[(tr.accelerator, tr.accelerators_per_node, tr.nodes)] = float(tr.samples_per_second)
            prof = _add(prof, tr, batch, workload.precision, use_measurements)
        else:
            failed.add((tr.accelerator, tr.accelerators_per_node, tr.nodes))

    def current():
        sp = _restrict(build_space(workload, prof, cat), restrict_to)
        return _with_measured(sp, measured)

    history: list[dict[str, Any]] = []
    stop = "max-trials"
    plan = None
    while True:
        space = current()
        try:
            plan = recommend(workload, space=space)
        except InfeasibleError:
            plan = None  # the model sees nothing that meets the limits: probes may show otherwise
        history.append({"trials": len(trials), "probe_spend_usd": spend,
                        "chosen": None if plan is None else plan.chosen.row()})
        if len(trials) >= max_trials:
            stop = "max-trials"
            break
        probed = set(measured) | failed
        best_pts, _ = _best_per_point(space, problem)
        dist = optuna.distributions.CategoricalDistribution(sorted(_pkey(k) for k in best_pts))
        trial = None
        if plan is None:  # probe the point the model thinks comes closest
            open_pts = [k for k in best_pts if k not in probed]
            if not open_pts:
                stop = "exhausted"
                break
            target = min(open_pts, key=lambda k: (not best_pts[k][1], best_pts[k][0], k))
        else:
            target = _point(plan.chosen.config)
        if plan is not None and target in probed:
            incumbent = plan.chosen.cost_usd if problem.objective == "cost" else plan.chosen.hours
            ei, arg = expected_improvement(space, problem, incumbent, probed)
            if arg is None and not ei_stop:  # tracing: keep probing the best predicted open point
                open_pts = [k for k in best_pts if k not in probed]
                arg = min(open_pts, key=lambda k: (not best_pts[k][1], best_pts[k][0], k)) if open_pts else None
            if arg is None:
                stop = "exhausted"
                break
            if ei_stop:
                value_per_unit = 1.0 if problem.objective == "cost" else plan.chosen.config.price_per_hour
                cost_next = _probe_config(space, arg).price_per_hour * probe_seconds / 3600
                if ei * value_per_unit < cost_next:
                    stop = "expected-improvement"
                    break
            target = arg
            if acquisition == "tpe":  # let optuna's sampler pick instead of the model's expected improvement
                trial, picked = _ask_sampler(study, dist, probed, measured, space, problem)
                target = picked or arg
        i = best_pts[target][2]
        config = _probe_config(space, target)
        cost = config.price_per_hour * probe_seconds / 3600
        if spend + cost > probe_budget_usd + 1e-12:
            if trial is not None:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            stop = "probe-budget"
            break
        if trial is None:  # the model's pick (or EI's): start from the prediction
            study.enqueue_trial({"point": _pkey(target)}, skip_if_exists=False)
            trial = study.ask({"point": dist})
        spec = probe_spec(config, model=workload.model, steps=probe_steps, budget_usd=probe_budget_usd - spend,
                          timeout_s=probe_seconds, batch_size_per_device=batch)
        spec = replace(spec, job=replace(spec.job, precision=workload.precision))
        result = executor.run(spec)
        ok = result.reason == "completed" and result.samples_per_second
        tr = Trial(number=trial.number, accelerator=target[0], accelerators_per_node=target[1], nodes=target[2],
                   machine_type=config.offering.machine_type, zone=config.offering.zone,
                   status="ok" if ok else "failed", samples_per_second=float(result.samples_per_second) if ok else None,
                   predicted_samples_per_second=float(space.samples_per_second[i]),
                   probe_cost_usd=float(result.spend_usd), reason="" if ok else (result.detail or result.reason))
        spend += tr.probe_cost_usd
        trial.set_user_attr("probe", tr.__dict__)
        if ok:
            measured[target] = tr.samples_per_second
            prof = _add(prof, tr, batch, workload.precision, use_measurements)
            value = _point_value(current(), problem, target)
            study.tell(trial, value)
        else:
            failed.add(target)
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        trials.append(tr)
        if on_trial:
            on_trial(tr)
    if plan is None:
        raise InfeasibleError(f"no configuration meets the limits, after {len(trials)} probe(s) "
                              f"(${spend:.2f} spent on probes); relax the deadline or budget")
    return ActiveResult(plan=plan, profile=prof, trials=tuple(trials), probe_spend_usd=spend, stop_reason=stop,
                        history=tuple(history))


def _pkey(k: Point) -> str:
    return f"{k[0]}|{k[1]}|{k[2]}"


def _ask_sampler(study, dist, probed: set[Point], measured: dict[Point, float], space, problem: Problem):
    """(trial, point): the sampler's pick among unprobed points, the trial left open for its probe.

    A proposal of an already probed point is told that point's known value (no probe needed) and the
    sampler is asked again; after 20 such proposals give up and return (None, None).
    """
    import optuna

    for _ in range(20):
        t = study.ask({"point": dist})
        a, c, n = t.params["point"].split("|")
        k = (a, int(c), int(n))
        if k not in probed:
            return t, k
        if k in measured:
            study.tell(t, _point_value(space, problem, k))
        else:
            study.tell(t, state=optuna.trial.TrialState.FAIL)
    return None, None


def _probe_config(space, point: Point) -> ClusterConfig:
    """The cheapest on-demand offering of ``point`` (a probe must not be preempted); spot if that is all."""
    offs = space.catalog.offerings
    ids = [i for i in range(len(space)) if _point(space.config(i)) == point]
    od = [i for i in ids if not space.spot[i]] or ids
    i = min(od, key=lambda j: (space.price_per_hour[j], j))
    return space.config(i)


def _point_value(space, problem: Problem, point: Point) -> float:
    best, _ = _best_per_point(space, problem)
    v, feasible, _ = best[point]
    return v if feasible else 10.0 * v


def _add(profile: Profile, tr: Trial, batch: int, precision: str, use: bool) -> Profile:
    if not use:
        return profile
    m = Measurement(accelerator=tr.accelerator, count=tr.accelerators_per_node, nodes=tr.nodes,
                    batch_size_per_device=int(batch), precision=precision,
                    samples_per_second=float(tr.samples_per_second), source="probe",
                    note=f"active search trial {tr.number} on {tr.machine_type} in {tr.zone}")
    return profile.with_measurement(m)
