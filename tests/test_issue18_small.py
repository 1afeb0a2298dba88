"""The smaller items of issue 18, one test each."""

from __future__ import annotations

import json
import re

import pytest

from cloudfit.errors import InfeasibleError
from cloudfit.plan import recommend
from cloudfit.workload import make_workload

BERT = ["recommend", "--model", "bert-base", "--epochs", "2", "--dataset-size", "88000"]


def test_plot_refuses_a_format_it_cannot_write(cli, tmp_path):
    r = cli(*BERT, "--budget", "10", "--plot", str(tmp_path / "p.gif"))
    assert r.exit_code == 2 and ".png, .svg or .pdf" in r.stderr and not (tmp_path / "p.gif").exists()
    r = cli(*BERT, "--budget", "10", "--plot", str(tmp_path / "p.svg"))
    assert r.exit_code == 0, r.stderr
    assert (tmp_path / "p.svg").read_text().lstrip().startswith(("<?xml", "<svg"))


def test_profile_written_by_profile_run_wins_over_the_shipped_one(tmp_path, monkeypatch):
    from cloudfit.profiling.io import resolve_profile, shipped_profiles

    shipped = shipped_profiles()["resnet18"]
    monkeypatch.chdir(tmp_path)
    assert resolve_profile("resnet18") == shipped
    (tmp_path / "resnet18.json").write_text(shipped.read_text())
    assert resolve_profile("resnet18").resolve() == (tmp_path / "resnet18.json").resolve()
    plan = recommend(make_workload(model="resnet18", samples=1e7, deadline="4h"))
    assert plan.provenance["profile_file"] == "resnet18.json"


def test_too_short_deadline_names_what_is_needed_and_the_closest_are_the_fastest():
    w = make_workload(model="bert-base", epochs=2, dataset_size=88_000, deadline="1m")
    with pytest.raises(InfeasibleError) as e:
        recommend(w)
    msg = str(e.value)
    m = re.search(r"a deadline of (\d+)m \(\+[^,]+, with (.+?) in ([a-z0-9-]+): ", msg)
    assert m, msg
    need = int(m.group(1))
    fast = min(c.hours for c in e.value.closest)
    # the closest options are the most likely to be on time, then the fastest: not slower than what is needed
    assert all(c.hours * 60 <= need + 1 for c in e.value.closest), msg
    assert fast * 60 <= need
    # and the needed deadline really is enough
    plan = recommend(make_workload(model="bert-base", epochs=2, dataset_size=88_000, deadline=f"{need}m"))
    assert plan.chosen.p_on_time >= 0.9


def test_a_tie_the_rounding_hides_is_called_a_tie():
    from cloudfit.plan.explain import explain
    from cloudfit.search import Problem

    from dataclasses import replace

    plan = recommend(make_workload(model="bert-base", epochs=2, dataset_size=88_000, budget="10", spot="only",
                                   objective="fastest"))
    c = plan.chosen
    runner = replace(c, hours=c.hours + 0.2 / 3600, cost_usd=c.cost_usd + 0.01)  # 0.2 s slower, a cent dearer
    text = explain(c, runner, Problem("time", None, 10.0, 0.9))
    assert "both take about" in text and "#1 is cheaper" in text
    assert "0 s sooner" not in text


def test_json_plan_records_prices_and_rule(cli):
    r = cli(*BERT, "--budget", "10", "--json")
    d = json.loads(r.stdout)
    prov = d["plan"]["provenance"]
    assert "2026-11-22" in prov["prices"] and prov["objective_rule"].startswith("knee")
