"""A fake of SkyPilot's client functions (the API boundary of ``cloudfit.executors.sky``), installed as ``sky``.

``FakeSky().install(monkeypatch)`` puts a module ``sky`` (with ``sky.jobs`` and ``sky.exceptions``) into
``sys.modules``. It behaves like SkyPilot ≥ 0.9's request API and is nasty about it:

* every call except ``tail_logs`` returns an opaque request id; only ``sky.get`` turns it into the result
  (and raises the request's exception there, as the API server does);
* ``Task.from_yaml_config`` rejects unknown keys, a resource whose instance type / accelerators / region are
  not in the fake catalog of its cloud, and a ``run`` without torchrun; a null secret stays a reference without a
  value unless ``secrets_overrides`` gives it one (as SkyPilot 0.14 does);
* a launch uploads every local file mount (a missing file refuses the launch) and runs ``setup`` as SkyPilot
  would: each ``sha256sum -c`` line is checked against the uploaded file, and ``pip install`` of a name from the
  package index fails (``cloudfit`` there is not this project) — the job ends FAILED_SETUP; the setup's checks
  and its ``tar`` (a shipped workdir) really run with bash in a temp HOME, so a tampered archive fails the job
  and ``Job.node_files`` lists what the node's ``~/sky_workdir`` holds;
* each node of a multi-node job draws its own checkpoint key unless the task's secret
  ``CLOUDFIT_CHECKPOINT_KEY`` has a value: the ranks then refuse ("ranks hold different checkpoint keys");
* ``sky.jobs.queue`` raises ``ClusterNotUpError`` while no managed job was ever launched (no jobs controller);
* ``launch_error``: an exception every launch request raises from ``sky.get`` before anything is made
  (credentials, API server …), or, with ``half_made``, after a cluster was left in INIT (billed until downed);
* a launch refused for capacity or quota raises ``sky.exceptions.ResourcesUnavailableError`` from ``sky.get``
  (after a half-made cluster was left in INIT: the launcher must down it);
* jobs run on real time: progress (from the task's ``--steps``) reaches the log as the task's run script
  would print it (``CLOUDFIT_PROGRESS {json}``); a managed spot job can be preempted (RECOVERING, the
  recovery count grows, the work since the last checkpoint is lost) or fail;
* ``cost_report`` bills every cluster ever launched at ``cost_factor`` × the catalog price.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
import shlex
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: (cloud, instance type) → (SkyPilot accelerator name, count, regions, $/h per node)
CATALOG = {
    ("aws", "p5.48xlarge"): ("H100", 8, ("us-east-1", "us-west-2"), 98.32),
    ("aws", "g6.12xlarge"): ("L4", 4, ("us-east-1", "eu-north-1"), 4.6),
    ("lambda", "gpu_1x_h100_pcie"): ("H100", 1, ("us-east-1", "europe-central-1"), 3.29),
    ("lambda", "gpu_8x_h100_sxm5"): ("H100", 8, ("us-east-1",), 23.92),
    ("runpod", "1x_A100-80GB_SECURE"): ("A100-80GB", 1, ("US",), 1.39),
    ("nebius", "gpu-h100-sxm_1gpu-16vcpu-200gb"): ("H100", 1, ("eu-north1",), 2.95),
}
TASK_KEYS = {"name", "resources", "num_nodes", "file_mounts", "envs", "secrets", "setup", "run", "workdir"}
KEY_SECRET = "CLOUDFIT_CHECKPOINT_KEY"
RESOURCE_KEYS = {"cloud", "region", "zone", "instance_type", "accelerators", "use_spot"}


class ManagedJobStatus(enum.Enum):
    PENDING = "PENDING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    RECOVERING = "RECOVERING"
    SUCCEEDED = "SUCCEEDED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    FAILED_SETUP = "FAILED_SETUP"


class JobStatus(enum.Enum):
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    FAILED_SETUP = "FAILED_SETUP"


class CloudUserIdentityError(Exception):
    pass


class ResourcesUnavailableError(Exception):
    pass


class ClusterDoesNotExist(ValueError):
    pass


class ClusterNotUpError(Exception):
    pass


@dataclass
class Task:
    config: dict
    secrets: dict = field(default_factory=dict, repr=False)  # name → value (references without one are left out)

    @classmethod
    def from_yaml_config(cls, config: dict, env_overrides=None, secrets_overrides=None) -> "Task":
        unknown = set(config) - TASK_KEYS
        if unknown:
            raise ValueError(f"Invalid task args: {sorted(unknown)}")
        res = config.get("resources") or {}
        for r in res.get("ordered", [res]):
            if set(r) - RESOURCE_KEYS:
                raise ValueError(f"Invalid resource args: {sorted(set(r) - RESOURCE_KEYS)}")
            row = CATALOG.get((r.get("cloud"), r.get("instance_type")))
            if row is None:
                raise ValueError(f"Invalid instance type {r.get('instance_type')!r} for cloud {r.get('cloud')!r}")
            if r.get("accelerators") != f"{row[0]}:{row[1]}":
                raise ValueError(f"Invalid accelerators {r.get('accelerators')!r} for {r['instance_type']}")
            if r.get("region") not in row[2]:
                raise ValueError(f"Invalid region {r.get('region')!r} for {r['instance_type']}")
        run = config.get("run", "")
        if not ("cloudfit.runtime.torchrun" in run or "cloudfit.runtime.logprogress" in run) \
                or int(config.get("num_nodes", 1)) < 1:  # torchrun, or a stack that starts its own ranks (followed)
            raise ValueError("a cloudfit task runs torchrun (or a followed stack) on at least one node")
        secrets = {k: str(v) for k, v in (config.get("secrets") or {}).items() if v is not None}
        secrets.update(dict(secrets_overrides or ()))
        return cls(json.loads(json.dumps(config)), secrets)

    @property
    def steps(self) -> int:
        m = re.search(r"--(?:training\.)?(?:train-iters|steps)'?[ =]'?(\d+)", self.config["run"])
        return int(m.group(1)) if m else 100

    @property
    def resource(self) -> dict:
        res = self.config["resources"]
        return res.get("ordered", [res])[0]


@dataclass
class Job:
    job_id: int
    name: str
    task: Task
    managed: bool
    start: float
    status: str = "RUNNING"
    recovery_count: int = 0
    down_until: float = 0.0  # RECOVERING until then
    lost_s: float = 0.0  # seconds of work thrown away by preemptions
    preempt_at: list = field(default_factory=list)  # seconds after start
    fail_at: float | None = None
    fail_status: str = "FAILED"
    failure_reason: str = "user code failed"
    checkpoint_every: int = 50
    stopped: bool = False
    node_files: tuple = ()  # what the node's workdir held after setup (relative paths)

    def step_at(self, now: float, job_s: float) -> int:
        total = self.task.steps
        return min(total, int(total * max(0.0, now - self.start - self.lost_s) / job_s))


@dataclass
class Request:
    rid: str


class FakeSky:
    def __init__(self, *, job_s: float = 0.4, unavailable: tuple = (), preempt_at: tuple = (), recover_s: float = 0.15,
                 fail_at: float | None = None, cost_factor: float = 1.0, samples_per_step: int = 64,
                 launch_error: BaseException | None = None, half_made: bool = False) -> None:
        self.launch_error, self.half_made = launch_error, half_made
        self.job_s, self.unavailable, self.preempt_at, self.recover_s = job_s, set(unavailable), list(preempt_at), recover_s
        self.fail_at, self.cost_factor, self.samples_per_step = fail_at, cost_factor, samples_per_step
        self.lock = threading.Lock()
        self.results: dict[str, tuple[Any, BaseException | None]] = {}
        self.clusters: dict[str, dict] = {}  # name → {"status", "task", "job", "since"}
        self.jobs: dict[int, Job] = {}
        self.bills: dict[str, list] = {}  # cluster name → [(start, end|None, $/h)]
        self.calls: list[tuple] = []
        self.launched: list[dict] = []  # every task config launched (managed or not)
        self.tasks: list[Task] = []  # every task launched (its secrets too)
        self._n = 0
        self._job_n = 0  # SkyPilot numbers jobs 1, 2, … apart from requests

    # ---------------------------------------------------------------- plumbing

    def _req(self, fn, *a, **kw) -> Request:
        self._n += 1
        rid = f"req-{self._n}"
        try:
            self.results[rid] = (fn(*a, **kw), None)
        except BaseException as e:  # noqa: BLE001 - delivered by get(), like the API server
            self.results[rid] = (None, e)
        return Request(rid)

    def get(self, req: Request) -> Any:
        if not isinstance(req, Request) or req.rid not in self.results:
            raise TypeError(f"sky.get takes a request id, got {req!r}")
        value, err = self.results[req.rid]
        if err is not None:
            raise err
        return value

    def install(self, monkeypatch) -> types.ModuleType:
        sky = types.ModuleType("sky")
        jobs = types.ModuleType("sky.jobs")
        exc = types.ModuleType("sky.exceptions")
        exc.ResourcesUnavailableError, exc.ClusterDoesNotExist = ResourcesUnavailableError, ClusterDoesNotExist
        exc.ClusterNotUpError, exc.CloudUserIdentityError = ClusterNotUpError, CloudUserIdentityError
        sky.Task, sky.get, sky.exceptions, sky.jobs = Task, self.get, exc, jobs
        for name in ("launch", "status", "queue", "cancel", "down", "cost_report", "tail_logs"):
            setattr(sky, name, getattr(self, f"sky_{name}"))
        for name in ("launch", "queue", "cancel", "tail_logs"):
            setattr(jobs, name, getattr(self, f"jobs_{name}"))
        jobs.ManagedJobStatus = ManagedJobStatus
        for mod in (("sky", sky), ("sky.jobs", jobs), ("sky.exceptions", exc)):
            monkeypatch.setitem(sys.modules, *mod)
        return sky

    # ---------------------------------------------------------------- simulation

    def _check_task(self, task) -> Task:
        if not isinstance(task, Task):
            raise TypeError("launch takes a sky.Task")
        if self.launch_error is not None:
            raise self.launch_error
        for remote, src in (task.config.get("file_mounts") or {}).items():
            if isinstance(src, str) and "://" not in src and not Path(src).is_file():
                raise ValueError(f"File mount source {src!r} for {remote} does not exist locally")
        key = (task.resource["cloud"], task.resource["instance_type"], bool(task.resource.get("use_spot")))
        if key in self.unavailable or key[:2] in self.unavailable:
            raise ResourcesUnavailableError(f"Failed to acquire resources in all zones of {task.resource['region']} "
                                            f"for {key[1]} (quota or capacity)\nFailover history: ...")
        return task

    def _bill(self, name: str, task: Task, now: float) -> None:
        price = CATALOG[(task.resource["cloud"], task.resource["instance_type"])][3] * int(task.config["num_nodes"])
        self.bills.setdefault(name, []).append([now, None, price])

    def _unbill(self, name: str, now: float) -> None:
        for b in self.bills.get(name, []):
            if b[1] is None:
                b[1] = now

    @staticmethod
    def _setup_failure(task: Task) -> str:
        """What running the task's ``setup`` on a node would fail with ("" when it installs)."""
        mounts = task.config.get("file_mounts") or {}
        checked = set()
        for sha, remote in re.findall(r"echo '([0-9a-f]{64})  (\S+)' \| sha256sum -c", task.config.get("setup", "")):
            src = mounts.get(remote)
            if not isinstance(src, str) or hashlib.sha256(Path(src).read_bytes()).hexdigest() != sha:
                return f"{remote} does not match its SHA-256 {sha[:12]}…"
            checked.add(remote)
        for line in task.config.get("setup", "").splitlines():
            if "pip install" not in line:
                continue
            for word in shlex.split(line.split("pip install", 1)[1]):
                if word.startswith("-"):
                    continue
                path = re.sub(r"\[.*\]$", "", word)
                if path.startswith("/"):
                    if path not in mounts:
                        return f"ERROR: {path} does not exist"
                    if path not in checked:
                        return f"{path} was installed without a SHA-256 check"
                elif re.match(r"(?i)cloudfit\b", word):  # the index's `cloudfit` is not this project
                    return f"ERROR: No matching distribution found for {word}"
        return ""

    @staticmethod
    def _node_setup(task: Task) -> tuple[str, tuple]:
        """Run the setup's checks and unpacking (every line but ``pip install``) with bash on a "node": a temp
        HOME, each file mount's remote path its uploaded file. (failure's last line or "", the node's workdir)."""
        import os
        import subprocess
        import tempfile

        setup = task.config.get("setup", "")
        if "tar " not in setup:
            return "", ()
        mounts = task.config.get("file_mounts") or {}
        lines = [ln for ln in setup.splitlines() if "pip install" not in ln]
        script = "\n".join(lines)
        for remote, src in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
            if isinstance(src, str) and "://" not in src:
                script = script.replace(remote, shlex.quote(src))
        with tempfile.TemporaryDirectory(prefix="fake-sky-node-") as home:
            p = subprocess.run(["bash", "-c", script], cwd=home, env={**os.environ, "HOME": home},
                               capture_output=True, text=True, timeout=60)
            wd = Path(home) / "sky_workdir"
            files = tuple(sorted(f.relative_to(wd).as_posix() for f in wd.rglob("*") if f.is_file())) if wd.is_dir() else ()
        if p.returncode != 0:
            return ((p.stderr or p.stdout).strip().splitlines() or ["setup failed"])[-1], files
        return "", files

    def _new_job(self, name: str, task: Task, managed: bool) -> Job:
        self._job_n += 1
        job = Job(self._job_n, name, task, managed, time.monotonic(), preempt_at=list(self.preempt_at), fail_at=self.fail_at)
        why, job.node_files = self._node_setup(task)
        why = why or self._setup_failure(task)
        if why:
            job.fail_at, job.fail_status, job.failure_reason = 0.0, "FAILED_SETUP", why
        elif int(task.config.get("num_nodes", 1)) > 1 and not task.secrets.get(KEY_SECRET):
            job.fail_at, job.failure_reason = 0.0, ("the ranks hold different checkpoint keys: set "
                                                    "$CLOUDFIT_CHECKPOINT_KEY on every node")
        self.jobs[job.job_id] = job
        self.launched.append(task.config)
        self.tasks.append(task)
        return job

    def _advance(self, job: Job) -> Job:
        now = time.monotonic()
        if job.status in ("SUCCEEDED", "CANCELLED", "FAILED", "FAILED_SETUP"):
            return job
        t = now - job.start
        if job.fail_at is not None and t >= job.fail_at:
            job.status = job.fail_status
        elif job.status == "RECOVERING" and now >= job.down_until:
            job.status = "RUNNING"
        elif job.managed and job.preempt_at and t >= job.preempt_at[0] and job.status == "RUNNING":
            at = job.preempt_at.pop(0)  # lose the work since the last checkpoint, then recover
            step = job.step_at(job.start + at, self.job_s)
            ckpt = step - step % job.checkpoint_every
            job.lost_s += (step - ckpt) / job.task.steps * self.job_s + self.recover_s
            job.status, job.down_until = "RECOVERING", now + self.recover_s
            job.recovery_count += 1
        elif job.step_at(now, self.job_s) >= job.task.steps:
            job.status = "SUCCEEDED"
        if job.status in ("SUCCEEDED", "FAILED", "FAILED_SETUP") and job.managed:
            self._unbill(f"{job.name}-{job.job_id}", now)  # the controller downs a managed job's cluster
        return job

    def _progress(self, job: Job) -> dict:
        now = time.monotonic()
        step = job.step_at(now, self.job_s)
        state = "stopped" if job.stopped else "completed" if step >= job.task.steps else "running"
        return {"step": step, "total_steps": job.task.steps, "samples_per_second": 1000.0, "state": state,
                "checkpoint_step": step - step % job.checkpoint_every, "restart": job.recovery_count}

    # ---------------------------------------------------------------- sky.*

    def sky_launch(self, task, cluster_name=None, retry_until_up=False, idle_minutes_to_autostop=None, down=False,
                   **kw):
        self.calls.append(("launch", cluster_name, idle_minutes_to_autostop, down))

        def go():
            if cluster_name in self.clusters:
                raise ValueError(f"cluster {cluster_name} exists: cloudfit launches a new one each time")
            if not down or idle_minutes_to_autostop is None:
                raise AssertionError("cloudfit's clusters must autostop with down=True (the cloud-side fence)")
            try:
                self._check_task(task)
            except Exception as e:
                if isinstance(e, ResourcesUnavailableError) or self.half_made:
                    self.clusters[cluster_name] = {"status": "INIT", "task": task, "job": None}  # half-made
                    if self.half_made:  # its VMs exist until it is downed (a stockout's INIT cluster has none)
                        self._bill(cluster_name, task, time.monotonic())
                raise
            now = time.monotonic()
            job = self._new_job(cluster_name, task, False)
            self.clusters[cluster_name] = {"status": "UP", "task": task, "job": job.job_id}
            self._bill(cluster_name, task, now)
            return job.job_id, object()

        return self._req(go)

    def sky_status(self, cluster_names=None, refresh=None, all_users=False):
        self.calls.append(("status", cluster_names))
        return self._req(lambda: [{"name": n, "status": c["status"]} for n, c in self.clusters.items()
                                  if cluster_names is None or n in cluster_names])

    def sky_queue(self, cluster_name, skip_finished=False, all_users=False):
        def go():
            c = self.clusters.get(cluster_name)
            if c is None or c["status"] != "UP":
                raise ClusterNotUpError(f"Cluster {cluster_name!r} is not up.")
            job = self._advance(self.jobs[c["job"]])
            return [{"job_id": job.job_id, "status": JobStatus[job.status]}]

        return self._req(go)

    def sky_cancel(self, cluster_name, all=False, all_users=False, job_ids=None):
        self.calls.append(("cancel", cluster_name, job_ids))
        return self._req(self._cancel, job_ids)

    def _cancel(self, job_ids):
        for j in job_ids or ():
            job = self._advance(self.jobs[j])
            if job.status not in ("SUCCEEDED", "FAILED", "FAILED_SETUP", "CANCELLED"):
                job.stopped, job.status = True, "CANCELLED"
                if job.managed:
                    self._unbill(f"{job.name}-{job.job_id}", time.monotonic())

    def sky_down(self, cluster_name, purge=False):
        self.calls.append(("down", cluster_name))

        def go():
            if cluster_name not in self.clusters:
                raise ClusterDoesNotExist(f"Cluster {cluster_name!r} does not exist.")
            c = self.clusters.pop(cluster_name)
            if c["job"] is not None:
                self._cancel([c["job"]])
            self._unbill(cluster_name, time.monotonic())

        return self._req(go)

    def sky_cost_report(self, days=None):
        def go():
            now = time.monotonic()
            return [{"name": n, "total_cost": self.cost_factor * sum(p * ((e or now) - s) / 3600 for s, e, p in bills)}
                    for n, bills in self.bills.items()]

        return self._req(go)

    def _log(self, job: Job | None, output_stream) -> int:
        if job is None:
            raise ClusterNotUpError("no such job")
        self._advance(job)
        output_stream.write("I 12:00:00 torchrun ...\nCLOUDFIT_PROGRESS {\"step\": \n")  # a torn line: skipped
        output_stream.write(f"(head, rank=0) CLOUDFIT_PROGRESS {json.dumps(self._progress(job))}\n")
        return 0

    def sky_tail_logs(self, cluster_name, job_id, follow, tail=0, output_stream=None):
        if follow:
            raise AssertionError("the launcher must not follow logs (it would block the guard)")
        c = self.clusters.get(cluster_name)
        return self._log(self.jobs.get(job_id) if c is not None else None, output_stream)

    # ---------------------------------------------------------------- sky.jobs.*

    def jobs_launch(self, task, name=None, **kw):
        self.calls.append(("jobs.launch", name))

        def go():
            self._check_task(task)
            if not task.resource.get("use_spot"):
                raise AssertionError("cloudfit runs only spot configs as managed jobs")
            job = self._new_job(name, task, True)
            self._bill(f"{name}-{job.job_id}", task, job.start)
            return [job.job_id], None

        return self._req(go)

    def jobs_queue(self, refresh, skip_finished=False, all_users=False, job_ids=None):
        def go():
            if not any(j.managed for j in self.jobs.values()):
                raise ClusterNotUpError("Managed jobs controller is not up. No managed jobs to show.")
            out = []
            for j in list(self.jobs.values()):
                if not j.managed or (job_ids is not None and j.job_id not in job_ids):
                    continue
                self._advance(j)
                if skip_finished and j.status in ("SUCCEEDED", "CANCELLED", "FAILED", "FAILED_SETUP"):
                    continue
                out.append({"job_id": j.job_id, "job_name": j.name, "status": ManagedJobStatus[j.status],
                            "recovery_count": j.recovery_count,
                            "failure_reason": j.failure_reason if j.status.startswith("FAILED") else None})
            return out

        return self._req(go)

    def jobs_cancel(self, name=None, job_ids=None, all=False, all_users=False, **kw):
        self.calls.append(("jobs.cancel", name, job_ids))
        return self._req(self._cancel, job_ids)

    def jobs_tail_logs(self, name=None, job_id=None, follow=True, controller=False, refresh=False, tail=None,
                       output_stream=None, **kw):
        if follow:
            raise AssertionError("the launcher must not follow logs (it would block the guard)")
        return self._log(self.jobs.get(job_id), output_stream)
