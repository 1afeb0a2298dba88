"""Reading a study back: finished probes are not run again, interrupted ones are failed and charged.

Each probe is one optuna trial. Before the probe runs, its trial gets a ``pending`` record (where it
runs, its cap); after, a ``probe`` record (the ``Trial``) and then the study is told. A search killed
mid-probe leaves a RUNNING trial with only ``pending``: on resume its leftovers are deleted, it is
failed and charged its whole cap, and its point may be probed again. A search killed after the
probe was recorded but before the study was told leaves a RUNNING trial with its ``probe`` record:
the probe happened, so it counts as recorded, and the trial is told on resume (``Resumed.untold``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cloudfit.active.record import Point, Trial, with_probe
from cloudfit.errors import CloudfitError, UsageError
from cloudfit.types import Profile, Workload

INTERRUPTED_BY_KILL = "interrupted: the search died during this probe (charged its cost cap)"


@dataclass
class Resumed:
    """What a study already holds: its trials, measured and failed points, and the profile with its probes."""

    profile: Profile
    trials: list[Trial] = field(default_factory=list)
    measured: dict[Point, float] = field(default_factory=dict)
    failed: set[Point] = field(default_factory=set)
    untold: list[tuple[int, Point]] = field(default_factory=list)  # (trial number, point) of ok probes never told

    @property
    def spent(self) -> float:
        return float(sum(t.probe_cost_usd for t in self.trials))


def open_study(name: str, storage: str | None, seed: int):
    """The study ``name`` in ``storage`` (created if new); UsageError if the storage cannot be opened."""
    import optuna

    try:
        return optuna.create_study(study_name=name, storage=storage, load_if_exists=True, direction="minimize",
                                   sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=3))
    except Exception as e:  # sqlalchemy's URL and connection errors, optuna's own
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UsageError(f"--storage {storage!r}: {msg} (expected e.g. sqlite:///study.db)") from None


def check_measures(study, name: str, storage: str | None, workload: Workload, batch: int) -> None:
    """Remember what the study measures (model, batch, precision); refuse to resume it for another."""
    what = {"model": workload.model, "batch_size_per_device": batch, "precision": workload.precision}
    seen = study.user_attrs.get("measures")
    if seen is None:
        study.set_user_attr("measures", what)
    elif seen != what:
        raise UsageError(f"study {name!r} in {storage} measured {seen['model']} at batch {seen['batch_size_per_device']} "
                         f"{seen['precision']}, not {what['model']} at batch {batch} {workload.precision}: "
                         "give another --study-name")


def resume(study, executor, profile: Profile, batch: int, precision: str, use_measurements: bool) -> Resumed:
    """The study's finished probes, with interrupted ones failed (and their leftovers deleted)."""
    import optuna

    running, failed_state = optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.FAIL
    out = Resumed(profile=profile)
    for t in study.trials:
        rec = t.user_attrs.get("probe")
        untold = t.state == running
        if rec is None and "pending" in t.user_attrs and t.state in (running, failed_state):
            rec = {**t.user_attrs["pending"], "status": "failed", "samples_per_second": None,
                   "reason": INTERRUPTED_BY_KILL}
            if untold:
                clean_up(executor, rec.get("run", ""))
                study.tell(t.number, state=failed_state)
                untold = False
        if rec is None:
            continue
        tr = Trial(**rec)
        out.trials.append(tr)
        if tr.status == "ok":
            out.measured[tr.point] = float(tr.samples_per_second)
            if use_measurements:
                out.profile = with_probe(out.profile, tr, batch, precision)
            if untold:  # killed between recording the probe and telling the study
                out.untold.append((t.number, tr.point))
        else:
            if untold:
                study.tell(t.number, state=failed_state)
            if not tr.retryable:
                out.failed.add(tr.point)
    return out


def recorded_spend(executor, run: str, default: float) -> float:
    """What the executor's state store recorded as the probe's spend (``default`` if it keeps none)."""
    store = getattr(executor, "store", None)
    rec = store.find_cluster(run) if store is not None and run else None
    return float(rec.spend_usd) if rec is not None else default


def clean_up(executor, run: str) -> None:
    """Delete what a probe of a killed search may have left running (its VMs stop at their cap anyway)."""
    down = getattr(executor, "down", None)
    if down is not None and run:
        try:
            down(run)
        except CloudfitError:
            pass  # best effort: `cloudfit status` lists it, `cloudfit down NAME` retries
