"""The state store: write-ahead rows, name reuse, schema guard, spend estimates."""

from __future__ import annotations

import sqlite3

import pytest

from cloudfit.errors import UsageError
from cloudfit.executors import state as st


def test_resource_lifecycle_is_recorded_before_and_after(tmp_path):
    s = st.StateStore(tmp_path / "state.db")
    s.create_cluster("c1", "gcp", 10.0, {"project": "p"})
    rid = s.intend("c1", "vm", "c1-0", zone="z", price_per_hour=3.6, cap_s=100)
    # a second process sees the intent before the VM exists
    other = st.StateStore(tmp_path / "state.db")
    [r] = other.resources("c1", live_only=True)
    assert (r.state, r.created_at) == (st.INTENT, None)
    s.confirm(rid, info={"internal_ip": "10.0.0.2"})
    s.deleting(rid)
    s.deleted(rid, why="preempted")
    [r] = other.resources("c1")
    assert r.state == st.DELETED and not r.live and r.info == {"internal_ip": "10.0.0.2", "ended": "preempted"}
    assert r.intent_at <= r.created_at <= r.deleted_at
    failed = s.intend("c1", "vm", "c1-1", zone="z")
    s.failed(failed, "ZONE_RESOURCE_POOL_EXHAUSTED")
    assert [x.state for x in s.resources("c1")] == [st.DELETED, st.FAILED]


def test_names_are_reused_only_after_the_cluster_ended(tmp_path):
    s = st.StateStore(tmp_path / "state.db")
    s.create_cluster("c1", "local", 1.0, {})
    with pytest.raises(UsageError, match="already exists"):
        s.create_cluster("c1", "local", 1.0, {})
    s.update_cluster("c1", status=st.ENDED, reason="completed", spend_usd=0.5)
    s.create_cluster("c1", "local", 2.0, {})  # the old one is archived, not lost
    names = [c.name for c in s.clusters()]
    assert "c1" in names and any(n.startswith("c1@") for n in names)
    assert s.cluster("c1").budget_usd == 2.0


def test_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "state.db"
    st.StateStore(path)
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    db.commit()
    db.close()
    with pytest.raises(UsageError, match="newer"):
        st.StateStore(path)


def test_spend_estimate_without_a_launcher_is_capped(tmp_path):
    s = st.StateStore(tmp_path / "state.db")
    s.create_cluster("c1", "gcp", 10.0, {})
    rid = s.intend("c1", "vm", "c1-0", zone="z", price_per_hour=36.0, cap_s=100)
    s.confirm(rid)
    [r] = s.resources("c1")
    # still live a day later: billed at most to its cap (+ teardown), never to "now"
    assert st.estimate_spend([r], now=r.intent_at + 86400, teardown_s=20) == pytest.approx(1.2, abs=0.01)
    assert st.estimate_spend([r], now=r.intent_at + 10) == pytest.approx(0.6, abs=0.01)  # 60 s minimum


def _corrupt_one_page(path, page: int = 3) -> None:
    """Overwrite one page of the database file with garbage (a bad sector, a torn copy)."""
    data = bytearray(path.read_bytes())
    size = int.from_bytes(data[16:18], "big") or 65536
    assert len(data) > (page + 1) * size, "the database is too small to corrupt page %d" % page
    data[page * size:(page + 1) * size] = b"\xde\xad\xbe\xef" * (size // 4)
    path.write_bytes(bytes(data))


def _populated(tmp_path):
    path = tmp_path / "state.db"
    s = st.StateStore(path)
    s.create_cluster("c1", "gcp", 10.0, {"project": "p", "launch_id": "abc"})
    for i in range(300):
        s.event("c1", "progress", "x" * 200)
    with sqlite3.connect(path) as db:  # fold the WAL into the file, as a quiet store would be
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


@pytest.mark.parametrize("damage", ["bad-page", "not-a-database"])
def test_a_corrupt_store_is_moved_aside_and_reported_in_one_line(tmp_path, damage):
    path = _populated(tmp_path)
    if damage == "bad-page":
        _corrupt_one_page(path)
    else:
        path.write_bytes(b"this is not sqlite" * 100)
    s = st.StateStore(path)
    assert s.recovered and "was corrupt" in s.recovered and "\n" not in s.recovered
    assert s.clusters() == []  # a fresh, working store
    s.create_cluster("c2", "local", 1.0, {})
    assert [c.name for c in st.StateStore(path).clusters()] == ["c2"]
    assert st.StateStore(path).recovered is None  # reported once
    [aside] = [p for p in tmp_path.iterdir() if ".corrupt-" in p.name and not p.name.endswith(("-wal", "-shm"))]
    assert aside.stat().st_size > 0  # kept for inspection, not deleted


_HOLDER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
if sys.argv[2] == "exclusive":
    db.execute("PRAGMA locking_mode=EXCLUSIVE")
db.execute("BEGIN EXCLUSIVE")
db.execute("INSERT INTO events (cluster, at, kind, message) VALUES ('x', 0, 'k', 'm')")
print("held", flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("mode", ["writer", "exclusive"])
def test_status_answers_at_once_while_another_process_holds_the_store(tmp_path, mode):
    """Issue 25: `cloudfit status` waited 30 s and failed while another process held the store."""
    import subprocess
    import sys
    import time

    from tests.conftest import run_cloudfit

    home = tmp_path / "home"
    st.StateStore(home / "state.db").create_cluster("held", "local", 1.0, {})
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(home / "state.db"), mode], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        r = run_cloudfit("status", env={"CLOUDFIT_HOME": str(home)}, timeout=60)
        took = time.monotonic() - t0
    finally:
        holder.kill()
        holder.wait()
    assert took < 20, took  # the old store waited its 30 s busy timeout
    if mode == "writer":  # WAL: a reader never waits for a writer
        assert r.returncode == 0 and "held" in r.stdout, r.stderr
    else:  # nothing can be read: one line naming who holds it
        assert r.returncode != 0 and "Traceback" not in r.stderr
        [line] = r.stderr.strip().splitlines()
        assert "locked by pid" in line and str(holder.pid) in line and "python" in line


def test_a_later_status_writes_the_spend_of_a_cluster_whose_launcher_is_gone(tmp_path):
    import time

    from tests.conftest import run_cloudfit

    home = tmp_path / "home"
    s = st.StateStore(home / "state.db")
    s.create_cluster("gone", "local", 5.0, {}, launcher_pid=None)
    rid = s.intend("gone", "process", "gone", zone="localhost", price_per_hour=36.0, cap_s=600)
    s.confirm(rid, info={"pid": 1})
    s.deleted(rid, why="exited", at=time.time())
    with s._tx() as db:  # it ran 100 s (launcher killed before it wrote any spend)
        db.execute("UPDATE resources SET intent_at=intent_at-100 WHERE id=?", (rid,))
    assert s.cluster("gone").spend_usd == 0.0
    r = run_cloudfit("status", "--json", env={"CLOUDFIT_HOME": str(home)})
    assert r.returncode == 0, r.stderr
    assert s.cluster("gone").spend_usd == pytest.approx(1.0, rel=0.01)  # 100 s at $36/h, kept for the relaunch
