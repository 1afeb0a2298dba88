"""Issue 34, "README tour": its lines run as written (a shipped config.json, `down` naming the cluster the tour
made), launch progress lines carry an ETA, a local launch without torch names the extra, and the "Your own
training script" section names what the script really gets."""

from __future__ import annotations

import json
import re
import shlex
from types import SimpleNamespace

from cloudfit.executors.base import Event
from tests.conftest import REPO


def _tour() -> list[list[str]]:
    """The README tour's commands, continuation lines joined, comments dropped, as argv lists."""
    text = (REPO / "README.md").read_text()
    block = text.split("## Tour", 1)[1].split("```bash", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.startswith("cloudfit ")]


def test_the_tours_config_line_names_a_shipped_config_and_runs(cli, tmp_path):
    [line] = [a for a in _tour() if "--config" in a and a[1] == "recommend"]
    config = line[line.index("--config") + 1]
    assert (REPO / config).is_file(), config
    args = [str(REPO / a) if a == config else a.replace("$T", str(tmp_path)) for a in line[1:]]
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    plan = json.loads((tmp_path / "llm.json").read_text())
    assert plan["layout"]["degrees"]["tp"] == 8


def test_the_tours_down_names_the_cluster_its_launch_made():
    tour = _tour()
    names = {a[a.index("--name") + 1] for a in tour if a[1] == "launch" and "--name" in a}
    downs = [a for a in tour if a[1] == "down"]
    assert downs and all(a[2] in names for a in downs), (downs, names)


def _printer():
    from cloudfit.cli.launch import _EventPrinter

    lines: list[str] = []
    p = _EventPrinter(SimpleNamespace(print=lambda text, **kw: lines.append(text)))
    return p, lines


def test_progress_lines_end_in_an_eta_from_the_measured_rate(monkeypatch):
    import cloudfit.cli.launch as launch

    clock = iter(range(10, 1000, 3))  # each event 3 s after the last: never throttled
    monkeypatch.setattr(launch.time, "monotonic", lambda: float(next(clock)))
    p, lines = _printer()
    for t, step in ((100.0, 0), (110.0, 10), (130.0, 30)):  # 1 step/s measured
        p(Event("progress", f"step {step}/100", {"step": step, "total_steps": 100, "updated_at": t}))
    assert "ETA" not in lines[0]  # no rate yet
    assert lines[1].endswith("ETA 90 s") and lines[2].endswith("ETA 70 s"), lines
    # a restart resumes at an earlier step: the rate is measured afresh
    p(Event("progress", "step 20/100", {"step": 20, "total_steps": 100, "updated_at": 200.0, "restart": 1}))
    assert "ETA" not in lines[3]
    p(Event("progress", "step 40/100", {"step": 40, "total_steps": 100, "updated_at": 210.0, "restart": 1}))
    assert lines[4].endswith("ETA 30 s"), lines[4]  # 2 steps/s, 60 steps left


def test_a_local_launch_without_torch_names_the_extra_before_anything_starts(cli, tmp_path, monkeypatch):
    import importlib.util

    from cloudfit.types import ClusterConfig
    from tests.executors.plans import offering, write_plan

    plan = write_plan(tmp_path / "plan.json", [ClusterConfig(offering(price=None), 1, True)], budget_usd=5)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    r = cli("launch", str(plan), "--backend", "local", "--yes", "--steps", "2", "--name", "no-torch")
    assert r.exit_code == 1, (r.stdout, r.stderr)
    [line] = r.stderr.strip().splitlines()
    assert 'pip install "cloudfit[profile]"' in line and "train.log" not in line
    assert "no-torch" not in cli("status", "--json").stdout  # nothing was created or charged


def test_your_own_training_script_section_names_what_the_script_gets():
    text = (REPO / "README.md").read_text()
    section = text.split("## Your own training script", 1)[1].split("\n## ", 1)[0]
    assert "cloudfit launch plan.json -- python train.py" in section
    named = set(re.findall(r"`(CLOUDFIT_[A-Z_]+)`", section))
    from cloudfit.executors import local

    source = (REPO / "cloudfit" / "executors" / "local.py").read_text()
    given = {v for v in named if v in source or v in (local.ENV_CLUSTER, local.ENV_CHECKPOINT_KEY)}
    assert named and named == given, named - given
    assert {"RANK", "WORLD_SIZE", "LOCAL_RANK"} <= set(re.findall(r"`([A-Z_]+)`", section))

