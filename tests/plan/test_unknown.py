"""Recommend knows what is unknown (issue 33, item 4): which GPUs have a measurement of the model family, the
best plan on measured rows, the pessimistic re-rank, ``--risk p90`` and the probe that would measure."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cloudfit.errors import UsageError
from cloudfit.plan import recommend, unknown
from cloudfit.plan.planner import _space_of, load_workload_profile
from cloudfit.search import Problem
from cloudfit.types import Measurement
from cloudfit.workload import make_workload

#: resnet101: its #1 (an H200) rests on no measurement; resnet50's profile holds a measured H200 row since the H200
#: session of 2026-11-27 (bench/RESULTS_gpu.md), so its plan rests on measured rows
ALL = dict(model="resnet101", epochs=90, dataset_size=1_281_167, deadline="24h", clouds=["gcp", "aws"])


@pytest.fixture(scope="module")
def work():
    return make_workload(**ALL)


@pytest.fixture(scope="module")
def plans(work):
    return recommend(work), recommend(work, risk="p90")


def test_measured_per_gpu_follows_the_family_rows_and_the_profile():
    prof = load_workload_profile(make_workload(**{**ALL, "model": "resnet50"}))
    m = unknown.measured_gpus(prof, ["H100", "A100", "A100-80GB", "V100", "H200", "B200", "T4", "L4"])
    # resnet50 has training-table rows on A100 (and its 80 GB variants), V100 and H100, and its profile a measured
    # H200 row (the H200 session); none on the rest
    assert m == {"A100": True, "A100-80GB": True, "B200": False, "H100": True, "H200": True, "L4": False,
                 "T4": False, "V100": True}
    # a model of no family in the table: only the profile's own (GPU) measurements count
    other = dataclasses.replace(prof, model="my-net", measurements=())
    assert not any(unknown.measured_gpus(other, ["H100", "A100", "T4"]).values())
    probe = Measurement("T4", 1, 1, 64, "fp16", 300.0)
    got = unknown.measured_gpus(dataclasses.replace(other, measurements=(probe,)), ["H100", "T4"])
    assert got == {"H100": False, "T4": True}
    # the family, not the workload name: bert-large's rows count for a bert-base profile
    assert unknown.family("bert-base")[0] == unknown.family("bert-large")[0] == "bert"


def test_unmeasured_choice_names_the_measured_alternative_and_the_pessimistic_end(plans):
    plan, _ = plans
    u = plan.provenance["unknown"]
    acc = plan.chosen.config.offering.accelerator
    assert u["accelerator"] == acc and u["chosen_measured"] is False and u["measured"][acc] is False
    alt = u["measured_alternative"]
    assert u["measured"][alt["accelerator"]] is True
    # #1 is the cheapest plan within the limits: the best on measured rows cannot be cheaper
    assert alt["cost_usd"] >= plan.chosen.cost_usd
    pess = u["pessimistic"]
    # at its band's low end the chosen plan is slower and costs more, never less
    assert pess["chosen"]["hours"] > plan.chosen.hours and pess["chosen"]["cost_usd"] > plan.chosen.cost_usd
    text = " ".join(unknown.lines(u))
    assert f"#1 rests on {acc}" in text and "Best plan on measured rows" in text and "10% speed" in text


def test_risk_p90_chooses_on_the_low_end(plans):
    plan, low = plans
    assert low.provenance["unknown"]["risk"] == "p90" and "pessimistic" not in low.provenance["unknown"]
    for e in low.candidates():  # every candidate planned at its band's low end
        assert e.samples_per_second == pytest.approx(e.low)
    # fewer plans meet the deadline and each is slower: the cheapest one costs at least as much
    assert low.chosen.cost_usd >= plan.chosen.cost_usd
    # the explanation's re-rank is what --risk p90 chooses
    best = plan.provenance["unknown"]["pessimistic"]["best"]
    c = low.chosen.config
    assert (best["machine_type"], best["nodes"], best["spot"]) == (c.offering.machine_type, c.nodes, c.spot)
    assert best["cost_usd"] == pytest.approx(low.chosen.cost_usd)


def test_probe_is_the_first_probe_cloudfit_search_would_run(plans, work):
    import inspect

    from cloudfit.active.record import PROBE_SECONDS
    from cloudfit.cli.search import search

    plan, _ = plans
    p = plan.provenance["unknown"]["probe"]
    o = plan.chosen.config.offering
    space, _, _ = _space_of(work, None, None)
    same = [i for i in range(len(space)) if space.shapes[space.shape[i]].cloud == "gcp"
            and (space.shapes[space.shape[i]].accelerator, space.shapes[space.shape[i]].accelerators_per_node,
                 int(space.nodes[i])) == (o.accelerator, o.accelerators_per_node, plan.chosen.config.nodes)]
    on_demand = [i for i in same if not space.spot[i]]
    assert p["on_gcp"] and not p["spot"] and "cloud" not in p  # gcp: as plans write it
    assert p["price_per_hour"] == pytest.approx(min(space.price_per_hour[i] for i in on_demand))
    assert p["usd"] == pytest.approx(p["price_per_hour"] * PROBE_SECONDS / 3600)
    # the command names only options `cloudfit search` has, and a probe budget that pays for the probe
    cmd = p["command"].split()
    assert cmd[:2] == ["cloudfit", "search"]
    names = {n for prm in inspect.signature(search).parameters.values()
             for n in getattr(prm.default, "param_decls", ())}
    assert "--probe-budget" in names
    assert {a for a in cmd if a.startswith("--")} <= names
    assert float(cmd[cmd.index("--probe-budget") + 1]) >= p["usd"]
    assert cmd[cmd.index("--accelerators") + 1] == o.accelerator


def test_a_measured_choice_says_nothing_more():
    plan = recommend(make_workload(model="resnet50", epochs=90, dataset_size=1_281_167, deadline="24h",
                                   accelerators=["A100"]))
    u = plan.provenance["unknown"]
    assert u["chosen_measured"] is True and "probe" not in u and unknown.lines(u) == []


def test_pessimistic_keeps_the_band_and_the_space():
    work = make_workload(**ALL)
    space, _, _ = _space_of(work, None, None)
    before = space.samples_per_second.copy()
    low = unknown.pessimistic(space)
    assert np.array_equal(space.samples_per_second, before)  # the (cached) space is not changed
    assert np.all(low.samples_per_second <= before) and np.array_equal(low.low, space.low)
    a, m = low.assess(Problem.of(work)), space.assess(Problem.of(work))
    # slower never takes less time nor costs less: what lets facts() re-price only the candidates that could win
    assert np.all(a.hours >= m.hours - 1e-9) and np.all(a.cost_usd >= m.cost_usd - 1e-9)


@pytest.mark.parametrize("bad", ["p80", "", "worst"])
def test_bad_risk(bad):
    with pytest.raises(UsageError, match="--risk must be median or p90"):
        unknown.check_risk(bad)


def test_llm_plans_know_their_measured_gpus():
    import cloudfit

    m = unknown.llm_measured(["H100", "A100-80GB", "B200", "H200", "L4"])
    # the LLM step model's table has H100, A100 and B200 runs; none on H200 or L4
    assert m == {"A100-80GB": True, "B200": True, "H100": True, "H200": False, "L4": False}
    assert unknown.llm_measured(["H200"], anchored_on=["H200"]) == {"H200": True}
    t = cloudfit.token_workload(tokens=1e9, model="llama3-8b", deadline="7d", accelerators=["H100", "L4"],
                                max_nodes=2)
    u = cloudfit.recommend(t).provenance["unknown"]
    assert u["measured"] == {"H100": True, "L4": False} and u["family"] == "LLM"
    h200 = cloudfit.recommend(cloudfit.token_workload(tokens=1e9, model="llama3-8b", deadline="7d",
                                                      accelerators=["H200"], max_nodes=2)).provenance["unknown"]
    assert h200["chosen_measured"] is False and h200["measured_alternative"] is None
    assert "probe" not in h200  # `cloudfit search` probes profiled models, not large ones
    assert "No plan on measured GPUs meets the limits." in unknown.lines(h200)[0]


def test_search_command_carries_the_workloads_options():
    import inspect

    from cloudfit.cli.search import search

    w = make_workload(model="bert-base", samples=5e7, budget="300", regions=["us-*"], spot="never", max_nodes=4,
                      precision="bf16", batch_size=32, confidence=0.8)
    cmd = unknown.search_command(w, {"usd": 1.234}, "L4")
    for part in ("--model bert-base", "--samples 50000000", "--budget 300.00", "--objective time",
                 "--confidence 0.8", "--regions us-*", "--no-spot", "--max-nodes 4", "--precision bf16",
                 "--batch-size 32", "--accelerators L4", "--probe-budget 1.24"):
        assert part in cmd, part
    names = {x for prm in inspect.signature(search).parameters.values()
             for n in getattr(prm.default, "param_decls", ()) for x in n.split("/")}  # "--spot/--no-spot"
    assert {a for a in cmd.split() if a.startswith("--")} <= names


@pytest.mark.parametrize("objective", [None, "fastest"])
def test_the_pessimistic_end_ranks_as_the_planner_does_under_a_budget(objective):
    """Under a budget the planner picks the cost × time knee (or the fastest): the re-rank at the bands' low end
    picks what --risk p90 picks, though it prices again only the candidates that could win there."""
    w = make_workload(model="resnet101", epochs=90, dataset_size=1_281_167, budget="400", objective=objective,
                      clouds=["all"])
    plan, low = recommend(w), recommend(w, risk="p90")
    u = plan.provenance["unknown"]
    assert u["chosen_measured"] is False  # an H200 or B200 plan
    best, c = u["pessimistic"]["best"], low.chosen.config
    assert (best["machine_type"], best["nodes"], best["spot"]) == (c.offering.machine_type, c.nodes, c.spot)
    assert best["cost_usd"] == pytest.approx(low.chosen.cost_usd) and best["hours"] == pytest.approx(low.chosen.hours)


def test_risk_p90_with_a_bill_explains_at_the_speed_it_chose_on():
    """The bill's lines compare #1 with the best plan near the data: both at the low end under --risk p90 (it said
    "still saves $-2.54" when only the planner's space was at the low end)."""
    from cloudfit.bill import Bill
    from cloudfit.bill import plan as bill_plan

    b = bill_plan.recommend(make_workload(**ALL), Bill.of("gs://b/imagenet", "150GB", "us-central1", 2, None), None,
                            risk="p90")
    assert np.array_equal(b.space.samples_per_second, b.space.low)
    assert b.plan.provenance["unknown"]["risk"] == "p90" and "saves $-" not in " ".join(b.lines)
    with pytest.raises(UsageError, match="large-model plans choose on the median"):
        import cloudfit

        bill_plan.recommend(cloudfit.token_workload(tokens=1e9, model="llama3-8b", deadline="7d"), None, None,
                            risk="p90")
