"""Active search: a few short, paid probe runs chosen by Bayesian optimisation, starting from the model.

The study (optuna, ask/tell, one trial per probe) searches hardware points — (accelerator, accelerators
per node, nodes); zones and spot only change the price and the preemption risk, so they are priced
exactly, never probed. Each round:

1. the surrogate predicts every point: by default (``surrogate="gp"``) the performance model's
   prediction (anchored on the input profile's measurements) is the prior mean of a Gaussian process
   on log throughput whose prior spread is the model's calibrated band, conditioned on the probes so
   far — this is the refit: one probe moves and narrows the predictions of related points (same
   accelerator, similar device and node counts), and probes that miss by more than the band widen
   every band (amplitude by maximum likelihood). ``"anchor"`` instead re-anchors the model on the
   probes (the profile's measurements; single-node ones only, as the model uses them). Probed points
   use their measured throughput with no uncertainty;
2. the plan is ``recommend`` on that space, under the workload's budget minus the probe spend;
3. if the plan's hardware point has not been probed, probe it (enqueued: the search starts from the
   model's prediction, not from random points, and a plan ends on a measured point unless a stop
   intervenes); otherwise probe the unprobed point of largest expected improvement net of its probe's
   cost — a lookahead re-pricing the point's best offerings as if it measured each of 13 quantiles
   of its predicted throughput (``acquisition="tpe"`` lets optuna's seeded TPE sampler choose
   instead). With no plan at all, probe the point most likely to meet the limits (the model may be wrong);
4. the probe runs through an executor (replay, local or gcp) on the point's cheapest on-demand
   offering, with a budget of ``probe_seconds`` at its price; every successful probe is appended to
   the profile as a ``probe`` measurement. A failed probe (stockout, quota, missing from a replay
   table) is a FAIL trial with its reason, never a measurement, and its point is not probed again.

Stopping (first that applies): ``max_trials`` probes; the next probe would overrun the probe budget
(``probe-budget``) or leave the workload's budget unable to pay for any plan (``budget``); no unprobed
point's expected improvement is worth its probe (``expected-improvement``; for the time objective an
hour is valued at the plan's price per hour); nothing left to probe (``exhausted``).

With an optuna storage (``sqlite:///study.db``) an interrupted search resumes: finished probes are
read back, not run again. A probe cut by Ctrl-C or SIGTERM (the executor tears it down) is a failed
trial charged what the executor recorded; one whose search process was killed is found still running
in the study on resume, its leftovers are deleted and it is charged its whole cap. Either may be
probed again. A study remembers the model, batch and precision it measured and refuses to resume for
another. One search process per study.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from cloudfit.errors import BudgetExceeded, CloudfitError, InfeasibleError, LaunchError, UsageError
from cloudfit.search.problem import Problem, score
from cloudfit.types import ClusterConfig, Measurement, Plan, Profile, Workload

PROBE_SECONDS = 600.0
#: Normal quantiles (and weights) for the expected-improvement integral: deterministic, no sampling noise.
_Z = np.array([-2.326, -1.645, -1.282, -0.842, -0.524, -0.253, 0.0, 0.253, 0.524, 0.842, 1.282, 1.645, 2.326])
_ZW = np.array([0.01, 0.04, 0.05, 0.1, 0.1, 0.1, 0.2, 0.1, 0.1, 0.1, 0.05, 0.04, 0.01])
#: Gaussian-process correlation of two points' model errors (log throughput), chosen a priori: a share
#: common to every point (the model misjudges this workload), one per accelerator, one for scaling
#: (similar device and node counts, any accelerator) and one for scaling on the same accelerator.
GP_WEIGHTS = {"common": 0.35, "accelerator": 0.25, "scaling": 0.25, "accelerator_scaling": 0.15}
GP_LENGTH_LOG2 = 1.0  # a doubling of devices or nodes → correlation × e^-½ on the scaling terms
GP_NOISE_LOG = 0.05  # a probe's own noise (log throughput): two probes of one point differ by ~5%
#: Per hardware point, the lookahead re-prices this many of its best candidates (zones × spot).
LOOKAHEAD_PER_POINT = 4
STOP_REASONS = ("max-trials", "probe-budget", "budget", "expected-improvement", "exhausted")

Point = tuple[str, int, int]  # (accelerator, accelerators per node, nodes): what a probe measures


@dataclass(frozen=True)
class Trial:
    """One probe: where it ran, what it measured (or why it failed) and what it cost."""

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
    run: str = ""  # the executor's name for the probe run (`cloudfit status NAME` on local/gcp)

    @property
    def point(self) -> Point:
        return (self.accelerator, self.accelerators_per_node, self.nodes)

    @property
    def retryable(self) -> bool:
        """An interrupted probe says nothing about its point: it may be probed again."""
        return self.status != "ok" and self.reason.startswith(("interrupted", "error"))


@dataclass(frozen=True)
class ActiveResult:
    plan: Plan  # under the workload's budget minus the probe spend
    profile: Profile  # the input profile plus every successful probe as a measurement
    trials: tuple[Trial, ...]
    probe_spend_usd: float
    stop_reason: str  # one of STOP_REASONS
    history: tuple[dict[str, Any], ...] = field(default_factory=tuple)  # the plan after each trial

    @property
    def total_expected_usd(self) -> float:
        return self.probe_spend_usd + self.plan.chosen.cost_usd

    def to_dict(self) -> dict[str, Any]:
        from cloudfit.plan.io import plan_to_dict

        return {"stop_reason": self.stop_reason, "probe_spend_usd": self.probe_spend_usd,
                "plan_expected_cost_usd": self.plan.chosen.cost_usd, "total_expected_usd": self.total_expected_usd,
                "trials": [t.__dict__ for t in self.trials], "history": list(self.history),
                "chosen": self.plan.chosen.row(), "plan": plan_to_dict(self.plan)}


# --------------------------------------------------------------------------------------------
# Spaces: restriction, points, the surrogate


def _point(c: ClusterConfig) -> Point:
    return (c.offering.accelerator, c.offering.accelerators_per_node, c.nodes)


def _points(space) -> tuple[list[Point], np.ndarray]:
    """The space's hardware points and, per candidate, the index of its point."""
    offs = space.catalog.offerings
    used = np.unique(space.offering)
    op = {int(o): (offs[int(o)].accelerator, offs[int(o)].accelerators_per_node) for o in used}
    pair_ids: dict[tuple[str, int], int] = {}
    off_pair = np.zeros(int(used.max()) + 1 if used.size else 1, dtype=np.int64)
    for o, pair in op.items():
        off_pair[o] = pair_ids.setdefault(pair, len(pair_ids))
    code = off_pair[space.offering] * (int(space.nodes.max()) + 1 if len(space) else 1) + space.nodes
    uniq, inverse = np.unique(code, return_inverse=True)
    pairs = list(pair_ids)
    width = int(space.nodes.max()) + 1 if len(space) else 1
    keys = [(pairs[int(c) // width][0], pairs[int(c) // width][1], int(c) % width) for c in uniq]
    return keys, inverse.reshape(-1)


def _with_measured(space, measured: dict[Point, float]):
    """The space with measured points' throughput in place of predictions (zero uncertainty)."""
    if not measured:
        return space
    keys, inv = _points(space)
    sps, low, high = space.samples_per_second.copy(), space.low.copy(), space.high.copy()
    for j, k in enumerate(keys):
        if k in measured:
            sel = inv == j
            sps[sel] = low[sel] = high[sel] = measured[k]
    return replace(space, samples_per_second=sps, low=low, high=high, _cache={})


def _restrict(space, allowed: set[Point] | None):
    if allowed is None:
        return space
    keys, inv = _points(space)
    keep = np.array([k in allowed for k in keys], dtype=bool)[inv] if keys else np.zeros(0, bool)
    if not keep.any():
        raise InfeasibleError("no catalog configuration matches a row of the replay table")
    cols = {k: getattr(space, k)[keep] for k in ("offering", "shape", "nodes", "spot", "price_per_hour",
                                                 "samples_per_second", "low", "high", "hazard_per_node_hour")}
    return replace(space, **cols, _cache={})


def _gp_correlation(a: list[Point], b: list[Point]) -> np.ndarray:
    w = GP_WEIGHTS
    acc_a = np.array([p[0] for p in a], dtype=object)
    acc_b = np.array([p[0] for p in b], dtype=object)
    xa = np.log2(np.array([[p[1], p[2]] for p in a], dtype=float).reshape(-1, 2))
    xb = np.log2(np.array([[p[1], p[2]] for p in b], dtype=float).reshape(-1, 2))
    same = (acc_a[:, None] == acc_b[None, :]).astype(float)
    d2 = ((xa[:, None, :] - xb[None, :, :]) ** 2).sum(-1)
    rbf = np.exp(-d2 / (2 * GP_LENGTH_LOG2 ** 2))
    return w["common"] + w["accelerator"] * same + w["scaling"] * rbf + w["accelerator_scaling"] * same * rbf


def _gp_corrected(space, measured: dict[Point, float]):
    """The space's predictions corrected by a GP on the probes' log-residuals (prior mean: the model).

    Every point's log throughput is the model's plus an error with the model's own spread (its band)
    and the correlations of ``_gp_correlation``; conditioning on the probes moves the mean of every
    point and narrows its band in proportion to what the probes say about it.
    """
    if not measured:
        return space
    from cloudfit.search.space import Z90

    keys, inv = _points(space)
    n = len(keys)
    logp = np.log(space.samples_per_second)
    sig_c = space.log_sigma
    # per point: mean log prediction and the widest band among its candidates (zones, shapes, spot)
    cnt = np.bincount(inv, minlength=n)
    mean = np.bincount(inv, weights=logp, minlength=n) / np.maximum(cnt, 1)
    s = np.zeros(n)
    np.maximum.at(s, inv, sig_c)
    s = np.maximum(s, 1e-3)
    obs = [j for j, k in enumerate(keys) if k in measured]
    if not obs:
        return space
    r = np.array([math.log(measured[keys[j]]) - mean[j] for j in obs])
    pk = [keys[j] for j in obs]
    C = _gp_correlation(pk, pk) * np.outer(s[obs], s[obs])
    noise = GP_NOISE_LOG ** 2 * np.eye(len(obs))
    # Amplitude by maximum likelihood, never below the model's own band: probes that miss by more than
    # the band says widen every point's band (the model is worse on this workload than it claims).
    kappa2 = max(1.0, float(r @ np.linalg.solve(C + noise, r)) / len(obs))
    s = s * math.sqrt(kappa2)
    K = C * kappa2 + noise
    Ks = _gp_correlation(keys, pk) * np.outer(s, s[obs])  # n × m
    L = np.linalg.cholesky(K)
    alpha = np.linalg.solve(L.T, np.linalg.solve(L, r))
    mu = Ks @ alpha
    v = np.linalg.solve(L, Ks.T)
    var = np.maximum(s ** 2 - (v ** 2).sum(0), 1e-8)
    ratio = np.sqrt(var) / s * math.sqrt(kappa2)  # posterior sd ÷ the model's own sd
    sps = space.samples_per_second * np.exp(mu[inv])
    sig = np.maximum(sig_c, 1e-3) * ratio[inv]
    return replace(space, samples_per_second=sps, low=sps * np.exp(-Z90 * sig), high=sps * np.exp(Z90 * sig), _cache={})


def _best_per_point(space, problem: Problem):
    """For every hardware point: (best objective value, feasible?, candidate id) under the space."""
    a = space.assess(problem.deadline_hours)
    feasible, primary, _ = score(a, problem)
    keys, inv = _points(space)
    out: dict[Point, tuple[float, bool, int]] = {}
    for i in np.lexsort((primary, ~feasible)):  # feasible first, then best value
        k = keys[int(inv[i])]
        if k not in out:
            out[k] = (float(primary[i]), bool(feasible[i]), int(i))
    return out, a


def _lookahead(space, problem: Problem, incumbent: float, open_points: set[Point]) -> dict[Point, tuple[float, float, float]]:
    """Per open point: (expected improvement over ``incumbent``, P(some config of it is feasible),
    expected best value where feasible), if it were probed.

    The point's throughput is lognormal with its (surrogate) band; at each of 13 quantiles the point's
    best ``LOOKAHEAD_PER_POINT`` candidates are re-priced as if measured (no band), which gets the
    preemption, the deadline and the budget right instead of assuming value ∝ 1/throughput.
    """
    if not open_points:
        return {}
    a = space.assess(problem.deadline_hours)
    feasible, primary, _ = score(a, problem)
    keys, inv = _points(space)
    want = np.array([k in open_points for k in keys], dtype=bool)
    cand = np.flatnonzero(want[inv])
    if cand.size == 0:
        return {}
    # the best few candidates of each open point under the current predictions
    order = cand[np.lexsort((primary[cand], ~feasible[cand], inv[cand]))]
    pt = inv[order]
    first = np.searchsorted(pt, pt, side="left")
    ids = order[(np.arange(order.size) - first) < LOOKAHEAD_PER_POINT]
    nz = len(_Z)
    rep = np.repeat(ids, nz)
    zz = np.tile(_Z, ids.size)
    t = space.samples_per_second[rep] * np.exp(space.log_sigma[rep] * zz)
    cols = {k: getattr(space, k)[rep] for k in ("offering", "shape", "nodes", "spot", "price_per_hour",
                                                 "hazard_per_node_hour")}
    stacked = replace(space, **cols, samples_per_second=t, low=t, high=t, _cache={})
    sa = stacked.assess(problem.deadline_hours)
    f2, v2, _ = score(sa, problem)
    v2 = np.where(f2, v2, np.inf)
    # best value per (point, quantile)
    grp = inv[rep] * nz + np.tile(np.arange(nz), ids.size)
    best = np.full(len(keys) * nz, np.inf)
    np.minimum.at(best, grp, v2)
    best = best.reshape(len(keys), nz)
    out = {}
    for j in np.unique(inv[ids]):
        b = best[j]
        ok = np.isfinite(b)
        p_ok = float(_ZW[ok].sum())
        ei = 0.0
        if math.isfinite(incumbent):
            ei = float(np.sum(_ZW[ok] * np.maximum(incumbent - b[ok], 0.0)))
        ev = float(np.sum(_ZW[ok] * b[ok]) / p_ok) if p_ok > 0 else math.inf
        out[keys[int(j)]] = (ei, p_ok, ev)
    return out


# --------------------------------------------------------------------------------------------
# The search


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

    ``executor`` is any Executor (``ReplayExecutor``, ``LocalExecutor``, ``GcpExecutor``); probes on
    gcp need ``checkpoint_dir`` (gs://BUCKET/PATH; each probe writes under its own name).
    ``restrict_to`` limits the space to these hardware points (a replay world). ``use_measurements=False``
    records probes without letting them change predictions (a local CPU rehearsal says nothing of a
    GPU). ``surrogate``: ``"gp"`` (model + Gaussian-process correction on the probes) or ``"anchor"``
    (the model re-anchored on the probes only). ``ei_stop=False`` keeps probing until another rule
    stops (benchmarks trace whole trajectories so). ``on_trial`` is called after every probe.
    """
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import optuna

    from cloudfit import catalog as catalog_mod
    from cloudfit.executors.base import RunResult, default_name, probe_spec
    from cloudfit.plan import load_workload_profile, recommend
    from cloudfit.search.space import build_space
    from cloudfit.workload import validate_workload

    validate_workload(workload)
    if not (probe_budget_usd > 0 and math.isfinite(probe_budget_usd)):
        raise UsageError(f"--probe-budget must be a positive number of USD, got {probe_budget_usd!r}")
    if acquisition not in ("ei", "tpe"):
        raise UsageError(f"acquisition must be 'ei' or 'tpe', got {acquisition!r}")
    if surrogate not in ("gp", "anchor"):
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
    study = _open_study(name, storage, seed)
    what = {"model": workload.model, "batch_size_per_device": batch, "precision": workload.precision}
    seen = study.user_attrs.get("measures")
    if seen is None:
        study.set_user_attr("measures", what)
    elif seen != what:
        raise UsageError(f"study {name!r} in {storage} measured {seen['model']} at batch {seen['batch_size_per_device']} "
                         f"{seen['precision']}, not {what['model']} at batch {batch} {workload.precision}: "
                         "give another --study-name")

    # Resume: finished probes come back from the storage; probes interrupted mid-run are failed trials.
    trials: list[Trial] = []
    measured: dict[Point, float] = {}
    failed: set[Point] = set()
    prof = base_profile
    for t in study.trials:
        rec = t.user_attrs.get("probe")
        if rec is None and "pending" in t.user_attrs and t.state in (optuna.trial.TrialState.RUNNING,
                                                                     optuna.trial.TrialState.FAIL):
            rec = {**t.user_attrs["pending"], "status": "failed", "samples_per_second": None,
                   "reason": "interrupted: the search died during this probe (charged its cost cap)"}
            if t.state == optuna.trial.TrialState.RUNNING:
                _clean_up(executor, rec.get("run", ""))
                study.tell(t.number, state=optuna.trial.TrialState.FAIL)
        if rec is None:
            continue
        tr = Trial(**rec)
        trials.append(tr)
        if tr.status == "ok":
            measured[tr.point] = float(tr.samples_per_second)
            prof = _add(prof, tr, batch, workload.precision, use_measurements)
        elif not tr.retryable:
            failed.add(tr.point)

    def spent() -> float:
        return float(sum(t.probe_cost_usd for t in trials))

    prior_space = None

    def current():
        nonlocal prior_space
        if surrogate == "anchor" and use_measurements:  # the model re-anchored on every probe
            return _with_measured(_restrict(build_space(workload, prof, cat), restrict_to), measured)
        # gp: the model as it was (anchored on the input profile only) is the prior; the GP does the update
        if prior_space is None:
            prior_space = _restrict(build_space(workload, base_profile, cat), restrict_to)
        sp = _gp_corrected(prior_space, measured) if use_measurements else prior_space
        return _with_measured(sp, measured)

    def remaining(extra: float = 0.0) -> Workload | None:
        """The workload under its budget minus the probe spend (None: nothing left to train with)."""
        if workload.budget_usd is None:
            return workload
        left = workload.budget_usd - spent() - extra
        return replace(workload, budget_usd=left) if left > 0 else None

    history: list[dict[str, Any]] = []
    stop = "max-trials"
    plan = None
    while True:
        space = current()
        wl_now = remaining()
        plan = None
        if wl_now is not None:
            try:
                plan = recommend(wl_now, space=space)
            except InfeasibleError:
                plan = None  # the model sees nothing that meets the limits: probes may show otherwise
        history.append({"trials": len(trials), "probe_spend_usd": spent(),
                        "chosen": None if plan is None else plan.chosen.row()})
        if len(trials) >= max_trials:
            stop = "max-trials"
            break
        if wl_now is None:
            stop = "budget"
            break
        problem = Problem.of(wl_now)
        best_pts, _ = _best_per_point(space, problem)
        probed = set(measured) | failed
        open_pts = {k for k in best_pts if k not in probed}
        target: Point | None = _point(plan.chosen.config) if plan is not None else None
        trial = None
        if plan is None:  # nothing predicted to meet the limits: probe what comes closest, the model may be wrong
            target = _closest(_lookahead(space, problem, math.inf, open_pts), space, problem, open_pts)
            if target is None:
                stop = "exhausted"
                break
        elif target in probed:
            incumbent = plan.chosen.cost_usd if problem.objective == "cost" else plan.chosen.hours
            value_per_unit = 1.0 if problem.objective == "cost" else plan.chosen.config.price_per_hour
            look = _lookahead(space, problem, incumbent, open_pts)
            target = _acquire(look, space, value_per_unit, probe_seconds, ei_stop)
            if target is None and not ei_stop:  # tracing: the open point most likely to be feasible
                target = _closest(look, space, problem, open_pts)
            if target is None:
                stop = "expected-improvement" if open_pts else "exhausted"
                break
            if acquisition == "tpe":  # optuna's sampler picks instead of the lookahead
                dist = _distribution(best_pts)
                trial, picked = _ask_sampler(study, dist, probed, measured, space, problem)
                target = picked or target
        config = _probe_config(space, target)
        cap = config.price_per_hour * probe_seconds / 3600  # the probe's own budget: its guard stops it there
        stop_now = None
        if spent() + cap > probe_budget_usd + 1e-12:
            stop_now = "probe-budget"
        elif workload.budget_usd is not None and plan is not None and not _any_feasible(space, remaining(cap)):
            stop_now = "budget"  # the probe would leave too little of the budget to train with
        if stop_now:
            if trial is not None:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            stop = stop_now
            break
        if trial is None:  # the model's pick (or the lookahead's): enqueued, so the study starts from it
            dist = _distribution(best_pts)
            study.enqueue_trial({"point": _pkey(target)}, skip_if_exists=False)
            trial = study.ask({"point": dist})
        i = best_pts[target][2]
        spec = probe_spec(config, model=workload.model, steps=probe_steps, budget_usd=cap, timeout_s=probe_seconds,
                          batch_size_per_device=batch, name=f"{default_name('probe-' + workload.model)}-{trial.number}")
        spec = replace(spec, job=replace(spec.job, precision=workload.precision,
                                         checkpoint_dir=f"{checkpoint_dir.rstrip('/')}/{spec.name}" if checkpoint_dir else None))
        base = {"number": trial.number, "accelerator": target[0], "accelerators_per_node": target[1],
                "nodes": target[2], "machine_type": config.offering.machine_type, "zone": config.offering.zone,
                "predicted_samples_per_second": float(space.samples_per_second[i]), "probe_cost_usd": float(cap),
                "run": spec.name}
        trial.set_user_attr("pending", base)  # a process killed mid-probe leaves this for the resume
        try:
            result = executor.run(spec)
        except (LaunchError, BudgetExceeded) as e:  # stockout, quota, too small a cap: a failed probe
            result = RunResult(spec.name, getattr(executor, "name", "?"),
                               "no-capacity" if isinstance(e, LaunchError) else "budget",
                               _recorded_spend(executor, spec.name, 0.0), 0.0, config, detail=str(e))
        except BaseException as e:  # Ctrl-C (the executor tore the probe down) or an error: record, re-raise
            what = "interrupted" if isinstance(e, KeyboardInterrupt) else f"error ({type(e).__name__}: {e})"
            tr = Trial(**{**base, "probe_cost_usd": _recorded_spend(executor, spec.name, cap)}, status="failed",
                       samples_per_second=None, reason=f"{what}: the search stopped during this probe")
            trial.set_user_attr("probe", tr.__dict__)
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            raise
        # a probe stopped by its timeout or its cap after measuring is still a measurement
        ok = result.reason in ("completed", "timeout", "budget") and bool(result.samples_per_second)
        tr = Trial(**{**base, "probe_cost_usd": float(result.spend_usd)}, status="ok" if ok else "failed",
                   samples_per_second=float(result.samples_per_second) if ok else None,
                   reason="" if ok else f"{result.reason}: {result.detail}".rstrip(": "))
        trial.set_user_attr("probe", tr.__dict__)
        trials.append(tr)
        if ok:
            measured[target] = float(tr.samples_per_second)
            prof = _add(prof, tr, batch, workload.precision, use_measurements)
            study.tell(trial, _point_value(current(), Problem.of(remaining() or workload), target))
        else:
            failed.add(target)
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        if on_trial:
            on_trial(tr)
    spend = spent()
    if plan is None:
        raise InfeasibleError(f"no configuration meets the limits, after {len(trials)} probe(s) "
                              f"(${spend:.2f} spent on probes); relax the deadline or budget")
    plan = replace(plan, provenance={**plan.provenance, "searcher": "active", "active_search": {
        "study": name, "probes": len(trials), "probes_ok": sum(t.status == "ok" for t in trials),
        "probe_spend_usd": spend, "stop_reason": stop, "surrogate": surrogate,
        "budget_before_probes_usd": workload.budget_usd}})
    return ActiveResult(plan=plan, profile=prof, trials=tuple(trials), probe_spend_usd=spend, stop_reason=stop,
                        history=tuple(history))


def _acquire(look: dict[Point, tuple[float, float, float]], space, value_per_unit: float, probe_seconds: float,
             ei_stop: bool) -> Point | None:
    """The open point of largest expected improvement (in $) net of its probe's cost; None if no net
    gain is positive (with ``ei_stop``) or no point improves at all."""
    best, arg = -math.inf, None
    prices = _probe_prices(space)
    for k, (ei, _, _) in sorted(look.items()):
        if ei <= 0:
            continue
        net = ei * value_per_unit - prices[k][0] * probe_seconds / 3600
        if net > best:
            best, arg = net, k
    if arg is None or (ei_stop and best <= 0):
        return None
    return arg


def _closest(look: dict[Point, tuple[float, float, float]], space, problem: Problem, open_points: set[Point]) -> Point | None:
    """The open point most likely to meet the limits (then of best expected value); if none may, the one
    whose best candidate misses them by the least (relative excess of hours over the deadline and of
    cost over the budget)."""
    cands = [(k, v) for k, v in look.items() if v[1] > 0]
    if cands:
        return min(cands, key=lambda kv: (-kv[1][1], kv[1][2], kv[0]))[0]
    if not open_points:
        return None
    from cloudfit.search.problem import cost_quantile

    a = space.assess(problem.deadline_hours)
    miss = np.zeros(len(space))
    if problem.deadline_hours is not None:
        miss += np.maximum(np.asarray(a.hours) / problem.deadline_hours - 1, 0)
    if problem.budget_usd is not None:
        need = cost_quantile(a, problem.confidence) + np.asarray(a.reserve_usd)
        miss += np.maximum(need / problem.budget_usd - 1, 0)
    keys, inv = _points(space)
    best = np.full(len(keys), np.inf)
    np.minimum.at(best, inv, miss)
    at = {k: j for j, k in enumerate(keys)}
    return min(open_points, key=lambda k: (best[at[k]], k))


def _open_study(name: str, storage: str | None, seed: int):
    """The study ``name`` in ``storage`` (created if new); UsageError if the storage cannot be opened."""
    import optuna

    try:
        return optuna.create_study(study_name=name, storage=storage, load_if_exists=True, direction="minimize",
                                   sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=3))
    except Exception as e:  # sqlalchemy's URL and connection errors, optuna's own
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UsageError(f"--storage {storage!r}: {msg} (expected e.g. sqlite:///study.db)") from None


def _recorded_spend(executor, run: str, default: float) -> float:
    """What the executor's state store recorded as the probe's spend (``default`` if it keeps none)."""
    store = getattr(executor, "store", None)
    rec = store.find_cluster(run) if store is not None and run else None
    return float(rec.spend_usd) if rec is not None else default


def _clean_up(executor, run: str) -> None:
    """Delete what a probe of a killed search may have left running (its VMs stop at their cap anyway)."""
    down = getattr(executor, "down", None)
    if down is not None and run:
        try:
            down(run)
        except CloudfitError:
            pass  # best effort: `cloudfit status` lists it, `cloudfit down NAME` retries


def _any_feasible(space, workload: Workload | None) -> bool:
    if workload is None:
        return False
    feasible, _, _ = score(space.assess(workload.deadline_hours), Problem.of(workload))
    return bool(feasible.any())


def _pkey(k: Point) -> str:
    return f"{k[0]}|{k[1]}|{k[2]}"


def _distribution(best_pts):
    import optuna

    return optuna.distributions.CategoricalDistribution(sorted(_pkey(k) for k in best_pts))


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


def _probe_prices(space) -> dict[Point, tuple[float, int]]:
    """Per hardware point: ($/h, candidate id) of its cheapest on-demand offering (a probe must not be
    preempted), or of its cheapest spot one if it has no on-demand offering."""
    keys, inv = _points(space)
    order = np.lexsort((np.arange(len(space)), space.price_per_hour, space.spot, inv))  # per point: on-demand first
    out: dict[Point, tuple[float, int]] = {}
    for i in order:
        k = keys[int(inv[i])]
        if k not in out:
            out[k] = (float(space.price_per_hour[i]), int(i))
    return out


def _probe_config(space, point: Point) -> ClusterConfig:
    """The configuration a probe of ``point`` runs on (see ``_probe_prices``)."""
    return space.config(_probe_prices(space)[point][1])


def _point_value(space, problem: Problem, point: Point) -> float:
    """The objective value optuna is told for a probed point (×10 if it cannot meet the limits)."""
    best, _ = _best_per_point(space, problem)
    v, feasible, _ = best[point]
    return v if feasible else 10.0 * v


def _add(profile: Profile, tr: Trial, batch: int, precision: str, use: bool) -> Profile:
    """The profile with the probe's measurement (once: a profile saved by an earlier run may hold it)."""
    if not use:
        return profile
    m = Measurement(accelerator=tr.accelerator, count=tr.accelerators_per_node, nodes=tr.nodes,
                    batch_size_per_device=int(batch), precision=precision,
                    samples_per_second=float(tr.samples_per_second), source="probe",
                    note=f"active search trial {tr.number} on {tr.machine_type} in {tr.zone}")
    if any(x.source == "probe" and x.note == m.note and x.samples_per_second == m.samples_per_second
           and (x.accelerator, x.count, x.nodes) == (m.accelerator, m.count, m.nodes) for x in profile.measurements):
        return profile
    return profile.with_measurement(m)
