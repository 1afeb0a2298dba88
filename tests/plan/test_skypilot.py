"""The SkyPilot task export (issue 14 item 9).

Before: ``run`` passed ``--samples`` to the trainer (which requires ``--steps``), checkpoints went to a
node-local folder, ``setup`` installed ``cloudfit==<version>`` from the index (not there; a name anyone
could claim), one bucket served every job of a model, and a3-edgegpu-8g (which SkyPilot cannot attach)
was emitted. The real ``skypilot`` package loads every emitted task in tests/executors/test_sky.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cloudfit import __version__
from cloudfit.plan.skypilot import CHECKPOINT_MOUNT, Shipped, skypilot_task
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


def test_checkpoints_go_to_a_bucket_of_this_launch_and_the_key_is_a_secret():
    """Before: every job of a model shared `cloudfit-<model>-ckpt` (403 for all but the first user, or a
    second job resuming the first one's checkpoint)."""
    one, two = skypilot_task(_plan()), skypilot_task(_plan())
    b1, b2 = (t["file_mounts"][CHECKPOINT_MOUNT]["name"] for t in (one, two))
    assert b1 != b2 and b1.startswith("cloudfit-mlp-") and len(b1) <= 63
    assert skypilot_task(_plan(), bucket="my-ckpts")["file_mounts"][CHECKPOINT_MOUNT] == {"name": "my-ckpts", "mode": "MOUNT"}
    assert f"--checkpoint-dir {CHECKPOINT_MOUNT}" in one["run"] and "--samples" not in one["run"]
    assert one["secrets"] == {"CLOUDFIT_CHECKPOINT_KEY": None}  # its value comes from the shell, never the file


def test_setup_never_installs_a_name_from_the_package_index():
    """Before: `pip install cloudfit==0.1.0` — not on the index, and whoever claims the name runs code
    on every node. Without a wheel the setup refuses; with one it installs that file, checked."""
    bare = skypilot_task(_plan())
    assert "cloudfit==" not in bare["setup"] and "exit 1" in bare["setup"]
    wheel = Shipped("/cloudfit-wheel", "cloudfit-9-py3-none-any.whl", "/x/cloudfit-9-py3-none-any.whl", "0" * 64, 10)
    task = skypilot_task(_plan(), wheel=wheel, launch_id="abcdef0123456789")
    assert task["file_mounts"]["/cloudfit-wheel/cloudfit-9-py3-none-any.whl"] == "/x/cloudfit-9-py3-none-any.whl"
    assert "sha256sum -c" in task["setup"] and "pip install --quiet /cloudfit-wheel/cloudfit-9-py3-none-any.whl" in task["setup"]


def _fresh_venv(tmp_path):
    """A fresh venv without pip (instant); pip comes from the base interpreter (system site packages)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    return venv


def _run_setup(task, venv, mounts: dict[str, str]):
    setup = task["setup"]
    for remote, local in mounts.items():
        setup = setup.replace(remote, local)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{venv / 'bin'}:{env['PATH']}", PIP_NO_DEPS="1", PIP_NO_INDEX="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    return subprocess.run(["bash", "-c", setup], env=env, capture_output=True, text=True, timeout=120), env


def test_the_emitted_setup_installs_the_checked_wheel_in_a_fresh_venv(tmp_path):
    from cloudfit.executors.skypilot import emit

    out = emit(_plan(), tmp_path / "task.yaml")
    task = yaml.safe_load(out.task.read_text())
    assert out.key_file.stat().st_mode & 0o077 == 0 and len(out.key_file.read_text().strip()) == 64
    assert out.key_file.read_text().strip() not in out.task.read_text()
    [(remote, local)] = [(r, l) for r, l in task["file_mounts"].items() if r.startswith("/cloudfit-wheel/")]
    assert Path(local) == out.wheel.resolve()
    venv = _fresh_venv(tmp_path)
    p, env = _run_setup(task, venv, {remote: local})
    assert p.returncode == 0, p.stderr[-2000:]
    got = subprocess.run([str(venv / "bin" / "python"), "-c", "import cloudfit, cloudfit.train; print(cloudfit.__version__, cloudfit.__file__)"],
                         env=env, capture_output=True, text=True, cwd=tmp_path)
    assert got.returncode == 0 and got.stdout.split()[0] == __version__ and str(venv) in got.stdout, got.stderr
    out.wheel.write_bytes(out.wheel.read_bytes() + b"tampered")  # a swapped wheel is refused before pip sees it
    p, _ = _run_setup(task, _fresh_venv(tmp_path / "2"), {remote: local})
    assert p.returncode != 0 and "does not match its SHA-256" in p.stderr
    again = emit(_plan(), tmp_path / "other.yaml")  # the same model again: another bucket
    assert again.bucket != out.bucket


def test_the_run_command_trains_locally_with_skypilot_environment(tmp_path):
    task = skypilot_task(_plan(samples=64 * 16 * 5))  # 5 steps of 64 samples per GPU on 16 GPUs
    run = task["run"].replace("/tmp/", f"{tmp_path}/").replace(CHECKPOINT_MOUNT, str(tmp_path / "bucket"))
    run = run.replace("python -m", f"{sys.executable} -m")
    env = {**os.environ, "SKYPILOT_NODE_IPS": "127.0.0.1", "SKYPILOT_NUM_NODES": "1", "SKYPILOT_NODE_RANK": "0",
           "SKYPILOT_NUM_GPUS_PER_NODE": "1", "OMP_NUM_THREADS": "1"}
    p = subprocess.run(["bash", "-c", run], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert checkpoints(tmp_path / "bucket")[0][0] == 5  # the trainer accepted every argument and finished


def test_a_workdir_archive_is_mounted_checked_then_unpacked_before_anything_runs(tmp_path):
    """`build_task`'s workdir: a packed folder (path, sha256, size) file-mounted, checked, unpacked into SkyPilot's
    workdir; a swapped archive stops the setup before `tar` or `pip` sees it."""
    import hashlib
    import tarfile

    from cloudfit.plan.skypilot import WORKDIR, workdir_archive
    from cloudfit.errors import UsageError

    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('hi')\n")
    archive = tmp_path / "wd.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src / "train.py", arcname="train.py")
    data = archive.read_bytes()
    with pytest.raises(UsageError, match="not the 3 it was packed with"):
        workdir_archive(str(archive), hashlib.sha256(data).hexdigest(), 3)
    wd = workdir_archive(str(archive), hashlib.sha256(data).hexdigest(), len(data))
    wheel = Shipped("/cloudfit-wheel", "w.whl", str(tmp_path / "w.whl"), "0" * 64, 0)
    task = skypilot_task(_plan(), pip_words=["numpy"], workdir=wd)
    assert task["file_mounts"]["/cloudfit-workdir/wd.tar.gz"] == str(archive) and wheel.remote not in task["file_mounts"]
    setup = task["setup"].replace("/cloudfit-workdir/wd.tar.gz", str(archive)).replace(WORKDIR, str(tmp_path / "wd"))
    setup = setup.replace("python -m pip install --quiet numpy", "true")
    p = subprocess.run(["bash", "-c", setup], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and (tmp_path / "wd" / "train.py").read_text() == "print('hi')\n", p.stderr
    archive.write_bytes(data + b"x")  # swapped after packing: refused before tar runs
    (tmp_path / "wd" / "train.py").unlink()
    p = subprocess.run(["bash", "-c", setup], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "does not match its SHA-256" in p.stderr and not (tmp_path / "wd" / "train.py").exists()


def test_emit_writes_the_task_of_every_clouds_plan_with_skypilots_names():
    """Before: `--emit-skypilot` refused every plan that was not on GCP."""
    from tests.executors.test_sky import AWS_H100, LAMBDA, NEBIUS, RUNPOD

    for o, acc in ((AWS_H100, "H100:8"), (LAMBDA, "H100:1"), (RUNPOD, "A100-80GB:1"), (NEBIUS, "H100:1")):
        task = skypilot_task(make_plan([ClusterConfig(o, 1, o.spot_price_per_hour is not None)]))
        [r] = task["resources"]["ordered"]
        assert (r["cloud"], r["instance_type"], r["accelerators"], r["region"]) == (o.cloud, o.machine_type, acc, o.region)
        assert ("zone" in r) == (o.cloud == "runpod") and task["secrets"] == {"CLOUDFIT_CHECKPOINT_KEY": None}
