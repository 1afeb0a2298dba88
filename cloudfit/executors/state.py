"""The state store: every cluster and every billed resource, in SQLite under ``$CLOUDFIT_HOME``.

Write-ahead: a resource row is written as an ``intent`` *before* the call that creates it, then
``created`` once the cloud confirms, ``deleting`` before the delete call and ``deleted`` after. A
launcher killed at any instant therefore leaves a row for every VM that might exist, and
``cloudfit down`` (a new process) finds it. Rows never hold credentials: only names, zones,
prices, caps and process ids.

One file (``state.db``) in WAL mode; every write is its own short transaction, so several
processes (a launcher, ``status``, ``down``) can use it at once.

A corrupt database (a bad page, a truncated or foreign file) is detected when the store is opened
(``PRAGMA quick_check``), moved aside with its WAL files (``state.db.corrupt-<time>``), and replaced
by an empty store; ``StateStore.recovered`` holds the one line the CLI shows. Clusters it held are
then found by label (``cloudfit down NAME --backend gcp --all-with-label``).
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from cloudfit.errors import LaunchError, UsageError

SCHEMA_VERSION = 1
READ_BUSY_S = 3.0  # a read waits at most this long for a lock held by another process

#: Resource states, in lifecycle order. ``failed`` = the create call was refused (nothing billed).
INTENT, CREATED, DELETING, DELETED, FAILED = "intent", "created", "deleting", "deleted", "failed"
LIVE_STATES = (INTENT, CREATED, DELETING)

#: Cluster states.
LAUNCHING, RUNNING, STOPPING, ENDED = "launching", "running", "stopping", "ended"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS clusters (
    name TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    budget_usd REAL NOT NULL,
    spend_usd REAL NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    ended_at REAL,
    launcher_pid INTEGER,
    launcher_started REAL,
    info TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS resources (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    cluster TEXT NOT NULL REFERENCES clusters(name),
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    zone TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL,
    price_per_hour REAL NOT NULL DEFAULT 0,
    cap_s REAL,
    intent_at REAL NOT NULL,
    created_at REAL,
    deleted_at REAL,
    info TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS resources_cluster ON resources(cluster);
CREATE TABLE IF NOT EXISTS keys (scope TEXT PRIMARY KEY, key TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    cluster TEXT NOT NULL,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    message TEXT NOT NULL
);
"""


@dataclass(frozen=True)
class Resource:
    id: int
    cluster: str
    kind: str  # "vm" | "process"
    name: str
    zone: str
    state: str
    price_per_hour: float
    cap_s: float | None
    intent_at: float
    created_at: float | None
    deleted_at: float | None
    info: Mapping[str, Any]

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES


@dataclass(frozen=True)
class ClusterRecord:
    name: str
    backend: str
    status: str
    reason: str | None
    budget_usd: float
    spend_usd: float
    created_at: float
    updated_at: float
    ended_at: float | None
    launcher_pid: int | None
    launcher_started: float | None
    info: Mapping[str, Any]

    @property
    def ended(self) -> bool:
        return self.status == ENDED


def default_path() -> Path:
    from cloudfit.resources import home

    return home() / "state.db"


class StateStore:
    """Thin, process-safe access to ``state.db``. Open one per process; methods are short transactions."""

    def __init__(self, path: str | Path | None = None, *, busy_s: float = 30.0) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.busy_s = busy_s  # how long a write waits for another process's write
        self.recovered: str | None = None  # one line when a corrupt store was moved aside on opening
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise LaunchError(f"cannot create the state folder {self.path.parent} ({e.strerror or e})") from None
        try:
            self._open()
        except sqlite3.DatabaseError as e:
            if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
                raise LaunchError(self._locked_line()) from None
            moved = self._move_aside()
            self.recovered = (f"the state store {self.path} was corrupt ({e}); moved it to {moved.name} and started "
                              "an empty one (clusters it held: `cloudfit down NAME --backend gcp --all-with-label`)")
            try:
                self._open()
            except sqlite3.DatabaseError as e2:
                raise LaunchError(f"{self.path}: cannot create a new state store ({e2})") from None

    def _move_aside(self) -> Path:
        target = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
        for suffix in ("", "-wal", "-shm"):  # the WAL belongs to the old file: never replay it into a new one
            src = Path(str(self.path) + suffix)
            if src.exists():
                os.replace(src, Path(str(target) + suffix))
        return target

    def _locked_line(self) -> str:
        return f"{self.path}: the state store is locked by {lock_holder(self.path)}; try again when it is done"

    def _open(self) -> None:
        new = not self.path.exists()
        db = self._raw_connect(min(self.busy_s, READ_BUSY_S))
        try:
            if new:
                try:
                    os.chmod(self.path, 0o600)  # it holds checkpoint keys: the user's alone
                except OSError:
                    pass
            db.executescript(_SCHEMA)  # executescript commits on its own: keep it out of _tx
            bad = [r[0] for r in db.execute("PRAGMA quick_check").fetchall() if r[0] != "ok"]
            if bad:
                raise sqlite3.DatabaseError(f"integrity check failed: {bad[0]}")
            row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif not str(row[0]).isdigit():
                raise sqlite3.DatabaseError(f"schema_version {row[0]!r} is not a number")
            elif int(row[0]) > SCHEMA_VERSION:
                raise UsageError(
                    f"{self.path}: state schema_version {row[0]} is newer than this cloudfit reads "
                    f"({SCHEMA_VERSION}); upgrade cloudfit"
                )
        finally:
            db.close()

    def _raw_connect(self, timeout: float | None = None) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=self.busy_s if timeout is None else timeout, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")  # an intent row must survive a kill -9 right after
        except BaseException:
            db.close()
            raise
        return db

    def _connect(self, timeout: float | None = None) -> sqlite3.Connection:
        try:
            return self._raw_connect(timeout)
        except sqlite3.OperationalError as e:
            if "locked" in str(e):
                raise LaunchError(self._locked_line()) from None
            raise LaunchError(f"{self.path}: cannot open the state store ({e})") from None
        except sqlite3.Error as e:
            raise LaunchError(f"{self.path}: cannot open the state store ({e})") from None

    @contextmanager
    def _tx(self, write: bool = True, wait_s: float | None = None) -> Iterator[sqlite3.Connection]:
        """One transaction. Reads are deferred (in WAL mode a reader never waits for a writer) and wait
        at most ``READ_BUSY_S`` for a lock (another process holding the file exclusively): then one line
        naming the holder, not a 30 s hang."""
        db = self._connect(wait_s if wait_s is not None else None if write else min(self.busy_s, READ_BUSY_S))
        try:
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            yield db
            db.execute("COMMIT")
        except sqlite3.DatabaseError as e:  # corrupted under us (after the check on opening): one line, no traceback
            if db.in_transaction:
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
                raise LaunchError(self._locked_line()) from None
            raise LaunchError(f"{self.path}: the state store failed ({e}); if it is corrupt, the next cloudfit "
                              "command moves it aside") from None
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        finally:
            db.close()

    # ------------------------------------------------------------------ clusters

    def create_cluster(self, name: str, backend: str, budget_usd: float, info: Mapping[str, Any],
                       *, launcher_pid: int | None = None, launcher_started: float | None = None) -> ClusterRecord:
        """Record a new cluster. Re-using the name of an ended cluster replaces it (its rows are
        kept under a renamed cluster so history is not lost); a live one is an error."""
        now = time.time()
        with self._tx() as db:
            old = db.execute("SELECT status FROM clusters WHERE name=?", (name,)).fetchone()
            if old is not None:
                live = db.execute(
                    f"SELECT COUNT(*) FROM resources WHERE cluster=? AND state IN ({_qs(LIVE_STATES)})",
                    (name, *LIVE_STATES),
                ).fetchone()[0]
                if old[0] != ENDED or live:
                    raise UsageError(
                        f"a cluster named {name!r} already exists ({old[0]}); pick another --name or run "
                        f"`cloudfit down {name}` first"
                    )
                archived = f"{name}@{int(now)}"
                db.execute("UPDATE clusters SET name=? WHERE name=?", (archived, name))
                db.execute("UPDATE resources SET cluster=? WHERE cluster=?", (archived, name))
                db.execute("UPDATE events SET cluster=? WHERE cluster=?", (archived, name))
            db.execute(
                "INSERT INTO clusters (name, backend, status, budget_usd, created_at, updated_at, launcher_pid, "
                "launcher_started, info) VALUES (?,?,?,?,?,?,?,?,?)",
                (name, backend, LAUNCHING, float(budget_usd), now, now, launcher_pid, launcher_started, _dump(info)),
            )
        return self.cluster(name)

    def cluster(self, name: str) -> ClusterRecord:
        rec = self.find_cluster(name)
        if rec is None:
            raise UsageError(f"no cluster named {name!r} in {self.path}")
        return rec

    def find_cluster(self, name: str) -> ClusterRecord | None:
        with self._tx(write=False) as db:
            row = db.execute(f"SELECT {_CLUSTER_COLS} FROM clusters WHERE name=?", (name,)).fetchone()
        return None if row is None else _cluster(row)

    def launch_ids(self, name: str) -> set[str]:
        """Launch identities recorded for clusters named ``name`` (this one and earlier ones archived
        as ``name@time``): what ``down NAME`` may delete."""
        with self._tx(write=False) as db:
            rows = db.execute("SELECT info FROM clusters WHERE name=? OR name LIKE ?",
                              (name, name + "@%")).fetchall()
        out = set()
        for (info,) in rows:
            try:
                lid = json.loads(info).get("launch_id")
            except ValueError:
                continue
            if isinstance(lid, str) and lid:
                out.add(lid)
        return out

    def clusters(self) -> list[ClusterRecord]:
        with self._tx(write=False) as db:
            rows = db.execute(f"SELECT {_CLUSTER_COLS} FROM clusters ORDER BY created_at").fetchall()
        return [_cluster(r) for r in rows]

    def update_cluster(self, name: str, *, status: str | None = None, reason: str | None = None,
                       spend_usd: float | None = None, info: Mapping[str, Any] | None = None) -> None:
        """Update fields; ``info`` is merged into the stored info."""
        now = time.time()
        with self._tx() as db:
            row = db.execute("SELECT info FROM clusters WHERE name=?", (name,)).fetchone()
            if row is None:
                raise UsageError(f"no cluster named {name!r}")
            sets, args = ["updated_at=?"], [now]
            if status is not None:
                sets.append("status=?")
                args.append(status)
                if status == ENDED:
                    sets.append("ended_at=?")
                    args.append(now)
            if reason is not None:
                sets.append("reason=?")
                args.append(reason)
            if spend_usd is not None:
                sets.append("spend_usd=?")
                args.append(float(spend_usd))
            if info:
                merged = {**json.loads(row[0]), **info}
                sets.append("info=?")
                args.append(_dump(merged))
            db.execute(f"UPDATE clusters SET {', '.join(sets)} WHERE name=?", (*args, name))

    # ------------------------------------------------------------------ resources

    def intend(self, cluster: str, kind: str, name: str, *, zone: str = "", price_per_hour: float = 0.0,
               cap_s: float | None = None, info: Mapping[str, Any] | None = None) -> int:
        """Write-ahead row for a resource about to be created. Returns its id."""
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO resources (cluster, kind, name, zone, state, price_per_hour, cap_s, intent_at, info) "
                "VALUES (?,?,?,?,?,?,?,?,?)",
                (cluster, kind, name, zone, INTENT, float(price_per_hour), cap_s, time.time(), _dump(info or {})),
            )
            return int(cur.lastrowid)

    def _set_state(self, rid: int, state: str, *, stamp: str | None = None, at: float | None = None,
                   info: Mapping[str, Any] | None = None) -> None:
        with self._tx() as db:
            row = db.execute("SELECT info FROM resources WHERE id=?", (rid,)).fetchone()
            if row is None:
                raise KeyError(rid)
            sets, args = ["state=?"], [state]
            if stamp:
                sets.append(f"{stamp}=?")
                args.append(time.time() if at is None else at)
            if info:
                sets.append("info=?")
                args.append(_dump({**json.loads(row[0]), **info}))
            db.execute(f"UPDATE resources SET {', '.join(sets)} WHERE id=?", (*args, rid))

    def confirm(self, rid: int, info: Mapping[str, Any] | None = None) -> None:
        """The resource exists (the create call succeeded)."""
        self._set_state(rid, CREATED, stamp="created_at", info=info)

    def failed(self, rid: int, why: str) -> None:
        """The create call was refused: nothing exists, nothing is billed."""
        self._set_state(rid, FAILED, stamp="deleted_at", info={"error": why})

    def deleting(self, rid: int) -> None:
        self._set_state(rid, DELETING)

    def deleted(self, rid: int, *, why: str = "deleted", at: float | None = None) -> None:
        """The resource is gone (deleted by us, preempted, expired, or already absent)."""
        self._set_state(rid, DELETED, stamp="deleted_at", at=at, info={"ended": why})

    def resources(self, cluster: str, *, live_only: bool = False) -> list[Resource]:
        q = f"SELECT {_RES_COLS} FROM resources WHERE cluster=?"
        args: tuple = (cluster,)
        if live_only:
            q += f" AND state IN ({_qs(LIVE_STATES)})"
            args += LIVE_STATES
        with self._tx(write=False) as db:
            rows = db.execute(q + " ORDER BY id", args).fetchall()
        return [_resource(r) for r in rows]

    # ------------------------------------------------------------------ spend per plan, checkpoint keys

    def plan_spend(self, plan_id: str | None, *, min_billed_s: float = 0.0, teardown_s: float = 0.0,
                   now: float | None = None) -> tuple[float, list[str]]:
        """``(USD, cluster names)`` every earlier launch of the plan ``plan_id`` spent — or, for one whose
        resources may still exist (launcher killed, not brought down), may still spend: each live
        resource billed to its cap. A relaunch of the same plan starts its guard from what is left."""
        if not plan_id:
            return 0.0, []
        total, names = 0.0, []
        for rec in self.clusters():  # archived launches (name@time) too
            if rec.info.get("plan_id") != plan_id:
                continue
            res = self.resources(rec.name)
            live = [r for r in res if r.live]
            by_life = estimate_spend(res, now=now if not live else math.inf, min_billed_s=min_billed_s,
                                     teardown_s=teardown_s)
            total += max(rec.spend_usd, by_life) if res else rec.spend_usd
            names.append(rec.name)
        return total, names

    def refresh_spend(self, name: str, *, min_billed_s: float = 0.0, teardown_s: float = 0.0,
                      wait_s: float | None = None) -> float:
        """Spend of ``name`` by resource lifetime (start to stop, or to now while a resource may still
        exist, never past its cap), written to the cluster row and returned (``down``, ``status``).
        ``wait_s``: wait at most this long to write it (``status`` must answer: a store another process
        is writing keeps its older figure, the answer is still the fresh one)."""
        spend = estimate_spend(self.resources(name), min_billed_s=min_billed_s, teardown_s=teardown_s)
        try:
            with self._tx(wait_s=wait_s) as db:
                db.execute("UPDATE clusters SET spend_usd=?, updated_at=? WHERE name=?", (spend, time.time(), name))
        except LaunchError:
            if wait_s is None:
                raise
        return spend

    def checkpoint_key(self, scope: str) -> str:
        """The HMAC key (64 hex characters) that signs the checkpoints of ``scope`` (a plan, else a
        cluster): drawn once, kept here — never in the bucket, the logs or the plan."""
        import secrets

        with self._tx() as db:
            row = db.execute("SELECT key FROM keys WHERE scope=?", (scope,)).fetchone()
            if row is not None:
                return str(row[0])
            key = secrets.token_hex(32)
            db.execute("INSERT INTO keys (scope, key, created_at) VALUES (?,?,?)", (scope, key, time.time()))
            return key

    # ------------------------------------------------------------------ events

    def event(self, cluster: str, kind: str, message: str) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO events (cluster, at, kind, message) VALUES (?,?,?,?)",
                       (cluster, time.time(), kind, message))

    def events(self, cluster: str, limit: int = 50) -> list[tuple[float, str, str]]:
        with self._tx(write=False) as db:
            rows = db.execute("SELECT at, kind, message FROM events WHERE cluster=? ORDER BY id DESC LIMIT ?",
                              (cluster, limit)).fetchall()
        return [tuple(r) for r in reversed(rows)]  # type: ignore[misc]


class SpendRecorder:
    """Writes a running cluster's spend and progress to the store at most every ``every_s`` seconds,
    so ``cloudfit status`` in another process sees them."""

    def __init__(self, store: StateStore, name: str, every_s: float = 5.0) -> None:
        self.store, self.name, self.every_s, self.last = store, name, every_s, -float("inf")

    def __call__(self, spend_usd: float, poll: Any) -> None:
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            self.store.update_cluster(self.name, spend_usd=spend_usd, info={"progress": dict(poll.progress)})


# ---------------------------------------------------------------------- helpers

def _qs(items: tuple) -> str:
    return ",".join("?" * len(items))


def _dump(obj: Mapping[str, Any]) -> str:
    return json.dumps(dict(obj), sort_keys=True, allow_nan=False)


_CLUSTER_COLS = ("name, backend, status, reason, budget_usd, spend_usd, created_at, updated_at, ended_at, "
                 "launcher_pid, launcher_started, info")
_RES_COLS = ("id, cluster, kind, name, zone, state, price_per_hour, cap_s, intent_at, created_at, deleted_at, info")


def _cluster(r: tuple) -> ClusterRecord:
    return ClusterRecord(*r[:11], info=json.loads(r[11]))


def _resource(r: tuple) -> Resource:
    return Resource(*r[:11], info=json.loads(r[11]))


def estimate_spend(resources: list[Resource], now: float | None = None, *, min_billed_s: float = 60.0,
                   teardown_s: float = 0.0) -> float:
    """Upper-bound spend from state alone (used when the launcher is gone): each VM billed from its
    intent to its deletion — or, while it may still exist, to now, but never past its cap + teardown."""
    now = time.time() if now is None else now
    total = 0.0
    for r in resources:
        if r.state == FAILED:
            continue
        end = r.deleted_at if r.deleted_at is not None else now
        if r.deleted_at is None and r.cap_s is not None and r.kind == "vm":  # the cloud ends a VM at its cap
            end = min(end, r.intent_at + r.cap_s + teardown_s)
        if not math.isfinite(end):  # no cap and still there: count it to now
            end = time.time()
        billed = max(end - r.intent_at, min_billed_s if r.kind == "vm" else 0.0)
        total += r.price_per_hour * billed / 3600.0
    return total


def lock_holder(path: Path) -> str:
    """Who has ``path`` (or its WAL files) open, for the "locked" line: ``pid N (command)`` of each other
    process of this user, or ``another process`` when none can be seen."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency
        return "another process"
    names = {str(Path(str(path) + sfx).resolve()) for sfx in ("", "-wal", "-shm", "-journal")}
    me, out = os.getpid(), []
    for p in psutil.process_iter(["pid"]):
        if p.pid == me:
            continue
        try:
            if any(f.path in names for f in p.open_files()):
                cmd = " ".join(p.cmdline())[:120] or p.name()
                out.append(f"pid {p.pid} ({cmd})")
        except (psutil.Error, OSError):
            continue
    return ", ".join(out[:3]) if out else "another process"
