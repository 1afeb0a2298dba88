"""The local backend: the plan's job as torch.distributed processes on this machine — a rehearsal.

The job runs under torch's elastic launcher (``python -m cloudfit.runtime.torchrun --standalone``: torchrun,
gloo on CPUs, NCCL on GPUs) with ``--max-restarts``, so a rank that dies makes the whole worker
group restart and resume from the newest checkpoint — but a rank that refuses its input (exit 2: a
checkpoint that does not verify) ends the job at once, and the launch reports its line with exit 2.

Scaling rule: the plan's ``nodes × accelerators_per_node`` ranks are scaled down to this machine:
``ranks = min(plan ranks, max_ranks)`` with ``max_ranks = min(4, CPU cores)`` (CUDA devices when
present) — 2 ranks on a 2-core box. The batch per rank stays the plan's (or the model's default).

A large-model plan (``plan.layout``) runs ``cloudfit.train_llm`` instead: the CLI fits the plan's
layout to this machine (``LlmJob.rehearsal``: FSDP2 over the ranks, tensor parallel kept at 2 when
the plan has it and ranks allow, the shape shrunk) and the job's ``world_size`` is the ranks it needs;
the trainer writes DCP checkpoints and one metrics line per step (``CHECKPOINT_DIR/metrics.jsonl``).
Relaunching with the same checkpoint folder on another number of ranks (``--ranks``) resumes re-sharded.

Billing rehearsal: the budget guard charges the plan's cluster $/hour (spot or on-demand as
planned) for wall time, with the same guard as the cloud (check every ``interval_s``, stop —
checkpoint first — before the next interval could pass the budget). There is no per-VM minimum
billed time here. The trainer also gets ``--stop-at`` = start + the guard's cap, the local
stand-in for a VM's ``max_run_duration``: the job stops itself even if the launcher dies.

Every process of the job carries ``CLOUDFIT_CLUSTER=<name>`` in its environment (the local
equivalent of a VM label), so ``down`` finds it even without the state store.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from cloudfit.executors import state as st
from cloudfit.executors.base import (
    ENV_CHECKPOINT_KEY, ENV_CLUSTER, LABEL, REFUSED, DownResult, Event, EventSink, NodePlan, Poll, Preview, RunResult, RunSpec,
    Timing, carried_budget, checkpoint_stops, supervise, taken_over,
)
from cloudfit.executors.budget import Guard, PriceSchedule, check_launchable

FINAL_EXIT = 2  # cloudfit.runtime.torchrun.FINAL_EXIT: a rank refused its input
ENV_ELASTIC = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}  # torch elastic restarts hang on CPU without it (#135712)


def max_local_ranks() -> int:
    """How many ranks this machine runs: CUDA devices if any, else min(4, CPU cores)."""
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.device_count()
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    return max(1, min(4, os.cpu_count() or 1))


def run_dir(name: str) -> Path:
    from cloudfit.resources import home

    return home() / "clusters" / name


class LocalExecutor:
    """See the module docstring. ``interval_s``/``grace_s``/``teardown_s`` are the guard's timing."""

    backend = "local"
    INTERVAL_S, GRACE_S, TEARDOWN_S = 1.0, 3.5, 5.0

    @classmethod
    def billing_bounds(cls) -> tuple[float, float]:
        """(min billed seconds, longest billed time after the cap): no minimum here, teardown only."""
        return 0.0, cls.TEARDOWN_S

    def __init__(self, *, store: st.StateStore | None = None, max_ranks: int | None = None,
                 interval_s: float = INTERVAL_S, grace_s: float = GRACE_S, teardown_s: float = TEARDOWN_S,
                 max_restarts: int = 3) -> None:
        self._store = store  # opened on first use: a dry run writes nothing, not even state.db
        self.max_ranks = max_ranks or max_local_ranks()
        self.timing = Timing(interval_s=interval_s, teardown_s=teardown_s, grace_s=grace_s)
        self.max_restarts = max_restarts

    @property
    def store(self) -> st.StateStore:
        if self._store is None:
            self._store = st.StateStore()
        return self._store

    # ---------------------------------------------------------------- planning

    def ranks(self, spec: RunSpec) -> int:
        if spec.job.world_size:  # a large-model rehearsal: the ranks its (already fitted) layout needs
            return spec.job.world_size
        return max(1, min(spec.configs[0].accelerators, self.max_ranks))

    def _guard(self, spec: RunSpec, budget: float | None = None) -> tuple[Guard, list[PriceSchedule]]:
        g = Guard(spec.budget_usd if budget is None else budget, interval_s=self.timing.interval_s,
                  teardown_s=self.timing.teardown_s, min_billed_s=0.0, provision_slack_s=0.0,
                  min_cap_s=self.timing.interval_s)
        return g, _schedules(spec.configs[0])

    def _paths(self, spec: RunSpec) -> dict[str, Path]:
        d = run_dir(spec.name)
        ckpt = Path(spec.job.checkpoint_dir) if spec.job.checkpoint_dir else d / "checkpoints"
        if str(ckpt).startswith("gs://"):
            from cloudfit.errors import UsageError

            raise UsageError("--checkpoint-dir gs://… needs --backend gcp; the local backend takes a folder")
        return {"dir": d, "checkpoints": ckpt, "progress": d / "progress.json", "stop": d / "STOP", "log": d / "train.log"}

    def _argv(self, spec: RunSpec, paths: dict[str, Path], stop_at: float | None) -> list[str]:
        launcher = [sys.executable, "-m", "cloudfit.runtime.torchrun", "--standalone", f"--nproc-per-node={self.ranks(spec)}",
                    f"--max-restarts={self.max_restarts}", "--monitor-interval=0.5"]
        if spec.job.stack is not None:  # another stack / the user's command with the plan's layout
            run = spec.job.stack
            sc = run.command(spec.configs[0], str(paths["checkpoints"]))
            argv = list(run.entry(sc)) if sc.launcher == "torchrun" else list(sc.argv)
            # it runs from the run folder (its config files are there): the user's relative paths made absolute
            argv = [str(Path(w).resolve()) if w and not w.startswith("-") and not Path(w).is_absolute()
                    and Path(w).exists() else w for w in argv]
            return launcher + argv if sc.launcher == "torchrun" else argv
        if spec.job.command:
            return launcher + ["--no-python", *spec.job.command]
        args = spec.job.trainer_args(
            str(paths["checkpoints"]), stop_file=str(paths["stop"]), stop_at=stop_at, progress_file=str(paths["progress"]),
            progress_every_s=min(spec.job.progress_every_s, 1.0))  # local disk: cheap, and the guard polls it
        if spec.job.trainer == "cloudfit.train_llm":  # one line per step (loss, layout, world size), kept across runs
            args += ["--metrics-file", str(paths["checkpoints"] / "metrics.jsonl")]
        return launcher + ["-m", spec.job.trainer, *args]

    def preview(self, spec: RunSpec) -> Preview:
        guard, schedules = self._guard(spec)
        guard.check_launchable(schedules)
        c = spec.configs[0]
        cap = guard.reserve([f"{spec.name}-{i}" for i in range(c.nodes)], schedules, 0.0)  # a throwaway guard
        paths = self._paths(spec)
        node = NodePlan(
            name=spec.name, zone="localhost", machine_type=c.offering.machine_type, accelerator="cpu ranks",
            accelerators=self.ranks(spec), provisioning="local", price_per_hour=c.price_per_hour,
            max_run_duration_s=int(cap), labels={LABEL: spec.name, **spec.labels},
            detail={"rehearsal_of": c.label(), "ranks": self.ranks(spec), "checkpoint_dir": str(paths["checkpoints"]),
                    "command": self._argv(spec, paths, None)},
        )
        note = (f"rehearsal: {self.ranks(spec)} local rank(s) stand in for {c.label()}, charged at "
                f"${c.price_per_hour:.4g}/h")
        return Preview("local", spec.name, c, (node,), spec.budget_usd, guard.committed(0.0),
                       self.timing.interval_s, self.timing.teardown_s, 0, (note,))

    # ---------------------------------------------------------------- running

    def run(self, spec: RunSpec, on_event: EventSink | None = None) -> RunResult:
        _require_torch()  # before anything exists or is charged
        _stack_imports(spec)
        emit = on_event or (lambda e: None)
        budget, prior = carried_budget(self.store, spec)
        guard, schedules = self._guard(spec, budget)
        check_launchable(guard, schedules, prior, spec.budget_usd)  # before anything exists
        paths = self._paths(spec)
        c = spec.configs[0]
        self.store.create_cluster(spec.name, "local", spec.budget_usd, {
            "config": c.to_dict(), "ranks": self.ranks(spec), "job": _job_info(spec), "run_dir": str(paths["dir"]),
            "checkpoint_dir": str(paths["checkpoints"]), "log": str(paths["log"]),
            "plan_id": spec.record.get("plan_id"), "spent_before_usd": prior,
            **{k: spec.record[k] for k in ("planned_speed", "rehearsal") if k in spec.record},  # status compares
        }, launcher_pid=os.getpid(), launcher_started=_create_time(os.getpid()))
        started = time.monotonic()
        reason, last = "failed", Poll()
        running = _LocalRunning(self, spec, guard, [], 0, None, paths, c,
                                key=self.store.checkpoint_key(spec.record.get("plan_id") or spec.name))
        watch = None
        if spec.deadline is not None:
            from cloudfit.executors.deadline import DeadlineLog, DeadlineWatch

            watch = DeadlineWatch(spec.deadline, spec.job.steps, margin_s=self.timing.interval_s, t0=started)
            running.log = DeadlineLog(self.store, spec.name, watch, time.monotonic)
        try:
            paths["dir"].mkdir(parents=True, exist_ok=True)
            for stale in (paths["progress"], paths["stop"]):  # a previous run's files must not end this one
                stale.unlink(missing_ok=True)
            _write_files(paths["dir"], spec.job.files)
            try:
                running.start(c)
                self.store.update_cluster(spec.name, status=st.RUNNING)
                emit(Event("created", f"started {self.ranks(spec)} rank(s) (pid {running.proc.pid}) rehearsing "
                                      f"{c.label()}; log {paths['log']}"))
                reason, last = supervise(running, guard, timing=self.timing, timeout_s=spec.timeout_s, emit=emit,
                                         record=st.SpendRecorder(self.store, spec.name), watch=watch, after_checkpoint=checkpoint_stops(spec))
            finally:
                running.teardown()  # a no-op after supervise; covers an exception before it
        except KeyboardInterrupt:
            reason = "interrupted"
            raise
        finally:
            spend = guard.accrued(time.monotonic())
            rec = self.store.find_cluster(spec.name)
            final = rec.reason if rec is not None and rec.reason == "down" else reason
            self.store.update_cluster(spec.name, status=st.ENDED, reason=final, spend_usd=spend,
                                      info={"progress": dict(last.progress)})
            self.store.event(spec.name, final, f"ended: {final}, spent ${spend:.4f}")
        p = last.progress
        return RunResult(spec.name, "local", reason, spend, time.monotonic() - started, running.config,
                         steps=int(p.get("step") or 0), total_steps=int(p.get("total_steps") or spec.job.steps),
                         samples_per_second=p.get("samples_per_second"), restarts=int(p.get("restart") or 0),
                         detail="; ".join([last.detail] * bool(last.detail) + [f"switched: {w}" for w in running.switches]))

    # ---------------------------------------------------------------- down / live

    def live(self, name: str) -> list[str]:
        return [str(p.pid) for p in _labelled(name)]

    def down(self, name: str, *, all_with_label: bool = False) -> DownResult:
        rec = self.store.find_cluster(name)
        deleted, gone = [], []
        tracked_pids = set()
        if rec is not None:
            if not rec.ended:
                self.store.update_cluster(name, status=st.STOPPING, reason="down")
            for r in self.store.resources(name, live_only=True):
                pid, ct = r.info.get("pid"), r.info.get("create_time")
                if pid is not None:
                    tracked_pids.add(int(pid))
                if pid is not None and _same_process(int(pid), ct) and _kill_group(int(pid)):
                    deleted.append(f"pid {pid}")
                else:
                    gone.append(r.name)
                self.store.deleted(r.id, why="down")
        untracked = []
        found = _labelled(name)
        pids = {p.pid for p in found}
        for p in found:  # roots only: killing a root's group takes its ranks with it
            try:
                if p.ppid() in pids or p.pid in tracked_pids:
                    continue
            except Exception:
                continue
            if _kill_group(p.pid):
                untracked.append(f"pid {p.pid}")
        if rec is not None:  # spend by the processes' lifetimes (start to the kill just now), also after a dead launcher
            spend = self.store.refresh_spend(name, min_billed_s=0.0)
            if not rec.ended:
                self.store.update_cluster(name, status=st.ENDED, reason="down")
                self.store.event(name, "down", f"deleted by `cloudfit down`; spent ${spend:.4f}")
        if rec is None and not untracked:
            from cloudfit.errors import UsageError

            raise UsageError(f"no cluster named {name!r} in {self.store.path} and no local process carries its label")
        return DownResult(name, tuple(deleted), tuple(gone), tuple(untracked))


def _require_torch() -> None:
    """``ModuleNotFoundError`` for torch (which the CLI turns into the one line naming the extra to install,
    ``cloudfit[profile]``) when it is not installed: the ranks run under torch's launcher, so the job would
    otherwise start, fail, and point at its train.log."""
    from importlib.util import find_spec

    if find_spec("torch") is None:
        raise ModuleNotFoundError("No module named 'torch'", name="torch")


#: Seconds the pre-flight import of a stack's entry module may take (torch's own import is most of it)
PREFLIGHT_S = 300.0


def _stack_imports(spec: RunSpec) -> None:
    """A stack run as ``-m MODULE`` under torchrun (torchtitan's ``-m torchtitan.train``) first imports MODULE once
    in this Python, before anything exists or is charged: an import that cannot succeed (torchtitan 0.3.0 on torch
    2.11: ``cannot import name 'DataParallelMeshDims'``, seen on an H200) is one line, not a job that torchrun
    restarts three times over the same error (75 s there). ``UsageError`` naming the module and the error."""
    from cloudfit.executors.stack_job import entry_module

    run = spec.job.stack
    if run is None:
        return
    cmd = run.command(spec.configs[0], None)
    module = entry_module(cmd.argv) if cmd.launcher == "torchrun" else None
    if module is None:
        return
    try:
        p = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True,
                           timeout=PREFLIGHT_S, stdin=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    except subprocess.TimeoutExpired:
        return  # slow, not broken: torchrun will say
    if p.returncode != 0:
        from cloudfit.errors import UsageError

        last = next((ln.strip() for ln in reversed(p.stderr.splitlines()) if ln.strip()), f"exit {p.returncode}")
        raise UsageError(f"{module} does not import in {sys.executable} ({last[:300]}): the {run.name} stack cannot "
                         "run here; nothing launched")


def _job_info(spec: RunSpec) -> dict[str, Any]:
    j = spec.job
    return {"model": j.model, "steps": j.steps, "batch_size_per_device": j.batch_size_per_device,
            "checkpoint_every": j.checkpoint_every, "command": list(j.command)}


def _schedules(c) -> list[PriceSchedule]:
    return [PriceSchedule.constant(c.price_per_hour / c.nodes)] * c.nodes


@dataclass
class _LocalRunning:
    ex: LocalExecutor
    spec: RunSpec
    guard: Guard
    keys: list[str]
    rid: int
    proc: Any  # subprocess.Popen once started
    paths: dict[str, Path]
    config: Any = None  # the ClusterConfig being rehearsed (and charged)
    key: str = ""  # the checkpoint HMAC key: the ranks' environment only
    log: Any = None  # cloudfit.executors.deadline.DeadlineLog (with a deadline)
    switches: list = field(default_factory=list)
    torn_down: bool = False
    generation: int = 0
    parser: Any = None  # cloudfit.runtime.logprogress.LogProgress: a stack's progress from its log

    def start(self, config) -> None:
        """Reserve the config's price with the guard and start the process group under torchrun."""
        self.config, self.torn_down = config, False
        self.generation += 1
        self.keys = [f"{self.spec.name}-g{self.generation}-{i}" for i in range(config.nodes)]
        cap = self.guard.reserve(self.keys, _schedules(config), time.monotonic())
        argv = self.ex._argv(self.spec, self.paths, time.time() + cap)
        self.rid = self.ex.store.intend(self.spec.name, "process", self.spec.name, zone="localhost",
                                        price_per_hour=config.price_per_hour, cap_s=cap,
                                        info={"ranks": self.ex.ranks(self.spec), "config": config.label()})
        env = {**os.environ, **ENV_ELASTIC, ENV_CLUSTER: self.spec.name,
               "CLOUDFIT_CHECKPOINT_DIR": str(self.paths["checkpoints"]), "CLOUDFIT_STOP_FILE": str(self.paths["stop"]),
               "CLOUDFIT_PROGRESS_FILE": str(self.paths["progress"]), ENV_CHECKPOINT_KEY: self.key}
        env.setdefault("OMP_NUM_THREADS", "1")
        if self.spec.job.stack is not None:
            env.update(self._stack_files())
        with open(self.paths["log"], "ab") as log:
            self.proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True,  # its own process group: teardown kills all ranks
                                         cwd=str(self.paths["dir"]) if self.spec.job.stack is not None else None)
        self.ex.store.confirm(self.rid, info={"pid": self.proc.pid, "create_time": _create_time(self.proc.pid)})

    def _stack_files(self) -> dict[str, str]:
        """The stack's config files into the run folder; its environment, a value naming one of those files made
        the file's absolute path (the command runs from the launcher's folder, as typed)."""
        from cloudfit.runtime.logprogress import LogProgress

        run = self.spec.job.stack
        sc = run.command(self.spec.configs[0], str(self.paths["checkpoints"]))
        d = self.paths["dir"]
        _write_files(d, sc.files)
        env = {k: (str(d / v) if v in sc.files else str(v)) for k, v in sc.env.items()}
        if self.parser is None:
            self.parser = LogProgress(run.stack if run.parser == run.name else _stack(run.parser),
                                      total_steps=self.spec.job.steps, gpus=self.ex.ranks(self.spec),
                                      seq_len=run.seq_len)
            self.parser.offset = self.paths["log"].stat().st_size if self.paths["log"].exists() else 0
            # where this run's lines begin (a cluster name used before appends to its log)
            self.ex.store.update_cluster(self.spec.name, info={"log_from": self.parser.offset})
        return env

    def _progress(self) -> dict[str, Any]:
        if self.parser is None:
            return _read_json(self.paths["progress"])
        p = self.parser.read_new(self.paths["log"])
        if p:
            from cloudfit.runtime.progress import write_json_atomic

            write_json_atomic(self.paths["progress"], p)  # `cloudfit status` reads it
        return p

    def poll(self) -> Poll:
        if taken_over(self.ex.store, self.spec.name):
            return Poll("down")
        progress = self._progress()
        code = self.proc.poll()
        if code is None:
            return Poll("running", progress)
        if code == 0:
            if self.parser is not None:
                progress = self.parser.finish(0, self.paths["stop"].exists())
            state = progress.get("state", "completed") if progress else "completed"
            return Poll(state if state in ("stopped", "exited") else "completed", progress)
        if code == FINAL_EXIT or progress.get("state") == "refused":  # a rank refused its input: final, its line
            return Poll(REFUSED, progress, detail=progress.get("error") or
                        f"a rank refused its input (exit {code}); see {self.paths['log']}")
        return Poll("failed", progress, detail=f"the job exited with code {code}; see {self.paths['log']}")

    def replace(self, lost: Sequence[str]) -> None:  # local processes are never preempted
        return None

    def deadline_seen(self, d) -> None:
        self.log.seen(d, self.config)

    def switch(self, d) -> None:
        """The deadline rule's move, rehearsed: the job checkpoints and stops, and resumes from its
        checkpoint charged at the alternative's price (the guard prices it first)."""
        to = d.to
        self.request_stop()
        try:
            self.proc.wait(timeout=self.ex.timing.grace_s)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.poll() == 0 and _read_json(self.paths["progress"]).get("state") != "stopped":
            return  # finished while stopping: nothing to move
        self.switches.append(self.log.switch("on-demand", self.config, to, d.reason))
        self.teardown()
        self.paths["stop"].unlink(missing_ok=True)
        if self.guard.cap_for(_schedules(to), time.monotonic()) < self.guard.min_cap_s:
            from cloudfit.errors import BudgetExceeded

            raise BudgetExceeded(f"the budget left cannot pay {to.label()}: stopping (checkpoint saved)")
        self.start(to)
        self.ex.store.update_cluster(self.spec.name, info={"config": to.to_dict()})

    def request_stop(self) -> None:
        self.paths["stop"].touch()
        if self.spec.job.command or self.spec.job.stack is not None:  # another stack / a user command may not know
            # the stop file: ask torchrun (or the stack's own launcher) to stop it
            _signal_group(self.proc.pid, signal.SIGTERM)

    def teardown(self) -> None:
        if self.torn_down or self.proc is None:
            return
        self.torn_down = True
        if self.proc.poll() is None:
            _signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=max(0.2, self.ex.timing.teardown_s - self.ex.timing.grace_s - 0.5))
            except subprocess.TimeoutExpired:
                _signal_group(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        _signal_group(self.proc.pid, signal.SIGKILL)  # stragglers of the group (workers orphaned by a crash)
        now = time.monotonic()
        for k in self.keys:
            if self.guard.is_live(k):
                self.guard.end(k, now)
        self.ex.store.deleted(self.rid, why="exited")


def _write_files(folder: Path, files) -> None:
    """A stack's config files (relative path → text) into the run folder."""
    from cloudfit.atomic import atomic_open

    for rel, text in (files or {}).items():
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(target) as fh:
            fh.write(text)


def _stack(name: str):
    from cloudfit import stacks

    return stacks.get(name)


def _read_json(path: Path) -> dict[str, Any]:
    import json

    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _create_time(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _same_process(pid: int, create_time: float | None) -> bool:
    """True if ``pid`` is still the process we started (not a reused pid)."""
    import psutil

    try:
        p = psutil.Process(pid)
        return p.is_running() and (create_time is None or abs(p.create_time() - create_time) < 0.01)
    except psutil.Error:
        return False


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # the job was started as its own session: pgid == pid
    except (ProcessLookupError, PermissionError):
        pass


def _kill_group(pid: int) -> bool:
    """Stop the process group led by ``pid`` (SIGTERM, then SIGKILL); False if it was already gone."""
    import psutil

    try:
        p = psutil.Process(pid)
    except psutil.Error:
        return False
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return False
    targets = [p] + [c for c in p.children(recursive=True)]
    try:
        if pgid == pid:
            os.killpg(pgid, signal.SIGTERM)
        else:
            for t in targets:
                t.terminate()
    except (ProcessLookupError, psutil.Error):
        pass
    _, alive = psutil.wait_procs(targets, timeout=3)
    for t in alive:
        try:
            t.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=3)
    return True


def _labelled(name: str) -> list:
    """Live processes whose environment says ``CLOUDFIT_CLUSTER=name`` (readable ones: ours)."""
    import psutil

    out = []
    me = os.getpid()
    for p in psutil.process_iter(["pid", "cmdline"]):
        if p.pid == me:
            continue
        try:
            if p.environ().get(ENV_CLUSTER) == name and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out
