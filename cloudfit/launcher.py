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
from pathlib import Path
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
    plan: Any = dataclasses.field(default=None, repr=False, compare=False)

    def preview(self, *notes: str):
        """What the executor would create (nothing is created), with ``notes`` and this launch's notes."""
        pv = self.executor.preview(self.spec)  # a budget too small → UsageError here, before anything exists
        extra = tuple(notes) + self.notes
        pv = dataclasses.replace(pv, notes=tuple(pv.notes) + extra) if extra else pv
        return dataclasses.replace(pv, job=job_view(self.spec, pv))

    def run(self, on_event: Callable | None = None):
        """Run it to the end (completed, budget, timeout, failed, …): the executor's ``RunResult``. A large-model
        run's measured speed (after warm-up) is then appended to its profile (``record_measured``), said in one
        event line."""
        result = self.executor.run(self.spec, on_event=on_event)
        line = record_measured(self, result)
        if line and on_event is not None:
            from cloudfit.executors.base import Event

            on_event(Event("profile", line))
        return result


def prepare_launch(plan, executor, *, budget_usd: float | None = None, name: str | None = None,
            command: tuple[str, ...] | list[str] = (), checkpoint_dir: str | None = None,
            checkpoint_every: int | None = None, steps: int | None = None, timeout_s: float | None = None,
            deadline_hours: float | None = None, record: dict | None = None, stack: str | None = None,
            workdir: str | None = None) -> Launch:
    """``plan`` as a run on ``executor`` (``cloudfit.executors.get_executor("local" | "gcp", …)``).

    ``command``: run this under torchrun instead of cloudfit's trainer — with a large-model plan as the
    ``custom`` stack: the plan's layout as environment variables and a JSON file, progress parsed from its log
    (by ``stack``'s parser when named). ``stack``: the training stack that runs a large-model plan (default:
    the plan's ``--stack``, else ``DEFAULT_GPU_STACK`` on a cloud and cloudfit's trainer locally: ``choose_stack``).
    ``workdir``: the folder that ships to every node (default: the command's script's folder).
    ``steps``: instead of the plan's samples. ``deadline_hours``: the deadline kept at run time (any plan
    family), counted from now (default: the plan's). ``record``: extra facts for the state store.
    """
    from cloudfit.executors.base import RunSpec, check_name, default_name, plan_configs

    command = tuple(command)
    budget = default_budget(plan) if budget_usd is None else float(budget_usd)
    configs = plan_configs(plan)
    record = dict(record or {})
    chosen, parser, stack_notes = choose_stack(plan, executor.backend, stack, command)
    packed, command = _workdir(command, workdir, executor.backend)
    if plan.layout and (command or chosen not in ("cloudfit",)) and not (executor.backend == "local" and not command):
        job, model, deadline = _stack_job(plan, executor, configs, steps, checkpoint_dir, checkpoint_every, record,
                                          chosen, parser, command)
    elif plan.layout and not command:
        job, model, deadline = _llm_job(plan, executor, configs, steps, checkpoint_dir, checkpoint_every, record)
        if chosen != "cloudfit":  # the local backend rehearses another stack's plan with cloudfit's trainer
            stack_notes.append(_local_rehearsal_note(plan, chosen, configs, checkpoint_dir))
            record["stack"] = {"name": chosen, "rehearsed_by": "cloudfit.train_llm"}
            from cloudfit.errors import UsageError
            from cloudfit.executors.stack_job import StackRun

            try:  # the stack's own files land in the run folder beside the rehearsal, to read
                sc = StackRun(chosen, chosen, plan, steps=steps).command(None, checkpoint_dir)
                job = dataclasses.replace(job, files=dict(sc.files))
            except UsageError as e:
                stack_notes.append(f"{chosen} would refuse this plan on its GPUs: {e}")
    else:
        from cloudfit.executors.deadline import deadline_spec

        job = _job(plan, executor, configs, steps, checkpoint_dir, checkpoint_every, command)
        model = plan.workload.model
        deadline = deadline_spec(plan, configs, job.steps, hazard_per_hour=job.hazard_per_hour,
                                 checkpoint_interval_s=job.checkpoint_interval_s)
    if packed is not None or (job.stack is not None and executor.backend != "local"):
        job = dataclasses.replace(job, workdir=_with_stack_files(packed, job, configs, node_checkpoint_dir(
            checkpoint_dir)))
    spec = RunSpec(name=check_name(name) if name else default_name(model), configs=configs, job=job,
                   budget_usd=budget, timeout_s=timeout_s, record=record, deadline=deadline)
    if deadline_hours is not None:  # kept at run time for every plan family and backend
        from cloudfit.executors.deadline import with_deadline

        spec = with_deadline(spec, plan, float(deadline_hours))
    if plan.layout:  # every launch is a profile: what the plan promised for this run, kept in its state record
        _planned_speed(plan, spec, chosen if job.stack is not None else "cloudfit", stack_notes)
    return Launch(spec, executor, tuple(stack_notes) + _notes(spec), plan=plan)


def _planned_speed(plan, spec, stack: str, notes: list) -> None:
    from cloudfit.errors import ProfileError, UsageError
    from cloudfit.profiling import measured

    try:
        spec.record["planned_speed"] = measured.planned_speed(plan, stack=stack)
    except (UsageError, ProfileError, KeyError, TypeError, ValueError) as e:
        notes.append(f"the plan's speed is not recorded for this run ({e}): status cannot compare")


def record_measured(ready: "Launch", result) -> str | None:
    """At the end of a large-model run (completed or stopped): its measured speed after warm-up appended to the
    profile the plan was made from (``layout.profile``), else ``$CLOUDFIT_HOME/profiles/<model>.json``
    (``cloudfit.profiling.measured.record_launch``). Returns the one line saying where (or why not); None for a
    run that is not a large model's. A ``ProfileError`` is that line, never a crash."""
    from cloudfit.errors import ProfileError, UsageError
    from cloudfit.profiling import measured

    spec = ready.spec
    facts = spec.record.get("planned_speed")
    if not facts:
        return None
    if spec.record.get("rehearsal"):
        return ("not recorded in a profile: the local rehearsal ran a shrunk model on CPU, whose speed is not "
                f"{facts.get('model')}'s on {facts.get('cluster_label')}")
    if getattr(ready.executor, "backend", None) == "local" and not _local_gpus_are(facts.get("accelerator")):
        return (f"not recorded in a profile: the local backend ran on this machine, which has no "
                f"{facts.get('accelerator')}; its speed is not {facts.get('cluster_label')}'s")
    store = getattr(ready.executor, "store", None)
    rec = store.find_cluster(spec.name) if store is not None else None
    p = dict((rec.info.get("progress") if rec is not None else None) or {})
    tps = measured.measured_tokens_per_second(p, seq_len=facts.get("seq_len"))
    if tps is None:
        return (f"not recorded in a profile: no speed after warm-up (step {p.get('step') or 0}, "
                f"{measured.WARMUP_STEPS} warm-up steps)")
    said, rate = _what_the_log_states(spec, rec, result)
    if rate.get("tokens_per_second"):  # the median of the log's steps after warm-up, not its last line
        tps = float(rate["tokens_per_second"])
        p["memory_gib"] = rate.get("memory_gib") or p.get("memory_gib")
    other = _layout_differs(spec, result, said)
    if other:
        if rec is not None and store is not None:
            store.update_cluster(spec.name, info={"layout_ran": other})
        return (f"not recorded in a profile: the job's log says it ran {other} — not the plan's layout "
                f"({facts.get('layout')}); its {tps:,.0f} tokens/s is another layout's speed")
    try:
        if ready.plan is not None and result.config is not None and result.config != spec.configs[0]:
            facts = measured.planned_speed(ready.plan, result.config, stack=facts.get("stack"))  # a fallback ran
        path, m = measured.record_launch(None, facts, tps, cluster=spec.name, memory_gib=p.get("memory_gib"),
                                         steps=(measured.WARMUP_STEPS + 1, int(p["step"])))
    except (ProfileError, UsageError) as e:
        return f"not recorded in a profile: {e}"
    if rec is not None:
        store.update_cluster(spec.name, info={"profile_row": {"path": str(path), "tokens_per_second": tps}})
    return (f"measured {tps:,.0f} tokens/s on {m.nodes}×{m.gpus_per_node}×{m.accelerator} ({m.layout}, "
            f"{facts.get('stack')}) recorded in {path}: `cloudfit recommend --profile {path} …` anchors on it")


#: The layout fields a stack's log can state (``Stack.layout_from_log``) that a ``StackJob`` of the plan also has
_LOGGED_LAYOUT = ("dp_replicate", "dp_shard", "tp", "pp", "cp", "micro_batch", "grad_accum", "global_batch", "seq_len",
                  "ac")


def _what_the_log_states(spec, rec, result) -> tuple[dict[str, Any], dict[str, Any]]:
    """Another stack's log (a local run's file; this run's lines): the layout it states
    (``Stack.layout_from_log``) and its after-warm-up medians (``stacks.base.median_rate``); ``({}, {})`` when
    there is no such log."""
    run = getattr(getattr(spec, "job", None), "stack", None)
    log = (rec.info.get("log") if rec is not None else None) or ""
    if run is None or not log or not Path(log).is_file():
        return {}, {}
    from cloudfit import stacks
    from cloudfit.errors import UsageError
    from cloudfit.profiling import measured

    try:
        parser = stacks.get(run.parser)
        with open(log, errors="replace") as f:
            f.seek(int(rec.info.get("log_from") or 0))  # this run's lines, not an earlier run's of the same name
            lines = f.readlines()
    except (UsageError, OSError, ValueError):
        return {}, {}
    gpus = int(result.config.accelerators if result.config is not None else spec.configs[0].accelerators)
    return parser.layout_from_log(lines), measured.from_events(parser.parse_log(lines), gpus)


def _layout_differs(spec, result, said: dict[str, Any]) -> str | None:
    """Where the log states a layout other than the plan's on the config that ran (a command of the user's own with
    other flags: ``-- torchrun … --training.local_batch_size 1``), what differs (``micro_batch 2→1, grad_accum
    2→4``); None when it agrees or states nothing."""
    from cloudfit.errors import UsageError

    if not said:
        return None
    try:
        job = spec.job.stack.job(result.config if result.config is not None and result.config != spec.configs[0]
                                 else None)
    except UsageError:
        return None
    diff = [f"{k} {getattr(job, k)}→{said[k]}" for k in _LOGGED_LAYOUT
            if k in said and getattr(job, k, None) is not None and str(getattr(job, k)) != str(said[k])]
    return ", ".join(diff) or None


def _local_gpus_are(accelerator) -> bool:
    """Whether this machine's CUDA GPUs are the plan's accelerator (a local run measures the plan's cluster only
    then; on a CPU, or on other GPUs, its speed would plant a wrong anchor)."""
    import importlib.util

    if not accelerator or importlib.util.find_spec("torch") is None:
        return False
    import torch

    if not torch.cuda.is_available():
        return False
    from cloudfit.profiling.device import canonical_device_name

    names = {canonical_device_name(torch.cuda.get_device_name(i)) for i in range(torch.cuda.device_count())}
    return names == {accelerator}


#: The stack a GPU launch of a large-model plan runs when nobody named one: torchtitan (PyTorch's own
#: large-model trainer; it speaks cloudfit's layout one to one). cloudfit's own trainer reached ~9% MFU on an
#: H100 (bench/RESULTS_gpu.md: llama3-1b, 0.35 s per 4,096-token step) where the plan promises far more, so a
#: plan launched on it would overrun its hours and budget; it stays the CPU rehearsal and `--stack cloudfit`.
DEFAULT_GPU_STACK = "torchtitan"


def default_stack_refusal(plan) -> str | None:
    """Why ``DEFAULT_GPU_STACK`` cannot run a large-model plan that names no stack (LoRA, a model that is none of
    its flavours), as one line that says what runs it instead; None when it can (or the plan names a stack)."""
    lay = plan.layout or {}
    if not lay or lay.get("stack"):
        return None
    from cloudfit import stacks

    why = stacks.get(DEFAULT_GPU_STACK).refuse_workload(lay.get("shape") or {}, finetune=str(lay.get("finetune") or "full"),
                                                       precision=str(lay.get("precision") or "bf16"),
                                                       model=str(lay.get("model") or ""))
    if not why:
        return None
    from cloudfit.errors import UsageError
    from cloudfit.stacks.base import StackJob

    try:  # Accelerate is named only where it runs this layout (it has no selective checkpointing, for one)
        accelerate = stacks.get("accelerate").refuse(StackJob.from_plan(plan)) is None
    except UsageError:
        accelerate = False
    what = "fine-tunes with LoRA" if lay.get("finetune") == "lora" else "trains a model"
    return (f"this plan names no stack and {what}, which {DEFAULT_GPU_STACK} (the GPU default) cannot run "
            f"({why.split(':')[0]}): launch your own script with the plan's layout — `cloudfit launch plan.json -- "
            "python finetune.py` (CLOUDFIT_* environment and cloudfit_layout.json)"
            + (" or `--stack accelerate -- finetune.py`" if accelerate else ""))


def choose_stack(plan, backend: str, stack: str | None, command: tuple[str, ...]) -> tuple[str, str, list[str]]:
    """``(the stack that runs, the stack whose parser reads its log, notes)`` for ``plan`` on ``backend``."""
    from cloudfit import stacks
    from cloudfit.errors import UsageError

    notes: list[str] = []
    named = None if stack is None else str(stack).strip().lower()
    if named is not None:
        stacks.get(named)  # unknown: one line
    lay = plan.layout or {}
    priced = lay.get("stack") or "cloudfit"
    if command:
        runs = named or lay.get("stack")  # the stack named here, else the plan's
        if runs not in (None, "custom", "cloudfit") and lay:
            from cloudfit.executors.stack_job import takes_arguments

            if takes_arguments(stacks.get(runs), command):  # accelerate: `-- train.py …`; `-- --flag …`
                if runs != priced:
                    notes.append(f"the plan's numbers are for {priced}, but {runs} runs it")
                return runs, runs, notes
        parser = named if named not in (None, "custom", "cloudfit") else "custom"
        return "custom", parser, notes
    if named == "custom":
        raise UsageError("--stack custom runs your own command: give it after --, e.g. `cloudfit launch plan.json "
                         "--stack custom -- python train.py`")
    if not lay:
        if named not in (None, "cloudfit"):
            raise UsageError(f"--stack {named} runs large-model plans (made with --tokens); this plan trains "
                             f"{plan.workload.model} on cloudfit's own trainer — or give your command after --")
        return "cloudfit", "cloudfit", notes
    if named is None:
        named = lay.get("stack")
    if named is None:
        if backend == "local":
            return "cloudfit", "cloudfit", notes
        refused = default_stack_refusal(plan)
        if refused:
            raise UsageError(refused)
        named = DEFAULT_GPU_STACK
        notes.append(f"no stack named: {named} runs this plan (the default on GPUs; cloudfit's own trainer ran at ~9% "
                     "MFU on an H100 — `--stack cloudfit` runs it anyway)")
    if named != priced:
        notes.append(f"the plan's numbers are for {priced}, but {named} runs it: `cloudfit recommend … --stack "
                     f"{named}` prices it for {named}")
    return named, named, notes


def _workdir(command: tuple[str, ...], workdir: str | None, backend: str):
    """``(Packed or None, command as it runs on a node)``: the folder of the command's script (or ``workdir``)
    ships to every node of a cloud backend and the command runs from it. Locally the command runs as typed."""
    from cloudfit.errors import UsageError
    from cloudfit.executors import workdir as wd

    if workdir is not None and not command:
        raise UsageError("--workdir ships the folder your command runs from: give the command after --")
    if not command or backend == "local":
        if workdir is not None:
            wd.pack(workdir)  # checked locally too (size, secrets): the same refusal as on a cloud
        return None, command
    folder = wd.script_folder(command) if workdir is None else None
    from pathlib import Path

    root = Path(workdir).expanduser().resolve() if workdir is not None else folder
    if root is None:
        return None, command
    packed = wd.pack(root)
    return packed, wd.node_command(command, Path(packed.folder))


def node_checkpoint_dir(checkpoint_dir: str | None) -> str | None:
    """Where a node sees the checkpoint folder: a gs:// bucket is mounted at /mnt/cloudfit/BUCKET (startup.sh)."""
    if checkpoint_dir and checkpoint_dir.startswith("gs://"):
        from cloudfit.executors.gcp.bodies import split_bucket

        return split_bucket(checkpoint_dir)[1]
    return checkpoint_dir


def _with_stack_files(packed, job, configs, checkpoint_dir):
    """The archive that ships: the user's folder and the stack's config files of every config the run may start
    (``StackCommand.files``, as the nodes' startup builds the command: the checkpoint folder where they mount it;
    a deadline switch's or fallback's own layout under its own name) at its root (a file of the folder with the
    same name is replaced by the stack's)."""
    from cloudfit.errors import UsageError
    from cloudfit.executors import workdir as wd

    files: dict = {}
    if job.stack is not None:
        for i, config in enumerate(configs):
            try:
                files.update(job.stack.command(config, checkpoint_dir).files)
            except UsageError:
                if i == 0:  # the first config's refusal is the launch's (one line); an alternative the stack
                    raise   # cannot run is refused again when (if ever) the run switches to it
    if not files:
        return packed
    return wd.pack(packed.folder if packed is not None else None, extra=files)


def _stack_job(plan, executor, configs, steps, checkpoint_dir, checkpoint_every, record, chosen, parser, command):
    """The plan run by ``chosen`` (its command per cluster config), progress from its log."""
    from cloudfit.executors.base import JobSpec
    from cloudfit.executors.deadline import deadline_spec
    from cloudfit.executors.stack_job import StackRun

    lay = plan.layout
    run = StackRun(chosen, parser, plan, tuple(command), steps=steps, checkpoint_every=checkpoint_every,
                   seq_len=int(lay.get("seq_len") or 0) or None)
    sj = run.job(None, checkpoint_dir)
    cmd = run.command(None, checkpoint_dir)  # a layout the stack cannot run: refused here, in one line
    interval_s = float((lay.get("checkpoint") or {}).get("interval_h") or 1.0) * 3600.0
    job = JobSpec(model=str(lay.get("model") or plan.workload.model), steps=sj.steps, checkpoint_dir=checkpoint_dir,
                  checkpoint_every=checkpoint_every, precision=sj.precision, command=tuple(command), stack=run,
                  checkpoint_interval_s=interval_s)
    record["stack"] = {"name": chosen, "parser": parser, "layout": sj.layout_text(),
                       "guarantee": StackRun.command_guarantee(cmd), "notes": list(cmd.notes)}
    return job, job.model, deadline_spec(plan, configs, sj.steps)


def _local_rehearsal_note(plan, chosen, configs, checkpoint_dir) -> str:
    return (f"local: {chosen} needs the plan's GPUs; this machine rehearses the layout with cloudfit's own trainer "
            f"(same degrees, shrunk) — `--dry-run --backend gcp` shows {chosen}'s command, and `-- CMD` runs a "
            "command of your own here")


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


def job_view(spec, pv=None) -> dict:
    """What runs and what ships, for ``--dry-run`` (plain text and ``--json``) on every backend: the stack, the
    exact command on each node, the files that travel (the workdir archive with each file's size, the cloudfit
    install), the stack's config files, where checkpoints go, how progress is read and what a stop guarantees."""
    import shlex

    job, c = spec.job, spec.configs[0]
    backend = pv.backend if pv is not None else ""
    local = backend == "local"
    ckpt = job.checkpoint_dir or ((pv.nodes[0].detail.get("checkpoint_dir") if pv is not None and pv.nodes else None)
                                  or ("gs://BUCKET/PATH (--checkpoint-dir)" if not local else "the run folder"))
    node_ckpt = node_checkpoint_dir(job.checkpoint_dir) if not local and job.checkpoint_dir else ckpt
    view: dict = {"stack": "cloudfit", "checkpoints": str(ckpt)}
    if node_ckpt != ckpt:
        view["node_checkpoints"] = str(node_ckpt)
    nodes, per_node = c.nodes, c.offering.accelerators_per_node
    run = job.stack
    body, direct = "", False
    if run is not None:
        sc = run.command(c, node_ckpt)
        direct = sc.launcher != "torchrun"
        body = shlex.join(sc.argv if direct else run.entry(sc))
        view.update(stack=run.name, log_parser=run.parser, env=dict(sc.env), stack_notes=list(sc.notes),
                    config_files={k: v for k, v in sc.files.items()},
                    guarantee=run.command_guarantee(sc), checkpoint_on_sigterm=bool(sc.checkpoint_on_sigterm))
    elif job.command:
        body = "--no-python " + shlex.join(job.command)
        view.update(stack="custom", guarantee="a stop sends SIGTERM (and touches $CLOUDFIT_STOP_FILE); what is "
                                              "kept is what your command checkpointed")
    else:
        body = f"-m {job.trainer} " + shlex.join(job.trainer_args(node_ckpt, config=c))
        view["guarantee"] = ("a stop checkpoints first: the trainer reads the stop file every step, saves and exits "
                             "(nothing is lost)")
        stk = spec.record.get("stack") or {}
        if stk.get("rehearsed_by"):
            view["stack"] = f"{stk['name']} (rehearsed here by {stk['rehearsed_by']})"
    if local and pv is not None and pv.nodes:
        cmd = list(pv.nodes[0].detail.get("command") or [])
        view["commands"] = [{"node": pv.nodes[0].name, "command": shlex.join(cmd)}]
    else:
        prefix = ("torchrun --nnodes={n} --nproc-per-node={p} --rdzv-backend=c10d --rdzv-endpoint={m}:29400 "
                  "--rdzv-id={name} --max-restarts=3")
        lines = []
        for i in range(nodes):
            head = "<node-0 internal IP>" if nodes > 1 else "localhost"
            pre = ("" if direct else prefix.format(n=nodes, p=per_node, m=head, name=spec.name) + " ")
            env = (f"NODE_RANK={i} MASTER_ADDR={head} " if direct else "")
            lines.append({"node": f"{spec.name}-{i}", "command": f"{env}{pre}{body}".strip(),
                          "cwd": "the unpacked workdir" if job.workdir is not None else "/var/lib/cloudfit"})
        view["commands"] = lines
    if backend == "sky" and pv.nodes:  # SkyPilot's nodes: its own rendezvous (node 0), the task's run from its workdir
        from cloudfit.plan.skypilot import WORKDIR

        cmd = shlex.join(pv.nodes[0].detail.get("command") or [])
        head = "<node-0 IP>" if nodes > 1 else "localhost"
        view["commands"] = [{"node": f"{spec.name}-{i}", "command": (f"NODE_RANK={i} MASTER_ADDR={head} " if direct
                                                                     else "") + cmd,
                             "cwd": f"{WORKDIR}, the unpacked workdir" if job.workdir is not None else "~"}
                            for i in range(nodes)]
    ships = []
    if job.workdir is not None and not local:
        w = job.workdir
        ships.append({"what": "workdir archive", "folder": w.folder, "bytes": w.size, "sha256": w.sha256,
                      "files": [{"path": p, "bytes": n} for p, n in w.files]})
    if pv is not None and pv.install:
        ships.append({"what": "cloudfit", "describe": pv.install})
    if backend == "sky" and pv.nodes:  # the wheel and the archive as file mounts, the bucket, the key as a secret
        ships += [{"what": "sky", "describe": line} for line in pv.nodes[0].detail.get("ships") or ()]
    view["ships"] = ships
    if job.stack is not None:
        view["progress"] = f"parsed from the job's log by {job.stack.parser}'s parser (step, tokens/s, loss, checkpoints)"
    elif job.command:
        view["progress"] = "none unless your command writes $CLOUDFIT_PROGRESS_FILE (the deadline rule is blind to it)"
    return view


def _notes(spec) -> tuple[str, ...]:
    """One line per difference between the plan's layout and what will run (and the deadline rule)."""
    r = spec.record.get("rehearsal")
    if r:
        head = f"rehearsing the plan's layout {r['planned']} as {r['rehearsed']}"
        return (head,) + tuple(f"rehearsal: {n}" for n in r.get("notes", []))
    lay = spec.record.get("layout")
    stk = spec.record.get("stack")
    d = spec.deadline
    dl = (f"deadline kept at run time: {d.deadline_s / 3600:,.1f} h, switching to on-demand "
          f"{d.on_demand.label()} if the spot cluster falls behind" if d is not None and d.on_demand is not None else "")
    if stk and stk.get("layout"):
        return (f"{stk['name']} runs layout {stk['layout']}" + (f" (progress: {stk['parser']}'s log parser)"
                                                                 if stk['parser'] != stk['name'] else "")
                + (f"; {dl}" if dl else ""),) + tuple(stk["notes"])
    if lay:
        return (f"cloudfit.train_llm runs layout {lay['runs']} (plan: {lay['planned']})" + (f"; {dl}" if dl else ""),
                ) + tuple(lay.get("notes", []))
    return (dl,) if dl else ()
