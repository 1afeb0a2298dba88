"""`cloudfit recommend` end to end: table, JSON, plan.json, SkyPilot YAML, plot, exit codes."""

from __future__ import annotations

import json

import pytest
import yaml
from tests.conftest import run_cloudfit

from cloudfit.plan.io import load_plan

BASE = ["recommend", "--model", "resnet50", "--epochs", "90", "--dataset-size", "1281167"]
KEYS = {"machine_type", "accelerator", "accelerators_per_node", "nodes", "region", "zone", "spot",
        "samples_per_second", "low", "high", "hours", "cost_usd", "cost_p90_usd", "p_on_time"}


def test_json_has_plan_and_ranked_candidates(cli):
    r = cli(*BASE, "--deadline", "24h", "--top", "4", "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d) == {"plan", "candidates"}
    cands = d["candidates"]
    assert 1 <= len(cands) <= 4 and all(KEYS <= set(c) for c in cands)
    costs = [c["cost_usd"] for c in cands]
    assert costs == sorted(costs)
    assert d["plan"]["schema_version"] == 1
    assert d["plan"]["chosen"]["config"]["offering"]["zone"] == cands[0]["zone"]
    assert all(c["p_on_time"] >= 0.9 for c in cands)


def test_table_outputs_and_files(cli, tmp_path):
    plan, sky, png = tmp_path / "plan.json", tmp_path / "task.yaml", tmp_path / "pareto.png"
    r = cli(*BASE, "--deadline", "24h", "--out", str(plan), "--emit-skypilot", str(sky), "--plot", str(png))
    assert r.exit_code == 0, r.stderr
    assert "Why #1:" in r.stdout and "Sensitivity:" in r.stdout and "Pareto front" in r.stdout
    p = load_plan(plan)
    task = yaml.safe_load(sky.read_text())
    o = p.chosen.config.offering
    first = task["resources"]["ordered"][0]  # the chosen config, then the alternatives SkyPilot can attach
    assert first["instance_type"] == o.machine_type
    assert first["accelerators"] == f"{o.accelerator}:{o.accelerators_per_node}"
    assert task["num_nodes"] == p.chosen.config.nodes and first["use_spot"] == p.chosen.config.spot
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_budget_defaults_to_time_objective(cli):
    r = cli(*BASE, "--budget", "400", "--json")
    d = json.loads(r.stdout)
    assert d["plan"]["workload"]["objective"] == "time"
    # the default under a budget is the cost × time knee: ranked by expected $ × expected hours
    knee = [c["cost_usd"] * c["hours"] for c in d["candidates"]]
    assert knee == sorted(knee)
    assert all(c["cost_p90_usd"] <= 400 for c in d["candidates"])
    fast = json.loads(cli(*BASE, "--budget", "400", "--objective", "fastest", "--json").stdout)
    hours = [c["hours"] for c in fast["candidates"]]
    assert hours == sorted(hours) and hours[0] <= d["candidates"][0]["hours"]


def test_spot_only_and_filters(cli):
    r = cli(*BASE, "--deadline", "48h", "--spot-only", "--regions", "us-*", "--accelerators", "A100,L4", "--json")
    assert r.exit_code == 0, r.stderr
    cands = json.loads(r.stdout)["candidates"]
    assert all(c["spot"] and c["region"].startswith("us-") and c["accelerator"] in ("A100", "L4") for c in cands)


@pytest.mark.parametrize(
    "args, code, msg",
    [(["--budget", "-5"], 2, "budget must be positive"),
     (["--deadline", "0h"], 2, "deadline must be positive"),
     (["--deadline", "12h", "--regions", "mars-*"], 2, "no region in the catalog matches 'mars-*'"),
     (["--deadline", "12h", "--spot-only", "--no-spot"], 2, "contradict"),
     (["--budget", "1"], 3, "no configuration meets a $1.00 budget")],
)
def test_bad_input_exit_codes(cli, args, code, msg):
    r = cli(*BASE, *args)
    assert r.exit_code == code and msg in r.stderr and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1


def test_unknown_model_and_subprocess():
    r = run_cloudfit("recommend", "--model", "alexnet-9000", "--samples", "1e6", "--deadline", "2h")
    assert r.returncode == 2 and "alexnet-9000" in r.stderr and "Traceback" not in r.stderr
    r = run_cloudfit(*BASE, "--deadline", "24h", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["candidates"]


def test_one_planner_entry_plans_both_kinds_of_workload():
    """A workload knows its kind; ``cloudfit.recommend`` plans samples and tokens alike (issue 25)."""
    import cloudfit
    from cloudfit.errors import UsageError
    from cloudfit.plan.io import plan_to_dict
    from cloudfit.plan.llm import recommend_llm

    w = cloudfit.make_workload(model="resnet50", samples=3e7, deadline="12h", max_nodes=2, accelerators=["T4"])
    assert w.kind == "samples" and cloudfit.recommend(w).layout is None
    t = cloudfit.token_workload(tokens=1e9, model="llama3-8b", deadline="7d", accelerators=["H100"], max_nodes=2)
    assert t.kind == "tokens" and t.limits.samples == 1e9 / 8192
    plan = cloudfit.recommend(t)
    assert plan.layout["model"] == plan.workload.model == "llama3-8b"
    same = [plan_to_dict(p) for p in (plan, recommend_llm(t.limits, t.job))]
    for d in same:
        d["provenance"].pop("created_at")
    assert same[0] == same[1]
    with pytest.raises(UsageError, match="searches exhaustively"):
        cloudfit.recommend(t, searcher="bayes")
