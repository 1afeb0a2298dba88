"""The VMs' wheel leaves out planning code: only what the trainers never import may be left out."""

from __future__ import annotations

from pathlib import Path

from cloudfit.executors.gcp import wheel

PACKAGE = Path(wheel.__file__).resolve().parents[2]


def _module_files() -> dict[str, Path]:
    return wheel._module_files(PACKAGE)


def _closure(roots: list[str]) -> set[str]:
    """Every cloudfit module ``roots`` import (lazy imports inside functions too): ``wheel.closure``, which the
    wheel ships; the last test below imports them from the unpacked wheel for real."""
    return wheel.closure(PACKAGE, tuple(roots))


def test_nothing_the_trainers_import_is_left_out_of_the_wheel():
    files = _module_files()
    needed = _closure(["cloudfit.train", "cloudfit.train_llm"])
    shipped = {rel for rel, _ in wheel._files(PACKAGE)}
    missing = sorted(m for m in needed if files[m].relative_to(PACKAGE.parent).as_posix() not in shipped)
    assert not missing, f"the VMs' wheel leaves out modules the trainers import: {missing}"
    assert "cloudfit/cli/main.py" not in shipped and "cloudfit/plan/planner.py" not in shipped  # planning stays home


def test_the_wheel_fits_instance_metadata():
    _, data = wheel.runtime_wheel()
    assert len(data) * 4 / 3 < wheel.MAX_METADATA_BYTES  # base64 in metadata


def test_the_wheel_runs_the_trainers_the_log_follower_and_every_stacks_parser(tmp_path):
    """Unpacked alone (nothing else of cloudfit on the path), the wheel imports what a node runs: the trainers,
    ``cloudfit.runtime.logprogress`` and every stack's parser — and leaves the launcher and executors home."""
    import io
    import subprocess
    import sys
    import zipfile

    _, data = wheel.runtime_wheel()
    zipfile.ZipFile(io.BytesIO(data)).extractall(tmp_path)
    assert not (tmp_path / "cloudfit" / "launcher.py").exists()
    assert not (tmp_path / "cloudfit" / "executors" / "gcp" / "cluster.py").exists()
    code = ("import cloudfit, cloudfit.train, cloudfit.train_llm, cloudfit.runtime.logprogress\n"
            "from cloudfit import stacks\n"
            "assert cloudfit.__file__.startswith(%r), cloudfit.__file__\n"
            "for n in stacks.names():\n"
            "    st = stacks.get(n)\n"
            "    assert [e for e in st.parse_log(st.sample_log())], n\n") % str(tmp_path)
    p = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
                       capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
