"""The Executor contract: what every backend (``local``, ``gcp``) does with a cluster.

An executor turns a :class:`RunSpec` — cluster configs to try in order, the job, a budget — into
running nodes, supervises them under the budget guard until the job completes (or the budget,
the timeout or a failure ends it), tears everything down and returns a :class:`RunResult`.
``launch`` is one ``run``; a probe run of active search is another ``run`` with a short job and a
small budget, reading ``RunResult.samples_per_second``.

Contract (checked by ``tests/executors/test_contract.py`` against every backend):

* ``preview(spec)`` creates nothing and lists the exact nodes ``run`` would create first.
* ``run`` records the cluster and, *before* creating anything, every resource (write-ahead intent)
  in the state store; it raises ``BudgetTooSmallError`` (a ``UsageError``) before creating anything
  when the budget cannot pay one guard interval.
* When ``run`` returns (or raises), nothing it created is left running; the cluster row holds the
  spend (never above the budget) and the reason the run ended.
* ``down(name)`` deletes everything the cluster's recorded launches own — found through the state
  store *and* the backend's own listing (labels / process environment) — from any process; already
  gone is success; calling it twice is harmless. A resource carrying the cluster's label but another
  launch's identity is left alone (``DownResult.foreign``) unless ``all_with_label=True``.
* ``live(name)`` lists what exists at the backend right now (the ground truth tests count).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

from cloudfit.errors import BudgetExceeded, UsageError
from cloudfit.types import ClusterConfig

#: How a run ended (stored in the state store, shown by ``status``). ``refused``: a rank refused its input
#: (a checkpoint whose signature does not verify; exit 2) — final, never restarted. ``exited``: another stack's
#: command ended on its own (exit 0) before the plan's steps — its own step count, not a stop cloudfit asked for.
COMPLETED, BUDGET, TIMEOUT, FAILED, INTERRUPTED, DOWN, NO_CAPACITY, REFUSED, EXITED = (
    "completed", "budget", "timeout", "failed", "interrupted", "down", "no-capacity", "refused", "exited")

MAX_STEPS = 10**12  # optimizer steps a job may ask for (a step a microsecond is still 11 days)
LABEL = "cloudfit-cluster"  # the label (GCP) / environment variable (local) naming a node's cluster
ENV_CLUSTER = "CLOUDFIT_CLUSTER"
#: The HMAC key that signs and verifies the job's checkpoints (64 hex). The launcher draws it per plan, keeps it
#: in its state store and hands it to every rank out of band (process environment; VM metadata; SkyPilot
#: secret): never in the checkpoint folder or bucket, the logs, the plan or --dry-run/--json output.
ENV_CHECKPOINT_KEY = "CLOUDFIT_CHECKPOINT_KEY"

_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")


def check_name(name: str) -> str:
    """Cluster names become VM names and label values: lowercase letters, digits, dashes, ≤ 40 chars."""
    if not _NAME.match(name or ""):
        raise UsageError(
            f"cluster name {name!r} must be 1–40 lowercase letters, digits or dashes, starting with a letter "
            "and not ending with a dash"
        )
    return name


def default_name(model: str) -> str:
    stem = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")[:20] or "job"
    if not stem[0].isalpha():
        stem = "m-" + stem
    return f"cf-{stem}-{time.strftime('%m%d-%H%M%S')}"


@dataclass(frozen=True)
class JobSpec:
    """What runs on the cluster: cloudfit's trainer, or ``command`` instead of it."""

    model: str = "mlp"  # zoo name or path/to/file.py:factory
    steps: int = 100  # total optimizer steps (global, across restarts)
    batch_size_per_device: int | None = None  # None = the model's default
    checkpoint_dir: str | None = None  # None = the backend's default
    checkpoint_every: int | None = None  # steps between checkpoints; None = by time (Young/Daly, below)
    precision: str = "fp32"
    model_options: Mapping[str, Any] = field(default_factory=dict)
    command: tuple[str, ...] = ()  # non-empty: run this under torchrun instead of the trainer
    checkpoint_interval_s: float = 600.0  # the interval the plan priced (re-estimated after the first write)
    hazard_per_hour: float = 0.0  # the cluster's revocation rate, for that re-estimate
    progress_every_s: float = 30.0  # the trainer writes its progress file at most this often
    # A large-model plan: ``cloudfit.train_llm`` with the plan's layout instead of ``cloudfit.train``.
    llm: Any = None  # cloudfit.executors.llm_job.LlmJob: the layout per cluster config (gcp)
    llm_args: tuple[str, ...] = ()  # fixed trainer arguments (the local rehearsal's layout)
    world_size: int | None = None  # ranks the fixed layout needs (local)
    #: Another training stack runs the job (``cloudfit.executors.stack_job.StackRun``: the stack's command per
    #: cluster config, its log parser, its guarantee) — torchtitan/Megatron/Accelerate or a user's command.
    stack: Any = None
    #: The folder that ships to every node and the command runs from (``cloudfit.executors.workdir.Packed``).
    workdir: Any = None
    #: Files the local run folder gets (relative path → text): the stack's config files of a plan another stack
    #: runs on GPUs, written beside its CPU rehearsal.
    files: Mapping[str, str] = field(default_factory=dict)

    @property
    def trainer(self) -> str:
        return "cloudfit.train_llm" if (self.llm is not None or self.llm_args) else "cloudfit.train"

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise UsageError(f"--steps must be at least 1, got {self.steps}")
        if self.steps > MAX_STEPS:
            raise UsageError(f"the job asks for {self.steps:.3g} optimizer steps; that is not a training run "
                             f"(at most {MAX_STEPS:.0e}: check the plan's samples, tokens or steps)")
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            raise UsageError(f"--checkpoint-every must be at least 1, got {self.checkpoint_every}")
        if not (self.checkpoint_interval_s > 0 and math.isfinite(self.checkpoint_interval_s)):
            raise UsageError(f"the checkpoint interval must be positive, got {self.checkpoint_interval_s}")
        if not (self.hazard_per_hour >= 0 and math.isfinite(self.hazard_per_hour)) or not self.progress_every_s >= 0:
            raise UsageError("the hazard and the progress interval must be non-negative")
        if self.batch_size_per_device is not None and self.batch_size_per_device < 1:
            raise UsageError(f"the batch size must be at least 1, got {self.batch_size_per_device}")

    def trainer_args(self, checkpoint_dir: str, *, stop_file: str | None = None, stop_at: float | None = None,
                     progress_file: str | None = None, progress_every_s: float | None = None,
                     config: ClusterConfig | None = None) -> list[str]:
        """Arguments of ``python -m cloudfit.train`` (or ``cloudfit.train_llm``, with the layout for
        ``config``) for this job."""
        if self.trainer == "cloudfit.train_llm":
            return self._llm_trainer_args(checkpoint_dir, stop_file, stop_at, progress_file, progress_every_s, config)
        args = ["--model", self.model, "--steps", str(self.steps), "--checkpoint-dir", checkpoint_dir,
                "--precision", _trainer_precision(self.precision)]
        if self.checkpoint_every:
            args += ["--checkpoint-every", str(self.checkpoint_every)]
        else:
            args += ["--checkpoint-interval-s", f"{self.checkpoint_interval_s:g}",
                     "--hazard-per-hour", f"{self.hazard_per_hour:.6g}"]
        every = self.progress_every_s if progress_every_s is None else progress_every_s
        args += ["--progress-every-s", f"{every:g}"]
        if self.batch_size_per_device:
            args += ["--batch-size", str(self.batch_size_per_device)]
        for k, v in sorted(self.model_options.items()):
            args += ["--model-option", f"{k}={str(v).lower() if isinstance(v, bool) else v}"]
        from cloudfit.train import control_args

        return args + control_args(progress_file, stop_file, stop_at)


    def _llm_trainer_args(self, checkpoint_dir, stop_file, stop_at, progress_file, progress_every_s, config) -> list[str]:
        if self.llm_args:
            args = list(self.llm_args)
        elif config is not None:
            args = self.llm.cluster_args(config)
        else:
            args = self.llm.args_for(self.llm.degrees, precision="bf16")
        args += ["--steps", str(self.steps), "--checkpoint-dir", checkpoint_dir]
        if self.checkpoint_every:
            args += ["--checkpoint-every", str(self.checkpoint_every)]
        else:
            args += ["--checkpoint-interval-s", f"{self.checkpoint_interval_s:g}"]
        every = self.progress_every_s if progress_every_s is None else progress_every_s
        args += ["--progress-interval-s", f"{every:g}"]
        from cloudfit.train import control_args

        return args + control_args(progress_file, stop_file, stop_at)


def _trainer_precision(p: str) -> str:
    return p if p in ("fp32", "tf32", "fp16", "bf16") else "bf16" if p == "fp8" else "fp32"


@dataclass(frozen=True)
class RunSpec:
    """One run: try ``configs`` in order (stockout/quota → next), train ``job``, spend ≤ ``budget_usd``."""

    name: str
    configs: tuple[ClusterConfig, ...]
    job: JobSpec
    budget_usd: float
    timeout_s: float | None = None
    labels: Mapping[str, str] = field(default_factory=dict)  # extra labels, e.g. {"cloudfit-purpose": "probe"}
    record: Mapping[str, Any] = field(default_factory=dict)  # extra facts for the state store (e.g. trusted prices)
    deadline: Any = None  # cloudfit.executors.deadline.DeadlineSpec: keep the deadline at run time

    def __post_init__(self) -> None:
        check_name(self.name)
        if not self.configs:
            raise UsageError("a run needs at least one cluster config")
        if not (self.budget_usd > 0 and math.isfinite(self.budget_usd)):
            raise UsageError(f"the budget must be a positive number of USD, got {self.budget_usd!r}")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise UsageError(f"the timeout must be positive, got {self.timeout_s}")


@dataclass(frozen=True)
class NodePlan:
    """One node as the backend will create it (``preview`` / ``--dry-run``)."""

    name: str
    zone: str
    machine_type: str
    accelerator: str
    accelerators: int
    provisioning: str  # SPOT | STANDARD | local
    price_per_hour: float
    max_run_duration_s: int
    labels: Mapping[str, str]
    detail: Mapping[str, Any] = field(default_factory=dict)  # image, termination action, ranks, command …


@dataclass(frozen=True)
class Preview:
    backend: str
    name: str
    config: ClusterConfig
    nodes: tuple[NodePlan, ...]
    budget_usd: float
    cost_cap_usd: float  # worst case if every node ran to its cap: never above the budget
    interval_s: float
    teardown_s: float
    fallbacks: int  # alternatives available after this config
    notes: tuple[str, ...] = ()
    startup_script: str = ""  # gcp: the script every VM runs (identical on all nodes)
    install: str = ""  # gcp: what the VMs install and from where
    #: what runs and ships (``cloudfit.launcher.job_view``): stack, the command per node, files with sizes,
    #: the stack's config files, where checkpoints go and what a stop guarantees — every backend
    job: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunResult:
    name: str
    backend: str
    reason: str  # completed | budget | timeout | failed | refused | interrupted | no-capacity
    spend_usd: float
    elapsed_s: float
    config: ClusterConfig | None  # the config that ran (after fallbacks)
    steps: int = 0
    total_steps: int = 0
    samples_per_second: float | None = None  # measured by the trainer (global, all ranks)
    restarts: int = 0  # worker-group restarts (torch elastic)
    preemptions: int = 0
    fallbacks: tuple[str, ...] = ()  # why earlier configs were skipped
    detail: str = ""


@dataclass(frozen=True)
class Event:
    """Something the CLI may show: ``kind`` is a short tag, ``message`` one line."""

    kind: str
    message: str
    data: Mapping[str, Any] = field(default_factory=dict)


EventSink = Callable[[Event], None]


@dataclass(frozen=True)
class DownResult:
    name: str
    deleted: tuple[str, ...]  # resources deleted now
    already_gone: tuple[str, ...]
    untracked: tuple[str, ...] = ()  # found by label/environment but missing from the state store
    foreign: tuple[str, ...] = ()  # carry the cluster label but belong to a launch this store did not record: left alone
    pending: tuple[str, ...] = ()  # inserts recorded but unanswered that may still create a VM: run `down` again


class Executor(Protocol):
    backend: str

    def preview(self, spec: RunSpec) -> Preview: ...

    def run(self, spec: RunSpec, on_event: EventSink | None = None) -> RunResult: ...

    def down(self, name: str, *, all_with_label: bool = False) -> DownResult: ...

    def live(self, name: str) -> list[str]: ...


# ------------------------------------------------------------------------------ supervision

@dataclass
class Poll:
    """What a backend saw on one look at its running cluster."""

    state: str = "running"  # running | completed | stopped | failed | refused | down
    progress: Mapping[str, Any] = field(default_factory=dict)
    lost: tuple[str, ...] = ()  # nodes that vanished (preempted, expired, crashed)
    detail: str = ""


class Running(Protocol):
    """A launched cluster, as the supervisor drives it (one per backend).

    ``poll`` reports ``down`` once the state store says `cloudfit down` took the cluster over, so the
    launcher stops instead of recreating what ``down`` deletes.
    """

    def poll(self) -> Poll: ...

    def replace(self, lost: Sequence[str]) -> None: ...  # recreate lost nodes (may raise BudgetExceeded)

    def request_stop(self) -> None: ...  # ask the job to checkpoint and exit

    def teardown(self) -> None: ...  # delete everything; idempotent; updates guard + state


@dataclass(frozen=True)
class Timing:
    interval_s: float  # time between polls = the guard's check interval
    teardown_s: float  # stop request → everything gone
    grace_s: float  # of teardown_s, how long the job may take to checkpoint before being killed


def supervise(running: Running, guard, *, timing: Timing, timeout_s: float | None, emit: EventSink,
              clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
              record: Callable[[float, Poll], None] | None = None, watch=None,
              after_checkpoint: "CheckpointStops | None" = None) -> tuple[str, Poll]:
    """Poll ``running`` every ``interval_s`` until the job ends or the guard / timeout stops it.

    ``record(spend_usd, poll)`` is called after every poll (the executors write it to the state
    store, so ``status`` from another process sees the spend). ``watch`` (a
    ``cloudfit.executors.deadline.DeadlineWatch``) keeps the deadline: after every poll it predicts the
    finish and, when Can't Be Late's rule says so, ``running.switch(decision)`` moves the job to
    on-demand (the guard still prices every VM: the budget guarantee is the same). ``after_checkpoint`` (a
    stack that saves nothing on SIGTERM): when its log reports a checkpoint and the next one would come after the
    budget or the timeout, the job stops right then, after the checkpoint (``CheckpointStops``).
    Returns ``(reason, last poll)``.
    Always tears down before returning (also on exceptions and Ctrl-C, which re-raise after teardown).
    """
    t0 = clock()
    last = Poll()
    reason = FAILED
    try:
        while True:
            tick = clock()
            p = running.poll()
            if not p.progress:  # keep the last progress we saw (a vanished node reports none)
                p.progress = last.progress
            last = p
            if record is not None:
                record(guard.accrued(tick), last)
            if last.progress:
                emit(Event("progress", _progress_line(last.progress, guard.accrued(tick), guard.budget_usd),
                           {**last.progress, "spend_usd": guard.accrued(tick)}))
            if last.state in ("completed", "stopped"):
                reason = COMPLETED if last.state == "completed" else BUDGET
                break
            if last.state == EXITED:
                reason = EXITED
                pr = last.progress or {}
                emit(Event(EXITED, f"the job's command ended on its own (exit 0) at step {pr.get('step', '?')} of the "
                                   f"plan's {pr.get('total_steps', '?')}: cloudfit did not stop it"))
                break
            if last.state == DOWN:  # `cloudfit down` from another process is deleting the cluster
                reason = DOWN
                emit(Event("down", "the cluster is being deleted by `cloudfit down`"))
                break
            if last.state in ("failed", REFUSED):
                reason = FAILED if last.state == "failed" else REFUSED
                emit(Event(reason, last.detail or "the job failed"))
                break
            early = after_checkpoint.check(tick, last.progress, guard, t0, timeout_s) if after_checkpoint else None
            if early is not None:
                reason = early[0]
                emit(Event(early[0], early[1]))
                last = _graceful_stop(running, timing, clock, sleep, last)
                break
            if guard.should_stop(tick):
                reason = BUDGET
                emit(Event("budget", f"${guard.accrued(tick):.4f} of ${guard.budget_usd:.4f} spent: "
                                     "checkpointing and stopping before the next interval could pass the budget"))
                last = _graceful_stop(running, timing, clock, sleep, last)
                break
            if timeout_s is not None and tick - t0 >= timeout_s:
                reason = TIMEOUT
                emit(Event("timeout", f"timeout after {tick - t0:.0f} s: checkpointing and stopping"))
                last = _graceful_stop(running, timing, clock, sleep, last)
                break
            if watch is not None and last.state == "running":
                if last.lost:
                    watch.lost()
                d = watch.observe(tick, last.progress, running.config, up=not last.lost,
                                  budget_left_usd=guard.remaining(tick))
                running.deadline_seen(d)
                if d.action == "on-demand":
                    emit(Event("switch", f"switching to on-demand: {d.reason}", dict(d.data)))
                    try:
                        running.switch(d)
                    except BudgetExceeded as e:
                        emit(Event("budget", str(e)))
                        reason = BUDGET
                        last = _graceful_stop(running, timing, clock, sleep, last)
                        break
                    watch.restarted()
                    last.lost = ()
            if last.lost:
                emit(Event("lost", f"lost {', '.join(last.lost)}: recreating"))
                try:
                    running.replace(last.lost)
                except BudgetExceeded as e:
                    emit(Event("budget", str(e)))
                    reason = BUDGET
                    last = _graceful_stop(running, timing, clock, sleep, last)
                    break
            sleep(max(0.0, timing.interval_s - (clock() - tick)))
    except KeyboardInterrupt:
        emit(Event("interrupted", "interrupted: deleting the cluster"))
        running.teardown()
        raise
    except BaseException:
        running.teardown()
        raise
    running.teardown()
    return reason, last


@dataclass
class CheckpointStops:
    """Where a stack checkpoints only every K steps (and not on SIGTERM), a budget or deadline stop is placed right
    after a checkpoint its log reports: at each newly reported checkpoint, if the next one (``every_s`` later:
    measured between the log's checkpoints, else the planned interval) would come after the guard must stop or
    after the timeout, the job stops now — losing no step instead of up to an interval of them."""

    every_s: float  # the planned interval between checkpoints (seconds)
    seen_step: int | None = None
    seen_at: float | None = None

    def check(self, now: float, progress: Mapping[str, Any], guard, t0: float,
              timeout_s: float | None) -> tuple[str, str] | None:
        step = progress.get("checkpoint_step") if progress else None
        if step is None or step == self.seen_step:
            return None
        if self.seen_at is not None and self.seen_step is not None and now > self.seen_at:
            self.every_s = now - self.seen_at  # measured: the log's own rhythm
        self.seen_step, self.seen_at = int(step), now
        nxt = now + self.every_s
        if guard.should_stop(nxt):
            return (BUDGET, f"checkpoint at step {step}; the next (~{self.every_s:,.0f} s away) would come after the "
                            f"budget (${guard.budget_usd:.4f}): stopping right after this one")
        if timeout_s is not None and nxt - t0 >= timeout_s:
            return (TIMEOUT, f"checkpoint at step {step}; the next (~{self.every_s:,.0f} s away) would come after the "
                             f"timeout: stopping right after this one")
        return None


def _graceful_stop(running: Running, timing: Timing, clock, sleep, last: Poll) -> Poll:
    """Ask the job to checkpoint, wait up to ``grace_s`` for it to exit; the caller tears down."""
    running.request_stop()
    deadline = clock() + timing.grace_s
    while clock() < deadline:
        p = running.poll()
        if not p.progress:
            p.progress = last.progress
        last = p
        if p.state in ("completed", "stopped", "failed", REFUSED, DOWN, EXITED):
            break
        sleep(min(0.2, max(0.0, deadline - clock())))
    return last


def taken_over(store, name: str) -> bool:
    """True when `cloudfit down` (another process) has claimed the cluster."""
    rec = store.find_cluster(name)
    return rec is not None and rec.reason == DOWN


def _progress_line(p: Mapping[str, Any], spend: float, budget: float) -> str:
    step, total = p.get("step"), p.get("total_steps")
    sps, tps = p.get("samples_per_second"), p.get("tokens_per_second")
    parts = [f"step {step}/{total}" if step is not None else "starting"]
    if tps and p.get("source"):  # a stack's log: it states tokens/s
        parts.append(f"{tps:,.0f} tokens/s")
    elif sps:
        parts.append(f"{sps:,.0f} samples/s")
    if isinstance(p.get("loss"), (int, float)):
        parts.append(f"loss {p['loss']:.3f}")
    if p.get("restart"):
        parts.append(f"restart {p['restart']} (resumed at step {p.get('resumed_from_step', 0)})")
    parts.append(f"${spend:.4f} of ${budget:.4f}")
    return " · ".join(parts)


def probe_spec(config: ClusterConfig, *, model: str, steps: int, budget_usd: float, timeout_s: float | None = None,
               name: str | None = None, checkpoint_dir: str | None = None, batch_size_per_device: int | None = None,
               command: tuple[str, ...] = ()) -> RunSpec:
    """A short measurement run on exactly one config (active search): no fallbacks, checkpoints only
    at the end, labelled ``cloudfit-purpose=probe``. ``executor.run(spec).samples_per_second`` is the
    measured throughput; the run is torn down when it returns."""
    return RunSpec(name=name or default_name(f"probe-{model}"), configs=(config,),
                   job=JobSpec(model=model, steps=steps, batch_size_per_device=batch_size_per_device,
                               checkpoint_dir=checkpoint_dir, checkpoint_every=max(1, steps), command=command),
                   budget_usd=budget_usd, timeout_s=timeout_s, labels={"cloudfit-purpose": "probe"})


def plan_configs(plan, limit: int | None = None) -> tuple[ClusterConfig, ...]:
    """The plan's chosen config followed by its ranked alternatives (launch's fallback order), deduplicated."""
    out: list[ClusterConfig] = []
    for e in (plan.chosen, *plan.alternatives):
        if e.config not in out:
            out.append(e.config)
    return tuple(out[:limit] if limit else out)


def plan_identity(plan) -> str:
    """A plan's identity (16 hex): its workload, chosen config and layout. Launches of the same plan share
    its spend (the budget continues across relaunches) and its checkpoint key (only it resumes them)."""
    import hashlib
    import json

    d = plan.to_dict()
    core = {"workload": d.get("workload"), "chosen": (d.get("chosen") or {}).get("config"), "layout": d.get("layout")}
    return hashlib.sha256(json.dumps(core, sort_keys=True, default=str).encode()).hexdigest()[:16]


def carried_budget(store, spec: RunSpec, *, min_billed_s: float = 0.0, teardown_s: float = 0.0) -> tuple[float, float]:
    """``(budget left for this launch, spent by earlier launches of the same plan)``: the budget is the
    plan's, not the process's — a relaunch after a killed launcher and a `down` continues it."""
    from cloudfit.executors.budget import BudgetTooSmallError

    prior, names = store.plan_spend(spec.record.get("plan_id"), min_billed_s=min_billed_s, teardown_s=teardown_s)
    left = spec.budget_usd - prior
    if names and left <= 0:
        raise BudgetTooSmallError(
            f"this plan's earlier launches ({', '.join(names[-3:])}) spent ${prior:.4g} of its ${spec.budget_usd:.4g} "
            "budget: nothing is left; raise --budget to continue")
    return left, prior


def checkpoint_stops(spec: RunSpec) -> CheckpointStops | None:
    """``CheckpointStops`` for a stack that saves nothing on SIGTERM (None otherwise: it checkpoints on a stop)."""
    run = spec.job.stack
    if run is None:
        return None
    try:
        cmd = run.command(spec.configs[0], spec.job.checkpoint_dir)
    except Exception:
        return None
    if cmd.checkpoint_on_sigterm:
        return None
    return CheckpointStops(float(spec.job.checkpoint_interval_s))
