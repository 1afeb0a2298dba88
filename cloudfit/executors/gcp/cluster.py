"""The GCP backend: one Compute Engine VM per node, supervised under the budget guard.

Each VM gets the plan's machine type (N1 shapes get ``guest_accelerators``; A2/A3/A4/G2 have their
GPUs built in), ``SPOT`` or ``STANDARD`` provisioning, ``on_host_maintenance=TERMINATE``, a Deep
Learning VM image, the labels ``cloudfit-cluster=<name>`` and ``cloudfit-launch=<uuid>`` (this
launch's identity), and ``max_run_duration`` (the guard's cap) with
``instance_termination_action=DELETE``: the cloud deletes the VM when its share of the budget is
used up, even if the launcher is gone. The startup script (``startup.sh``) mounts the checkpoint
bucket, installs cloudfit and runs ``torchrun`` with c10d rendezvous at node 0's internal IP.

Failures: a capacity error — a stockout (``ZONE_RESOURCE_POOL_EXHAUSTED``), a quota, or a shape the
zone does not offer — moves the whole cluster to the plan's next alternative at once (partial nodes
are deleted first), whether it arrives as the insert call's HTTP error (Compute Engine answers
503 synchronously) or inside the operation; only transient errors (429, other 5xx, dropped
connections) are retried. A VM name that already exists is adopted only when it carries this
launch's UUID (a retried insert whose first try went through), never another launch's VM of the
same cluster name. A preempted node (TERMINATED, or 404 plus a ``compute.instances.preempted``
zone operation) is recreated — node 0 with its old internal IP — and the job resumes from its
checkpoint. ``down NAME`` deletes the VMs of NAME's recorded launches (``all_with_label=True``:
every VM carrying the cluster label).

A large-model job's startup script runs ``cloudfit.train_llm`` with the plan's layout for the config
being created (re-computed for a config of another size). With a deadline (``RunSpec.deadline``), the
supervisor's ``DeadlineWatch`` (``cloudfit.executors.deadline``: Can't Be Late's rule) may ``switch``
a spot cluster that fell behind to on-demand — the job checkpoints and stops, the spot VMs go, the
on-demand cluster (priced by the guard first) resumes from the checkpoint — and when a lost node cannot
be replaced (no capacity), a large-model job resumes on the surviving VMs themselves (new ranks and a
re-computed layout in their metadata, then a reset: nothing re-inserted into the zone that refused) if
the deadline still holds there. A finished VM deletes itself (``startup.sh``); every VM gets the plan's
checkpoint key as instance metadata (``cloudfit-checkpoint-key``), read into the ranks' environment:
whoever can write the checkpoint bucket but cannot read the project's instance metadata cannot plant a
checkpoint the ranks accept (the trainers verify the HMAC); project viewers with compute.instances.get
can read it, as they can the VMs themselves. Each switch is recorded (``switches`` in the cluster's info, an event).
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from cloudfit.errors import BudgetExceeded, LaunchError, UsageError
from cloudfit.executors import state as st
from cloudfit.executors.base import (
    LABEL, NO_CAPACITY, DownResult, Event, EventSink, Poll, Preview, RunResult, RunSpec, Timing, carried_budget,
    checkpoint_stops, supervise, taken_over,
)
from cloudfit.executors.budget import Guard, PriceSchedule, check_launchable
from cloudfit.executors.gcp.bodies import (
    DEFAULT_IMAGE, LAUNCH_LABEL, NodeSpec, node_name, render_startup_script, split_bucket,
)
from cloudfit.executors.gcp.wheel import check_room, install_source
from cloudfit.executors.gcp.clients import (
    ENV_ENDPOINT, Clients, NotOfferedError, Retry, capacity_error, capacity_exception, classify, make_clients,
    one_line, op_error, wait,
)
from cloudfit.errors import QuotaError, StockoutError
from cloudfit.types import ClusterConfig

CAPACITY_ERRORS = (StockoutError, QuotaError, NotOfferedError)
PREVIEW_LAUNCH_ID = "new-uuid-at-launch"
KEY_METADATA = "cloudfit-checkpoint-key"  # instance metadata the startup script reads into the ranks' environment  # what --dry-run shows for the label every launch draws afresh


class GcpExecutor:
    """See the module docstring. Timing defaults suit real VMs; tests shrink them."""

    backend = "gcp"

    #: Default timing of real VMs (tests shrink it): guard interval, stop grace, stop → gone, insert → RUNNING.
    INTERVAL_S, GRACE_S, TEARDOWN_S, PROVISION_SLACK_S, MIN_BILLED_S = 30.0, 60.0, 180.0, 600.0, 60.0
    INSERT_SETTLE_S = 120.0  # how long after an unanswered insert `down` watches for its VM

    @classmethod
    def billing_bounds(cls) -> tuple[float, float]:
        """(min billed seconds per VM, longest billed time after a VM's cap) at the default timing."""
        return cls.MIN_BILLED_S, cls.TEARDOWN_S + cls.PROVISION_SLACK_S

    def __init__(self, *, project: str | None = None, endpoint: str | None = None, store: st.StateStore | None = None,
                 image: str = DEFAULT_IMAGE, interval_s: float = INTERVAL_S, grace_s: float = GRACE_S,
                 teardown_s: float = TEARDOWN_S, provision_slack_s: float = PROVISION_SLACK_S,
                 min_billed_s: float = MIN_BILLED_S, insert_settle_s: float = INSERT_SETTLE_S, retry: Retry | None = None,
                 clients: Clients | None = None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._project, self._endpoint = project, endpoint or os.environ.get(ENV_ENDPOINT) or None
        self._clients = clients
        self._store = store  # opened on first use: a dry run writes nothing, not even state.db
        self.image = image
        self.timing = Timing(interval_s=interval_s, teardown_s=teardown_s, grace_s=grace_s)
        self.provision_slack_s = provision_slack_s
        self.min_billed_s = min_billed_s
        self.insert_settle_s = insert_settle_s
        self.retry = retry or Retry()
        # The guard's clock (tests run it faster than real time; the guard only needs it to be monotonic).
        self.clock, self.sleep = clock, sleep

    @property
    def store(self) -> st.StateStore:
        if self._store is None:
            self._store = st.StateStore()
        return self._store

    @property
    def clients(self) -> Clients:
        if self._clients is None:
            self._clients = make_clients(self._project, self._endpoint)
        return self._clients

    def _guard(self, budget: float) -> Guard:
        return Guard(budget, interval_s=self.timing.interval_s, teardown_s=self.timing.teardown_s,
                     min_billed_s=self.min_billed_s, provision_slack_s=self.provision_slack_s)

    @staticmethod
    def _schedules(config: ClusterConfig) -> list[PriceSchedule]:
        return [PriceSchedule.constant(config.price_per_hour / config.nodes)] * config.nodes

    def node_specs(self, spec: RunSpec, config: ClusterConfig, cap_s: float, *, stop_at: float | None,
                   master_ip: str | None, launch_id: str, install=None, key: str = "") -> list[NodeSpec]:
        """One ``NodeSpec`` per node. ``key``: the checkpoint HMAC key, carried as the metadata value
        ``cloudfit-checkpoint-key`` among the attachments (sent, never shown by --dry-run)."""
        attach = dict(install.chunks) if install is not None else {}
        if spec.job.workdir is not None:  # the user's folder (+ the stack's files), beside the wheel
            attach.update(spec.job.workdir.chunks())
        if key:
            attach[KEY_METADATA] = key
        labels = {LABEL: spec.name, **{k: v for k, v in spec.labels.items()}}
        out = []
        for i in range(config.nodes):
            head = "self" if i == 0 else (master_ip or "<node-0 internal IP>")
            md = {"cloudfit-node-rank": str(i), "cloudfit-nnodes": str(config.nodes),
                  "cloudfit-master-addr": head, "enable-guest-attributes": "TRUE"}
            if stop_at is not None:
                md["cloudfit-stop-at"] = f"{stop_at:.0f}"
            out.append(NodeSpec(node_name(spec.name, i), config.offering.zone, i, config, int(cap_s),
                                {**labels, "cloudfit-node": str(i), LAUNCH_LABEL: launch_id}, md, self.image,
                                attachments=attach))
        return out

    def preview(self, spec: RunSpec) -> Preview:
        guard = self._guard(spec.budget_usd)
        config = spec.configs[0]
        guard.check_launchable(self._schedules(config))
        cap = guard.reserve([f"n{i}" for i in range(config.nodes)], self._schedules(config), 0.0)
        nodes = self.node_specs(spec, config, cap, stop_at=None, master_ip=None, launch_id=PREVIEW_LAUNCH_ID)
        notes = []
        if not (spec.job.checkpoint_dir or "").startswith("gs://"):
            notes.append("launching needs --checkpoint-dir gs://BUCKET/PATH: checkpoints must outlive preempted VMs")
        ckpt = spec.job.checkpoint_dir or "gs://your-bucket/path"  # a placeholder: launching needs one
        install = install_source(spec.job.model)
        check_room(install, spec.job.workdir)
        script = render_startup_script(spec, config, ckpt, install=install)
        plans = tuple(dataclasses.replace(p, detail={**p.detail, "startup_script_bytes": len(script)})
                      for p in (n.plan() for n in nodes))
        return Preview("gcp", spec.name, config, plans, spec.budget_usd, guard.committed(0.0),
                       self.timing.interval_s, self.timing.teardown_s, len(spec.configs) - 1, tuple(notes), script,
                       install=install.describe)

    # ---------------------------------------------------------------- run

    def run(self, spec: RunSpec, on_event: EventSink | None = None) -> RunResult:
        emit = on_event or (lambda e: None)
        budget, prior = carried_budget(self.store, spec, min_billed_s=self.min_billed_s,
                                       teardown_s=self.timing.teardown_s + self.provision_slack_s)
        guard = self._guard(budget)
        check_launchable(guard, self._schedules(spec.configs[0]), prior, spec.budget_usd)  # before anything exists
        ckpt = spec.job.checkpoint_dir
        if not ckpt or not ckpt.startswith("gs://"):
            raise UsageError("--backend gcp needs --checkpoint-dir gs://BUCKET/PATH (checkpoints must outlive "
                             "preempted VMs; the VMs mount the bucket)")
        split_bucket(ckpt)
        clients = self.clients  # credentials problems surface before anything is recorded
        install = install_source(spec.job.model)  # a wheel too large for metadata is refused before anything exists
        check_room(install, spec.job.workdir)  # and so is a workdir that does not fit beside it
        launch_id = uuid.uuid4().hex
        self.store.create_cluster(spec.name, "gcp", spec.budget_usd, {
            **spec.record, "project": clients.project, "endpoint": clients.endpoint, "checkpoint_dir": ckpt,
            "job": {"model": spec.job.model, "steps": spec.job.steps, "command": list(spec.job.command)},
            "configs": [c.label() for c in spec.configs], "launch_id": launch_id, "install": install.describe,
            "plan_id": spec.record.get("plan_id"), "spent_before_usd": prior,
        }, launcher_pid=os.getpid(), launcher_started=_proc_start())
        cluster = _GcpCluster(self, spec, guard, emit, launch_id=launch_id, install=install,
                              key=self.store.checkpoint_key(spec.record.get("plan_id") or spec.name))
        started = self.clock()
        from cloudfit.executors.deadline import DeadlineLog, DeadlineWatch

        watch = None
        if spec.deadline is not None:
            watch = DeadlineWatch(spec.deadline, spec.job.steps, margin_s=self.timing.interval_s, t0=started)
        cluster.watch, cluster.log = watch, DeadlineLog(self.store, spec.name, watch, self.clock)
        reason, last = "failed", Poll()
        try:
            cluster.launch(0)
            self.store.update_cluster(spec.name, status=st.RUNNING, info={"config": cluster.config.to_dict(),
                                                                       "zone": cluster.config.offering.zone})
            reason, last = supervise(cluster, guard, timing=self.timing, timeout_s=spec.timeout_s, emit=emit,
                                     clock=self.clock, sleep=self.sleep, record=st.SpendRecorder(self.store, spec.name),
                                     watch=watch, after_checkpoint=checkpoint_stops(spec))
        except _NoCapacity as e:
            reason = NO_CAPACITY
            raise LaunchError(str(e)) from None
        except KeyboardInterrupt:
            reason = "interrupted"
            raise
        finally:
            cluster.teardown()  # a no-op after supervise; after a failure mid-launch it deletes what exists
            self._finish(spec.name, reason, guard, last)
        p = last.progress
        return RunResult(spec.name, "gcp", reason, guard.accrued(self.clock()), self.clock() - started,
                         cluster.config, steps=int(p.get("step") or 0), total_steps=int(p.get("total_steps") or spec.job.steps),
                         samples_per_second=p.get("samples_per_second"), restarts=int(p.get("restart") or 0),
                         preemptions=cluster.preemptions, fallbacks=tuple(cluster.fallbacks),
                         detail="; ".join([last.detail] * bool(last.detail) + [f"switched: {w}" for w in cluster.switches]))

    def _finish(self, name: str, reason: str, guard: Guard, last: Poll) -> None:
        rec = self.store.find_cluster(name)
        if rec is None or rec.ended:
            return
        final = "down" if rec.reason == "down" else reason
        spend = guard.accrued(self.clock())
        self.store.update_cluster(name, status=st.ENDED, reason=final, spend_usd=spend,
                                  info={"progress": dict(last.progress)})
        self.store.event(name, final, f"ended: {final}, spent ${spend:.4f}")

    # ---------------------------------------------------------------- down / live

    def labelled(self, name: str) -> dict[tuple[str, str], tuple[str, str]]:
        """``{(zone, vm name): (status, launch id)}`` for every VM labelled ``cloudfit-cluster=name`` in the
        project (launch id ``""`` when the VM carries none). Keyed by zone too: the same name in two zones
        is two VMs."""
        from google.cloud import compute_v1

        c = self.clients
        req = compute_v1.AggregatedListInstancesRequest(project=c.project, filter=f"labels.{LABEL} = {name}")
        pages = self.retry.call(f"listing VMs of {name}", c.instances.aggregated_list, request=req)
        out = {}
        for scope, scoped in pages:
            for inst in scoped.instances:
                if inst.labels.get(LABEL) == name:  # trust, but verify the server-side filter
                    out[(scope.rsplit("/", 1)[-1], inst.name)] = (inst.status, inst.labels.get(LAUNCH_LABEL, ""))
        return out

    def live(self, name: str) -> list[str]:
        return sorted(vm for _, vm in self.labelled(name))

    def vm_states(self, name: str) -> dict[str, str]:
        """``{vm name: Compute Engine status}`` of every VM labelled with ``name`` (``RUNNING``, ``TERMINATED``, …)."""
        return {vm: status for (_, vm), (status, _) in sorted(self.labelled(name).items())}

    def down(self, name: str, *, all_with_label: bool = False) -> DownResult:
        """Delete the VMs of ``name``'s recorded launches (every launch of that name in this state
        store); VMs that carry the cluster label but belong to another launch (another state folder,
        another laptop) are left alone and reported, unless ``all_with_label``. An insert the store
        recorded but nobody saw answered (a launcher killed mid-call) may still land: ``down`` watches
        for it up to ``insert_settle_s`` and deletes it when it appears; one still unseen stays recorded
        (``DownResult.pending``) for the next ``down``/``status``."""
        rec = self.store.find_cluster(name)
        launches = self.store.launch_ids(name)
        found = self.labelled(name)
        mine = [k for k, (_, lid) in found.items() if all_with_label or (lid and lid in launches)]
        foreign = tuple(sorted(vm for (zone, vm) in found if (zone, vm) not in mine))
        if rec is None and not mine:
            if foreign:
                raise UsageError(
                    f"no recorded launch of {name!r} in {self.store.path}; {len(foreign)} VM(s) carry the label "
                    f"{LABEL}={name} ({', '.join(foreign)}): pass --all-with-label to delete them")
            raise UsageError(f"no cluster named {name!r} in {self.store.path} and no VM labelled {LABEL}={name} "
                             f"in project {self.clients.project}")
        if rec is not None and not rec.ended:
            self.store.update_cluster(name, status=st.STOPPING, reason="down")
        known = {(r.zone, r.name) for r in self.store.resources(name)} if rec else set()
        deleted, gone = _Deleter(self).delete_all([(vm, zone) for zone, vm in mine])
        landed = self._settle_inserts(name, set(mine), launches, all_with_label)
        deleted += landed
        mine = set(mine) | set(landed)
        pending = []
        for r in self.store.resources(name, live_only=True):
            if r.kind == "vm" and r.state == st.INTENT and (r.zone, r.name) not in mine and self._may_land(r):
                pending.append(f"{r.name} ({r.zone})")  # an unanswered insert: not forgotten
                continue
            if (r.zone, r.name) not in mine:
                gone.append(r.name)  # recorded, but no VM of this launch carries its name: never created, or gone
            self.store.deleted(r.id, why="down")
        if rec is not None:
            spend = self.store.refresh_spend(name, min_billed_s=self.min_billed_s,
                                             teardown_s=self.timing.teardown_s + self.provision_slack_s)
            if not rec.ended and not pending:
                self.store.update_cluster(name, status=st.ENDED, reason="down")
                self.store.event(name, "down", f"deleted by `cloudfit down`: {len(deleted)} VM(s), spent ${spend:.4f}")
            elif pending:
                self.store.event(name, "down", f"{len(pending)} insert(s) unanswered: run `cloudfit down {name}` again")
        untracked = tuple(sorted(vm for zone, vm in deleted if (zone, vm) not in known))
        deleted_known = [vm for zone, vm in deleted if (zone, vm) in known]
        return DownResult(name, tuple(sorted(deleted_known)), tuple(sorted(set(gone))), untracked, foreign,
                          tuple(pending))

    def _may_land(self, r) -> bool:
        """An insert recorded as intended (never confirmed) may still create its VM this long after."""
        return time.time() - r.intent_at < self.insert_settle_s

    def _settle_inserts(self, name: str, seen: set, launches: set, all_with_label: bool) -> list[tuple[str, str]]:
        """Watch for VMs of unanswered inserts of ``name`` (recorded intents no listing showed yet) and delete
        them as they appear; ``[(zone, vm)]`` deleted."""
        out: list[tuple[str, str]] = []
        until = time.monotonic() + self.insert_settle_s
        while True:
            waiting = {(r.zone, r.name) for r in self.store.resources(name, live_only=True)
                       if r.kind == "vm" and r.state == st.INTENT and self._may_land(r)} - seen
            if not waiting or time.monotonic() >= until:
                return out
            time.sleep(min(1.0, self.timing.interval_s))
            found = self.labelled(name)
            landed = [k for k in waiting if k in found and (all_with_label or found[k][1] in launches)]
            if landed:
                d, _ = _Deleter(self).delete_all([(vm, zone) for zone, vm in landed])
                out += d
                seen |= set(landed)

class _NoCapacity(Exception):
    pass


def _proc_start() -> float | None:
    try:
        import psutil

        return psutil.Process().create_time()
    except Exception:  # pragma: no cover
        return None


class _Deleter:
    """Delete VMs (all calls first, then all waits); 404 counts as already gone."""

    def __init__(self, ex: GcpExecutor) -> None:
        self.ex = ex

    def delete_all(self, targets) -> tuple[list[tuple[str, str]], list[str]]:
        """``targets``: ``(vm, zone)`` pairs (a name is unique only within its zone). Returns
        ``([(zone, vm) deleted], [vm already gone])``."""
        from google.api_core import exceptions as gex

        c = self.ex.clients
        pending, deleted, gone = [], [], []
        for vm, zone in dict.fromkeys(targets):
            try:
                op = self.ex.retry.call(f"deleting {vm}", c.instances.delete, project=c.project, zone=zone, instance=vm)
                pending.append((vm, zone, op.name))
            except gex.NotFound:
                gone.append(vm)
        for vm, zone, op_name in pending:
            try:
                done = _wait(self.ex, zone, op_name, f"deleting {vm}")
            except gex.NotFound:
                gone.append(vm)
                continue
            err = op_error(done)
            if err and err[0] not in ("RESOURCE_NOT_FOUND",):
                raise LaunchError(f"deleting {vm} failed: {err[0]}: {err[1]}")
            deleted.append((zone, vm))
        return deleted, gone


@dataclass
class _Node:
    spec: NodeSpec
    rid: int
    ip: str | None = None
    op: str | None = None  # the insert operation still to wait for


@dataclass
class _GcpCluster:
    """The cluster ``run`` drives: launch with fallbacks, poll, recreate, stop, teardown."""

    ex: GcpExecutor
    spec: RunSpec
    guard: Guard
    emit: EventSink
    launch_id: str = ""
    install: Any = None  # cloudfit.executors.gcp.wheel.Install
    key: str = field(default="", repr=False)  # the checkpoint HMAC key (metadata only)
    config_index: int = 0
    nodes: dict[str, _Node] = field(default_factory=dict)
    preemptions: int = 0
    fallbacks: list[str] = field(default_factory=list)
    stop_at: float | None = None
    script: str = ""
    configs: list = field(default_factory=list)  # the plan's configs, plus any the deadline rule moved to
    watch: Any = None  # cloudfit.executors.deadline.DeadlineWatch (None: no deadline to keep)
    switches: list[str] = field(default_factory=list)
    log: Any = None  # cloudfit.executors.deadline.DeadlineLog (with watch)

    def __post_init__(self) -> None:
        self.configs = list(self.spec.configs)

    @property
    def config(self) -> ClusterConfig:
        return self.configs[self.config_index]

    # ---------------------------------------------------------------- the deadline rule

    def deadline_seen(self, d) -> None:
        """Write the prediction where `cloudfit status` reads it."""
        self.log.seen(d, self.config)

    def _record_switch(self, kind: str, to: ClusterConfig, why: str) -> None:
        self.switches.append(self.log.switch(kind, self.config, to, why))

    def _checkpoint_and_stop(self) -> bool:
        """Ask the job to checkpoint and exit (up to the grace time); True if it completed meanwhile."""
        if not self.nodes:
            return False
        self.request_stop()
        end = self.ex.clock() + self.ex.timing.grace_s
        while self.ex.clock() < end:
            p = self.poll()
            if p.state == "completed":
                return True
            if p.state in ("stopped", "exited", "failed", "down"):
                break
            self.ex.sleep(min(self.ex.timing.interval_s, max(0.0, end - self.ex.clock())))
        return False

    def _move_to(self, to: ClusterConfig) -> None:
        """Tear the cluster down and bring the job up on ``to`` (it resumes from the newest checkpoint).
        The guard prices ``to`` before anything is created: ``BudgetExceeded`` if it cannot pay one
        interval of it (the supervisor then stops the run — the budget wins over the deadline)."""
        self.teardown()
        if self.guard.cap_for(self.ex._schedules(to), self.ex.clock()) < self.guard.min_cap_s:
            msg = f"the budget left cannot pay {to.label()}: stopping (checkpoint saved)"
            self.ex.store.event(self.spec.name, "budget", msg)
            raise BudgetExceeded(msg)
        self.configs.insert(self.config_index + 1, to)
        self.launch(self.config_index + 1)
        self.ex.store.update_cluster(self.spec.name, info={"config": self.config.to_dict(),
                                                           "zone": self.config.offering.zone})

    def switch(self, d) -> None:
        """Move a spot cluster that fell behind to the alternative the rule chose (for good)."""
        from cloudfit.executors.deadline import on_demand_config

        to = d.to if d.to is not None else on_demand_config(self.configs, self.config)
        if self._checkpoint_and_stop():  # finished while stopping: nothing to move
            return
        self._record_switch("on-demand", to, d.reason)
        self.emit(Event("switch", f"moving {self.spec.name} to {to.label()} (on demand); the job resumes from its checkpoint"))
        self._move_to(to)

    # ---------------------------------------------------------------- creation

    def launch(self, first: int) -> None:
        """Create the cluster on ``configs[first]``, falling back through the rest on stockout/quota."""
        for i in range(first, len(self.configs)):
            self.config_index = i
            cfg = self.config
            try:
                cap = self.guard.reserve([node_name(self.spec.name, j) for j in range(cfg.nodes)],
                                         self.ex._schedules(cfg), self.ex.clock())
            except BudgetExceeded as e:
                self.fallbacks.append(f"{cfg.label()}: {e}")
                self.emit(Event("fallback", f"skipping {cfg.label()}: {e}"))
                continue
            self.stop_at = time.time() + cap - self.ex.timing.grace_s
            self.script = render_startup_script(self.spec, cfg, self.spec.job.checkpoint_dir or "", install=self.install)
            self.emit(Event("creating", f"creating {cfg.label()} (max_run_duration {cap:.0f} s)"))
            try:
                self._create_all(cap)
                self.emit(Event("created", f"{cfg.nodes} VM(s) running in {cfg.offering.zone}"))
                return
            except CAPACITY_ERRORS as e:
                self.fallbacks.append(f"{cfg.label()}: {e}")
                self.emit(Event("fallback", f"{cfg.label()}: {e}; deleting partial nodes and trying the next alternative"))
                self.teardown()
        raise _NoCapacity("no alternative in the plan could be created: " + " | ".join(self.fallbacks[-3:]))

    def _create_all(self, cap: float) -> None:
        specs = self.ex.node_specs(self.spec, self.config, cap, stop_at=self.stop_at, master_ip=None,
                                   launch_id=self.launch_id, install=self.install, key=self.key)
        keys = [s.name for s in specs]
        try:
            # Node 0 first: its internal IP is every node's rendezvous address.
            first = self._insert(specs[0], master_ip=None)
            ip0 = self._wait_created(first)
            if ip0 is None:  # preempted before we learnt its address: replace it now, once
                index = self.config_index
                self.replace([specs[0].name])
                if self.config_index != index:  # no capacity to replace it: the whole cluster moved
                    return
                ip0 = self.nodes[specs[0].name].ip if specs[0].name in self.nodes else None
                if ip0 is None:
                    raise LaunchError(f"{specs[0].name} vanished twice while being created in {specs[0].zone}")
            pending = [self._insert(s, master_ip=ip0) for s in specs[1:]]
            for n in pending:
                self._wait_created(n)
        except BaseException:
            for k in keys:
                if k not in self.nodes and self.guard.is_live(k):
                    self.guard.cancel(k, self.ex.clock())
            raise

    def _insert(self, node: NodeSpec, *, master_ip: str | None, network_ip: str | None = None) -> _Node:
        from google.api_core import exceptions as gex

        c = self.ex.clients
        md = dict(node.metadata)
        if master_ip and node.index != 0:
            md["cloudfit-master-addr"] = master_ip
        node = dataclasses.replace(node, metadata=md)
        rid = self.ex.store.intend(self.spec.name, "vm", node.name, zone=node.zone, price_per_hour=node.price_per_hour,
                                   cap_s=node.cap_s, info={"machine_type": node.config.offering.machine_type,
                                                           "accelerator": node.config.offering.accelerator,
                                                           "accelerators": node.config.offering.accelerators_per_node,
                                                           "spot": node.config.spot, "index": node.index,
                                                           "launch_id": self.launch_id})
        body = node.instance(self.script, network_ip=network_ip)
        n = _Node(node, rid)
        try:
            op = self.ex.retry.call(f"creating {node.name}", c.instances.insert, project=c.project, zone=node.zone,
                                    instance_resource=body)
        except gex.Conflict:
            # Our own earlier attempt (a retried call whose first try went through) — or a name clash:
            # adopt the VM only when it carries this launch's identity, never another launch's VM.
            try:
                inst = self.ex.retry.call(f"reading {node.name}", c.instances.get, project=c.project, zone=node.zone,
                                          instance=node.name)
                theirs = (inst.labels.get(LABEL, ""), inst.labels.get(LAUNCH_LABEL, ""))
            except gex.NotFound:  # deleted between the two calls: not ours to adopt; the name is contested
                theirs = ("", "")
            if theirs != (self.spec.name, self.launch_id):
                owner = (f"launch {theirs[1] or '(unlabelled)'} of cluster {theirs[0]}" if theirs[0]
                         else "a VM outside cloudfit")
                self._refused(n, f"name taken by {owner}")
                raise LaunchError(f"a VM named {node.name} already exists in {node.zone} ({owner}, not this launch); "
                                  "pick another --name") from None
            self.nodes[node.name] = n
            return n
        except gex.GoogleAPICallError as e:
            self._refused(n, one_line(e))
            kind = classify(e)
            if kind is not None:  # a capacity error answered synchronously (HTTP 503 stockout, 403 quota, …)
                raise capacity_exception(kind, f"{node.zone} for {node.config.offering.machine_type}",
                                         one_line(e)) from None
            raise LaunchError(f"creating {node.name}: {one_line(e)}") from None
        n.op = op.name
        self.nodes[node.name] = n
        return n

    def _refused(self, n: _Node, why: str) -> None:
        self.ex.store.failed(n.rid, why)
        if self.guard.is_live(n.spec.name):
            self.guard.cancel(n.spec.name, self.ex.clock())

    def _wait_created(self, n: _Node) -> str | None:
        """Wait for the insert; returns the internal IP (None if the VM vanished right away)."""
        from google.api_core import exceptions as gex

        c = self.ex.clients
        if n.op:
            done = _wait(self.ex, n.spec.zone, n.op, f"creating {n.spec.name}")
            err = op_error(done)
            if err:
                code, msg = err
                del self.nodes[n.spec.name]
                self._refused(n, f"{code}: {msg}")
                kind = capacity_error([code], msg)
                if kind is not None:
                    raise capacity_exception(kind, f"{n.spec.zone} for {n.spec.config.offering.machine_type}",
                                             f"{code}: {msg}" if kind != "stockout" else code)
                raise LaunchError(f"creating {n.spec.name} failed: {code}: {msg}")
        try:
            inst = self.ex.retry.call(f"reading {n.spec.name}", c.instances.get, project=c.project, zone=n.spec.zone,
                                      instance=n.spec.name)
        except gex.NotFound:
            # Created, then gone before we looked (a spot VM preempted at once): it existed, so it is
            # recorded as created; the next poll finds it lost and recreates it.
            self.ex.store.confirm(n.rid, info={"vanished": True})
            return None
        n.ip = inst.network_interfaces[0].network_i_p if inst.network_interfaces else None
        self.ex.store.confirm(n.rid, info={"id": str(inst.id), "internal_ip": n.ip})
        return n.ip

    # ---------------------------------------------------------------- supervision

    def poll(self) -> Poll:
        from google.api_core import exceptions as gex
        from google.cloud import compute_v1

        if taken_over(self.ex.store, self.spec.name):
            return Poll("down")
        c = self.ex.clients
        zone = self.config.offering.zone
        req = compute_v1.ListInstancesRequest(
            project=c.project, zone=zone,
            filter=f"labels.{LABEL} = {self.spec.name} AND labels.{LAUNCH_LABEL} = {self.launch_id}")
        listed = {i.name: i for i in self.ex.retry.call("listing the cluster", c.instances.list, request=req)}
        progress: dict[str, Any] = {}
        state, error = "running", ""
        head = self._head()
        if head in listed:
            try:
                # like list filters, query_path is accepted only inside a request object
                req_ga = compute_v1.GetGuestAttributesInstanceRequest(project=c.project, zone=zone, instance=head,
                                                                      query_path="cloudfit/")
                ga = self.ex.retry.call("reading progress", c.instances.get_guest_attributes, request=req_ga)
                attrs = {e.key: e.value for e in ga.query_value.items}
                state = {"completed": "completed", "stopped": "stopped", "failed": "failed",
                         "refused": "refused", "exited": "exited"}.get(attrs.get("state", ""), "running")
                error = attrs.get("error", "")
                if attrs.get("progress"):
                    import json

                    try:
                        progress = json.loads(attrs["progress"])
                    except ValueError:
                        progress = {}
            except gex.NotFound:  # nothing reported yet (the VM is still booting)
                pass
        if state != "running":
            detail = {"failed": "the job failed on the VMs (guest attribute cloudfit/state=failed)",
                      "refused": error or "a rank refused its input (exit 2)"}.get(state, "")
            return Poll(state, progress, detail=detail)
        lost = tuple(name for name in self.nodes
                     if name not in listed or listed[name].status in ("TERMINATED", "STOPPED", "SUSPENDED", "STOPPING"))
        return Poll("running", progress, lost=lost)

    def _preempted(self, names: Sequence[str]) -> set[str]:
        from google.cloud import compute_v1

        c = self.ex.clients
        req = compute_v1.ListZoneOperationsRequest(project=c.project, zone=self.config.offering.zone,
                                                   filter="operationType = compute.instances.preempted")
        ops = self.ex.retry.call("listing preemptions", c.zone_operations.list, request=req)
        hit = {op.target_link.rsplit("/", 1)[-1] for op in ops}
        return {n for n in names if n in hit}

    def replace(self, lost: Sequence[str]) -> None:
        now = self.ex.clock()
        preempted = self._preempted(lost)
        ranks = {name: self.nodes[name].spec.index for name in lost}  # (after a re-shard, names ≠ ranks)
        for name in lost:
            n = self.nodes[name]
            life = next((l for l in reversed(self.guard.lives) if l.key == name), None)
            if life is not None and life.end is None and now - life.start >= life.cap_s:
                raise BudgetExceeded(f"{name} reached its max_run_duration: the budget is used up")
            why = "preempted" if name in preempted else "terminated"
            if why == "preempted":
                self.preemptions += 1
            self.emit(Event("preempted" if why == "preempted" else "lost", f"{name} was {why}; recreating it"))
            # A TERMINATED VM still exists: delete it before re-creating the name.
            _Deleter(self.ex).delete_all([(name, n.spec.zone)])
            self.guard.end(name, self.ex.clock())
            self.ex.store.deleted(n.rid, why=why)
            del self.nodes[name]
        for name in lost:
            index = ranks[name]
            # What the lost VM did not use is what its replacement may spend (BudgetExceeded if too little).
            cap = self.guard.reserve([name], self.ex._schedules(self.config)[:1], self.ex.clock())
            head = self._head()
            head_ip = self.nodes[head].ip if head in self.nodes else None
            old_ip = None
            spec = dataclasses.replace(self.ex.node_specs(self.spec, self.config, cap, stop_at=self.stop_at, master_ip=None,
                                                          launch_id=self.launch_id, install=self.install,
                                                          key=self.key)[index], name=name)
            if index == 0:
                old_ip = self._old_ip(name)  # keep node 0's address: it is everyone's rendezvous point
            try:
                n = self._insert(spec, master_ip=head_ip or old_ip, network_ip=old_ip)
                self._wait_created(n)
            except CAPACITY_ERRORS as e:
                if self._shrink(len(lost), e):
                    return
                self.emit(Event("fallback", f"cannot recreate {name} ({e}): moving the whole cluster"))
                self.fallbacks.append(f"{self.config.label()}: {e}")
                self.teardown()
                self.launch(self.config_index + 1)
                return

    def _shrink(self, n_lost: int, err: Exception) -> bool:
        """No capacity to replace lost nodes: a large-model job resumes on the nodes that are left, with
        a re-computed layout (DCP re-shards the checkpoint), if the deadline still holds there."""
        cfg = self.config
        left = cfg.nodes - n_lost
        if self.spec.job.llm is None or left < 1 or cfg.nodes <= 1:
            return False
        smaller = ClusterConfig(cfg.offering, left, cfg.spot)
        fits, mem = self.spec.job.llm.fits(smaller)
        if not fits:
            self.emit(Event("deadline", f"not resuming on {left} node(s): the layout needs {mem}"))
            return False
        if self.watch is not None:
            ok, why = self.watch.holds(self.ex.clock(), self.watch.last_step, smaller, cfg)
            if not ok:
                self.emit(Event("deadline", f"not resuming on {left} node(s): {why}"))
                return False
        else:
            why = "no deadline to keep"
        from cloudfit.executors.llm_job import label

        lay = label(self.spec.job.llm.layout_for(smaller))
        self._record_switch("fewer-nodes", smaller, f"no capacity to replace {n_lost} node(s) ({err}); "
                                                    f"re-sharded layout {lay} ({mem}); {why}")
        self.emit(Event("shrink", f"resuming on the {left} surviving node(s) with layout {lay} from the checkpoint"))
        self._reshard_in_place(smaller)
        return True

    def _head(self) -> str:
        """The VM of rank 0 (the rendezvous host; the one reporting progress)."""
        return next((name for name, n in self.nodes.items() if n.spec.index == 0), node_name(self.spec.name, 0))

    def _reshard_in_place(self, to: ClusterConfig) -> None:
        """Resume on the surviving VMs themselves: their metadata gets the new ranks, node count and
        startup script (the re-sharded layout), then a reset reruns it. Nothing is deleted, nothing is
        inserted into the zone that just refused capacity; the survivors keep their budget caps."""
        from google.cloud import compute_v1

        c = self.ex.clients
        survivors = sorted(self.nodes.values(), key=lambda n: n.spec.index)
        self.configs.insert(self.config_index + 1, to)
        self.config_index += 1
        self.script = render_startup_script(self.spec, to, self.spec.job.checkpoint_dir or "", install=self.install)
        specs = self.ex.node_specs(self.spec, to, survivors[0].spec.cap_s, stop_at=self.stop_at,
                                   master_ip=survivors[0].ip, launch_id=self.launch_id, install=self.install, key=self.key)
        for n, new in zip(survivors, specs):
            inst = self.ex.retry.call(f"reading {n.spec.name}", c.instances.get, project=c.project, zone=n.spec.zone,
                                      instance=n.spec.name)
            items = {i.key: i.value for i in inst.metadata.items if i.key != "cloudfit-stop"}
            items.update({**new.metadata, "startup-script": self.script})
            md = compute_v1.Metadata(fingerprint=inst.metadata.fingerprint,
                                     items=[compute_v1.Items(key=k, value=v) for k, v in sorted(items.items())])
            self.ex.retry.call(f"re-sharding {n.spec.name}", c.instances.set_metadata, project=c.project,
                               zone=n.spec.zone, instance=n.spec.name, metadata_resource=md)
            op = self.ex.retry.call(f"restarting {n.spec.name}", c.instances.reset, project=c.project,
                                    zone=n.spec.zone, instance=n.spec.name)
            _wait(self.ex, n.spec.zone, op.name, f"restarting {n.spec.name}")
            n.spec = dataclasses.replace(new, name=n.spec.name, cap_s=n.spec.cap_s)
        self.ex.store.update_cluster(self.spec.name, info={"config": to.to_dict(), "zone": to.offering.zone})

    def _old_ip(self, name: str) -> str | None:
        for r in reversed(self.ex.store.resources(self.spec.name)):
            if r.name == name and r.info.get("internal_ip"):
                return r.info["internal_ip"]
        return None

    def request_stop(self) -> None:
        from google.api_core import exceptions as gex
        from google.cloud import compute_v1

        c = self.ex.clients
        for name, n in list(self.nodes.items()):
            try:
                inst = self.ex.retry.call(f"reading {name}", c.instances.get, project=c.project, zone=n.spec.zone,
                                          instance=name)
                items = [i for i in inst.metadata.items if i.key != "cloudfit-stop"]
                items.append(compute_v1.Items(key="cloudfit-stop", value="1"))
                md = compute_v1.Metadata(fingerprint=inst.metadata.fingerprint, items=items)
                self.ex.retry.call(f"asking {name} to stop", c.instances.set_metadata, project=c.project,
                                   zone=n.spec.zone, instance=name, metadata_resource=md)
            except (gex.NotFound, gex.PreconditionFailed):
                continue  # gone, or changed under us: teardown deletes it anyway

    def teardown(self) -> None:
        """Delete every VM this cluster created (and any other VM with its label in its zones)."""
        targets = [(name, n.spec.zone) for name, n in self.nodes.items()]
        store_ok = True
        try:
            for r in self.ex.store.resources(self.spec.name, live_only=True):
                if r.kind == "vm":
                    targets.append((r.name, r.zone))  # (name, zone): a move to another zone reuses names
        except LaunchError:  # the state store broke under us: still delete what this process knows it created
            store_ok = False
        if not targets:
            return
        deleted, gone = _Deleter(self.ex).delete_all(targets)
        now = self.ex.clock()
        for name, _ in targets:
            if self.guard.is_live(name):
                self.guard.end(name, now)
        if store_ok:
            for r in self.ex.store.resources(self.spec.name, live_only=True):
                if (r.name, r.zone) in targets:
                    self.ex.store.deleted(r.id, why="deleted")
        self.nodes.clear()
        if deleted:
            self.emit(Event("deleted", f"deleted {', '.join(sorted(vm for _, vm in deleted))}"))


def _wait(ex: "GcpExecutor", zone: str, op_name: str, what: str, timeout_s: float = 1800.0):
    return wait(ex.clients, ex.retry, zone, op_name, what, timeout_s)
