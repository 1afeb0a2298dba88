"""The SkyPilot task export (issue 14 item 9).

Before: ``run`` passed ``--samples`` to the trainer (which requires ``--steps``), checkpoints went to a
node-local folder, ``setup`` installed cloudfit unpinned, and a3-edgegpu-8g (which SkyPilot cannot
attach) was emitted. Loaded with the real ``skypilot`` package when it is importable (skipped otherwise).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cloudfit import __version__
from cloudfit.plan.skypilot import CHECKPOINT_MOUNT, skypilot_task
from cloudfit.train import checkpoints
from cloudfit.types import ClusterConfig
from tests.executors.plans import catalog_offering, make_plan

REPO = Path(__file__).resolve().parents[2]


def _plan(model="mlp", samples=64 * 40):
    edge = ClusterConfig(catalog_offering("us-central1-a", "a3-edgegpu-8g", "H100", 8), 2, True)
    high = ClusterConfig(catalog_offering("us-central1-a", "a3-highgpu-8g", "H100", 8), 2, True)
    other_nodes = ClusterConfig(catalog_offering("us-central1-b", "a3-highgpu-8g", "H100", 8), 3, False)
    t4 = ClusterConfig(catalog_offering("us-central1-b", "a3-highgpu-8g", "H100", 8), 2, False)
    return make_plan([edge, high, other_nodes, t4], model=model, samples=samples)


def test_the_task_never_emits_shapes_skypilot_cannot_attach_and_orders_the_alternatives():
    task = skypilot_task(_plan())
    ordered = task["resources"]["ordered"]
    assert [r["instance_type"] for r in ordered] == ["a3-highgpu-8g", "a3-highgpu-8g"]
    assert [r["use_spot"] for r in ordered] == [True, False] and task["num_nodes"] == 2
    assert all(r["accelerators"] == "H100:8" for r in ordered)


def test_setup_pins_the_planning_cloudfit_and_checkpoints_go_to_a_bucket():
    task = skypilot_task(_plan(), bucket="my-ckpts")
    assert f"cloudfit=={__version__}" in task["setup"]
    assert task["file_mounts"] == {CHECKPOINT_MOUNT: {"name": "my-ckpts", "mode": "MOUNT"}}
    assert f"--checkpoint-dir {CHECKPOINT_MOUNT}" in task["run"] and "--samples" not in task["run"]


def test_the_run_command_trains_locally_with_skypilot_environment(tmp_path):
    task = skypilot_task(_plan(samples=64 * 16 * 5))  # 5 steps of 64 samples per GPU on 16 GPUs
    run = task["run"].replace("/tmp/", f"{tmp_path}/").replace(CHECKPOINT_MOUNT, str(tmp_path / "bucket"))
    run = run.replace("python -m", f"{sys.executable} -m")
    env = {**os.environ, "SKYPILOT_NODE_IPS": "127.0.0.1", "SKYPILOT_NUM_NODES": "1", "SKYPILOT_NODE_RANK": "0",
           "SKYPILOT_NUM_GPUS_PER_NODE": "1", "OMP_NUM_THREADS": "1"}
    p = subprocess.run(["bash", "-c", run], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert checkpoints(tmp_path / "bucket")[0][0] == 5  # the trainer accepted every argument and finished


def test_the_yaml_loads_with_the_real_skypilot_package(tmp_path):
    sky = pytest.importorskip("sky", reason="skypilot is not installed (pip install skypilot)")
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(skypilot_task(_plan()), sort_keys=False))
    task = sky.Task.from_yaml(str(path))
    assert task.num_nodes == 2
    assert len(task.resources) == 2 and {r.instance_type for r in task.resources} == {"a3-highgpu-8g"}
    assert CHECKPOINT_MOUNT in task.storage_mounts
