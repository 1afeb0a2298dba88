"""cloudfit's trainer (issue 14): checkpoints at the priced interval, throttled progress, safe loads.

Before: a checkpoint every 50 steps (~7 s) whatever the plan priced, the progress file rewritten
about once a second through gcsfuse, and ``torch.load(weights_only=False)`` on files from a shared bucket.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from cloudfit import train
from cloudfit.spot.checkpointing import MIN_INTERVAL_S, young_daly_s


def _run(tmp_path: Path, *extra: str, steps: int = 300, monkeypatch=None) -> tuple[list[Path], int, dict]:
    saved: list[Path] = []
    writes = {"n": 0}
    real_save, real_write = train.save_checkpoint, train.write_json_atomic

    def save(folder, step, state, keep=2):
        p = real_save(folder, step, state, keep)
        saved.append(p)
        return p

    def write(path, obj):
        writes["n"] += 1
        real_write(path, obj)

    monkeypatch.setattr(train, "save_checkpoint", save)
    monkeypatch.setattr(train, "write_json_atomic", write)
    rc = train.main(["--model", "mlp", "--steps", str(steps), "--checkpoint-dir", str(tmp_path / "shared"),
                     "--progress-file", str(tmp_path / "progress.json"), *extra])
    assert rc == 0
    return saved, writes["n"], json.loads((tmp_path / "progress.json").read_text())


def test_checkpoints_follow_the_planned_interval_not_a_step_count(tmp_path, monkeypatch):
    saved, _, progress = _run(tmp_path, "--checkpoint-interval-s", "600", monkeypatch=monkeypatch)
    assert [p.name for p in saved] == ["ckpt-000000300.pt"]  # 300 fast steps: only the final checkpoint
    assert progress["checkpoint_interval_s"] == 600 and progress["state"] == "completed"


def test_the_interval_is_re_estimated_from_the_measured_write(tmp_path, monkeypatch):
    hazard = 0.036  # revocations per cluster-hour: Young/Daly gives ~45 s for a ~10 ms write
    saved, _, progress = _run(tmp_path, "--checkpoint-interval-s", "0.01", "--hazard-per-hour", str(hazard),
                              steps=400, monkeypatch=monkeypatch)
    # the first write comes after 0.01 s; then Young/Daly for the measured write time, far beyond this run
    assert len(saved) == 2 and saved[-1].name == "ckpt-000000400.pt"
    w = progress["checkpoint_write_s"]
    assert progress["checkpoint_interval_s"] == pytest.approx(young_daly_s(hazard, w), rel=2e-2)  # w is rounded in the file
    assert progress["checkpoint_interval_s"] >= MIN_INTERVAL_S


def test_young_daly_matches_the_planner_for_the_issue_example():
    # the issue's example: a 7.7 s write priced at ~810 s needs Λ ≈ 2·7.7/810² per second
    lam_per_h = 2 * 7.7 / 810**2 * 3600
    assert young_daly_s(lam_per_h, 7.7) == pytest.approx(810, rel=0.05)
    assert young_daly_s(0.0, 7.7) == young_daly_s(float("nan"), 7.7)  # on demand: the cap


def test_progress_is_written_at_most_every_n_seconds(tmp_path, monkeypatch):
    _, writes, progress = _run(tmp_path, "--progress-every-s", "1000", steps=2000, monkeypatch=monkeypatch)
    assert writes == 2 and progress["step"] == 2000  # the start and the end, nothing in between


def test_rank_0_writes_to_local_disk_and_uploads_in_the_background(tmp_path, monkeypatch):
    saved, _, _ = _run(tmp_path, "--local-checkpoint-dir", str(tmp_path / "local"), "--checkpoint-interval-s", "0.01",
                       monkeypatch=monkeypatch)
    assert saved and all(p.parent == tmp_path / "local" for p in saved)  # no rank wrote through the shared folder
    assert [s for s, _ in train.checkpoints(tmp_path / "shared")][0] == 300  # the final one was uploaded before exit
    assert not list((tmp_path / "shared").glob(".*.part"))


class _Boom:
    def __reduce__(self):
        import os

        return (os.system, (f"touch {MARKER}",))


MARKER = Path("/nonexistent")


def test_a_planted_checkpoint_cannot_run_code(tmp_path, monkeypatch):
    global MARKER
    MARKER = tmp_path / "pwned"
    _run(tmp_path, steps=20, monkeypatch=monkeypatch)  # a genuine checkpoint at step 20
    evil = tmp_path / "shared" / "ckpt-000000999.pt"
    evil.write_bytes(pickle.dumps({"model": _Boom()}))
    step, state = train.newest_readable(tmp_path / "shared")
    assert not MARKER.exists()  # weights_only=True refused the payload
    assert step == 20 and "model" in state
