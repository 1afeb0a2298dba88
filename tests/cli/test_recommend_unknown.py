"""`cloudfit recommend` says which candidates rest on unmeasured GPUs, what a probe costs, and `--risk p90`
(issue 33, item 4), at 80 columns and wide."""

from __future__ import annotations

import json
import re

import pytest
from rich.console import Console

from cloudfit.cli.recommend import _distinct, _render
from cloudfit.plan import recommend
from cloudfit.workload import make_workload

#: The README's "What is unknown" command: resnet101 has no H200 row (resnet50 has one since the H200 session of
#: 2026-11-27, bench/RESULTS_gpu.md, and its plan now rests on measured rows: test_a_measured_first_choice_needs_no_probe)
ALL = ["recommend", "--model", "resnet101", "--epochs", "90", "--dataset-size", "1281167", "--deadline", "24h",
       "--clouds", "all"]


@pytest.fixture(scope="module")
def plan():
    return recommend(make_workload(model="resnet101", epochs=90, dataset_size=1_281_167, deadline="24h",
                                   clouds=["all"]))


def _text(plan, width: int) -> str:
    con = Console(width=width, record=True, highlight=False, soft_wrap=False, file=open("/dev/null", "w"))
    _render(plan, _distinct(plan, 5), None, None, None, con=con)
    return con.export_text()


@pytest.mark.parametrize("width", [80, 200])
def test_table_marks_unmeasured_gpus_and_prices_the_probe(plan, width):
    text = _text(plan, width)
    table, rest = text.split("Why #1")
    measured = plan.provenance["unknown"]["measured"]
    for e in _distinct(plan, 5):
        acc = e.config.offering.accelerator
        assert (f"{acc}†" in table) == (not measured[acc])
    assert "H200†" in table  # #1 is an H200 (no resnet101 row)
    assert "† no resnet101 measurement on this GPU: spec-based" in rest
    flat = " ".join(rest.split())
    p = plan.provenance["unknown"]["probe"]
    assert f"measure first: ~${p['usd']:,.2f}" in flat
    # the command `cloudfit search` runs where it can probe (GCP); elsewhere the line says it cannot
    assert (p["command"] in flat) if p["on_gcp"] else "`cloudfit search` probes on GCP only" in flat
    # a probe off GCP carries no command (a `cloudfit search` there would probe another cluster at another price)
    assert (p["command"] is None) == (not p["on_gcp"])
    from cloudfit.plan.unknown import describe

    assert f"Best plan on measured rows: {describe(plan.provenance['unknown']['measured_alternative'])}" in flat
    if width == 80:
        assert max(len(line.rstrip()) for line in text.splitlines()) <= 80


def test_json_says_measured_per_candidate(cli):
    r = cli(*ALL, "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    got = {(c["accelerator"], c["measured"]) for c in d["candidates"]}
    # #1 an H200 (no resnet101 row); the best plan on measured rows named beside it (an 8×H100)
    assert ("H200", False) in got
    assert d["plan"]["provenance"]["unknown"]["measured_alternative"]
    assert d["plan"]["provenance"]["unknown"]["probe"]["usd"] > 0


def test_risk_p90_in_the_header_and_plan(cli):
    r = cli(*ALL, "--risk", "p90")
    assert r.exit_code == 0, r.stderr
    assert "on the 10% speed (--risk p90)" in r.stdout.splitlines()[0]
    assert "pessimistic end" not in r.stdout  # it already chose there
    d = json.loads(cli(*ALL, "--risk", "p90", "--json").stdout)
    assert all(c["samples_per_second"] == pytest.approx(c["low"]) for c in d["candidates"])


@pytest.mark.parametrize("extra", [["--risk", "p50"], ["--risk", "p90", "--model", "llama3-8b", "--tokens", "1e9"]])
def test_bad_risk_is_one_line_exit_2(cli, extra):
    args = ALL + extra if extra[-1] != "1e9" else ["recommend", "--deadline", "7d", *extra]
    r = cli(*args)
    assert r.exit_code == 2 and r.stdout == "" and "--risk" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_llm_table_and_json_mark_unmeasured_gpus(cli):
    import cloudfit
    from cloudfit.cli.recommend_llm import _render as render_llm
    from cloudfit.cli.render import distinct

    plan = cloudfit.recommend(cloudfit.token_workload(tokens=1e9, model="llama3-8b", deadline="7d",
                                                      accelerators=["H200", "H100"], max_nodes=2))
    measured = plan.provenance["unknown"]["measured"]
    assert measured == {"H100": True, "H200": False}
    con = Console(width=80, record=True, highlight=False, soft_wrap=False, file=open("/dev/null", "w"))
    shown = distinct(plan, 5)
    render_llm(plan, shown, 8192, None, None, None, con=con)
    text = con.export_text()
    table = text.split("Layout #1")[0]
    for _, e in shown:
        acc = e.config.offering.accelerator
        assert (f"{acc}†" in table) == (not measured[acc])
    assert ("† no LLM measurement on this GPU: spec-based" in text) == any("†" in ln for ln in table.splitlines())
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    r = cli("recommend", "--model", "llama3-8b", "--tokens", "1e9", "--deadline", "7d", "--accelerators", "H200",
            "--max-nodes", "2", "--json")
    assert r.exit_code == 0, r.stderr
    assert {c["measured"] for c in json.loads(r.stdout)["candidates"]} == {False}


def test_the_done_when_command_at_80_columns(cli, monkeypatch):
    """Issue 33's "Done when" (its resnet50 now rests on a measured H200 row: the same command for resnet101, which
    has none): says which candidates rest on unmeasured GPUs and what a probe would cost, in 80 columns."""
    monkeypatch.setenv("COLUMNS", "80")
    r = cli(*ALL)
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "…" not in r.stdout and max(len(line) for line in lines) <= 80, r.stdout
    text = " ".join(r.stdout.split())
    assert "†" in lines[3] and "† no resnet101 measurement on this GPU: spec-based" in text
    assert re.search(r"measure first: ~\$\d+\.\d\d \(10 min on 1× \S+ on demand in \w+ [\w-]+", text)


def test_a_measured_first_choice_needs_no_probe(cli, monkeypatch):
    """resnet50 --clouds all: #1 (8×H200) rests on the profile's measured H200 row — no dagger on it, no probe; the
    GPUs still spec-based are named in the basis line."""
    monkeypatch.setenv("COLUMNS", "200")
    r = cli("recommend", "--model", "resnet50", "--epochs", "90", "--dataset-size", "1281167", "--deadline", "24h",
            "--clouds", "all")
    assert r.exit_code == 0, r.stderr
    row1 = next(line for line in r.stdout.splitlines() if line.lstrip().startswith("│ 1 "))
    assert "H200" in row1 and "H200†" not in row1
    assert "measure first" not in r.stdout and "Unmeasured: #1" not in r.stdout
    assert "spec-based: A10, A10G, B200" in " ".join(r.stdout.split())
