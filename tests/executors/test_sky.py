"""The sky backend's calls at SkyPilot's API boundary (a fake of its client functions, tests/fakes/sky_api.py),
the one-line refusal without the extra, and the emitted tasks in the real SkyPilot package (when installed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cloudfit.errors import LaunchError, UsageError
from cloudfit.executors import check_launchable, get_executor
from cloudfit.executors.base import JobSpec, RunSpec
from cloudfit.executors.deadline import DeadlineSpec
from cloudfit.types import ClusterConfig, Offering
from tests.executors.plans import make_plan, offering
from tests.fakes.sky_api import FakeSky

REPO = Path(__file__).resolve().parents[2]
AWS_L4 = Offering("g6.12xlarge", "L4", 4, 48, 192, "us-east-1", "use1-az4", 4.6, 0.9, cloud="aws")
AWS_H100 = Offering("p5.48xlarge", "H100", 8, 192, 2048, "us-east-1", "use1-az4", 98.32, 30.0, cloud="aws")
LAMBDA = Offering("gpu_1x_h100_pcie", "H100-PCIe", 1, 26, 200, "us-east-1", "us-east-1", 3.29, None, cloud="lambda")
RUNPOD = Offering("1x_A100-80GB_SECURE", "A100-80GB-PCIe", 1, 8, 117, "US", "US-TX-3", 1.39, None, cloud="runpod")
NEBIUS = Offering("gpu-h100-sxm_1gpu-16vcpu-200gb", "H100", 1, 16, 200, "eu-north1", "eu-north1", 2.95, 1.25, cloud="nebius")
JOB = JobSpec(model="mlp", steps=150, checkpoint_every=50, checkpoint_dir="s3://ckpt-bucket/ckpt")


def _ex(**kw):
    opts = dict(interval_s=0.03, grace_s=0.3, teardown_s=1.0)
    opts.update(kw)
    return get_executor("sky", **opts)


def _spec(name, configs, budget=50.0, job=JOB, **kw):
    return RunSpec(name, tuple(configs), job, budget, **kw)


def _written(ex, launch_id):
    from cloudfit.executors.skypilot import node_install

    install = node_install(ex._wheel_dir(launch_id))
    install.write()
    return install


@pytest.fixture
def fake_sky(monkeypatch):
    def make(**kw):
        f = FakeSky(**kw)
        f.install(monkeypatch)
        return f

    return make


# ------------------------------------------------------------------ without the extra, and the refusals

def test_without_skypilot_one_line_names_the_extra_and_nothing_is_recorded(monkeypatch):
    monkeypatch.setitem(sys.modules, "sky", None)  # `import sky` raises ImportError
    ex = _ex()
    for call in (lambda: ex.run(_spec("nosky", [ClusterConfig(AWS_L4, 1, True)])),
                 lambda: ex.preview(_spec("nosky", [ClusterConfig(AWS_L4, 1, True)])), lambda: ex.down("nosky")):
        with pytest.raises(UsageError, match=r"pip install 'cloudfit\[sky\]'.*nothing launched") as e:
            call()
        assert "\n" not in str(e.value)
    assert ex.store.find_cluster("nosky") is None


def test_cli_launch_of_an_aws_plan_without_the_extra_exits_2_in_one_line(cli, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "sky", None)
    out = tmp_path / "plan.json"
    r = cli("recommend", "--model", "resnet50", "--samples", "5e7", "--deadline", "24h", "--clouds", "gcp,aws",
            "--out", str(out))
    assert r.exit_code == 0 and json.loads(out.read_text())["chosen"]["config"]["offering"]["cloud"] == "aws"
    r = cli("launch", str(out), "--backend", "sky", "--yes")
    assert r.exit_code == 2 and "pip install 'cloudfit[sky]'" in r.output
    assert len(r.output.strip().splitlines()) == 1
    FakeSky().install(monkeypatch)  # with SkyPilot: the dry run shows the task pinned to the plan's AWS config
    r = cli("launch", str(out), "--backend", "sky", "--dry-run", "--json")
    assert r.exit_code == 0, r.output
    pv = json.loads(r.output)["preview"]
    res = pv["nodes"][0]["detail"]["task"]["resources"]["ordered"]
    chosen = json.loads(out.read_text())["chosen"]["config"]["offering"]
    assert res[0]["cloud"] == "aws" and res[0]["instance_type"] == chosen["machine_type"] and pv["backend"] == "sky"
    r = cli("launch", str(out), "--backend", "gcp", "--yes")  # the native GCP backend refuses it, naming sky
    assert r.exit_code == 2 and "this plan is for aws" in r.output and "--backend sky" in r.output
    r = cli("launch", str(out), "--backend", "local", "--dry-run")  # a local rehearsal of any cloud's plan
    assert r.exit_code == 0 and "rehearsal" in r.output and "aws" in r.output, r.output


def test_sky_launches_other_clouds_gcp_keeps_its_executor():
    aws_plan = make_plan([ClusterConfig(AWS_L4, 1, True), ClusterConfig(offering(), 1, True),
                          ClusterConfig(LAMBDA, 1, False)])
    kept = check_launchable(aws_plan, "sky")
    assert [e.config.offering.cloud for e in kept.alternatives] == ["lambda"]  # the GCP fallback is gcp's
    with pytest.raises(UsageError, match="this plan is for gcp.*--backend gcp"):
        check_launchable(make_plan([ClusterConfig(offering(), 1, True)]), "sky")
    with pytest.raises(UsageError, match="this plan is for aws.*--backend sky.*nothing launched"):
        check_launchable(aws_plan, "gcp")
    assert check_launchable(aws_plan, "local") is aws_plan  # the local backend rehearses any cloud's plan


# ------------------------------------------------------------------ the task

def test_task_pins_every_config_and_runs_the_same_torchrun_command(fake_sky):
    from cloudfit.executors.sky import task_config

    spec = _spec("pin", [ClusterConfig(NEBIUS, 1, True), ClusterConfig(LAMBDA, 1, False), ClusterConfig(RUNPOD, 1, False),
                         ClusterConfig(AWS_H100, 1, True)])
    t = task_config(spec, spec.configs, launch_id="abc123456789", cap_s=3600, stop_at=1e9)
    assert t["resources"]["ordered"] == [
        {"cloud": "nebius", "region": "eu-north1", "instance_type": NEBIUS.machine_type, "accelerators": "H100:1", "use_spot": True},
        {"cloud": "lambda", "region": "us-east-1", "instance_type": "gpu_1x_h100_pcie", "accelerators": "H100:1", "use_spot": False},
        {"cloud": "runpod", "region": "US", "instance_type": "1x_A100-80GB_SECURE", "accelerators": "A100-80GB:1",
         "use_spot": False, "zone": "US-TX-3"}]  # the 8-GPU p5 is another shape: not in one task
    assert t["num_nodes"] == 1 and t["file_mounts"]["/cloudfit-ckpt"] == {"source": "s3://ckpt-bucket/ckpt", "mode": "MOUNT"}
    run = t["run"]
    assert "timeout --signal=TERM --kill-after=60 3600 python -m cloudfit.runtime.torchrun" in run
    assert "-m cloudfit.train --model mlp --steps 150 --checkpoint-dir /cloudfit-ckpt" in run and "--stop-at 1000000000" in run
    own = task_config(_spec("pin", spec.configs, job=JobSpec(model="mlp", steps=3)), spec.configs, launch_id="abc123456789")
    assert own["file_mounts"]["/cloudfit-ckpt"] == {"name": "cloudfit-pin-abc123456789", "mode": "MOUNT"}  # this launch's
    with pytest.raises(UsageError, match="bucket URI"):
        task_config(_spec("pin", spec.configs, job=JobSpec(model="mlp", steps=3, checkpoint_dir="/tmp/x")), spec.configs,
                    launch_id="x")


# ------------------------------------------------------------------ launching

def test_on_demand_cluster_completes_autostops_and_is_downed(fake_sky):
    f = fake_sky()
    ex = _ex()
    r = ex.run(_spec("od", [ClusterConfig(LAMBDA, 1, False)]))
    assert r.reason == "completed" and r.steps == 150 and r.config.offering.cloud == "lambda"
    assert ("launch", "od", 1, True) in f.calls and ("down", "od") in f.calls and not f.clusters
    assert not [c for c in f.calls if c[0] == "jobs.launch"]  # on demand: a cluster, not a managed job
    assert ex.store.cluster("od").reason == "completed" and ex.live("od") == []


def test_stockout_and_quota_move_to_the_next_alternative_and_the_half_made_cluster_is_deleted(fake_sky):
    f = fake_sky(unavailable={("aws", "g6.12xlarge")})
    ex = _ex()
    events = []
    r = ex.run(_spec("fb", [ClusterConfig(AWS_L4, 1, False), ClusterConfig(LAMBDA, 1, False)]), on_event=events.append)
    assert r.reason == "completed" and r.config.offering.cloud == "lambda"
    assert len(r.fallbacks) == 1 and "Failed to acquire resources" in r.fallbacks[0]
    assert [c[:2] for c in f.calls if c[0] in ("launch", "down")][:2] == [("launch", "fb"), ("down", "fb")]
    rows = ex.store.resources("fb")
    assert [x.state for x in rows][0] == "failed" and not any(x.live for x in rows)
    assert any(e.kind == "fallback" for e in events)


def test_no_alternative_available_raises_one_line_and_leaves_nothing(fake_sky):
    f = fake_sky(unavailable={("aws", "g6.12xlarge", True), ("nebius", NEBIUS.machine_type)})
    ex = _ex()
    with pytest.raises(LaunchError, match="no alternative .* SkyPilot"):
        ex.run(_spec("none", [ClusterConfig(AWS_L4, 1, True), ClusterConfig(NEBIUS, 1, True)]))
    assert ex.store.cluster("none").reason == "no-capacity" and ex.store.cluster("none").spend_usd == 0
    assert not f.clusters and ex.live("none") == []


def test_preempted_managed_job_recovers_and_the_guard_prices_the_new_nodes(fake_sky):
    f = fake_sky(preempt_at=(0.15,), job_s=0.4)
    ex = _ex(min_billed_s=0.0)
    r = ex.run(_spec("pre", [ClusterConfig(AWS_L4, 2, True)]))
    assert r.reason == "completed" and r.preemptions == 1 and r.steps == 150
    assert [c[0] for c in f.calls].count("jobs.launch") == 1  # SkyPilot recovered it: cloudfit launched once
    assert any(k == "lost" and "recovery 1" in m for _, k, m in ex.store.events("pre"))
    assert ex.live("pre") == []


def test_managed_job_that_fails_ends_the_run_as_failed(fake_sky):
    fake_sky(fail_at=0.1, job_s=5.0)
    ex = _ex()
    r = ex.run(_spec("bad", [ClusterConfig(AWS_L4, 1, True)]))
    assert r.reason == "failed" and "failed" in r.detail and ex.live("bad") == []


def test_skypilots_reported_cost_stops_the_run_before_the_guard_alone_would(fake_sky):
    f = fake_sky(job_s=30.0, cost_factor=2e4)  # SkyPilot bills far more than the catalog price
    ex = _ex(min_billed_s=0.0)
    r = ex.run(_spec("cost", [ClusterConfig(AWS_L4, 1, True)], budget=2.0))
    assert r.reason == "budget" and r.steps < 150 and r.elapsed_s < 5
    assert ("jobs.cancel", None, [1]) in f.calls and ex.live("cost") == []
    assert ex.store.cluster("cost").info["sky_cost_usd"] > 0


def test_deadline_moves_a_late_spot_job_to_an_on_demand_cluster(fake_sky):
    f = fake_sky(job_s=1.0)
    ex = _ex(min_billed_s=0.0)
    spot, od = ClusterConfig(AWS_L4, 1, True), ClusterConfig(AWS_L4, 1, False)
    # spot as risky as this (2 revocations a second, 0.15 s lost each) misses a 1.25 s deadline for a 1 s job;
    # on-demand (no revocations, one restart) keeps it: issue 27's rule switches only then
    d = DeadlineSpec(deadline_s=1.25, planned_step_s=1.0 / 150, restart_s=0.05, on_demand=od, planned_gpus=4,
                     hazard_per_hour=7200.0, checkpoint_interval_s=0.2, warmup_steps=1, window_steps=5, confirm=1)
    r = ex.run(_spec("late", [spot], deadline=d))
    assert r.reason == "completed" and not r.config.spot and "on-demand" in r.detail
    kinds = [c[0] for c in f.calls]
    assert kinds.index("jobs.launch") < kinds.index("jobs.cancel") < kinds.index("launch")
    assert ex.live("late") == []


def test_down_cancels_managed_jobs_and_downs_clusters_through_skypilot(fake_sky):
    f = fake_sky(job_s=30.0)
    ex = _ex()
    from cloudfit.executors.sky import _SkyCluster
    from cloudfit.executors.budget import Guard

    spec = _spec("dn", [ClusterConfig(AWS_L4, 1, True)])
    ex.store.create_cluster("dn", "sky", 50.0, {})
    c = _SkyCluster(ex, sys.modules["sky"], spec, ex._guard(50.0), lambda e: None, "lid", install=_written(ex, "lid"),
                    key="ab" * 32)
    c.launch(0)  # the launcher dies here: nothing tears it down
    assert ex.live("dn") == ["managed-job-1"]
    res = ex.down("dn")
    assert res.deleted == ("managed-job-1",) and ex.live("dn") == [] and ex.store.cluster("dn").reason == "down"
    assert ex.down("dn").deleted == ()  # twice is harmless
    with pytest.raises(UsageError, match="no cluster named"):
        ex.down("never")
    assert isinstance(c.guard, Guard)


# ------------------------------------------------------------------ the real SkyPilot package

def _sky_python() -> str | None:
    """A Python that imports ``sky``: this one, or $CLOUDFIT_SKY_PYTHON (a separate venv with skypilot)."""
    for py in (sys.executable, os.environ.get("CLOUDFIT_SKY_PYTHON")):
        if py and subprocess.run([py, "-c", "import sky"], capture_output=True).returncode == 0:
            return py
    return None


def _seed_catalogs(home: Path) -> None:
    """SkyPilot fetches its catalog from GitHub; offline, give it the transcribed rows of the same catalog (v8)."""
    import csv

    cols = ["InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "Price", "SpotPrice", "Region",
            "AvailabilityZone", "GpuInfo"]
    for cloud, name in (("aws", "aws_v8_vms_gpu_subset"), ("lambda", "lambda_v8_vms_gpu_subset"), ("gcp", "gcp_v8_vms_gpu_subset"),
                        ("nebius", "nebius_v8_vms_gpu"), ("runpod", "runpod_v8_vms_gpu_subset")):
        rows = list(csv.DictReader((REPO / "data" / "raw" / "catalog" / f"{name}.csv").open()))
        d = home / ".sky" / "catalogs" / "v8" / cloud
        d.mkdir(parents=True)
        with (d / "vms.csv").open("w", newline="") as fh:
            w = csv.DictWriter(fh, cols, extrasaction="ignore")
            w.writeheader()
            w.writerows({c: r.get(c) or "" for c in cols} for r in rows)


# ------------------------------------------------------------------ issue 34: `--backend sky` as trustworthy as gcp

def _offering(cloud: str, machine: str, region: str) -> Offering:
    """A real catalog row (the CLI re-prices plan files from the catalog)."""
    from cloudfit import catalog
    from cloudfit.types import CLOUDS

    return next(o for o in catalog.load(clouds=CLOUDS).offerings
                if (o.cloud, o.machine_type, o.region) == (cloud, machine, region))


def _aws_plan(tmp_path, nodes=2):
    import dataclasses

    from cloudfit.plan.io import save_plan

    plan = make_plan([ClusterConfig(_offering("aws", "g6.12xlarge", "us-east-1"), nodes, True)], model="mlp",
                     samples=64 * 4 * nodes * 150)
    plan = dataclasses.replace(plan, workload=dataclasses.replace(plan.workload, clouds=("aws",)))
    save_plan(plan, tmp_path / "plan.json")
    return tmp_path / "plan.json"


def test_the_nodes_install_the_checked_wheel_never_a_name_from_the_index(fake_sky):
    """Before: setup ran `pip install cloudfit==0.1.0` (not on the index; whoever claims the name runs code on
    every node): the fake's setup fails it, as a node would."""
    import hashlib

    f = fake_sky()
    ex = _ex()
    r = ex.run(_spec("whl", [ClusterConfig(LAMBDA, 1, False)]))
    assert r.reason == "completed", r.detail
    [task] = f.launched
    assert "cloudfit==" not in task["setup"] and "sha256sum -c" in task["setup"]
    from cloudfit.executors.gcp.wheel import runtime_wheel

    [(remote, local)] = [(k, v) for k, v in task["file_mounts"].items() if k.startswith("/cloudfit-wheel/")]
    sha = hashlib.sha256(runtime_wheel()[1]).hexdigest()  # the fake's setup checked the uploaded file against it
    assert f"echo '{sha}  {remote}' | sha256sum -c" in task["setup"] and f"install --quiet {remote}" in task["setup"]
    assert not Path(local).parent.exists()  # uploaded at launch; not left behind in the state folder
    assert ex.store.cluster("whl").info["install"].startswith("the nodes install cloudfit")


def test_every_node_of_a_two_node_job_gets_the_plans_key_as_a_secret(fake_sky, monkeypatch):
    """Before: no key reached the nodes, each drew its own and the 2-node job refused itself ("ranks hold
    different checkpoint keys"). The key is the plan's (the same across relaunches) and never in the task dict."""
    monkeypatch.setenv("CLOUDFIT_PIP_SPEC", "https://pkgs.example.com/cloudfit-0.1.0-py3-none-any.whl")
    f = fake_sky()
    ex = _ex(min_billed_s=0.0)
    spec = _spec("two", [ClusterConfig(AWS_L4, 2, True)], record={"plan_id": "plan-abc"})
    r = ex.run(spec)
    assert r.reason == "completed" and r.steps == 150, r.detail
    key = ex.store.checkpoint_key("plan-abc")
    assert f.tasks[0].secrets == {"CLOUDFIT_CHECKPOINT_KEY": key}
    assert f.launched[0]["secrets"] == {"CLOUDFIT_CHECKPOINT_KEY": None} and key not in json.dumps(f.launched)
    assert key not in json.dumps(ex.store.cluster("two").info) + json.dumps(ex.store.events("two"))
    ex.run(_spec("two-again", spec.configs, record={"plan_id": "plan-abc"}))  # a relaunch resumes: the same key
    assert f.tasks[1].secrets == f.tasks[0].secrets


def test_a_failed_launch_records_no_spend_for_what_skypilot_never_made(fake_sky):
    """Before: a launch SkyPilot refused (no credentials) was billed a minimum minute per node ($0.70 here)."""
    from tests.fakes.sky_api import CloudUserIdentityError

    fake_sky(launch_error=CloudUserIdentityError("Failed to get AWS user.\n  Reason: no credentials\n  Details: …"))
    ex = _ex()
    with pytest.raises(Exception) as e:
        ex.run(_spec("nocred", [ClusterConfig(AWS_H100, 2, True)]))
    rec = ex.store.cluster("nocred")
    assert rec.spend_usd == 0 and rec.ended and [x.state for x in ex.store.resources("nocred")] == ["failed"]
    assert isinstance(e.value, LaunchError) and "\n" not in str(e.value)  # SkyPilot's 3 lines → one, with what to do
    assert "sky check" in str(e.value) and "Failed to get AWS user" in str(e.value)


def test_a_launch_that_fails_after_skypilot_made_a_cluster_is_billed_and_the_cluster_deleted(fake_sky):
    """The other side of the rule: what SkyPilot reports as made (a cluster left in INIT) is billed and downed."""
    f = fake_sky(launch_error=RuntimeError("provisioner crashed\nTraceback …"), half_made=True)
    ex = _ex()
    with pytest.raises(LaunchError, match=r"^SkyPilot could not launch .*RuntimeError: provisioner crashed; `sky api logs`"):
        ex.run(_spec("half", [ClusterConfig(LAMBDA, 1, False)]))
    assert ("down", "half") in f.calls and not f.clusters and ex.live("half") == []
    assert ex.store.cluster("half").spend_usd > 0 and [x.state for x in ex.store.resources("half")] == ["deleted"]


def test_cli_errors_are_one_line_and_down_of_a_cluster_already_gone_says_so(cli, fake_sky, tmp_path):
    """Before: SkyPilot's exceptions reached the user as 15–19 line tracebacks; `down` of a cluster that had
    gone printed a raw ClusterNotUpError (the jobs controller is not up when no managed job ever ran)."""
    from tests.fakes.sky_api import CloudUserIdentityError

    plan = _aws_plan(tmp_path)
    f = fake_sky(launch_error=CloudUserIdentityError("Failed to get AWS user.\n  Reason: no credentials"))
    r = cli("launch", str(plan), "--backend", "sky", "--yes", "--budget", "50", "--name", "gone", "--check-interval", "0.05")
    lines = r.output.strip().splitlines()  # the launch's progress line, then the error in one line
    assert r.exit_code == 1 and len(lines) == 2 and "Traceback" not in r.output, r.output
    assert lines[-1].startswith("cloudfit: error: SkyPilot could not launch") and "sky check" in lines[-1]
    f.launch_error = None
    ex = _ex()
    ex.store.create_cluster("od", "sky", 50.0, {})  # a launcher that died after its cluster came up …
    from cloudfit.executors.sky import _SkyCluster

    spec = _spec("od", [ClusterConfig(LAMBDA, 1, False)])
    _SkyCluster(ex, sys.modules["sky"], spec, ex._guard(50.0), lambda e: None, "lid", install=_written(ex, "lid"),
                key="ab" * 32).launch(0)
    f.clusters.clear()  # … then SkyPilot's autostop deleted it
    for name in ("od", "gone"):
        r = cli("down", name, "--yes")
        assert r.exit_code == 0 and "already gone" in r.output and len(r.output.strip().splitlines()) == 1, r.output
    r = cli("down", "never-launched", "--backend", "sky", "--yes")
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1


def test_plain_dry_run_shows_nodes_command_what_ships_and_the_bucket(cli, fake_sky, tmp_path):
    """Before: "5 local process group … rehearsing None" and an empty `command:`."""
    fake_sky()
    r = cli("launch", str(_aws_plan(tmp_path)), "--backend", "sky", "--dry-run", "--budget", "50")
    out = r.output
    assert r.exit_code == 0 and "rehearsing" not in out and "local process group" not in out, out
    assert "2 node(s) through SkyPilot" in out and "aws us-east-1, instance type g6.12xlarge, 4× L4, SPOT" in out
    cmds = [ln for ln in out.splitlines() if ln.strip().startswith("command on")]
    assert len(cmds) == 2 and all("python -m cloudfit.runtime.torchrun --nnodes=2 --nproc-per-node=4 -m cloudfit.train "
                                  "--model mlp --steps 150" in c for c in cmds), out
    assert "ships cloudfit-" in out and "KiB, sha256 " in out and "bucket cloudfit-" in out and "/cloudfit-ckpt" in out


def test_a_token_in_the_pip_spec_reaches_neither_the_task_nor_the_dry_run(cli, fake_sky, tmp_path, monkeypatch):
    """Before: `?token=` in $CLOUDFIT_PIP_SPEC went into the task and `--dry-run --json`."""
    f = fake_sky()
    monkeypatch.setenv("CLOUDFIT_PIP_SPEC", "https://alice:hunter2@pkgs.example.com/cloudfit-0.1.0-py3-none-any.whl"
                                            "?token=s3cr3t&v=1 --extra-index-url https://bob:pw9@idx.example.com/simple")
    plan = _aws_plan(tmp_path)
    for extra in (("--json",), ()):
        r = cli("launch", str(plan), "--backend", "sky", "--dry-run", "--budget", "50", *extra)
        assert r.exit_code == 0 and "pkgs.example.com/cloudfit-0.1.0-py3-none-any.whl?v=1" in r.output, r.output
        assert not any(s in r.output for s in ("hunter2", "s3cr3t", "pw9", "alice"))
    r = cli("launch", str(plan), "--backend", "sky", "--yes", "--budget", "50", "--name", "tok", "--check-interval", "0.05")
    assert r.exit_code == 0, r.output
    seen = json.dumps(f.launched) + r.output
    assert "pkgs.example.com" in f.launched[0]["setup"] and not any(s in seen for s in ("hunter2", "s3cr3t", "pw9"))


# ------------------------------------------------------------------ issue 32: sky runs the stack, ships the workdir

def _lambda_plan(d: Path, stack: str) -> Path:
    """llama3-1b on 1 × H100 on Lambda, priced for ``stack``."""
    from tests.conftest import run_cloudfit

    r = run_cloudfit("recommend", "--model", "llama3-1b", "--tokens", "1e8", "--seq-len", "2048", "--deadline", "2d",
                     "--accelerators", "H100-PCIe", "--clouds", "lambda", "--stack", stack,
                     "--out", str(d / f"{stack}.json"), cwd=str(d))
    assert r.returncode == 0, r.stderr
    return d / f"{stack}.json"


@pytest.fixture(scope="module")
def titan_plan(tmp_path_factory):
    return _lambda_plan(tmp_path_factory.mktemp("skytitan"), "torchtitan")


def _proj(tmp_path: Path) -> Path:
    from tests.executors.test_stack_launch import _project

    return _project(tmp_path)


def test_a_torchtitan_plan_on_sky_ships_its_config_and_runs_torchtitan_from_the_unpacked_workdir(cli, fake_sky,
                                                                                               titan_plan):
    """Before: sky ran cloudfit's trainer for every plan and shipped no workdir (`spec.record["workdir"]` was never
    filled): `--stack torchtitan --backend sky` now runs torchtitan under cloudfit's torchrun from the checked,
    unpacked archive (its config file inside), and node 0 follows torchtitan's log into progress."""
    f = fake_sky()
    r = cli("launch", str(titan_plan), "--backend", "sky", "--stack", "torchtitan", "--dry-run", "--budget", "50")
    out = r.output
    assert r.exit_code == 0, out
    [cmd] = [ln for ln in out.splitlines() if ln.strip().startswith("command on")]
    assert "python -m cloudfit.runtime.torchrun --nnodes=1 --nproc-per-node=1 -m torchtitan.train" in cmd, cmd
    assert "(in ~/sky_workdir, the unpacked workdir)" in cmd and "stack: torchtitan" in out
    assert "ships: workdir (stack files)" in out and "ships workdir-" in out and "/cloudfit-workdir/" in out
    assert "checked on every node before use" in out and "install: " in out
    j = json.loads(cli("launch", str(titan_plan), "--backend", "sky", "--stack", "torchtitan", "--dry-run", "--json",
                       "--budget", "50").output)
    job = j["job"] if "job" in j else j["preview"]["job"]
    [arch] = [s for s in job["ships"] if s["what"] == "workdir archive"]
    files = [x["path"] for x in arch["files"]]
    assert files and set(files) == set(job["config_files"]) and job["log_parser"] == "torchtitan"
    r = cli("launch", str(titan_plan), "--backend", "sky", "--stack", "torchtitan", "--yes", "--budget", "50",
            "--name", "titan", "--check-interval", "0.05")
    assert r.exit_code == 0 and "completed" in r.output, r.output
    [task], [sky_job] = f.launched, list(f.jobs.values())
    assert set(sky_job.node_files) == set(files)  # the node unpacked exactly the archive, after its SHA-256 check
    run = task["run"]
    assert run.startswith("set -u\ncd ~/sky_workdir ||") and "-m torchtitan.train" in run
    assert "python -m cloudfit.runtime.logprogress --stack torchtitan --total-steps" in run and "--seq-len 2048" in run
    assert "tee -a /tmp/cloudfit-job.log" in run and "CLOUDFIT_PROGRESS" in run
    [(remote, local)] = [(k, v) for k, v in task["file_mounts"].items() if k.startswith("/cloudfit-workdir/")]
    assert f"echo '{arch['sha256']}  {remote}' | sha256sum -c" in task["setup"] and not Path(local).exists()


def test_a_users_script_ships_to_sky_the_node_sees_it_and_a_tampered_archive_is_refused(cli, fake_sky, tmp_path):
    """`cloudfit launch plan.json --backend sky -- python proj/train.py`: the script's folder travels, the node
    unpacks it (train.py, lib/steps.py) and runs `python train.py` from it; an archive that does not match the
    SHA-256 the launch packed it with fails the setup before anything runs from it."""
    import dataclasses

    f = fake_sky()
    proj = _proj(tmp_path)
    plan = _aws_plan(tmp_path)
    r = cli("launch", str(plan), "--backend", "sky", "--dry-run", "--budget", "50", "--", "python",
            str(proj / "train.py"), "--lr", "0.1")
    assert r.exit_code == 0 and "--no-python python train.py --lr 0.1" in r.output, r.output
    assert "    train.py (" in r.output and "    lib/steps.py (" in r.output
    r = cli("launch", str(plan), "--backend", "sky", "--yes", "--budget", "50", "--name", "own", "--check-interval",
            "0.05", "--", "python", str(proj / "train.py"), "--lr", "0.1")
    assert r.exit_code == 0, r.output
    [task], [job] = f.launched, list(f.jobs.values())
    assert {"train.py", "lib/steps.py", "lib/__init__.py"} <= set(job.node_files) and job.status == "SUCCEEDED"
    assert "cd ~/sky_workdir" in task["run"] and "--no-python python train.py --lr 0.1" in task["run"]
    import cloudfit
    from cloudfit.executors import get_executor as ge

    ready = cloudfit.prepare_launch(cloudfit.load_plan(str(plan)), ge("sky", interval_s=0.03, grace_s=0.3,
                                                                       teardown_s=1.0),
                                    command=("python", str(proj / "train.py")), name="tampered", budget_usd=50.0)
    bad = dataclasses.replace(ready.spec.job.workdir, sha256="0" * 64)  # the bytes are not what was packed
    res = ready.executor.run(dataclasses.replace(ready.spec, job=dataclasses.replace(ready.spec.job, workdir=bad)))
    assert res.reason == "failed" and "failed_setup" in res.detail and "does not match its SHA-256" in res.detail
    assert list(f.jobs.values())[-1].node_files == ()  # nothing was unpacked


def test_the_sky_run_script_runs_a_users_command_from_the_workdir_and_echoes_its_progress(tmp_path, titan_plan):
    """The task's `run` itself, on this machine as one SkyPilot node: from the unpacked folder, the custom stack
    (the layout in the environment and cloudfit_layout.json) under cloudfit's torchrun; node 0 follows the log
    into `CLOUDFIT_PROGRESS {json}` lines that the executor reads."""
    import cloudfit
    from cloudfit.executors.sky import parse_progress, run_script
    from cloudfit.executors.workdir import unpack

    plan = cloudfit.load_plan(str(titan_plan))
    proj = _proj(tmp_path)
    ready = cloudfit.prepare_launch(plan, get_executor("sky"), command=("python", str(proj / "train.py"), "--x", "1"),
                                    name="own", budget_usd=50.0)
    spec = ready.spec
    home = tmp_path / "home"
    unpack(spec.job.workdir.tar_gz, spec.job.workdir.sha256, home / "sky_workdir")
    script = run_script(spec, spec.configs[0], 120, None).replace("/tmp/", f"{tmp_path}/")
    script = script.replace("python -m", f"{sys.executable} -m")
    seen = tmp_path / "seen.json"
    env = {**os.environ, "HOME": str(home), "SKYPILOT_NODE_IPS": "127.0.0.1", "SKYPILOT_NUM_NODES": "1",
           "SKYPILOT_NODE_RANK": "0", "SKYPILOT_NUM_GPUS_PER_NODE": "1", "SEEN_FILE": str(seen), "OMP_NUM_THREADS": "1"}
    p = subprocess.run(["bash", "-c", script.replace("python train.py", f"{sys.executable} train.py")], env=env,
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    got = json.loads(seen.read_text())
    assert got["cwd"] == str(home / "sky_workdir") and got["argv"] == ["--x", "1"] and got["dp_shard"]
    prog = parse_progress(p.stdout)
    assert prog["step"] == 3 and prog["tokens_per_second"] == 4000.0 and prog["checkpoint_step"] == 3, prog


def test_the_sky_run_script_stops_in_one_line_when_the_stack_does_not_import(tmp_path, titan_plan):
    """The task's `run` imports torchtitan's entry module once before torchrun, as GCP's startup script does: a
    torchtitan that cannot import on the node (a real package raising the H200 session's ImportError) ends the run
    with that line, and torchrun never starts."""
    import cloudfit
    from cloudfit.executors.sky import run_script
    from cloudfit.executors.workdir import unpack

    plan = cloudfit.load_plan(str(titan_plan))
    ready = cloudfit.prepare_launch(plan, get_executor("sky"), command=("--hf_assets_path", "/assets"),
                                    stack="torchtitan", name="noimp", budget_usd=50.0)
    spec = ready.spec
    assert spec.job.stack.name == "torchtitan"
    home = tmp_path / "home"
    unpack(spec.job.workdir.tar_gz, spec.job.workdir.sha256, home / "sky_workdir")
    site = tmp_path / "site" / "torchtitan"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    (site / "train.py").write_text("raise ImportError(\"cannot import name 'DataParallelMeshDims' from "
                                   "'torch.distributed.fsdp'\")\n")
    script = run_script(spec, spec.configs[0], 120, None).replace("/tmp/", f"{tmp_path}/")
    script = script.replace("python -m", f"{sys.executable} -m").replace("python -c", f"{sys.executable} -c")
    env = {**os.environ, "HOME": str(home), "SKYPILOT_NODE_IPS": "127.0.0.1", "SKYPILOT_NUM_NODES": "1",
           "SKYPILOT_NODE_RANK": "0", "SKYPILOT_NUM_GPUS_PER_NODE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
    assert "cloudfit: torchtitan.train does not import on this node" in p.stderr and "DataParallelMeshDims" in p.stderr
    assert "torchelastic" not in p.stderr and "cloudfit.runtime.torchrun" not in p.stderr


def _sky_workdir(spec, into):
    from cloudfit.executors.sky import SkyExecutor

    return SkyExecutor._workdir(spec, into)


_LOAD_ALL = """
import json, sys
import sky
from sky import catalog
out = []
for item in json.load(open(sys.argv[1])):
    if "yaml" in item:
        task = sky.Task.from_yaml(item["yaml"])
    else:
        task = sky.Task.from_yaml_config(item["config"], secrets_overrides=[tuple(s) for s in item["overrides"]])
    res = []
    for r in task.resources:
        acc = catalog.get_accelerators_from_instance_type(r.instance_type, clouds=str(r.cloud).lower())
        res.append([str(r.cloud).lower(), r.region, r.zone, r.instance_type, r.accelerators, acc, bool(r.use_spot)])
    out.append({"num_nodes": task.num_nodes, "resources": res, "file_mounts": task.file_mounts or {},
                "storage": {k: [s.name, s.source] for k, s in task.storage_mounts.items()},
                "secrets": {k: v.get_secret_value() for k, v in task.secrets.items()},
                "refs": sorted(r.name for r in task.managed_secret_refs), "setup": task.setup, "run": task.run})
print(json.dumps(out))
"""


def test_every_task_both_paths_build_loads_in_real_skypilot_with_its_mounts_secret_and_resources(tmp_path, titan_plan):
    """`--emit-skypilot` for a plan of every cloud (before: GCP only) and `--backend sky`'s own task (with a
    workdir archive and the key as an override), parsed by SkyPilot 0.14's task loader."""
    import yaml

    from cloudfit.executors.skypilot import emit, node_install
    from cloudfit.executors.sky import task_config
    from cloudfit.plan.skypilot import workdir_archive
    from tests.executors.plans import catalog_offering

    py = _sky_python()
    if py is None:
        pytest.skip("skypilot is not installed (pip install 'cloudfit[sky]', or set CLOUDFIT_SKY_PYTHON)")
    gcp = ClusterConfig(catalog_offering("us-central1-a", "a3-highgpu-8g", "H100", 8), 2, True)
    plans = {"aws": [ClusterConfig(AWS_H100, 2, True)], "gcp": [gcp], "lambda": [ClusterConfig(LAMBDA, 1, False)],
             "runpod": [ClusterConfig(RUNPOD, 1, False)], "nebius": [ClusterConfig(NEBIUS, 1, True)]}
    items, expect = [], []
    for cloud, configs in plans.items():
        (tmp_path / cloud).mkdir()
        e = emit(make_plan(configs), tmp_path / cloud / "task.yaml")
        items.append({"yaml": str(e.task)})
        expect.append((configs, yaml.safe_load(e.task.read_text()), {}))
    archive = tmp_path / "wd.tar"
    archive.write_bytes(b"\0" * 10240)
    import hashlib

    wd = workdir_archive(str(archive), hashlib.sha256(archive.read_bytes()).hexdigest(), 10240)
    install = node_install(tmp_path / "run")
    install.write()
    run = task_config(_spec("real", [ClusterConfig(AWS_L4, 2, True)], job=JobSpec(model="mlp", steps=9)),
                      [ClusterConfig(AWS_L4, 2, True)], launch_id="0123456789abcdef", cap_s=600, install=install,
                      workdir=wd)
    items.append({"config": run, "overrides": [["CLOUDFIT_CHECKPOINT_KEY", "k" * 64]]})
    expect.append(([ClusterConfig(AWS_L4, 2, True)], run, {"CLOUDFIT_CHECKPOINT_KEY": "k" * 64}))
    import cloudfit  # a torchtitan plan's task: its archive (config file inside) shipped, torchtitan in `run`

    titan = cloudfit.prepare_launch(cloudfit.load_plan(str(titan_plan)), get_executor("sky"), stack="torchtitan",
                                    name="titan", budget_usd=50.0).spec
    twd = _sky_workdir(titan, tmp_path / "titan")
    stack_task = task_config(titan, titan.configs[:1], launch_id="0123456789abcdef", cap_s=600, install=install,
                             workdir=twd)
    items.append({"config": stack_task, "overrides": [["CLOUDFIT_CHECKPOINT_KEY", "k" * 64]]})
    expect.append((list(titan.configs[:1]), stack_task, {"CLOUDFIT_CHECKPOINT_KEY": "k" * 64}))
    mixed = [ClusterConfig(LAMBDA, 1, False), ClusterConfig(RUNPOD, 1, False), ClusterConfig(NEBIUS, 1, True)]
    items.append({"config": task_config(_spec("mix", mixed), mixed, launch_id="0123456789abcdef", install=install),
                  "overrides": []})
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(items))
    _seed_catalogs(tmp_path / "home")
    p = subprocess.run([py, "-c", _LOAD_ALL, str(path)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "HOME": str(tmp_path / "home"), "PYTHONPATH": ""})
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    *got, mix = got
    *_, titan_loaded = got
    assert "-m torchtitan.train" in titan_loaded["run"] and "cloudfit.runtime.logprogress" in titan_loaded["run"]
    assert titan_loaded["file_mounts"][twd.remote] == twd.local and f"tar -xf {twd.remote}" in titan_loaded["setup"]
    assert [r[3] for r in mix["resources"]] == [c.offering.machine_type for c in mixed]  # every cloud's, in order
    for (configs, task, secrets), t in zip(expect, got, strict=True):
        c, o = configs[0], configs[0].offering
        assert t["num_nodes"] == c.nodes and len(t["resources"]) == 1
        cloud, region, zone, itype, acc, catalog_acc, spot = t["resources"][0]
        assert (cloud, region, itype, spot) == (o.cloud, o.region, o.machine_type, c.spot)
        assert zone == (o.zone if o.cloud in ("gcp", "runpod") else None)
        assert acc == catalog_acc and sum(acc.values()) == o.accelerators_per_node  # SkyPilot's own name, its catalog's
        assert t["secrets"] == secrets and t["refs"] == ([] if secrets else ["CLOUDFIT_CHECKPOINT_KEY"])
        wheel = {k: v for k, v in t["file_mounts"].items() if k.startswith("/cloudfit-wheel/")}
        assert len(wheel) == 1 and all(Path(v).is_file() for v in wheel.values())
        assert list(t["storage"]) == ["/cloudfit-ckpt"] and t["storage"]["/cloudfit-ckpt"][0].startswith("cloudfit-")
        assert t["setup"] == task["setup"] and "cloudfit.runtime.torchrun" in t["run"]
    t = got[-2]
    assert t["file_mounts"]["/cloudfit-workdir/wd.tar"] == str(archive) and "tar -xf /cloudfit-workdir/wd.tar" in t["setup"]


def test_a_stack_that_starts_its_own_ranks_runs_once_per_node_on_sky(cli, fake_sky, tmp_path):
    """Accelerate (`accelerate launch` starts the ranks): no cloudfit torchrun around it; every node gets the
    cluster's shape (NNODES, NPROC, NODE_RANK, MASTER_ADDR, MASTER_PORT) and the script ships with the config."""
    f = fake_sky()
    proj = _proj(tmp_path)
    acc_plan = _lambda_plan(tmp_path, "accelerate")
    r = cli("launch", str(acc_plan), "--backend", "sky", "--dry-run", "--budget", "50",
            "--", str(proj / "train.py"), "--lr", "3e-4")
    assert r.exit_code == 0, r.output
    [cmd] = [ln for ln in r.output.splitlines() if ln.strip().startswith("command on")]
    assert "NODE_RANK=0 MASTER_ADDR=localhost bash -c 'exec accelerate launch" in cmd, cmd
    assert '--machine_rank "$NODE_RANK"' in cmd and "cloudfit.runtime.torchrun" not in cmd
    assert "train.py --lr 3e-4" in cmd and "    cloudfit_accelerate.yaml (" in r.output and "    train.py (" in r.output
    r = cli("launch", str(acc_plan), "--backend", "sky", "--yes", "--budget", "50",
            "--name", "acc", "--check-interval", "0.05", "--", str(proj / "train.py"), "--lr", "3e-4")
    assert r.exit_code == 0, r.output
    [task], [job] = f.launched, list(f.jobs.values())
    run = task["run"]
    assert "cloudfit.runtime.torchrun" not in run
    assert 'NODE_RANK="$SKYPILOT_NODE_RANK" MASTER_ADDR MASTER_PORT=29500' in run
    line = next(ln for ln in run.splitlines() if "accelerate launch" in ln)
    assert line.startswith("timeout --signal=TERM") and "tee -a /tmp/cloudfit-job.log" in line
    assert "--stack accelerate" in run and {"train.py", "cloudfit_accelerate.yaml"} <= set(job.node_files)
