"""`cloudfit search` end to end with the replay backend."""

from __future__ import annotations

import json

import numpy as np

from cloudfit.executors.replay import worlds_from_measurements
from tests.search.test_active import write_table


def _world():
    return [w for w in worlds_from_measurements() if w["name"].startswith("resnet50@64 fp32")][0]


def test_search_json_reports_trials_spend_and_plan(cli, tmp_path):
    w = _world()
    table = write_table(tmp_path / "t.csv", w)
    samples = float(np.median(list(w["table"].values()))) * 36000
    args = ["search", "--model", "resnet50", "--samples", str(samples), "--deadline", "40h", "--batch-size", "64",
            "--precision", "fp32", "--max-nodes", "8", "--probe-budget", "20", "--max-trials", "3",
            "--backend", "replay", "--replay-data", str(table)]
    r = cli(*args, "--json", "--out", str(tmp_path / "plan.json"))
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert 1 <= len(d["trials"]) <= 3 and d["stop_reason"] in ("max-trials", "expected-improvement", "probe-budget", "exhausted")
    assert d["probe_spend_usd"] == sum(t["probe_cost_usd"] for t in d["trials"]) <= 20
    assert abs(d["total_expected_usd"] - (d["probe_spend_usd"] + d["plan_expected_cost_usd"])) < 1e-9
    assert (tmp_path / "plan.json").exists()
    r = cli(*args)
    assert r.exit_code == 0 and "Total with probes" in r.output


def test_search_bad_input(cli, tmp_path):
    r = cli("search", "--model", "resnet50", "--samples", "1e7", "--deadline", "10h", "--probe-budget", "5")
    assert r.exit_code == 2 and "--replay-data" in r.output
    r = cli("search", "--model", "resnet50", "--samples", "1e7", "--deadline", "10h", "--probe-budget", "-1",
            "--replay-data", str(tmp_path / "x.csv"))
    assert r.exit_code == 2
    r = cli("search", "--model", "resnet50", "--samples", "1e7", "--deadline", "10h", "--probe-budget", "5",
            "--replay-data", str(tmp_path / "missing.csv"))
    assert r.exit_code == 2 and "not found" in r.output
