"""The sky backend: a plan for another cloud (AWS, Lambda, RunPod, Nebius) launched through SkyPilot.

SkyPilot (``pip install 'cloudfit[sky]'``, credentials checked by ``sky check``) is an existing engine that
provisions on every cloud cloudfit's catalogs list; GCP keeps its native executor (``--backend gcp``).
Without the extra, ``get_executor("sky")`` works but ``preview``/``run``/``down`` raise one ``UsageError``
naming the extra before anything is recorded or launched.

The task (``task_config``): ``num_nodes`` and ``resources: ordered:`` pinned to each config's cloud, region,
instance type, SkyPilot's accelerator name and spot flag (AWS zones are AZ *ids* in the catalog and Lambda and
Nebius have none, so no zone is pinned), the checkpoints in a bucket mounted at
``cloudfit.plan.skypilot.CHECKPOINT_MOUNT`` (``--checkpoint-dir s3://…`` or a bucket unique to the launch),
and the same ``torchrun`` command as the other backends (cloudfit's trainer, or the command after ``--``) — or,
for a plan run by another stack, that stack's command (``cloudfit.executors.stack_job.node_job``: under cloudfit's
torchrun, or once per node for a command that starts its own ranks), its log followed on node 0 by
``cloudfit.runtime.logprogress``. The launch's workdir archive (``JobSpec.workdir``: the user's folder and the
stack's config files) is a file mount that ``setup`` checks against its SHA-256 and unpacks; ``run`` starts there.

The launcher walks the ordered list itself — one config per ``sky.launch`` — so the budget guard prices
exactly what runs: SkyPilot's ``ResourcesUnavailableError`` (stockout, quota) moves to the next config,
like a refused insert on GCP. A spot config runs as a managed job (``sky.jobs.launch``: SkyPilot recovers a
preempted cluster from the checkpoint bucket); each recovery ends the lost nodes' lives in the guard and
reserves new ones (``BudgetExceeded`` → checkpoint and stop). On-demand configs run on a cluster
(``sky.launch`` with autostop ``down``).

The two budget fences: the guard (``cloudfit.executors.budget``) checks every ``interval_s`` with SkyPilot's
own ``cost_report`` as a floor on the spend; the cloud-side cap is the job's own: ``timeout`` ends the
``torchrun`` at the guard's cap (the trainer also gets ``--stop-at``), after which the cluster is idle and
SkyPilot's autostop deletes it (on-demand) or the jobs controller does (spot). ``teardown_s`` covers that.
The deadline rule (``cloudfit.executors.deadline``) moves a managed spot job that falls behind to an
on-demand cluster. Progress: node 0 echoes the trainer's progress file into the job's log
(``CLOUDFIT_PROGRESS {json}``), read back with ``tail_logs``.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from cloudfit.errors import BudgetExceeded, CloudfitError, LaunchError, UsageError
from cloudfit.executors import state as st
from cloudfit.executors.base import (
    LABEL, NO_CAPACITY, DownResult, Event, EventSink, NodePlan, Poll, Preview, RunResult, RunSpec, Timing, supervise,
    taken_over,
)
from cloudfit.executors.budget import Guard, PriceSchedule
from cloudfit.types import ClusterConfig

EXTRA = "pip install 'cloudfit[sky]'"
CLOUDS = ("aws", "lambda", "runpod", "nebius")  # what this backend launches; GCP has its native executor
PROGRESS_TAG = "CLOUDFIT_PROGRESS "
PROGRESS_FILE = "/tmp/cloudfit-progress.json"
#: managed-job states (sky.jobs.ManagedJobStatus names) → how the launcher reads them
DONE, FAILED_STATES = "SUCCEEDED", ("FAILED", "FAILED_SETUP", "FAILED_PRECHECKS", "FAILED_NO_RESOURCE",
                                    "FAILED_CONTROLLER", "FAILED_DRIVER", "CANCELLED")


def load_sky():
    """SkyPilot's client module, or one ``UsageError`` naming the extra (nothing launched)."""
    try:
        import sky
    except ImportError:
        raise UsageError(f"--backend sky needs SkyPilot: {EXTRA} (then `sky check` for the cloud's credentials); "
                         "nothing launched") from None
    if not all(hasattr(sky, a) for a in ("get", "launch", "jobs", "Task")):
        raise UsageError(f"--backend sky needs skypilot>=0.9 (its request API): {EXTRA}; nothing launched")
    return sky


#: SkyPilot exception names → what to do about them (the rest: SkyPilot's own logs).
_ADVICE = (
    (("NoCloudAccessError", "CloudUserIdentityError", "InvalidCloudCredentials", "CloudError"),
     "check the cloud's credentials with `sky check`"),
    (("ApiServerConnectionError", "ApiServerAuthenticationError", "APIVersionMismatchError", "RequestInterruptedError"),
     "check SkyPilot's API server (`sky api info`; `sky api start`)"),
    (("ClusterNotUpError", "ClusterDoesNotExist"), "it is not up in SkyPilot: `sky status` lists what is"),
    (("InvalidSkyPilotConfigError", "NotSupportedError", "ResourcesMismatchError"),
     "the task or ~/.sky/config.yaml asks for something SkyPilot refuses: fix it and launch again"),
)


def sky_error_line(doing: str, e: BaseException) -> str:
    """One line for a SkyPilot exception: what cloudfit was doing, SkyPilot's first line, what to do."""
    kind = type(e).__name__
    first = next((ln.strip() for ln in re.sub(r"\x1b\[[0-9;]*m|\[/?[a-z ]+\]", "", str(e)).splitlines() if ln.strip()),
                 "")
    first = first if len(first) <= 240 else first[:239] + "…"
    advice = next((a for names, a in _ADVICE if kind in names), "`sky api logs` shows SkyPilot's side")
    return f"SkyPilot could not {doing}: {kind}" + (f": {first}" if first else "") + f"; {advice}"


def _is_sky_error(e: BaseException) -> bool:
    return not isinstance(e, (CloudfitError, KeyboardInterrupt, SystemExit)) and isinstance(e, Exception)


def checkpoint_mount(checkpoint_dir: str | None, name: str, launch_id: str) -> dict[str, Any]:
    """The checkpoint bucket: ``--checkpoint-dir`` as a store URI, else a bucket of this launch alone."""
    from cloudfit.plan.skypilot import bucket_name

    if checkpoint_dir:
        if "://" not in checkpoint_dir:
            raise UsageError(f"--backend sky takes --checkpoint-dir as a bucket URI (s3://BUCKET/PATH, gs://…, r2://…), "
                             f"not {checkpoint_dir!r}: the nodes of another cloud cannot see this machine's folders")
        return {"source": checkpoint_dir}
    return {"name": bucket_name(name, launch_id)}


def run_words(spec: RunSpec, config: ClusterConfig, stop_at: float | None) -> list[str]:
    """What torchrun runs on every node: cloudfit's trainer with its arguments, the command after ``--``, or a
    torchrun-mode stack's entry (``stack_job.node_job``); a direct-mode stack's whole command (once per node)."""
    from cloudfit.plan.skypilot import CHECKPOINT_MOUNT

    job = spec.job
    nj = node_job_of(spec, config)
    if nj is not None:
        return list(nj.argv)
    if job.command:
        return ["--no-python", *job.command]
    return ["-m", job.trainer, *job.trainer_args(CHECKPOINT_MOUNT, stop_at=stop_at, progress_file=PROGRESS_FILE,
                                                   config=config)]


def node_job_of(spec: RunSpec, config: ClusterConfig):
    """The stack's ``NodeJob`` on a node of ``config`` (None: cloudfit's trainer or a plain command)."""
    from cloudfit.executors.stack_job import node_job
    from cloudfit.plan.skypilot import CHECKPOINT_MOUNT

    return node_job(spec, config, CHECKPOINT_MOUNT) if spec.job.stack is not None else None


def node_command(spec: RunSpec, config: ClusterConfig, stop_at: float | None = None) -> list[str]:
    """The command one node runs, as a dry run shows it (SkyPilot's node rank and rendezvous left out)."""
    nj = node_job_of(spec, config)
    if nj is not None and nj.mode == "direct":
        return list(nj.argv)
    return ["python", "-m", "cloudfit.runtime.torchrun", f"--nnodes={config.nodes}",
            f"--nproc-per-node={config.offering.accelerators_per_node}", *run_words(spec, config, stop_at)]


JOB_LOG = "/tmp/cloudfit-job.log"


def run_script(spec: RunSpec, config: ClusterConfig, cap_s: float | None, stop_at: float | None) -> str:
    """The task's ``run``: from the unpacked workdir (when one ships), torchrun over SkyPilot's nodes (node 0 the
    rendezvous) — or a direct-mode stack's own command once per node — capped by ``timeout``; node 0 echoes the
    progress into the log (the trainer's progress file, or for another stack the file its log parser
    ``cloudfit.runtime.logprogress`` writes from the job's output, as on GCP)."""
    from cloudfit.plan.skypilot import CHECKPOINT_MOUNT, WORKDIR

    target = run_words(spec, config, stop_at)
    nj = node_job_of(spec, config)
    cap = f"timeout --signal=TERM --kill-after=60 {int(cap_s)} " if cap_s else ""
    every = max(1, int(min(spec.job.progress_every_s, 30)))
    torchrun = ("python -m cloudfit.runtime.torchrun --nnodes=\"$SKYPILOT_NUM_NODES\" "
                '--nproc-per-node="$SKYPILOT_NUM_GPUS_PER_NODE" --node-rank="$SKYPILOT_NODE_RANK" '
                '--master-addr="$MASTER_ADDR" --master-port=29500 ')
    words = " ".join(shlex.quote(a) for a in target)
    lines = ["set -u"]
    if spec.job.workdir is not None:  # setup checked its SHA-256 and unpacked it there
        lines.append(f"cd {WORKDIR} || {{ echo 'cloudfit: no unpacked workdir at {WORKDIR}' >&2; exit 1; }}")
    lines += ['MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)',
              f"export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 CLOUDFIT_CLUSTER={shlex.quote(spec.name)}",
              f"report() {{ [ -f {PROGRESS_FILE} ] && echo \"{PROGRESS_TAG}$(tr -d '\\n' < {PROGRESS_FILE})\"; }}"]
    if nj is None:
        lines += [f'if [ "$SKYPILOT_NODE_RANK" = 0 ]; then ( while sleep {every}; do report; done ) & fi',
                  f"{cap}{torchrun}{words}", "rc=$?",
                  'if [ "$SKYPILOT_NODE_RANK" = 0 ]; then report; fi', "exit $rc"]
        return "\n".join(lines) + "\n"
    follow = (f"python -m cloudfit.runtime.logprogress {' '.join(shlex.quote(a) for a in nj.follower)} "
              f"--log {JOB_LOG} --progress {PROGRESS_FILE}")
    lines += [f"export {k}={shlex.quote(str(v))}" for k, v in sorted(nj.env.items())
              if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)]
    lines += [f"export CLOUDFIT_CHECKPOINT_DIR={CHECKPOINT_MOUNT}",
              f"rm -f {PROGRESS_FILE}; : > {JOB_LOG}", "BG=",
              f'if [ "$SKYPILOT_NODE_RANK" = 0 ]; then  # the stack prints; its parser writes the progress file',
              f"  {follow} --every-s {every} & BG=$!",
              f'  ( while sleep {every} >/dev/null 2>&1; do report; done ) & BG="$BG $!"',  # sleep holds no pipe open
              "fi"]
    if nj.mode == "direct":  # the command starts its own ranks: once per node, told the cluster's shape
        lines += ['export NNODES="$SKYPILOT_NUM_NODES" NPROC="$SKYPILOT_NUM_GPUS_PER_NODE" '
                  'NODE_RANK="$SKYPILOT_NODE_RANK" MASTER_ADDR MASTER_PORT=29500',
                  f"{cap}{words} > >(tee -a {JOB_LOG}) 2>&1"]
    else:
        from cloudfit.executors.stack_job import entry_module

        m = entry_module(nj.argv)
        if m:  # imported once first, as on GCP (stack_job.entry_module)
            lines.append(f'if ! why=$(python -c "import {m}" 2>&1 >/dev/null); then echo "cloudfit: {m} does not '
                         f'import on this node ($(printf \'%s\\n\' "$why" | grep -v \'^[[:space:]]*$\' | tail -n 1 '
                         f'| head -c 300))" | tee -a {JOB_LOG} >&2; [ -n "$BG" ] && kill $BG 2>/dev/null; exit 1; fi')
        lines.append(f"{cap}{torchrun}{words} > >(tee -a {JOB_LOG}) 2>&1")
    lines += ["rc=$?",
              "[ -n \"$BG\" ] && kill $BG 2>/dev/null",  # the follower and the echo loop end with the job
              f'if [ "$SKYPILOT_NODE_RANK" = 0 ]; then sleep 1; {follow} --once || true; report; fi',
              "exit $rc"]
    return "\n".join(lines) + "\n"


def task_config(spec: RunSpec, configs: Sequence[ClusterConfig], *, launch_id: str, cap_s: float | None = None,
                stop_at: float | None = None, install=None, workdir=None) -> dict[str, Any]:
    """The SkyPilot task (a dict for ``sky.Task.from_yaml_config`` or YAML) running ``spec`` on ``configs`` in order,
    built by ``cloudfit.plan.skypilot.build_task`` (the one builder). ``install``: a
    ``cloudfit.executors.skypilot.NodeInstall`` (default: this install's wheel, not written); ``workdir``: a
    ``cloudfit.plan.skypilot.Shipped`` archive."""
    from cloudfit.executors.skypilot import node_install
    from cloudfit.plan.skypilot import build_task

    install = install or node_install(st.default_path().parent / "sky" / launch_id)
    same = [c for c in configs if c.offering.cloud in CLOUDS]
    if not same:
        raise UsageError(f"--backend sky launches {', '.join(CLOUDS)} configs; none given")
    extra = "[hf]" if any(spec.job.model.startswith(p) for p in ("bert", "gpt2")) else ""
    return build_task(spec.name, same, run_script(spec, same[0], cap_s, stop_at),
                      bucket=checkpoint_mount(spec.job.checkpoint_dir, spec.name, launch_id), wheel=install.wheel,
                      pip_words=install.pip_words, extra=extra, workdir=workdir,
                      envs={"CLOUDFIT_CLUSTER": spec.name, "CLOUDFIT_LAUNCH_ID": launch_id})


def parse_progress(log: str) -> dict[str, Any]:
    """The newest ``CLOUDFIT_PROGRESS {json}`` line of a job log ({} when none parses)."""
    for line in reversed(log.splitlines()):
        i = line.find(PROGRESS_TAG)
        if i >= 0:
            try:
                p = json.loads(line[i + len(PROGRESS_TAG):])
            except ValueError:
                continue
            if isinstance(p, dict):
                return p
    return {}


def _status_name(s: Any) -> str:
    return str(getattr(s, "name", None) or getattr(s, "value", None) or s).upper()


def _field(rec: Any, key: str, default: Any = None) -> Any:
    """A field of a SkyPilot response record (a dict, or a pydantic response with attributes)."""
    if isinstance(rec, dict):
        return rec.get(key, default)
    try:
        return rec[key]
    except (TypeError, KeyError, IndexError):
        return getattr(rec, key, default)


class SkyExecutor:
    """See the module docstring. Timing defaults suit real clusters; tests shrink them."""

    backend = "sky"
    INTERVAL_S, GRACE_S, TEARDOWN_S, PROVISION_SLACK_S, MIN_BILLED_S = 30.0, 60.0, 300.0, 900.0, 60.0
    AUTOSTOP_MIN = 1  # idle minutes before SkyPilot deletes an on-demand cluster whose job ended

    @classmethod
    def billing_bounds(cls) -> tuple[float, float]:
        return cls.MIN_BILLED_S, cls.TEARDOWN_S + cls.PROVISION_SLACK_S

    def __init__(self, *, store: st.StateStore | None = None, interval_s: float = INTERVAL_S, grace_s: float = GRACE_S,
                 teardown_s: float = TEARDOWN_S, provision_slack_s: float = PROVISION_SLACK_S,
                 min_billed_s: float = MIN_BILLED_S, managed_spot: bool = True,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self._store = store
        self.timing = Timing(interval_s=interval_s, teardown_s=teardown_s, grace_s=grace_s)
        self.provision_slack_s, self.min_billed_s = provision_slack_s, min_billed_s
        self.managed_spot = managed_spot
        self.clock, self.sleep = clock, sleep

    @property
    def store(self) -> st.StateStore:
        if self._store is None:
            self._store = st.StateStore()
        return self._store

    @property
    def sky(self):
        return load_sky()

    def _guard(self, budget: float) -> Guard:
        return Guard(budget, interval_s=self.timing.interval_s, teardown_s=self.timing.teardown_s,
                     min_billed_s=self.min_billed_s, provision_slack_s=self.provision_slack_s)

    @staticmethod
    def _schedules(config: ClusterConfig) -> list[PriceSchedule]:
        return [PriceSchedule.constant(config.price_per_hour / config.nodes)] * config.nodes

    @staticmethod
    def _check_clouds(spec: RunSpec) -> None:
        cloud = spec.configs[0].offering.cloud
        if cloud not in CLOUDS:
            raise UsageError(f"--backend sky launches {', '.join(CLOUDS)} plans; this one is for {cloud}"
                             + (" (use --backend gcp, the native executor)" if cloud == "gcp" else "")
                             + "; nothing launched")

    def _wheel_dir(self, launch_id: str):
        """Where a launch's wheel is written for SkyPilot to upload (beside the state store)."""
        base = self._store.path if self._store is not None else st.default_path()
        return base.parent / "sky" / launch_id

    def preview(self, spec: RunSpec) -> Preview:
        from cloudfit.executors.skypilot import node_install
        from cloudfit.plan.skypilot import shipping

        self._check_clouds(spec)
        self.sky  # noqa: B018 - the extra is named before anything else
        guard = self._guard(spec.budget_usd)
        config = spec.configs[0]
        guard.check_launchable(self._schedules(config))
        cap = guard.reserve([f"n{i}" for i in range(config.nodes)], self._schedules(config), 0.0)
        launch_id = "launchid" + "0" * 8  # drawn at launch: the bucket's name ends with it
        install = node_install(self._wheel_dir("LAUNCH-ID"))
        workdir = self._workdir(spec)
        task = task_config(spec, spec.configs, launch_id=launch_id, cap_s=cap, install=install, workdir=workdir)
        bucket = task["file_mounts"]["/cloudfit-ckpt"]
        if "name" in bucket:
            bucket = {**bucket, "name": bucket["name"].replace(launch_id, "<launch id>")}
            task["file_mounts"]["/cloudfit-ckpt"] = bucket
        task["envs"]["CLOUDFIT_LAUNCH_ID"] = "<drawn at launch>"
        managed = bool(config.spot and self.managed_spot)
        command = node_command(spec, config)
        ships = shipping(task, [f for f in (install.wheel, workdir) if f is not None])
        if install.wheel is None:
            ships.insert(0, install.describe)
        nodes = tuple(NodePlan(
            name=f"{spec.name}-{i}", zone=config.offering.zone, machine_type=config.offering.machine_type,
            accelerator=config.offering.accelerator, accelerators=config.offering.accelerators_per_node,
            provisioning="SPOT" if config.spot else "STANDARD", price_per_hour=config.price_per_hour / config.nodes,
            max_run_duration_s=int(cap), labels={LABEL: spec.name, **spec.labels},
            detail={"cloud": config.offering.cloud, "region": config.offering.region,
                    "via": "sky.jobs.launch" if managed else "sky.launch", "command": command, "ships": ships,
                    "task": task}) for i in range(config.nodes))
        notes = [f"SkyPilot launches on {config.offering.cloud} ({'a managed spot job: recovered after preemption' if managed else 'a cluster, autostop down'}); "
                 f"the job is capped at {cap:.0f} s by `timeout` on the nodes"]
        return Preview("sky", spec.name, config, nodes, spec.budget_usd, guard.committed(0.0), self.timing.interval_s,
                       self.timing.teardown_s, len(task["resources"]["ordered"]) - 1, tuple(notes),
                       install=install.describe)

    @staticmethod
    def _workdir(spec: RunSpec, into=None):
        """The packed workdir a launch ships, as a ``Shipped`` file mount: the launch's own archive
        (``spec.job.workdir``, a ``cloudfit.executors.workdir.Packed``: the user's folder and the stack's files),
        written into ``into`` for SkyPilot to upload (None: a dry run, nothing written); else a prepared archive
        named by ``spec.record["workdir"]`` (path, sha256, size_bytes); else None."""
        from cloudfit.plan.skypilot import workdir_archive

        packed = spec.job.workdir
        if packed is not None:
            name = f"workdir-{packed.sha256[:12]}.tar.gz"
            path = os.path.join(str(into), name) if into is not None else name
            if into is not None:
                os.makedirs(str(into), exist_ok=True)
                from cloudfit.atomic import atomic_open

                with atomic_open(path, "wb") as fh:
                    fh.write(packed.tar_gz)
            return workdir_archive(path, packed.sha256, packed.size)
        w = spec.record.get("workdir") if spec.record else None
        return workdir_archive(w["path"], w["sha256"], w.get("size_bytes")) if w else None

    # ---------------------------------------------------------------- run

    def run(self, spec: RunSpec, on_event: EventSink | None = None) -> RunResult:
        from cloudfit.executors.skypilot import node_install

        emit = on_event or (lambda e: None)
        self._check_clouds(spec)
        sky = self.sky  # the extra is named before anything is recorded
        guard = self._guard(spec.budget_usd)
        guard.check_launchable(self._schedules(spec.configs[0]))  # before anything exists
        launch_id = uuid.uuid4().hex
        install = node_install(self._wheel_dir(launch_id))
        workdir = self._workdir(spec, self._wheel_dir(launch_id))
        self.store.create_cluster(spec.name, "sky", spec.budget_usd, {
            **spec.record, "launch_id": launch_id, "checkpoint_dir": spec.job.checkpoint_dir,
            "job": {"model": spec.job.model, "steps": spec.job.steps, "command": list(spec.job.command)},
            "configs": [c.label() for c in spec.configs], "install": install.describe,
            **({"workdir": {"sha256": workdir.sha256, "size_bytes": workdir.size_bytes, "mount": workdir.remote}}
               if workdir is not None else {}),
        }, launcher_pid=os.getpid())
        install.write()
        key = self.store.checkpoint_key(spec.record.get("plan_id") or spec.name)  # every node, every relaunch: one key
        cluster = _SkyCluster(self, sky, spec, guard, emit, launch_id, install=install, workdir=workdir, key=key)
        started = self.clock()
        if spec.deadline is not None:
            from cloudfit.executors.deadline import DeadlineWatch

            cluster.watch = DeadlineWatch(spec.deadline, spec.job.steps, margin_s=self.timing.interval_s, t0=started)
        reason, last = "failed", Poll()
        try:
            cluster.launch(0)
            self.store.update_cluster(spec.name, status=st.RUNNING, info={"config": cluster.config.to_dict()})
            reason, last = supervise(cluster, _SkyGuard(guard, cluster), timing=self.timing, timeout_s=spec.timeout_s,
                                     emit=emit, clock=self.clock, sleep=self.sleep,
                                     record=st.SpendRecorder(self.store, spec.name), watch=cluster.watch)
        except _NoCapacity as e:
            reason = NO_CAPACITY
            raise LaunchError(str(e)) from None
        except KeyboardInterrupt:
            reason = "interrupted"
            raise
        finally:
            try:
                cluster.teardown()
            finally:
                self._finish(spec.name, reason, cluster, last)
                import shutil

                shutil.rmtree(self._wheel_dir(launch_id), ignore_errors=True)  # uploaded by now: SkyPilot keeps its copy
        p = last.progress
        return RunResult(spec.name, "sky", reason, cluster.spend(), self.clock() - started, cluster.config,
                         steps=int(p.get("step") or 0), total_steps=int(p.get("total_steps") or spec.job.steps),
                         samples_per_second=p.get("samples_per_second"), restarts=int(p.get("restart") or 0),
                         preemptions=cluster.preemptions, fallbacks=tuple(cluster.fallbacks),
                         detail="; ".join([last.detail] * bool(last.detail) + cluster.switches))

    def _finish(self, name: str, reason: str, cluster: "_SkyCluster", last: Poll) -> None:
        rec = self.store.find_cluster(name)
        if rec is None or rec.ended:
            return
        final = "down" if rec.reason == "down" else reason
        spend = cluster.spend()
        self.store.update_cluster(name, status=st.ENDED, reason=final, spend_usd=spend,
                                  info={"progress": dict(last.progress), "sky_cost_usd": cluster.reported_cost})
        self.store.event(name, final, f"ended: {final}, spent ${spend:.4f}")

    # ---------------------------------------------------------------- down / live

    def _get(self, doing: str, fn, *args, **kwargs):
        """One SkyPilot request and its answer; SkyPilot's exception becomes one ``LaunchError`` line."""
        sky = self.sky
        try:
            return sky.get(fn(*args, **kwargs))
        except Exception as e:
            if not _is_sky_error(e):
                raise
            raise LaunchError(sky_error_line(doing, e)) from None

    def _clusters(self, name: str) -> list[str]:
        sky = self.sky
        recs = self._get(f"list the cluster {name}", sky.status, cluster_names=[name])
        return [str(_field(r, "name")) for r in recs or () if _field(r, "name") == name]

    def _jobs(self, name: str) -> list[int]:
        """Managed jobs named ``name`` that have not ended (none when SkyPilot's jobs controller is not up)."""
        sky = self.sky
        try:
            recs = sky.get(sky.jobs.queue(refresh=False, skip_finished=True))
        except Exception as e:
            if type(e).__name__ == "ClusterNotUpError":  # no jobs controller: no managed job exists
                return []
            if not _is_sky_error(e):
                raise
            raise LaunchError(sky_error_line("list its managed jobs", e)) from None
        if isinstance(recs, tuple):  # version 2 of the queue answers (records, total, counts, …)
            recs = recs[0]
        return [int(_field(r, "job_id")) for r in recs or ()
                if _field(r, "job_name") == name and _status_name(_field(r, "status")) not in (DONE, *FAILED_STATES)]

    def live(self, name: str) -> list[str]:
        return sorted(self._clusters(name) + [f"managed-job-{j}" for j in self._jobs(name)])

    def down(self, name: str, *, all_with_label: bool = False) -> DownResult:
        """Cancel the name's managed jobs and delete its cluster through SkyPilot. A cluster SkyPilot no longer lists
        is answered as already gone (``DownResult.already_gone``), never as SkyPilot's exception."""
        sky = self.sky
        rec = self.store.find_cluster(name)
        found = self.live(name)
        if rec is None and not found:
            raise UsageError(f"no cluster named {name!r} in {self.store.path} and none in SkyPilot's status or jobs")
        if rec is None and not all_with_label:
            return DownResult(name, (), (), (), tuple(found))  # another state store's launch: left alone
        if rec is not None and not rec.ended:
            self.store.update_cluster(name, status=st.STOPPING, reason="down")
        deleted = []
        for j in self._jobs(name):
            self._get(f"cancel managed job {j}", sky.jobs.cancel, job_ids=[j])
            deleted.append(f"managed-job-{j}")
        if self._clusters(name):
            try:
                sky.get(sky.down(name))
                deleted.append(name)
            except Exception as e:
                if type(e).__name__ not in ("ClusterDoesNotExist", "ClusterNotUpError"):  # gone meanwhile: fine
                    if not _is_sky_error(e):
                        raise
                    raise LaunchError(sky_error_line(f"delete the cluster {name}", e)) from None
        gone = []
        for r in self.store.resources(name, live_only=True) if rec else ():
            if not deleted:
                gone.append(r.name)  # recorded, but SkyPilot lists nothing of it: never launched, or gone
            self.store.deleted(r.id, why="down")
        if rec is not None and not deleted and not gone:
            gone.append(name)  # nothing live recorded and nothing in SkyPilot: already gone
        if rec is not None and not rec.ended:
            spend = st.estimate_spend(self.store.resources(name), teardown_s=self.timing.teardown_s)
            self.store.update_cluster(name, status=st.ENDED, reason="down", spend_usd=spend)
            self.store.event(name, "down", f"deleted by `cloudfit down` through SkyPilot: {', '.join(deleted) or 'nothing left'}")
        if rec is None:
            return DownResult(name, (), (), tuple(deleted))
        return DownResult(name, tuple(deleted), tuple(sorted(set(gone))))


class _NoCapacity(Exception):
    pass


@dataclass
class _SkyGuard:
    """The guard as ``supervise`` sees it: SkyPilot's reported cost is a floor on the spend it checks."""

    guard: Guard
    cluster: "_SkyCluster"

    @property
    def budget_usd(self) -> float:
        return self.guard.budget_usd

    def accrued(self, now: float) -> float:
        return max(self.guard.accrued(now), self.cluster.reported_cost or 0.0)

    def remaining(self, now: float) -> float:
        return self.guard.budget_usd - self.accrued(now)

    def should_stop(self, now: float) -> bool:
        extra = (self.cluster.reported_cost or 0.0) - self.guard.accrued(now)
        return self.guard.should_stop(now) or (extra > 0 and self.guard.projected(now) + extra > self.guard.budget_usd)


@dataclass
class _SkyCluster:
    ex: SkyExecutor
    sky: Any
    spec: RunSpec
    guard: Guard
    emit: EventSink
    launch_id: str
    install: Any = None  # cloudfit.executors.skypilot.NodeInstall (default: this install's wheel)
    workdir: Any = None  # cloudfit.plan.skypilot.Shipped: a packed workdir, or None
    key: str = field(default="", repr=False)  # the plan's checkpoint key: a SkyPilot secret, never in the task dict
    watch: Any = None
    configs: list = field(default_factory=list)
    config_index: int = 0
    managed: bool = False
    job_id: int | None = None
    rid: int | None = None
    keys: list = field(default_factory=list)
    recoveries: int = 0
    preemptions: int = 0
    reported_cost: float | None = None
    fallbacks: list = field(default_factory=list)
    switches: list = field(default_factory=list)
    torn_down: bool = True
    _stop_requested: bool = False
    _recovering: bool = False  # a recovery already counted while SkyPilot still reports RECOVERING

    def __post_init__(self) -> None:
        self.configs = list(self.spec.configs)

    @property
    def config(self) -> ClusterConfig:
        return self.configs[self.config_index]

    def spend(self) -> float:
        return max(self.guard.accrued(self.ex.clock()), self.reported_cost or 0.0)

    # ---------------------------------------------------------------- launching

    def launch(self, first: int) -> None:
        """Launch ``configs[first]``, falling back through the rest on ``ResourcesUnavailableError``."""
        unavailable = self.sky.exceptions.ResourcesUnavailableError
        for i in range(first, len(self.configs)):
            self.config_index = i
            cfg = self.config
            if cfg.offering.cloud not in CLOUDS:
                continue
            try:
                self._launch_one(cfg)
                return
            except BudgetExceeded as e:
                self.fallbacks.append(f"{cfg.label()}: {e}")
                self.emit(Event("fallback", f"skipping {cfg.label()}: {e}"))
            except unavailable as e:  # stockout or quota: SkyPilot created nothing that stays billed
                why = str(e).splitlines()[0] if str(e) else type(e).__name__
                self.fallbacks.append(f"{cfg.label()}: {why}")
                self.emit(Event("fallback", f"{cfg.label()}: {why}; trying the next alternative"))
                self._end_lives(billed=False)
                if self.rid is not None:
                    self.ex.store.failed(self.rid, why)
                    self.rid = None
                self.teardown()  # a half-made cluster (INIT) is deleted before the next config
        raise _NoCapacity("no alternative in the plan could be launched through SkyPilot: " + " | ".join(self.fallbacks[-3:]))

    def _launch_one(self, cfg: ClusterConfig) -> None:
        from cloudfit.plan.skypilot import KEY_SECRET

        now = self.ex.clock()
        self.keys = [f"{self.spec.name}-{self.launch_id[:6]}-{self.recoveries}-{j}" for j in range(cfg.nodes)]
        cap = self.guard.reserve(self.keys, self.ex._schedules(cfg), now)
        self.managed = bool(cfg.spot and self.ex.managed_spot)
        self._stop_requested = False
        try:
            task = self.sky.Task.from_yaml_config(task_config(
                self.spec, [cfg], launch_id=self.launch_id, cap_s=cap, install=self.install, workdir=self.workdir,
                stop_at=time.time() + cap - self.ex.timing.grace_s),
                secrets_overrides=[(KEY_SECRET, self.key)] if self.key else None)
        except Exception as e:  # nothing was requested: nothing is billed
            self._end_lives(billed=False)
            if not _is_sky_error(e):
                raise
            raise LaunchError(sky_error_line(f"load the task for {cfg.label()}", e)) from None
        kind = "sky-managed-job" if self.managed else "sky-cluster"
        self.rid = self.ex.store.intend(self.spec.name, kind, self.spec.name, zone=cfg.offering.region,
                                        price_per_hour=cfg.price_per_hour, cap_s=cap,
                                        info={"cloud": cfg.offering.cloud, "config": cfg.label()})
        self.torn_down = False
        self.emit(Event("creating", f"launching {cfg.label()} through SkyPilot "
                                    f"({'managed spot job' if self.managed else 'cluster'}, job capped at {cap:.0f} s)"))
        unavailable = self.sky.exceptions.ResourcesUnavailableError
        try:
            if self.managed:
                ids, _ = self.sky.get(self.sky.jobs.launch(task, name=self.spec.name))
                self.job_id = int(ids[0] if isinstance(ids, (list, tuple)) else ids)
            else:
                job_id, _ = self.sky.get(self.sky.launch(task, cluster_name=self.spec.name, down=True,
                                                         idle_minutes_to_autostop=self.ex.AUTOSTOP_MIN))
                self.job_id = int(job_id) if job_id is not None else None
        except unavailable:
            raise
        except Exception as e:
            if not _is_sky_error(e):
                raise
            line = sky_error_line(f"launch {cfg.label()}", e)
            self._failed_launch(line)
            raise LaunchError(line) from None
        self.ex.store.confirm(self.rid, info={"job_id": self.job_id, "managed": self.managed})
        self.emit(Event("created", f"{cfg.nodes} node(s) on {cfg.offering.cloud} {cfg.offering.region}, "
                                   f"SkyPilot job {self.job_id}"))

    def _failed_launch(self, why: str) -> None:
        """A launch request that raised: billed only if SkyPilot reports what it made (a half-made cluster, a job);
        otherwise nothing was requested from the cloud and nothing is billed or left to delete."""
        try:
            made = self.ex._jobs(self.spec.name) if self.managed else self.ex._clusters(self.spec.name)
        except LaunchError:
            made = ["unknown"]  # SkyPilot cannot say: keep the lives (billed), teardown asks again
        if made:
            return
        self._end_lives(billed=False)
        if self.rid is not None:
            self.ex.store.failed(self.rid, why)
            self.rid = None
        self.torn_down, self.job_id = True, None

    def _end_lives(self, *, billed: bool = True) -> None:
        now = self.ex.clock()
        for k in self.keys:
            if self.guard.is_live(k):
                (self.guard.end if billed else self.guard.cancel)(k, now)

    # ---------------------------------------------------------------- polling

    def _log(self) -> str:
        buf = io.StringIO()
        try:
            if self.managed:
                self.sky.jobs.tail_logs(job_id=self.job_id, follow=False, tail=200, output_stream=buf)
            else:
                self.sky.tail_logs(self.spec.name, self.job_id, follow=False, tail=200, output_stream=buf)
        except Exception:  # noqa: BLE001 - a log that cannot be read now is read at the next poll
            return ""
        return buf.getvalue()

    def _state(self) -> tuple[str, int, str]:
        """(SkyPilot's job status name, recoveries so far, failure reason)."""
        if self.managed:
            recs = self.ex._get(f"read managed job {self.job_id}", self.sky.jobs.queue, refresh=False,
                                skip_finished=False, job_ids=[self.job_id])
            if isinstance(recs, tuple):
                recs = recs[0]
            rec = next((r for r in recs or () if int(_field(r, "job_id", -1)) == self.job_id), None)
            if rec is None:
                return "FAILED", self.recoveries, "the managed job is gone from SkyPilot's queue"
            return (_status_name(_field(rec, "status")), int(_field(rec, "recovery_count", 0) or 0),
                    str(_field(rec, "failure_reason") or ""))
        try:
            recs = self.sky.get(self.sky.queue(self.spec.name, skip_finished=False))
        except Exception as e:  # noqa: BLE001 - a cluster that is gone (preempted, deleted) ends the run
            return "FAILED", self.recoveries, f"the cluster is gone: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        rec = next((r for r in recs or () if _field(r, "job_id") == self.job_id), None)
        return (_status_name(_field(rec, "status")) if rec is not None else "FAILED", self.recoveries,
                "" if rec is not None else "the job is gone from the cluster's queue")

    def _cost(self) -> None:
        """SkyPilot's own bill of this cluster (``cost_report``), when it lists it."""
        try:
            recs = self.sky.get(self.sky.cost_report())
        except Exception:  # noqa: BLE001 - the guard's own accounting stands
            return
        mine = re.compile(re.escape(self.spec.name) + r"(-\d+)?")  # a managed job's cluster is NAME-JOBID
        total = [float(_field(r, "total_cost") or 0.0) for r in recs or () if mine.fullmatch(str(_field(r, "name")))]
        if total:
            self.reported_cost = max(self.reported_cost or 0.0, sum(total))

    def poll(self) -> Poll:
        if taken_over(self.ex.store, self.spec.name):
            return Poll("down")
        status, recoveries, why = self._state()
        self._cost()
        progress = parse_progress(self._log())
        if status == DONE:
            return Poll(progress["state"] if progress.get("state") in ("stopped", "exited") else "completed", progress)
        if status == "CANCELLED" and self._stop_requested:  # our own stop (budget, timeout): checkpointed
            return Poll("stopped", progress)
        if status in FAILED_STATES:
            return Poll("failed", progress, detail=f"SkyPilot job {self.job_id}: {status.lower()}" + (f": {why}" if why else ""))
        if recoveries > self.recoveries or (status == "RECOVERING" and not self._recovering):
            self.recoveries = max(recoveries, self.recoveries + 1)  # one loss per recovery, however it is seen
            self._recovering = status == "RECOVERING"
            self.preemptions += 1
            return Poll("running", progress, lost=tuple(self.keys))
        self._recovering = self._recovering and status == "RECOVERING"
        return Poll("running", progress)

    def replace(self, lost: Sequence[str]) -> None:
        """SkyPilot re-provisions a preempted managed job itself: end the lost lives, reserve the new ones."""
        now = self.ex.clock()
        for k in lost:
            if self.guard.is_live(k):
                self.guard.end(k, now)
        cfg = self.config
        keys = [f"{self.spec.name}-{self.launch_id[:6]}-{self.recoveries}-{j}" for j in range(cfg.nodes)]
        try:
            self.guard.reserve(keys, self.ex._schedules(cfg), now)
        except BudgetExceeded:
            self.keys = []
            raise
        self.keys = keys
        self.ex.store.event(self.spec.name, "lost", f"SkyPilot recovers managed job {self.job_id} (recovery {self.recoveries})")

    def deadline_seen(self, d) -> None:
        if d.action != "stay":
            self.ex.store.update_cluster(self.spec.name, info={"deadline": {**dict(d.data), "slack_s": d.slack_s,
                                                                            "config": self.config.label()}})

    def switch(self, d) -> None:
        """Can't Be Late: cancel the managed spot job and relaunch on demand (it resumes from the bucket)."""
        from cloudfit.executors.deadline import on_demand_config

        to = self.watch.spec.on_demand or on_demand_config(self.configs, self.config)
        line = f"on-demand: {self.config.label()} → {to.label()}: {d.reason}"
        self.switches.append(line)
        self.ex.store.event(self.spec.name, "switch", line)
        self.teardown()
        if self.guard.cap_for(self.ex._schedules(to), self.ex.clock()) < self.guard.min_cap_s:
            raise BudgetExceeded(f"the budget left cannot pay {to.label()}: stopping (checkpoint saved)")
        self.configs.insert(self.config_index + 1, to)
        self.launch(self.config_index + 1)

    def request_stop(self) -> None:
        """Ask the job to checkpoint and exit: SkyPilot cancels it (SIGTERM to the job; the trainer checkpoints)."""
        if self.torn_down or self.job_id is None:
            return
        self._stop_requested = True
        try:
            if self.managed:
                self.sky.get(self.sky.jobs.cancel(job_ids=[self.job_id]))
            else:
                self.sky.get(self.sky.cancel(self.spec.name, job_ids=[self.job_id]))
        except Exception as e:  # noqa: BLE001 - teardown follows either way
            self.emit(Event("stop", f"SkyPilot could not cancel job {self.job_id}: {e}"))

    def teardown(self) -> None:
        """Delete everything through SkyPilot (idempotent): cancel the managed job, or down the cluster."""
        if self.torn_down:
            return
        if self.job_id is not None and self.managed:
            self.ex._get(f"cancel managed job {self.job_id} (run `cloudfit down {self.spec.name}`)",
                         self.sky.jobs.cancel, job_ids=[self.job_id])
        elif not self.managed:
            try:
                self.sky.get(self.sky.down(self.spec.name))
            except Exception as e:  # a cluster already gone is success; anything else is one line
                gone = getattr(self.sky.exceptions, "ClusterDoesNotExist", ())
                if not (isinstance(e, gone) or "does not exist" in str(e).lower()):
                    if not _is_sky_error(e):
                        raise
                    raise LaunchError(sky_error_line(f"delete the cluster {self.spec.name} (run `cloudfit down "
                                                     f"{self.spec.name}`)", e)) from None
        self.torn_down = True
        self._end_lives()
        if self.rid is not None:
            self.ex.store.deleted(self.rid, why="down through SkyPilot")
            self.rid = None
        self.job_id = None
