"""`cloudfit launch / status / down` from the command line: bad input, dry runs, a killed launcher, secrets."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cloudfit.executors.state import StateStore
from cloudfit.types import ClusterConfig
from tests.conftest import run_cloudfit
from tests.executors.conftest import PROJECT
from tests.executors.plans import make_plan, offering, write_plan


def t4(zone="us-central1-a", nodes=2, spot=True):
    return ClusterConfig(offering(zone, price=None), nodes, spot)  # the catalog's row: launch re-prices plans


@pytest.fixture
def plan(tmp_path):
    return write_plan(tmp_path / "plan.json", [t4(), t4("us-central1-b"), t4("us-east1-c", 1, False)], budget_usd=30)


def _nothing_created():
    assert StateStore().clusters() == []


def _gcp_args(fake, *extra):
    return ["--backend", "gcp", "--project", PROJECT, "--compute-endpoint", fake.endpoint, *extra]


# ------------------------------------------------------------------------------ bad input

@pytest.mark.parametrize("content, message", [
    (None, "no such plan file"),
    ("{not json", "corrupt plan"),
    (json.dumps({"schema_version": 99}), "schema_version 99 is not supported"),
    (json.dumps({"schema_version": 1, "workload": {"model": "mlp", "samples": 1}}), "missing field 'chosen'"),
])
def test_bad_plan_files_exit_2_and_create_nothing(cli, tmp_path, content, message):
    path = tmp_path / "plan.json"
    if content is not None:
        path.write_text(content)
    r = cli("launch", str(path), "--yes")
    assert r.exit_code == 2 and message in r.output
    assert "Traceback" not in r.output
    _nothing_created()


def test_unknown_backend_exits_2(cli, plan):
    r = cli("launch", str(plan), "--backend", "aws")
    assert r.exit_code == 2 and "unknown backend 'aws'" in r.output
    _nothing_created()


@pytest.mark.parametrize("backend", ["local", "gcp"])
def test_budget_below_one_interval_exits_2_and_creates_nothing(cli, fake, plan, backend):
    args = _gcp_args(fake, "--checkpoint-dir", "gs://ckpt-bucket/x") if backend == "gcp" else []
    r = cli("launch", str(plan), "--budget", "0.0001", "--yes", *args)
    assert r.exit_code == 2 and "below one guard interval" in r.output
    _nothing_created()
    assert fake.requests == [] and fake.vms() == []


def test_gcp_launch_needs_confirmation_or_yes(cli, fake, plan):
    r = cli("launch", str(plan), *_gcp_args(fake, "--checkpoint-dir", "gs://ckpt-bucket/x"))
    assert r.exit_code == 2 and "pass --yes" in r.output
    _nothing_created()
    assert fake.requests == []


def test_gcp_launch_needs_a_bucket(cli, fake, plan):
    r = cli("launch", str(plan), "--yes", *_gcp_args(fake))
    assert r.exit_code == 2 and "gs://BUCKET/PATH" in r.output
    _nothing_created()
    assert fake.requests == []


def test_a_model_outside_the_zoo_needs_a_command(cli, tmp_path):
    p = write_plan(tmp_path / "p.json", [t4()], model="my-model")
    r = cli("launch", str(p))
    assert r.exit_code == 2 and "give your training command after --" in r.output
    _nothing_created()


def test_status_and_down_of_unknown_clusters_exit_2(cli):
    assert cli("status", "nope").exit_code == 2
    assert cli("down", "nope", "--yes").exit_code == 2
    r = cli("down", "nope")
    assert r.exit_code == 2 and "--yes" in r.output


# ------------------------------------------------------------------------------ dry runs

def test_gcp_dry_run_prints_the_exact_instances_and_creates_nothing(cli, fake, plan):
    r = cli("launch", str(plan), "--dry-run", "--name", "dry", *_gcp_args(fake))
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    for piece in ("dry-0:", "dry-1:", "zone us-central1-a", "machine type n1-highmem-8", "nvidia-tesla-t4", "SPOT",
                  "max_run_duration", "then DELETE", "labels cloudfit-cluster=dry, cloudfit-node=0",
                  "deeplearning-platform-release", "cost cap $30.00", "2 fallback config(s)",
                  "install: the VMs install cloudfit", "from a wheel of this install", "cloudfit-launch=new-uuid-at-launch"):
        assert piece in out, piece
    assert fake.requests == [] and not (Path(os.environ["CLOUDFIT_HOME"]) / "state.db").exists()
    j = cli("launch", str(plan), "--dry-run", "--json", "--name", "dry", *_gcp_args(fake))
    pv = json.loads(j.output)["preview"]
    assert [n["name"] for n in pv["nodes"]] == ["dry-0", "dry-1"] and pv["cost_cap_usd"] <= 30
    assert "cloudfit.runtime.torchrun" in pv["startup_script"] and "instance metadata" in pv["install"]


def _library_preview(plan_path, backend, fake=None, **options):
    """What a notebook gets from ``cloudfit.prepare_launch`` for the plan file (as JSON, like ``--json``)."""
    import cloudfit
    from cloudfit.executors import get_executor
    from cloudfit.plan.io import reprice
    from cloudfit.types import to_jsonable

    plan, _ = reprice(cloudfit.load_plan(plan_path))
    ex = (get_executor("gcp", project=PROJECT, endpoint=fake.endpoint) if backend == "gcp"
          else get_executor("local", max_ranks=2))
    return json.loads(json.dumps(to_jsonable(cloudfit.prepare_launch(plan, ex, **options).preview())))


def test_a_notebook_launches_exactly_what_the_cli_launches(cli, fake, plan, tmp_path):
    """One entry, ``cloudfit.launch(plan, executor)``: the CLI only parses, confirms and renders."""
    for backend, args in (("gcp", _gcp_args(fake)), ("local", ["--ranks", "2"])):
        r = cli("launch", str(plan), "--dry-run", "--json", "--name", "same", "--steps", "40", *args)
        assert r.exit_code == 0, r.output
        cli_pv = json.loads(r.output)["preview"]
        assert cli_pv == _library_preview(plan, backend, fake, name="same", steps=40)
        assert cli_pv != _library_preview(plan, backend, fake, name="same", steps=41)  # the comparison can fail
    llm = tmp_path / "llm.json"
    r = run_cloudfit("recommend", "--model", "llama3-8b", "--tokens", "1e11", "--deadline", "7d", "--accelerators",
                     "H100", "--out", str(llm), cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    for backend, args in (("gcp", _gcp_args(fake, "--checkpoint-dir", "gs://ckpt-bucket/x")), ("local", ["--ranks", "2"])):
        r = cli("launch", str(llm), "--dry-run", "--json", "--name", "same", *args)
        assert r.exit_code == 0, r.output
        cli_pv = json.loads(r.output)["preview"]
        lib = _library_preview(llm, backend, fake, name="same",
                               checkpoint_dir="gs://ckpt-bucket/x" if backend == "gcp" else None)
        assert cli_pv == lib
        assert any("rehearsing the plan's layout" in n if backend == "local" else "deadline kept at run time" in n
                   for n in lib["notes"]), lib["notes"]


def test_budget_form_recommends_with_objective_time(cli, monkeypatch, fake):
    import cloudfit.plan

    seen = {}

    def fake_recommend(workload, **kw):
        seen["w"] = workload
        return make_plan([t4()], model="mlp", budget_usd=workload.budget_usd)

    monkeypatch.setattr(cloudfit.plan, "recommend", fake_recommend)
    r = cli("launch", "--model", "resnet50", "--epochs", "90", "--dataset-size", "1281167", "--budget", "200",
            "--dry-run", *_gcp_args(fake))
    assert r.exit_code == 0, r.output
    w = seen["w"]
    assert (w.model, w.objective, w.budget_usd, w.samples) == ("resnet50", "time", 200.0, 90 * 1281167)
    assert "Recommended under $200.00" in r.output
    assert cli("launch", "--model", "resnet50", "--epochs", "1", "--dataset-size", "10").exit_code == 2  # no budget


def test_budget_form_with_the_real_recommender_stays_within_the_budget(cli, fake):
    # no mock: recommend under the budget (objective time), then preview the winner on GCP
    r = cli("launch", "--model", "resnet50", "--epochs", "90", "--dataset-size", "1281167", "--budget", "200",
            "--dry-run", "--json", *_gcp_args(fake))
    assert r.exit_code == 0, r.output
    pv = json.loads(r.output)["preview"]
    assert 0 < pv["cost_cap_usd"] <= 200 and len(pv["nodes"]) >= 1
    assert fake.requests == []


# ------------------------------------------------------------------------------ real runs through the CLI

def test_gcp_launch_status_down_round_trip(cli, fake, plan):
    r = cli("launch", str(plan), "--yes", "--name", "rt", "--steps", "40", "--check-interval", "0.1",
            *_gcp_args(fake, "--checkpoint-dir", "gs://ckpt-bucket/rt"))
    assert r.exit_code == 0, r.output
    assert "rt: completed" in r.output
    s = json.loads(cli("status", "rt", "--json").output)
    assert s["status"] == "ended" and s["reason"] == "completed" and 0 < s["spend_usd"] <= 30
    assert {x["name"] for x in s["resources"]} == {"rt-0", "rt-1"}
    listing = json.loads(cli("status", "--json").output)["clusters"]
    assert [c["name"] for c in listing] == ["rt"]
    d = cli("down", "rt", "--yes", *_gcp_args(fake)[2:])
    assert d.exit_code == 0 and fake.vms() == []
    # an ended cluster that down has cleared leaves the status list; --all and `status rt` still show it
    assert json.loads(cli("status", "--json").output)["clusters"] == []
    assert [c["name"] for c in json.loads(cli("status", "--all", "--json").output)["clusters"]] == ["rt"]
    assert json.loads(cli("status", "rt", "--json").output)["status"] == "ended"


def test_kill_9_mid_creation_then_down_from_a_new_process_leaves_no_vm(fake, plan, tmp_path):
    fake.op_delay_s = 0.4  # every insert operation takes a while: the launcher dies waiting
    p4 = write_plan(tmp_path / "p4.json", [t4(nodes=4)], budget_usd=30)
    env = {**os.environ}
    launcher = subprocess.Popen(
        [sys.executable, "-m", "cloudfit", "launch", str(p4), "--yes", "--name", "k9", "--checkpoint-dir", "gs://ckpt-bucket/k9",
         *_gcp_args(fake)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(fake.vms("k9")) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    launcher.send_signal(signal.SIGKILL)
    launcher.wait()
    time.sleep(0.2)  # requests the launcher had in flight land
    assert 2 <= len(fake.vms("k9")) <= 4
    rows = StateStore().resources("k9")
    assert {r.name for r in rows} >= set(fake.vms("k9"))  # every VM that exists had its intent row first
    status = run_cloudfit("status", "k9", "--json")
    assert json.loads(status.stdout)["launcher_alive"] is False
    p = run_cloudfit("down", "k9", "--yes")  # endpoint and project come from the state store
    assert p.returncode == 0, p.stderr
    assert fake.vms() == []
    assert StateStore().cluster("k9").reason == "down"


def test_a_refusal_on_the_vms_ends_the_gcp_launch_with_the_ranks_line_and_exit_2(cli, fake, plan):
    """Issue 34: the startup script reports a rank's exit 2 (state `refused`, its line): final, not 'failed'."""
    line = "cloudfit.train: checkpoint file gs://ckpt-bucket/rf/step-000000004/__1_0.distcp: signature does not verify"
    fake.refuse_with = line
    r = cli("launch", str(plan), "--yes", "--name", "rf", "--steps", "20", "--check-interval", "0.1",
            *_gcp_args(fake, "--checkpoint-dir", "gs://ckpt-bucket/rf"))
    assert r.exit_code == 2, r.output
    assert line in r.output and "refused (not restarted)" in r.output and "guest attribute" not in r.output
    assert StateStore().cluster("rf").reason == "refused" and fake.vms() == []


def _status_is(name: str, status: str) -> bool:
    if not (Path(os.environ["CLOUDFIT_HOME"]) / "state.db").exists():
        return False
    rec = StateStore().find_cluster(name)
    return rec is not None and rec.status == status


@pytest.mark.slow  # five CLI processes: 14–40 s on the loaded 2-core machine
def test_status_shows_vms_that_shut_themselves_down_as_stopped_but_billing(fake, tmp_path):
    """Issue 34: a VM whose self-delete was refused powers itself off (TERMINATED, disks billed, max_run_duration
    no longer runs); with the launcher gone, `status` said "running … stop at their max_run_duration"."""
    fake.simulate_job_s = 3600.0  # the job is still training when the launcher dies
    p1 = write_plan(tmp_path / "p1.json", [t4(nodes=1)], budget_usd=30)
    launcher = subprocess.Popen(
        [sys.executable, "-m", "cloudfit", "launch", str(p1), "--yes", "--name", "sd", "--checkpoint-dir",
         "gs://ckpt-bucket/sd", *_gcp_args(fake)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (fake.vms("sd", statuses=("RUNNING",)) and _status_is("sd", "running")):
        time.sleep(0.05)
    launcher.send_signal(signal.SIGKILL)
    launcher.wait()
    (vm,) = fake.vms("sd")
    running = json.loads(run_cloudfit("status", "sd", "--json").stdout)
    assert running["status"] == "running" and running["stopped_vms"] == [] and "max_run_duration" in running["warning"]
    fake.shut_down(vm)  # `self_delete || shutdown -h now`: the delete was refused
    row = json.loads(run_cloudfit("status", "sd", "--json").stdout)
    assert row["stopped_vms"] == [vm] and row["status"] == "stopped, billing"
    assert "cloudfit down sd --yes" in row["warning"] and "max_run_duration" not in row["warning"]
    text = run_cloudfit("status", "sd", env={"COLUMNS": "200"}).stdout
    assert "sd (gcp): stopped, billing" in text and f"{vm} (stopped, billing)" in text
    assert "cloudfit down sd --yes" in text and "max_run_duration" not in text
    listing = json.loads(run_cloudfit("status", "--json").stdout)["clusters"]
    assert [(r["name"], r["status"], r["stopped_vms"]) for r in listing] == [("sd", "stopped, billing", [vm])]
    assert run_cloudfit("down", "sd", "--yes").returncode == 0 and fake.vms() == []  # the command it names ends it


def test_no_secret_reaches_state_scripts_plans_or_output(cli, fake, plan, tmp_path, monkeypatch):
    secrets = ["ya29.SECRET-ACCESS-TOKEN", "-----BEGIN PRIVATE KEY-----MIIsecret", "AIzaSECRETAPIKEY"]
    key = tmp_path / "sa.json"
    key.write_text(json.dumps({"type": "service_account", "private_key": secrets[1], "client_email": "x@y"}))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    monkeypatch.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", secrets[0])
    monkeypatch.setenv("GOOGLE_API_KEY", secrets[2])
    outputs = []
    for args in (("--dry-run", "--json"), ("--yes", "--check-interval", "0.1")):
        r = cli("launch", str(plan), "--name", "sec", "--steps", "20", *args, *_gcp_args(fake, "--checkpoint-dir", "gs://ckpt-bucket/s"))
        assert r.exit_code == 0, r.output
        outputs.append(r.output)
    outputs.append(cli("status", "sec", "--json").output)
    state_bytes = b"".join(p.read_bytes() for p in (StateStore().path.parent).glob("state.db*"))
    scripts = json.dumps(fake.inserted)
    for s in secrets:
        assert s not in scripts and s.encode() not in state_bytes and s not in plan.read_text()
        assert all(s not in o for o in outputs)
    assert "startup-script" in scripts  # the scripts were really inspected


def test_sigterm_to_the_launcher_tears_the_local_cluster_down(tmp_path):
    p = write_plan(tmp_path / "p.json", [t4(nodes=1)], budget_usd=5)
    launcher = subprocess.Popen(
        [sys.executable, "-m", "cloudfit", "launch", str(p), "--yes", "--name", "term", "--backend", "local",
         "--steps", "100000", "--check-interval", "0.2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rec = StateStore().find_cluster("term") if (Path(os.environ["CLOUDFIT_HOME"]) / "state.db").exists() else None
        if rec is not None and StateStore().resources("term"):
            break
        time.sleep(0.1)
    time.sleep(1.0)
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(timeout=60) != 0
    rec = StateStore().cluster("term")
    assert rec.status == "ended" and rec.reason == "interrupted"
    status = json.loads(run_cloudfit("status", "term", "--json").stdout)
    assert status["status"] == "ended"
    for r in status["resources"]:  # the torchrun process group is gone
        with pytest.raises(ProcessLookupError):
            os.kill(r["pid"], 0)


# ------------------------------------------------------------------------------ issue 14

def test_launch_skips_a_zone_that_answers_503_stockout_within_seconds(cli, fake, plan):
    """Before: HTTP 503 ZONE_RESOURCE_POOL_EXHAUSTED was retried 7× for ~55 s, then exit 1."""
    fake.stockout("us-central1-a", sync=True)
    t0 = time.monotonic()
    r = cli("launch", str(plan), "--yes", "--name", "so", "--steps", "20", "--check-interval", "0.1",
            *_gcp_args(fake, "--checkpoint-dir", "gs://ckpt-bucket/so"))
    assert r.exit_code == 0, r.output
    assert time.monotonic() - t0 < 15
    assert "so: completed" in r.output and "stockout in us-central1-a" in r.output
    assert {b["name"] for b in fake.inserted} == {"so-0", "so-1"}
    assert fake.count("POST", r"/zones/us-central1-a/instances$") == 1
    assert fake.count("POST", r"/zones/us-central1-b/instances$") == 2 and fake.vms() == []


def test_status_and_down_survive_a_corrupt_state_store(fake, tmp_path):
    """Before: one bad page gave a traceback for `status` and `down`, and `down` could not delete by label."""
    import sqlite3

    from tests.executors.test_state import _corrupt_one_page

    fake.simulate_job_s = 1e6
    p2 = write_plan(tmp_path / "p2.json", [t4(nodes=2)], budget_usd=30)
    launcher = subprocess.Popen(
        [sys.executable, "-m", "cloudfit", "launch", str(p2), "--yes", "--name", "cor", "--check-interval", "0.2",
         *_gcp_args(fake, "--checkpoint-dir", "gs://ckpt-bucket/c")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while fake.vms("cor", statuses=("RUNNING",)) != ["cor-0", "cor-1"] and time.monotonic() < deadline:
        time.sleep(0.05)
    launcher.send_signal(signal.SIGKILL)  # the launcher is gone; its VMs run on
    launcher.wait()
    store = StateStore()
    for i in range(300):  # enough pages to lose one in the middle
        store.event("filler", "x", "y" * 200)
    with sqlite3.connect(store.path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    _corrupt_one_page(store.path, page=2)
    s = run_cloudfit("status")
    assert s.returncode == 0 and "Traceback" not in s.stderr, s.stderr
    assert len([x for x in s.stderr.splitlines() if "was corrupt" in x]) == 1
    d = run_cloudfit("down", "cor", "--yes", "--backend", "gcp", "--project", PROJECT, "--compute-endpoint", fake.endpoint)
    assert d.returncode == 2 and "--all-with-label" in d.stderr and "Traceback" not in d.stderr
    assert fake.vms("cor") == ["cor-0", "cor-1"]
    d = run_cloudfit("down", "cor", "--yes", "--backend", "gcp", "--all-with-label", "--project", PROJECT,
                     "--compute-endpoint", fake.endpoint)
    assert d.returncode == 0, d.stderr
    assert fake.vms() == []


def test_a_token_in_the_pip_spec_reaches_neither_metadata_nor_json(cli, fake, plan, monkeypatch):
    token = "ghp_SECRETTOKEN123"
    monkeypatch.setenv("CLOUDFIT_PIP_SPEC", f"git+https://user:{token}@github.com/org/cloudfit.git@v1")
    r = cli("launch", str(plan), "--dry-run", "--json", "--name", "tok", *_gcp_args(fake))
    assert r.exit_code == 0 and token not in r.output and "github.com/org/cloudfit.git" in r.output
    r = cli("launch", str(plan), "--yes", "--name", "tok", "--steps", "20", "--check-interval", "0.1",
            *_gcp_args(fake, "--checkpoint-dir", "gs://ckpt-bucket/t"))
    assert r.exit_code == 0, r.output
    assert token not in json.dumps(fake.inserted) and "startup-script" in json.dumps(fake.inserted)
    assert token not in r.output
    state_bytes = b"".join(p.read_bytes() for p in StateStore().path.parent.glob("state.db*"))
    assert token.encode() not in state_bytes


def test_the_cli_assembles_no_run_spec_itself():
    """`cloudfit launch` parses, confirms and renders; the run spec is cloudfit.launcher's (issue 25)."""
    import ast

    import cloudfit.cli.launch as cli_launch

    names = {n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else n.name
             for n in ast.walk(ast.parse(Path(cli_launch.__file__).read_text()))
             if isinstance(n, (ast.Name, ast.Attribute, ast.alias))}
    assert not names & {"RunSpec", "JobSpec", "LlmJob", "deadline_spec", "planned_interval", "plan_configs",
                        "rehearsal", "default_name"}
    assert "prepare_launch" in names
