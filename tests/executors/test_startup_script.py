"""The rendered startup script, run for real off GCP: a fake metadata server stands in for the VM's.

It must find its rank and rendezvous address in metadata, run torchrun (c10d at node 0's address)
with cloudfit's trainer, report progress and the outcome as guest attributes, and turn the
``cloudfit-stop`` metadata key into a checkpoint-and-stop.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest


from cloudfit.executors.base import JobSpec, RunSpec
from cloudfit.executors.gcp import render_startup_script
from cloudfit.train import checkpoints
from cloudfit.types import ClusterConfig
from tests.executors.plans import offering
from tests.fakes.compute_server import FakeMetadata


def _run_script(tmp_path: Path, extra_md: dict[str, str], steps: int) -> tuple[subprocess.CompletedProcess, FakeMetadata, Path]:
    ckpt = tmp_path / "ckpt"
    spec = RunSpec("boot", (ClusterConfig(offering(), 1, True),),
                   JobSpec(model="mlp", steps=steps, checkpoint_every=20, checkpoint_dir=str(ckpt)), 1.0)
    script = render_startup_script(spec, spec.configs[0], str(ckpt))
    md = FakeMetadata({"cloudfit-node-rank": "0", "cloudfit-nnodes": "1", "cloudfit-master-addr": "self",
                       "cloudfit-stop-at": f"{time.time() + 600:.0f}", **extra_md})
    env = {**os.environ, "CLOUDFIT_METADATA_URL": md.url, "CLOUDFIT_WORK_DIR": str(tmp_path / "work"),
           "CLOUDFIT_LINGER_S": "0", "CLOUDFIT_NO_SHUTDOWN": "1", "CLOUDFIT_WATCH_S": "0.2",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # python3 = this venv (cloudfit installed)
    try:
        p = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120)
    finally:
        md.close()
    return p, md, ckpt


@pytest.mark.slow
def test_startup_script_trains_and_reports_completion(tmp_path):
    p, md, ckpt = _run_script(tmp_path, {}, steps=60)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "rendezvous at 127.0.0.1:29400" in p.stdout
    assert md.guest["cloudfit/state"] == "completed"
    progress = json.loads(md.guest["cloudfit/progress"])
    assert progress["step"] == 60 and progress["state"] == "completed"
    assert checkpoints(ckpt)[0][0] == 60


@pytest.mark.slow
def test_startup_script_turns_the_stop_key_into_a_checkpointed_stop(tmp_path):
    p, md, ckpt = _run_script(tmp_path, {"cloudfit-stop": "1"}, steps=100000)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert md.guest["cloudfit/state"] == "stopped"
    step = json.loads(md.guest["cloudfit/progress"])["step"]
    assert step < 100000 and checkpoints(ckpt)[0][0] == step


def test_a_vm_whose_install_fails_reports_it_and_powers_off(tmp_path, monkeypatch):
    """Before: a failed install left the VM idle (and billed) until its max_run_duration."""
    monkeypatch.setenv("CLOUDFIT_PIP_SPEC", str(tmp_path / "no-such-cloudfit.whl"))
    spec = RunSpec("boot", (ClusterConfig(offering(), 1, True),),
                   JobSpec(model="mlp", steps=5, checkpoint_dir=str(tmp_path / "ckpt")), 1.0)
    script = render_startup_script(spec, spec.configs[0], str(tmp_path / "ckpt"), version="0.0.0-other")
    md = FakeMetadata({"cloudfit-node-rank": "0", "cloudfit-nnodes": "1", "cloudfit-master-addr": "self"})
    shutdown = tmp_path / "bin"
    shutdown.mkdir()
    (shutdown / "shutdown").write_text(f"#!/bin/sh\ntouch {tmp_path}/powered-off\n")
    (shutdown / "shutdown").chmod(0o755)
    env = {**os.environ, "CLOUDFIT_METADATA_URL": md.url, "CLOUDFIT_WORK_DIR": str(tmp_path / "work"),
           "CLOUDFIT_LINGER_S": "0", "PATH": f"{shutdown}:{Path(sys.executable).parent}:{os.environ['PATH']}"}
    try:
        p = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=300)
    finally:
        md.close()
    assert p.returncode == 1
    assert md.guest["cloudfit/state"] == "failed" and "pip install" in md.guest["cloudfit/error"]
    assert (tmp_path / "powered-off").exists()  # not left running until its cap


@pytest.mark.slow  # end to end, 10–16 s: CI's slow run (the README command stays under 10 minutes)
def test_a_finished_vm_deletes_itself_and_the_ranks_get_the_checkpoint_key(tmp_path):
    """Before: a finished VM powered off and stayed TERMINATED, billing its disk until `cloudfit down`
    (its launcher may be gone). The checkpoint key reaches every rank's environment from metadata."""
    from google.cloud import compute_v1

    from tests.executors.conftest import PROJECT
    from tests.fakes.compute_server import FakeCompute

    key = "ab" * 32
    seen = tmp_path / "key"
    cmd = (sys.executable, "-c", f"import os; open({str(seen)!r}, 'w').write(os.environ['CLOUDFIT_CHECKPOINT_KEY'])")
    spec = RunSpec("boot", (ClusterConfig(offering(), 1, True),), JobSpec(command=cmd), 1.0)
    script = render_startup_script(spec, spec.configs[0], str(tmp_path / "ckpt"))
    assert key not in script
    shutdown = tmp_path / "bin"
    shutdown.mkdir()
    (shutdown / "shutdown").write_text(f"#!/bin/sh\ntouch {tmp_path}/powered-off\n")
    (shutdown / "shutdown").chmod(0o755)
    with FakeCompute(op_delay_s=0.01) as fake:
        from cloudfit.executors.gcp import make_clients

        c = make_clients(PROJECT, fake.endpoint)
        c.instances.insert(project=PROJECT, zone="us-central1-a", instance_resource=compute_v1.Instance(
            name="boot-0", machine_type="zones/us-central1-a/machineTypes/n1-highmem-8", labels={"cloudfit-cluster": "boot"}))
        deadline = time.monotonic() + 10
        while fake.vms() != ["boot-0"] and time.monotonic() < deadline:
            time.sleep(0.05)
        md = FakeMetadata({"cloudfit-node-rank": "0", "cloudfit-nnodes": "1", "cloudfit-master-addr": "self",
                           "cloudfit-checkpoint-key": key},
                          paths={"instance/name": "boot-0", "instance/zone": "projects/123/zones/us-central1-a",
                                 "project/project-id": PROJECT, "instance/service-accounts/default/token":
                                 '{"access_token":"ya29.test","expires_in":3599,"token_type":"Bearer"}'})
        env = {**os.environ, "CLOUDFIT_METADATA_URL": md.url, "CLOUDFIT_WORK_DIR": str(tmp_path / "work"),
               "CLOUDFIT_LINGER_S": "0", "CLOUDFIT_COMPUTE_URL": f"{fake.endpoint}/compute/v1",
               "PATH": f"{shutdown}:{Path(sys.executable).parent}:{os.environ['PATH']}"}
        try:
            p = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120)
        finally:
            md.close()
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        assert md.guest["cloudfit/state"] == "completed"
        assert fake.vms() == [] and not (tmp_path / "powered-off").exists()  # deleted, not left stopped
        assert ("DELETE", f"/compute/v1/projects/{PROJECT}/zones/us-central1-a/instances/boot-0", 200) in fake.requests
    assert seen.read_text() == key and key not in p.stdout + p.stderr
