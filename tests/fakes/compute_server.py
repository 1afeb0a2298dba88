"""A fake Compute Engine REST API on 127.0.0.1 for the real google-cloud-compute client.

    with FakeCompute() as fake:
        client = compute_v1.InstancesClient(transport="rest", credentials=AnonymousCredentials(),
                                            client_options=ClientOptions(api_endpoint=fake.endpoint))

Implements what cloudfit's GCP executor calls — instances insert / get / list (with ``filter``) /
aggregatedList / delete / setMetadata / reset / getGuestAttributes, zoneOperations get / wait / list — with
Compute Engine's shapes: long-running operations that finish after ``op_delay_s``, errors inside
the operation (``ZONE_RESOURCE_POOL_EXHAUSTED``, ``QUOTA_EXCEEDED``), HTTP errors in Google's JSON
error format, spot preemption (the VM goes TERMINATED — or is deleted when its termination action
is DELETE — and a ``compute.instances.preempted`` zone operation appears), and ``max_run_duration``
enforcement.

Faults are injected from the test: ``stockout(zone)`` (inside the operation, or ``sync=True``: the
insert call itself answers HTTP 503 with reason ``ZONE_RESOURCE_POOL_EXHAUSTED``, as Compute Engine
does for GPU VMs), ``quota(zone)`` (operation or HTTP 403), ``not_offered(zone)`` (HTTP 404
``RESOURCE_NOT_FOUND`` for the accelerator type), ``http_errors(429, 2)``, ``preempt(name)``. ``simulate_job_s`` makes the fake play the VMs' startup script too: node 0
reports ``cloudfit/state = completed`` (guest attribute) that long after it starts RUNNING, and
``stopped`` soon after the ``cloudfit-stop`` metadata key is set. ``vms()`` counts what exists.

Run it alone (``python tests/fakes/compute_server.py``) to point a manual ``cloudfit`` at it.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

_BASE = "https://www.googleapis.com/compute/v1"


@dataclass
class _Fault:
    kind: str  # stockout | quota | not-offered | http
    zone: str | None = None
    machine_type: str | None = None
    remaining: int | None = None  # None = forever
    status: int = 0
    method: str | None = None
    path_re: str | None = None
    sync: bool = False  # refuse the insert call itself (HTTP 503 / 403) instead of failing the operation
    after: int = 0  # let this many matching inserts through first (a stockout hitting node 3 of 4)


@dataclass
class _Op:
    body: dict[str, Any]
    done_at: float
    on_done: Any = None  # callable run once when the operation completes


@dataclass
class FakeCompute:
    op_delay_s: float = 0.05
    insert_delay_s: float = 0.0  # the insert *call* itself takes this long (to kill a launcher mid-way)
    simulate_job_s: float | None = None
    stop_reaction_s: float = 0.2
    refuse_with: str | None = None  # the simulated job ends as the startup script reports a rank's exit 2: this line
    instances: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    operations: dict[tuple[str, str, str], _Op] = field(default_factory=dict)
    faults: list[_Fault] = field(default_factory=list)
    requests: list[tuple[str, str, int]] = field(default_factory=list)  # (method, path, status)
    inserted: list[dict[str, Any]] = field(default_factory=list)  # every accepted insert body
    metadata_sets: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (VM, body) of each setMetadata
    guest: dict[tuple[str, str, str], dict[str, str]] = field(default_factory=dict)
    preempt_on_start: set[str] = field(default_factory=set)  # VM names preempted the moment they run (once each)
    #: regions.get answers: region → {quota metric: (limit, usage)}; a region not named here is 404
    region_quotas: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)
    _ids = itertools.count(1000)
    _ips = itertools.count(2)

    def __post_init__(self) -> None:
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._running_since: dict[tuple[str, str, str], float] = {}
        self._stop_seen: dict[tuple[str, str, str], float] = {}

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "FakeCompute":
        fake = self

        class Handler(_Handler):
            pass

        Handler.fake = fake
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeCompute":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "start() the fake first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # ------------------------------------------------------------------ faults and inspection

    def stockout(self, zone: str, machine_type: str | None = None, count: int | None = None, after: int = 0,
                 *, sync: bool = False) -> None:
        """Inserts into ``zone`` fail with ZONE_RESOURCE_POOL_EXHAUSTED (after letting ``after``
        through): inside their operation, or (``sync``) as the insert call's HTTP 503."""
        self.faults.append(_Fault("stockout", zone=zone, machine_type=machine_type, remaining=count, after=after,
                                  sync=sync))

    def not_offered(self, zone: str, count: int | None = None) -> None:
        """Inserts into ``zone`` name an accelerator type the zone does not have: HTTP 404 RESOURCE_NOT_FOUND."""
        self.faults.append(_Fault("not-offered", zone=zone, remaining=count, sync=True))

    def quota(self, zone: str, *, sync: bool = False, count: int | None = None) -> None:
        """Inserts into ``zone`` exceed quota: inside the operation, or (``sync``) as HTTP 403."""
        self.faults.append(_Fault("quota", zone=zone, remaining=count, sync=sync))

    def http_errors(self, status: int, count: int, *, method: str | None = None, path_re: str | None = None) -> None:
        """The next ``count`` matching requests get HTTP ``status`` (429, 503, …)."""
        self.faults.append(_Fault("http", status=status, remaining=count, method=method, path_re=path_re))

    def preempt(self, name: str) -> None:
        """Preempt a RUNNING spot VM now, as Compute Engine does."""
        with self._lock:
            key = self._find(name)
            inst = self.instances[key]
            if inst["status"] != "RUNNING":
                raise AssertionError(f"{name} is {inst['status']}, not RUNNING")
            self._terminate(key, "compute.instances.preempted")

    def shut_down(self, name: str) -> None:
        """The guest powers the VM off (``shutdown -h now``, what the startup script does when its self-delete
        is refused): TERMINATED, whatever the termination action (that applies to preemption and
        max_run_duration only); the VM and its disks stay until deleted."""
        with self._lock:
            key = self._find(name)
            self._running_since.pop(key, None)
            self.instances[key]["status"] = "TERMINATED"

    def vms(self, label: str | None = None, *, statuses: tuple[str, ...] | None = None) -> list[str]:
        """Names of instances that exist (any status unless ``statuses``), optionally with cloudfit-cluster=label."""
        with self._lock:
            self._tick()
            return sorted(i["name"] for i in self.instances.values()
                          if (label is None or i.get("labels", {}).get("cloudfit-cluster") == label)
                          and (statuses is None or i["status"] in statuses))

    def count(self, method: str, pattern: str) -> int:
        """How many requests of ``method`` had a path matching ``pattern`` (regex)."""
        return sum(1 for m, p, _ in self.requests if m == method and re.search(pattern, p))

    def set_guest(self, name: str, key: str, value: str) -> None:
        with self._lock:
            self.guest.setdefault(self._find(name), {})[key] = value

    # ------------------------------------------------------------------ internals

    def _find(self, name: str) -> tuple[str, str, str]:
        for key in self.instances:
            if key[2] == name:
                return key
        raise KeyError(name)

    def _now_iso(self) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S.000-00:00", time.gmtime())

    def _new_op(self, project: str, zone: str, op_type: str, target: str, *, delay: float | None = None,
                error: dict | None = None, on_done=None, target_id: str = "") -> dict[str, Any]:
        name = f"operation-{next(self._ids)}-{op_type.split('.')[-1]}"
        body = {
            "kind": "compute#operation", "id": str(next(self._ids)), "name": name,
            "zone": f"{_BASE}/projects/{project}/zones/{zone}", "operationType": op_type,
            "targetLink": f"{_BASE}/projects/{project}/zones/{zone}/instances/{target}",
            "status": "RUNNING", "progress": 0, "insertTime": self._now_iso(), "startTime": self._now_iso(),
            "selfLink": f"{_BASE}/projects/{project}/zones/{zone}/operations/{name}",
        }
        if target_id:
            body["targetId"] = target_id
        if error:
            body["_pending_error"] = error
        op = _Op(body, time.monotonic() + (self.op_delay_s if delay is None else delay), on_done)
        self.operations[(project, zone, name)] = op
        if op.done_at <= time.monotonic():
            self._finish(op)
        return self._public(body)

    @staticmethod
    def _public(body: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in body.items() if not k.startswith("_")}

    def _finish(self, op: _Op) -> None:
        if op.body["status"] == "DONE":
            return
        op.body.update(status="DONE", progress=100, endTime=self._now_iso())
        err = op.body.pop("_pending_error", None)
        if err:
            op.body["error"] = {"errors": [err]}
            op.body["httpErrorStatusCode"] = 503 if err["code"] == "ZONE_RESOURCE_POOL_EXHAUSTED" else 403
        if op.on_done:
            op.on_done()

    def _terminate(self, key: tuple[str, str, str], op_type: str) -> None:
        """Preemption or max_run_duration: TERMINATED, or deleted when the termination action is DELETE."""
        inst = self.instances[key]
        project, zone, name = key
        self._new_op(project, zone, op_type, name, delay=0, target_id=inst["id"])
        action = inst.get("scheduling", {}).get("instanceTerminationAction", "STOP")
        self._running_since.pop(key, None)
        if action == "DELETE":
            del self.instances[key]
            self.guest.pop(key, None)
            self._stop_seen.pop(key, None)
        else:
            inst["status"] = "TERMINATED"

    def _tick(self) -> None:
        now = time.monotonic()
        for op in list(self.operations.values()):
            if op.body["status"] != "DONE" and op.done_at <= now:
                self._finish(op)
        for key, since in list(self._running_since.items()):
            inst = self.instances.get(key)
            if inst is None:
                continue
            mrd = inst.get("scheduling", {}).get("maxRunDuration")
            if mrd and now - since >= float(mrd.get("seconds", 0)):
                self._terminate(key, "compute.instances.terminateOnMaxRunDuration")
                continue
            if self.simulate_job_s is not None and _meta(inst, "cloudfit-node-rank") == "0":
                g = self.guest.setdefault(key, {})
                elapsed = now - since
                if key in self._stop_seen and now - self._stop_seen[key] >= self.stop_reaction_s:
                    if g.get("cloudfit/state") not in ("completed", "stopped"):
                        g["cloudfit/state"] = "stopped"
                elif g.get("cloudfit/state") not in ("completed", "stopped"):
                    frac = min(1.0, elapsed / max(self.simulate_job_s, 1e-9))
                    m = re.search(r"--steps (\d+)", _meta(inst, "startup-script") or "")
                    total = int(m.group(1)) if m else 100  # what the startup script would train
                    g["cloudfit/progress"] = json.dumps({"step": int(total * frac), "total_steps": total,
                                                         "samples_per_second": 1234.0, "state": "running"})
                    if frac >= 1.0 and self.refuse_with is not None:  # `guest error …; guest state refused`
                        g["cloudfit/error"], g["cloudfit/exit_code"] = self.refuse_with, "2"
                        g["cloudfit/state"] = "refused"
                    elif frac >= 1.0:
                        g["cloudfit/state"] = "completed"

    def _maybe_http_fault(self, method: str, path: str) -> int | None:
        for f in self.faults:
            if f.kind != "http" or f.remaining == 0:
                continue
            if f.method and f.method != method:
                continue
            if f.path_re and not re.search(f.path_re, path):
                continue
            if f.remaining is not None:
                f.remaining -= 1
            return f.status
        return None

    def _insert_fault(self, zone: str, machine_type: str) -> _Fault | None:
        for f in self.faults:
            if f.kind in ("stockout", "quota", "not-offered") and f.zone == zone and f.remaining != 0:
                if f.machine_type and f.machine_type != machine_type:
                    continue
                if f.after > 0:
                    f.after -= 1
                    continue
                if f.remaining is not None:
                    f.remaining -= 1
                return f
        return None

    # ------------------------------------------------------------------ API

    def handle(self, method: str, path: str, query: dict[str, list[str]], body: dict | None) -> tuple[int, dict]:
        with self._lock:
            self._tick()
            status = self._maybe_http_fault(method, path)
            if status:
                reason = {429: "rateLimitExceeded", 503: "backendError"}.get(status, "error")
                return status, _error(status, f"injected HTTP {status}", reason)
            m = re.match(r"^/compute/v1/projects/([^/]+)/(.*)$", path)
            if not m:
                return 404, _error(404, f"unknown path {path}", "notFound")
            project, rest = m.group(1), m.group(2)
            if rest == "aggregated/instances" and method == "GET":
                return self._aggregated(project, query)
            m = re.match(r"^regions/([^/]+)$", rest)
            if m and method == "GET":
                return self._region(project, m.group(1))
            m = re.match(r"^zones/([^/]+)/(instances|operations)(?:/([^/]+))?(?:/([A-Za-z]+))?$", rest)
            if not m:
                return 404, _error(404, f"unknown path {path}", "notFound")
            zone, coll, name, verb = m.groups()
            if coll == "operations":
                return self._operations(project, zone, name, verb, method, query)
            return self._instances(project, zone, name, verb, method, query, body)

    def _region(self, project: str, region: str) -> tuple[int, dict]:
        """regions.get: the region with its quotas (metric, limit, usage), as Compute Engine answers it."""
        if region not in self.region_quotas:
            return 404, _error(404, f"The resource 'projects/{project}/regions/{region}' was not found", "notFound")
        quotas = [{"metric": m, "limit": lim, "usage": use} for m, (lim, use) in self.region_quotas[region].items()]
        return 200, {"kind": "compute#region", "name": region, "status": "UP", "quotas": quotas,
                     "selfLink": f"{self.endpoint}/compute/v1/projects/{project}/regions/{region}"}

    def _instances(self, project, zone, name, verb, method, query, body) -> tuple[int, dict]:
        key = (project, zone, name)
        if name is None and method == "POST":
            return self._insert(project, zone, body or {})
        if name is None and method == "GET":
            items = [i for (p, z, _), i in self.instances.items() if p == project and z == zone]
            items = _filter(items, (query.get("filter") or [""])[0])
            return 200, {"kind": "compute#instanceList", "items": items} if items else {"kind": "compute#instanceList"}
        inst = self.instances.get(key)
        if inst is None:
            return 404, _error(404, f"The resource 'projects/{project}/zones/{zone}/instances/{name}' was not found",
                               "notFound")
        if verb is None and method == "GET":
            return 200, inst
        if verb is None and method == "DELETE":
            inst["status"] = "STOPPING"

            def gone(key=key):
                self.instances.pop(key, None)
                self.guest.pop(key, None)
                self._running_since.pop(key, None)
                self._stop_seen.pop(key, None)  # a new VM of the same name has not been asked to stop

            return 200, self._new_op(project, zone, "delete", name, on_done=gone, target_id=inst["id"])
        if verb == "setMetadata" and method == "POST":
            md = body or {}
            if md.get("fingerprint") != inst["metadata"].get("fingerprint"):
                return 412, _error(412, "Supplied fingerprint does not match current metadata fingerprint.",
                                   "conditionNotMet")
            self.metadata_sets.append((name, json.loads(json.dumps(md))))
            inst["metadata"] = {"kind": "compute#metadata", "items": md.get("items", []),
                                "fingerprint": f"fp-{next(self._ids)}"}
            if _meta(inst, "cloudfit-stop"):
                self._stop_seen.setdefault(key, time.monotonic())
            return 200, self._new_op(project, zone, "setMetadata", name, target_id=inst["id"])
        if verb == "reset" and method == "POST":  # a hard restart: the startup script (the job) runs again

            def restarted(key=key):
                if key in self.instances:
                    self.instances[key]["status"] = "RUNNING"
                    self._running_since[key] = time.monotonic()
                    self.guest.pop(key, None)
                    self._stop_seen.pop(key, None)

            return 200, self._new_op(project, zone, "reset", name, on_done=restarted, target_id=inst["id"])
        if verb == "getGuestAttributes" and method == "GET":
            prefix = (query.get("queryPath") or [""])[0]
            attrs = {k: v for k, v in self.guest.get(key, {}).items() if k.startswith(prefix)}
            if not attrs:
                return 404, _error(404, "The resource 'guestAttributes' was not found", "notFound")
            items = [{"namespace": k.split("/", 1)[0], "key": k.split("/", 1)[1], "value": v} for k, v in attrs.items()]
            return 200, {"kind": "compute#guestAttributes", "queryPath": prefix, "queryValue": {"items": items}}
        return 400, _error(400, f"unsupported {method} {verb}", "badRequest")

    def _insert(self, project: str, zone: str, body: dict) -> tuple[int, dict]:
        if self.insert_delay_s:
            self._lock.release()  # let other requests through while this call "takes time"
            try:
                time.sleep(self.insert_delay_s)
            finally:
                self._lock.acquire()
        name = body.get("name", "")
        if not re.match(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$", name):
            return 400, _error(400, f"Invalid value for field 'resource.name': '{name}'", "invalid")
        key = (project, zone, name)
        if key in self.instances:
            return 409, _error(409, f"The resource 'projects/{project}/zones/{zone}/instances/{name}' already exists",
                               "alreadyExists")
        items = (body.get("metadata") or {}).get("items") or []
        if any(len(i.get("value", "")) > 256 * 1024 for i in items) or sum(
                len(i.get("key", "")) + len(i.get("value", "")) for i in items) > 512 * 1024:
            return 400, _error(400, "Metadata exceeds the size limit (256 KB per value, 512 KB in total)", "invalid")
        for k, v in (body.get("labels") or {}).items():
            if not (re.match(r"^[a-z][a-z0-9_-]{0,62}$", k) and re.match(r"^[a-z0-9_-]{0,63}$", v)):
                return 400, _error(400, f"Invalid value for field 'resource.labels': '{k}={v}'", "invalid")
        mt = body.get("machineType", "").rsplit("/", 1)[-1]
        sched = body.get("scheduling", {})
        mrd = sched.get("maxRunDuration")
        if mrd is not None and not (30 <= int(mrd.get("seconds", 0)) <= 120 * 86400):
            return 400, _error(400, "Invalid value for field 'resource.scheduling.maxRunDuration'", "invalid")
        fault = self._insert_fault(zone, mt)
        if fault is not None and fault.kind == "quota" and fault.sync:
            return 403, _error(403, "Quota 'NVIDIA_T4_GPUS' exceeded.  Limit: 0.0 in region "
                                    f"{zone.rsplit('-', 1)[0]}.", "quotaExceeded")
        if fault is not None and fault.kind == "stockout" and fault.sync:
            # What Compute Engine answers for a GPU VM it cannot place: the call itself fails with 503.
            return 503, _error(503, f"The zone 'projects/{project}/zones/{zone}' does not have enough resources "
                                    "available to fulfill the request.  '(resource type:compute)'.",
                               "ZONE_RESOURCE_POOL_EXHAUSTED")
        if fault is not None and fault.kind == "not-offered":
            acc = ((body.get("guestAccelerators") or [{}])[0].get("acceleratorType")
                   or f"zones/{zone}/acceleratorTypes/nvidia-h100-80gb")
            return 404, _error(404, f"The resource 'projects/{project}/{acc}' was not found", "notFound")
        if fault is not None:
            code = "ZONE_RESOURCE_POOL_EXHAUSTED" if fault.kind == "stockout" else "QUOTA_EXCEEDED"
            msg = (f"The zone 'projects/{project}/zones/{zone}' does not have enough resources available to fulfill "
                   "the request.  Try a different zone, or try again later." if fault.kind == "stockout"
                   else "Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally.")
            return 200, self._new_op(project, zone, "insert", name, error={"code": code, "message": msg})
        used = {ni.get("networkIP") for i in self.instances.values() for ni in i.get("networkInterfaces", [])}
        nics = body.get("networkInterfaces") or [{}]
        want_ip = nics[0].get("networkIP")
        if want_ip and want_ip in used:
            return 400, _error(400, f"IP '{want_ip}' is already being used by another resource.", "badRequest")
        ip = want_ip or next(f"10.128.0.{n}" for n in self._ips if f"10.128.0.{n}" not in used)
        inst = json.loads(json.dumps(body))
        inst.update({
            "kind": "compute#instance", "id": str(next(self._ids)), "status": "PROVISIONING",
            "zone": f"{_BASE}/projects/{project}/zones/{zone}",
            "selfLink": f"{_BASE}/projects/{project}/zones/{zone}/instances/{name}",
            "creationTimestamp": self._now_iso(),
        })
        inst["networkInterfaces"] = [{**nics[0], "networkIP": ip, "name": "nic0"}] + nics[1:]
        md = inst.setdefault("metadata", {})
        md["fingerprint"] = f"fp-{next(self._ids)}"
        self.instances[key] = inst
        self.inserted.append(json.loads(json.dumps(body)))

        def running(key=key):
            if key in self.instances:
                self.instances[key]["status"] = "RUNNING"
                self._running_since[key] = time.monotonic()
                if key[2] in self.preempt_on_start:
                    self.preempt_on_start.discard(key[2])
                    self._terminate(key, "compute.instances.preempted")

        return 200, self._new_op(project, zone, "insert", name, on_done=running, target_id=inst["id"])

    def _aggregated(self, project: str, query) -> tuple[int, dict]:
        flt = (query.get("filter") or [""])[0]
        items: dict[str, Any] = {}
        for (p, z, _), inst in self.instances.items():
            if p == project and _filter([inst], flt):
                items.setdefault(f"zones/{z}", {"instances": []})["instances"].append(inst)
        return 200, {"kind": "compute#instanceAggregatedList", "items": items}

    def _operations(self, project, zone, name, verb, method, query) -> tuple[int, dict]:
        if name is None and method == "GET":
            ops = [self._public(o.body) for (p, z, _), o in self.operations.items() if p == project and z == zone]
            ops = _filter(ops, (query.get("filter") or [""])[0])
            return 200, {"kind": "compute#operationList", "items": ops} if ops else {"kind": "compute#operationList"}
        op = self.operations.get((project, zone, name))
        if op is None:
            return 404, _error(404, f"The resource 'projects/{project}/zones/{zone}/operations/{name}' was not found",
                               "notFound")
        if verb == "wait" and method == "POST":
            deadline = time.monotonic() + 30  # the real wait returns within 2 minutes, done or not
            while op.body["status"] != "DONE" and time.monotonic() < deadline:
                self._lock.release()
                try:
                    time.sleep(min(0.01, max(0.0, op.done_at - time.monotonic())))
                finally:
                    self._lock.acquire()
                self._tick()
            return 200, self._public(op.body)
        if verb is None and method == "GET":
            return 200, self._public(op.body)
        return 400, _error(400, f"unsupported {method} {verb}", "badRequest")


def _meta(inst: dict, key: str) -> str | None:
    for item in inst.get("metadata", {}).get("items", []) or []:
        if item.get("key") == key:
            return item.get("value")
    return None


def _error(code: int, message: str, reason: str) -> dict:
    status = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 409: "ALREADY_EXISTS",
              412: "FAILED_PRECONDITION", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}.get(code, "UNKNOWN")
    return {"error": {"code": code, "message": message, "status": status,
                      "errors": [{"message": message, "domain": "global", "reason": reason}]}}


_CLAUSE = re.compile(r"^\(?\s*([\w.\-]+)\s*(=|!=|eq|ne)\s*\"?([^\")]*)\"?\s*\)?$")


def _filter(items: list[dict], expr: str) -> list[dict]:
    """Compute Engine list filters: ``field = value`` clauses (dotted fields, optional quotes and
    parentheses) joined by AND."""
    expr = expr.strip()
    if not expr:
        return items
    clauses = []
    for part in re.split(r"\s+AND\s+", expr, flags=re.IGNORECASE):
        m = _CLAUSE.match(part.strip())
        if not m:
            raise ValueError(f"fake compute: unsupported filter clause {part!r}")
        clauses.append(m.groups())

    def get(obj: Any, dotted: str) -> Any:
        for k in dotted.split("."):
            obj = obj.get(k) if isinstance(obj, dict) else None
        return obj

    out = []
    for it in items:
        ok = True
        for fld, op, val in clauses:
            v = get(it, fld)
            eq = str(v) == val if v is not None else False
            ok &= eq if op in ("=", "eq") else not eq
        if ok:
            out.append(it)
    return out


class FakeMetadata:
    """The GCE metadata server one VM sees, for running the rendered startup script off GCP:
    ``instance/attributes/KEY`` (GET), ``instance/network-interfaces/0/ip`` (GET) and
    ``instance/guest-attributes/NS/KEY`` (PUT, then readable in ``guest``)."""

    def __init__(self, attributes: dict[str, str], ip: str = "127.0.0.1", paths: dict[str, str] | None = None) -> None:
        self.attributes = dict(attributes)
        self.paths = dict(paths or {})  # other GET paths after /computeMetadata/v1/ (instance/name, a token …)
        self.ip = ip
        self.guest: dict[str, str] = {}
        meta = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _reply(self, code: int, text: str = "") -> None:
                out = text.encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def do_GET(self) -> None:
                if self.headers.get("Metadata-Flavor") != "Google":
                    return self._reply(403, "missing Metadata-Flavor header")
                path = urlparse(self.path).path
                if path.endswith("/instance/network-interfaces/0/ip"):
                    return self._reply(200, meta.ip)
                rel = path.split("/computeMetadata/v1/", 1)[-1]
                if rel in meta.paths:
                    return self._reply(200, meta.paths[rel])
                key = path.rsplit("/instance/attributes/", 1)[-1] if "/instance/attributes/" in path else None
                if key is not None and key in meta.attributes:
                    return self._reply(200, meta.attributes[key])
                return self._reply(404, "not found")

            def do_PUT(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n).decode() if n else ""
                path = urlparse(self.path).path
                if self.headers.get("Metadata-Flavor") != "Google" or "/instance/guest-attributes/" not in path:
                    return self._reply(403, "forbidden")
                meta.guest[path.split("/instance/guest-attributes/", 1)[1]] = body
                return self._reply(200)

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/computeMetadata/v1"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    fake: FakeCompute
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        url = urlparse(self.path)
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        try:
            status, payload = self.fake.handle(self.command, unquote(url.path), parse_qs(url.query), body)
        except Exception as e:  # a bug in the fake must show up as a failing request, not a hang
            status, payload = 500, _error(500, f"fake compute crashed: {type(e).__name__}: {e}", "backendError")
        self.fake.requests.append((self.command, unquote(url.path), status))
        out = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _serve

    def log_message(self, *args) -> None:  # quiet
        pass


if __name__ == "__main__":  # pragma: no cover - manual use
    import argparse

    ap = argparse.ArgumentParser(description="Run the fake Compute Engine API until Ctrl-C.")
    ap.add_argument("--job-seconds", type=float, default=20.0, help="node 0 reports completion this long after RUNNING")
    a = ap.parse_args()
    with FakeCompute(simulate_job_s=a.job_seconds) as f:
        print(f"CLOUDFIT_COMPUTE_ENDPOINT={f.endpoint}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
