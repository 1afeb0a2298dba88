"""atomic_open: the whole new file or the old one, never half, and no temporary left behind."""

import os
import stat

import pytest

from cloudfit.atomic import atomic_open


def test_a_clean_exit_replaces_the_file_with_ordinary_permissions(tmp_path):
    p = tmp_path / "sub" / "plan.json"
    with atomic_open(p) as fh:
        fh.write("new")
        assert not p.exists() and os.path.dirname(fh.name) == str(p.parent) and os.path.exists(fh.name)
    assert p.read_text() == "new" and os.listdir(p.parent) == ["plan.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~umask


def test_an_exception_leaves_the_old_file_and_no_temporary(tmp_path):
    p = tmp_path / "model.bin"
    p.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_open(p, "wb") as fh:
            fh.write(b"half of the ne")
            raise KeyboardInterrupt
    assert p.read_bytes() == b"old" and os.listdir(tmp_path) == ["model.bin"]


def test_only_whole_file_modes():
    with pytest.raises(ValueError, match="mode 'w' or 'wb'"):
        with atomic_open("x", "a"):
            pass
