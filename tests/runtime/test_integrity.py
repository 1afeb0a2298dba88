"""Checkpoints are code (issue 27): DCP unpickles a checkpoint's ``.metadata`` on every rank, so the
trainers sign what they write and refuse — one line naming the file, exit 2, nothing unpickled — a
checkpoint whose signature does not verify. Before: a planted ``.metadata`` ran its command on load."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import stat
from pathlib import Path

import pytest

from cloudfit import runtime
from cloudfit.runtime import integrity
from cloudfit.runtime.checkpoint import MARKER, complete_checkpoints
from tests.runtime.ranks import Trainer

KEY = "ab" * 32


class _Payload:
    """Unpickling this runs a shell command (what an attacker with write access to the bucket plants)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _train(trainer, capsys, *args: str) -> tuple[int, list[str]]:
    """The family's trainer in this process (one rank), as ``python -m`` would run it."""
    rc = runtime.main(trainer.family, trainer.argv(*args))
    return rc, capsys.readouterr().err.strip().splitlines()


@pytest.fixture
def saved(trainer, capsys, monkeypatch):
    """A genuine checkpoint at step 2 (signed with KEY)."""
    monkeypatch.setenv(integrity.ENV_KEY, KEY)
    rc, err = _train(trainer, capsys, "--steps", "2")
    assert rc == 0, err
    [(step, path)] = complete_checkpoints(trainer.ckpt)
    assert step == 2
    return path


def _refused(trainer, capsys, needle: str, *args: str) -> str:
    rc, err = _train(trainer, capsys, "--steps", "4", *args)
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"{trainer.family.prog}: ") and needle in err[0], err[0]
    assert not [m for m in trainer.metrics() if m["step"] > 2], "it trained on"
    return err[0]


def test_a_planted_metadata_pickle_is_refused_and_nothing_runs(trainer, saved, capsys, tmp_path):
    pwned = tmp_path / "pwned"
    (saved / ".metadata").write_bytes(pickle.dumps(_Payload(pwned)))
    _refused(trainer, capsys, f"{saved / '.metadata'}: signature does not verify")
    assert not pwned.exists()


def test_a_planted_newer_checkpoint_with_a_forged_marker_is_refused(trainer, saved, capsys, tmp_path):
    pwned = tmp_path / "pwned"
    evil = trainer.ckpt / "step-000000999"
    shutil.copytree(saved, evil)
    (evil / ".metadata").write_bytes(pickle.dumps(_Payload(pwned)))
    marker = json.loads((evil / MARKER).read_text())
    marker["step"] = 999  # the attacker cannot re-sign without the key
    (evil / MARKER).write_text(json.dumps(marker))
    _refused(trainer, capsys, f"{evil / MARKER}: signature does not verify")
    (evil / MARKER).write_text(json.dumps({"step": 999}))  # no signature at all (an old-format marker)
    _refused(trainer, capsys, f"checkpoint {evil / MARKER} is not signed")
    assert not pwned.exists()


def test_a_tampered_shard_an_extra_file_and_another_key_are_refused(trainer, saved, capsys, monkeypatch):
    shard = sorted(saved.glob("*.distcp"))[0]
    good = shard.read_bytes()
    shard.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    _refused(trainer, capsys, f"{shard}: signature does not verify")
    shard.write_bytes(good)
    (saved / "__7_0.distcp").write_bytes(b"x")
    _refused(trainer, capsys, f"{saved / '__7_0.distcp'}: not signed")
    (saved / "__7_0.distcp").unlink()
    monkeypatch.setenv(integrity.ENV_KEY, "cd" * 32)
    _refused(trainer, capsys, "signed with another key")
    monkeypatch.setenv(integrity.ENV_KEY, KEY)  # the right key: it resumes
    rc, err = _train(trainer, capsys, "--steps", "3")
    assert rc == 0, err
    assert [m["step"] for m in trainer.metrics()] == [1, 2, 3]


def test_a_malformed_key_is_one_line_and_exit_2(trainer, capsys, monkeypatch):
    monkeypatch.setenv(integrity.ENV_KEY, "not-hex")
    rc, err = _train(trainer, capsys, "--steps", "2")
    assert rc == 2 and err == [f"{trainer.family.prog}: ${integrity.ENV_KEY} must be 64 hex characters (a 32-byte key)"]
    assert not trainer.ckpt.exists()


def test_without_a_key_the_users_key_signs_and_another_user_cannot_plant(tmp_path, monkeypatch):
    monkeypatch.delenv(integrity.ENV_KEY, raising=False)
    home = Path(os.environ["CLOUDFIT_HOME"])
    key = integrity.checkpoint_key()
    path = home / integrity.KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and integrity.checkpoint_key() == key  # made once, kept
    monkeypatch.setenv("CLOUDFIT_HOME", str(tmp_path / "other"))
    assert integrity.checkpoint_key() != key  # another user (or machine) has another key
    (tmp_path / "other" / integrity.KEY_FILE).write_text("zz\n")
    with pytest.raises(integrity.BadInput, match="must be 64 hex characters"):
        integrity.checkpoint_key()


def test_the_marker_signs_every_file_and_itself(tmp_path):
    key = bytes.fromhex(KEY)
    (tmp_path / ".metadata").write_bytes(b"meta")
    files = {".metadata": integrity.file_digest(key, tmp_path / ".metadata")}
    marker = integrity.sign(key, {"step": 3}, files)
    (tmp_path / MARKER).write_text(json.dumps(marker))
    assert integrity.verified_marker(key, tmp_path / MARKER)["step"] == 3
    assert integrity.verify_files(key, tmp_path, marker["files"], [".metadata"]) is None
    (tmp_path / "x.metadata").write_bytes(b"meta")  # the same bytes under another name: its own digest
    assert integrity.file_digest(key, tmp_path / "x.metadata") != files[".metadata"]


@pytest.mark.slow
def test_on_two_ranks_every_rank_refuses_together_with_one_line(tmp_path):
    """The ranks split the shard files to verify; a bad one on any rank stops them all (rank 0 says it once)."""
    t = Trainer("cnn", tmp_path)
    env = {integrity.ENV_KEY: KEY}
    p = t.torchrun("--steps", "2", env=env)
    assert t.finish(p) == 0, t.logs()
    [(_, path)] = complete_checkpoints(t.ckpt)
    shards = sorted(path.glob("*.distcp"))
    assert len(shards) == 2
    shard = shards[0]  # rank 1 verifies it (rank 0: the metadata and the other shard)
    shard.write_bytes(b"\0" + shard.read_bytes()[1:])
    p = t.torchrun("--steps", "4", env=env)
    assert t.finish(p) != 0  # torchrun reports the failed ranks
    said = [line for line in t.logs().splitlines() if "signature does not verify" in line]
    assert said == [f"cloudfit.train: checkpoint file {shard}: signature does not verify: refused "
                    "(nothing in it was loaded)"], t.logs()
    assert "exitcode  : 2 " in t.logs() and "SIGABRT" not in t.logs(), t.logs()  # the refusal's code, not a crash
