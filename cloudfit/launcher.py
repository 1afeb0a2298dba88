"""``launch(plan, executor)``: the one way a plan becomes a run, for the CLI and a notebook alike.

Any plan — a profiled model's (``cloudfit.train``, DDP) or a large model's (``Plan.layout``:
``cloudfit.train_llm`` with the plan's parallel layout) — turns into the executor's ``RunSpec`` here:
the configs to try in order (the chosen one, then the alternatives), the steps, the checkpoint
interval the plan priced (Young/Daly), the layout on each config (re-computed for alternatives of
another size), the local backend's rehearsal shrink (the nearest layout this machine's ranks run),
and the deadline rule (a spot cluster that falls behind moves to on-demand). ``cloudfit launch``
only parses its options, builds the executor, confirms and renders what ``prepare_launch`` returns::

    import cloudfit
    from cloudfit.executors import get_executor
    plan = cloudfit.load_plan("plan.json")
    result = cloudfit.launch(plan, get_executor("local"), steps=30)     # what `cloudfit launch` runs
    ready = cloudfit.prepare_launch(plan, get_executor("local"))        # or look first:
    ready.preview(); ready.notes; result = ready.run()

The library never prints: events go to ``on_event``; errors are ``CloudfitError`` (``UsageError`` for
options that do not fit the plan).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable

#: With no budget given and none in the plan: the plan's P90 cost (at the catalog's price) times this margin.
BUDGET_MARGIN = 1.25
#: More optimizer steps than this is not a training run (a plan's samples gone wrong).
MAX_STEPS = 10**12


def default_budget(plan) -> float:
    """The plan's own budget, else its P90 hours at the chosen config's price × ``BUDGET_MARGIN``."""
    from cloudfit.executors.budget import default_budget as budget_of

    return budget_of(plan, BUDGET_MARGIN)  # refuses a plan predicting no real training run (one line)


@dataclass(frozen=True)
class Launch:
    """A plan made ready to run on one executor: the spec, and one note per thing that runs differently."""

    spec: Any  # cloudfit.executors.base.RunSpec
    executor: Any
    notes: tuple[str, ...] = ()

    def preview(self, *notes: str):
        """What the executor would create (nothing is created), with ``notes`` and this launch's notes."""
        pv = self.executor.preview(self.spec)  # a budget too small → UsageError here, before anything exists
        extra = tuple(notes) + self.notes
        return dataclasses.replace(pv, notes=tuple(pv.notes) + extra) if extra else pv

    def run(self, on_event: Callable | None = None):
        """Run it to the end (completed, budget, timeout, failed, …): the executor's ``RunResult``."""
        return self.executor.run(self.spec, on_event=on_event)


def prepare_launch(plan, executor, *, budget_usd: float | None = None, name: str | None = None,
            command: tuple[str, ...] | list[str] = (), checkpoint_dir: str | None = None,
            checkpoint_every: int | None = None, steps: int | None = None, timeout_s: float | None = None,
            deadline_hours: float | None = None, record: dict | None = None) -> Launch:
    """``plan`` as a run on ``executor`` (``cloudfit.executors.get_executor("local" | "gcp", …)``).

    ``command``: run this under torchrun instead of cloudfit's trainer. ``steps``: instead of the plan's
    samples. ``deadline_hours``: the deadline kept at run time (any plan family), counted from now
    (default: the plan's). ``record``: extra facts for the state store.
    """
    from cloudfit.executors.base import RunSpec, check_name, default_name, plan_configs

    command = tuple(command)
    budget = default_budget(plan) if budget_usd is None else float(budget_usd)
    configs = plan_configs(plan)
    record = dict(record or {})
    if plan.layout and not command:
        job, model, deadline = _llm_job(plan, executor, configs, steps, checkpoint_dir, checkpoint_every, record)
    else:
        from cloudfit.executors.deadline import deadline_spec

        job = _job(plan, executor, configs, steps, checkpoint_dir, checkpoint_every, command)
        model = plan.workload.model
        deadline = deadline_spec(plan, configs, job.steps, hazard_per_hour=job.hazard_per_hour,
                                 checkpoint_interval_s=job.checkpoint_interval_s)
    spec = RunSpec(name=check_name(name) if name else default_name(model), configs=configs, job=job,
                   budget_usd=budget, timeout_s=timeout_s, record=record, deadline=deadline)
    if deadline_hours is not None:  # kept at run time for every plan family and backend
        from cloudfit.executors.deadline import with_deadline

        spec = with_deadline(spec, plan, float(deadline_hours))
    return Launch(spec, executor, _notes(spec))


def launch(plan, executor, *, on_event: Callable | None = None, **options: Any):
    """Run ``plan`` on ``executor`` exactly as ``cloudfit launch`` does; ``options`` are :func:`prepare_launch`'s.
    Returns the executor's ``RunResult`` (``reason``: completed, budget, timeout, failed, …)."""
    return prepare_launch(plan, executor, **options).run(on_event)


def _job(plan, executor, configs, steps, checkpoint_dir, checkpoint_every, command):
    """cloudfit's DDP trainer on a zoo model (or ``command``), at the checkpoint interval the plan priced."""
    from cloudfit.errors import UsageError
    from cloudfit.executors.base import JobSpec
    from cloudfit.spot.checkpointing import planned_interval

    w = plan.workload
    info: dict = {}
    if not command:
        from cloudfit.profiling import zoo

        if w.model not in zoo.names():
            raise UsageError(f"cloudfit's trainer knows the zoo models ({', '.join(zoo.names())}), not {w.model!r}: "
                             "give your training command after --")
        info = zoo.info(w.model)
    local = executor.backend == "local"
    ranks = max(1, min(configs[0].accelerators, executor.max_ranks)) if local else configs[0].accelerators
    batch = w.batch_size_per_device or (None if command else info["cpu_batch_size" if local else "default_batch_size"])
    if steps is None:
        steps = max(1, math.ceil(w.samples / ((batch or 1) * ranks)))
    if steps > MAX_STEPS:
        raise UsageError(f"the plan asks for {steps:.3g} steps; that is not a training run (check workload.samples)")
    interval_s, hazard, _ = planned_interval(configs[0], w.model)
    return JobSpec(model=w.model, steps=steps, batch_size_per_device=batch, checkpoint_dir=checkpoint_dir,
                   checkpoint_every=checkpoint_every, precision=w.precision, command=command,
                   checkpoint_interval_s=interval_s, hazard_per_hour=hazard)


def _llm_job(plan, executor, configs, steps, checkpoint_dir, checkpoint_every, record):
    """``cloudfit.train_llm`` with the plan's layout (on every config, re-computed for alternatives of
    another size), or its rehearsal on the local backend's ranks; the deadline rule of the plan."""
    from cloudfit.executors.base import JobSpec
    from cloudfit.executors.deadline import deadline_spec
    from cloudfit.executors.llm_job import LlmJob, label, world_of

    llm = LlmJob.from_plan(plan)
    steps = steps or llm.steps
    interval_s = llm.checkpoint_interval_s or 3600.0
    if executor.backend == "local":
        degrees, args, notes = llm.rehearsal(executor.max_ranks)
        job = JobSpec(model=llm.shape or "llm", steps=steps, checkpoint_dir=checkpoint_dir,
                      checkpoint_every=checkpoint_every or max(1, min(10, steps // 3)), llm_args=tuple(args),
                      world_size=world_of(degrees), precision="fp32", checkpoint_interval_s=interval_s)
        record["rehearsal"] = {"planned": llm.planned_text, "rehearsed": label(degrees), "notes": notes}
    else:
        job = JobSpec(model=llm.shape or "llm", steps=steps, checkpoint_dir=checkpoint_dir,
                      checkpoint_every=checkpoint_every, llm=llm, precision="bf16", checkpoint_interval_s=interval_s)
        record["layout"] = {"planned": llm.planned_text, "runs": label(llm.degrees), "notes": list(llm.notes)}
    return job, llm.shape or plan.workload.model, deadline_spec(plan, configs, steps)


def _notes(spec) -> tuple[str, ...]:
    """One line per difference between the plan's layout and what will run (and the deadline rule)."""
    r = spec.record.get("rehearsal")
    if r:
        head = f"rehearsing the plan's layout {r['planned']} as {r['rehearsed']}"
        return (head,) + tuple(f"rehearsal: {n}" for n in r.get("notes", []))
    lay = spec.record.get("layout")
    d = spec.deadline
    dl = (f"deadline kept at run time: {d.deadline_s / 3600:,.1f} h, switching to on-demand "
          f"{d.on_demand.label()} if the spot cluster falls behind" if d is not None and d.on_demand is not None else "")
    if lay:
        return (f"cloudfit.train_llm runs layout {lay['runs']} (plan: {lay['planned']})" + (f"; {dl}" if dl else ""),
                ) + tuple(lay.get("notes", []))
    return (dl,) if dl else ()
