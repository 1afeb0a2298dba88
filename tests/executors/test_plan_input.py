"""plan.json is input like any other (issue 14): validated field by field, re-priced from the catalog.

Before: ``nodes: 0`` → ZeroDivisionError traceback; ``nodes: -3`` → IndexError; a negative price → a
traceback; price 0 → a 120-day max_run_duration and $0 charged; ``"spot": "false"`` launched SPOT;
0 GPUs accepted; a zone with path characters → a traceback and a cluster `down` could not clear.
"""

from __future__ import annotations

import json

import pytest

from cloudfit.executors.state import StateStore
from cloudfit.types import ClusterConfig
from tests.executors.conftest import PROJECT
from tests.executors.plans import offering, write_plan


def _plan(tmp_path):
    cfgs = [ClusterConfig(offering(price=None), 2, True), ClusterConfig(offering("us-central1-b", price=None), 2, True)]
    return write_plan(tmp_path / "plan.json", cfgs, budget_usd=30)


def _mutate(path, fn):
    d = json.loads(path.read_text())
    fn(d)
    path.write_text(json.dumps(d))
    return path


def _off(d):
    return d["chosen"]["config"]["offering"]


@pytest.mark.parametrize("mutation, message", [
    (lambda d: d["chosen"]["config"].update(nodes=0), "chosen.config.nodes must be a whole number >= 1"),
    (lambda d: d["chosen"]["config"].update(nodes=-3), "chosen.config.nodes must be a whole number >= 1"),
    (lambda d: d["chosen"]["config"].update(nodes=2.5), "chosen.config.nodes must be a whole number"),
    (lambda d: _off(d).update(price_per_hour=-1.0), "price_per_hour must be a number > 0"),
    (lambda d: _off(d).update(spot_price_per_hour=0), "spot_price_per_hour must be a number > 0"),
    (lambda d: d["chosen"]["config"].update(spot="false"), "chosen.config.spot must be true or false"),
    (lambda d: _off(d).update(accelerators_per_node=0), "accelerators_per_node must be a whole number >= 1"),
    (lambda d: _off(d).update(zone="us-central1-a/../../x"), "zone must be a zone name"),
    (lambda d: _off(d).update(zone="europe-west4-a"), "must lie in region us-central1"),
    (lambda d: _off(d).update(machine_type="n1 highmem; rm -rf"), "machine_type must be a Compute Engine machine type"),
    (lambda d: d["workload"].update(samples=float("1e400") if False else "many"), "workload.samples must be a number"),
    (lambda d: d["workload"].update(budget_usd=-5), "workload.budget_usd must be a number > 0"),
    (lambda d: d["alternatives"][0]["config"].update(nodes=0), "alternatives[0].config.nodes"),
    (lambda d: d.update(alternatives={"a": 1}), "alternatives must be a list"),
])
def test_malformed_plans_exit_2_with_one_line_and_create_nothing(cli, fake, tmp_path, mutation, message):
    path = _mutate(_plan(tmp_path), mutation)
    for backend in (["--backend", "local"], ["--backend", "gcp", "--project", PROJECT, "--compute-endpoint",
                                              fake.endpoint, "--checkpoint-dir", "gs://ckpt-bucket/x"]):
        r = cli("launch", str(path), "--yes", "--name", "bad", *backend)
        assert r.exit_code == 2, r.output
        assert message in r.output and "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1
    assert StateStore().clusters() == [] and fake.requests == []


@pytest.mark.parametrize("where, value, message", [
    ("price_per_hour", 0.01, "the catalog at $0.82321/h"),  # a plan cheaper than the catalog
    ("spot_price_per_hour", 0.0001, "the catalog at $0.30432/h"),
    ("price_per_hour", 50.0, "the catalog at $0.82321/h"),  # dearer too: a mismatch is a mismatch
])
def test_a_plan_priced_unlike_the_catalog_is_refused(cli, tmp_path, where, value, message):
    path = _mutate(_plan(tmp_path), lambda d: _off(d).update({where: value}))
    r = cli("launch", str(path), "--yes", "--dry-run")
    assert r.exit_code == 2 and message in r.output and "--trust-plan-prices" in r.output, r.output


def test_unknown_zones_and_machine_types_are_refused_even_with_trust(cli, tmp_path):
    path = _mutate(_plan(tmp_path), lambda d: _off(d).update(zone="mars-north1-a", region="mars-north1"))
    r = cli("launch", str(path), "--dry-run", "--trust-plan-prices")
    assert r.exit_code == 2 and "zone 'mars-north1-a' is not in the catalog" in r.output
    path = _mutate(_plan(tmp_path), lambda d: _off(d).update(machine_type="n9-mega-8"))
    r = cli("launch", str(path), "--dry-run", "--trust-plan-prices")
    assert r.exit_code == 2 and "machine type 'n9-mega-8' is not in the catalog" in r.output


def test_trust_plan_prices_never_charges_less_than_the_catalog_and_is_recorded(cli, fake, tmp_path):
    cheap = _mutate(_plan(tmp_path), lambda d: _off(d).update(spot_price_per_hour=0.0001))
    r = cli("launch", str(cheap), "--dry-run", "--json", "--trust-plan-prices", "--name", "tr", "--backend", "gcp",
            "--project", PROJECT, "--compute-endpoint", fake.endpoint)
    assert r.exit_code == 0, r.output
    pv = json.loads(r.output)["preview"]
    assert pv["nodes"][0]["price_per_hour"] == pytest.approx(0.30432)  # the catalog's, not the plan's $0.0001
    assert any("--trust-plan-prices" in n for n in pv["notes"])
    dear = _mutate(_plan(tmp_path), lambda d: _off(d).update(spot_price_per_hour=0.5))
    r = cli("launch", str(dear), "--yes", "--trust-plan-prices", "--name", "tr2", "--steps", "20", "--check-interval",
            "0.1", "--backend", "gcp", "--project", PROJECT, "--compute-endpoint", fake.endpoint,
            "--checkpoint-dir", "gs://ckpt-bucket/t")
    assert r.exit_code == 0, r.output
    rec = StateStore().cluster("tr2")
    assert rec.info["trust_plan_prices"] is True and rec.info["price_notes"]
    assert {x.price_per_hour for x in StateStore().resources("tr2")} == {0.5}  # the plan's dearer price is kept


def test_a_valid_plan_from_the_recommender_round_trips(tmp_path):
    from cloudfit.plan import recommend
    from cloudfit.plan.io import load_plan, reprice, save_plan
    from cloudfit.workload import make_workload

    plan = recommend(make_workload(model="resnet50", samples=2e7, deadline=24))
    save_plan(plan, tmp_path / "p.json")
    again, notes = reprice(load_plan(tmp_path / "p.json"))
    assert notes == [] and again.chosen.config == plan.chosen.config


def test_a_plan_nested_100000_arrays_deep_is_one_line_exit_2(cli, tmp_path):
    """Before: json's recursion guard raised RecursionError out of load_plan (a traceback)."""
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    r = cli("launch", str(path), "--yes", "--dry-run")
    assert r.exit_code == 2, r.output
    assert "nested too deeply" in r.output and "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1
    deep = _mutate(_plan(tmp_path), lambda d: d["provenance"].update(x=0))
    deep.write_text(deep.read_text().replace('"x": 0', '"x": ' + "[" * 100_000 + "]" * 100_000))
    r = cli("launch", str(deep), "--yes", "--dry-run")
    assert r.exit_code == 2 and "nested too deeply" in r.output and len(r.output.strip().splitlines()) == 1, r.output


LLM_LAYOUT = {"text": "dp=1,fsdp=2,tp=1,pp=1,cp=1,mb=1,ga=1,ac=none", "model": "llama3-8b", "gpus": 2,
              "launch": {"args": ["--shape", "llama3-8b", "--seq-len", "64", "--steps", "10", "--dp-replicate", "1",
                                  "--dp-shard", "2", "--tp", "1", "--pp", "1", "--cp", "1", "--micro-batch", "1",
                                  "--grad-accum", "1"]}}


@pytest.mark.parametrize("model, layout, message", [
    ("resnet50", LLM_LAYOUT, "trains the single model 'resnet50' (a profile), but carries a large-model 'layout'"),
    ("resnet50", {**LLM_LAYOUT, "model": "resnet50"}, "carries a large-model 'layout'"),
    ("llama3-70b", LLM_LAYOUT, "'layout' is for model \"llama3-8b\", but the plan trains 'llama3-70b'"),
])
def test_a_plan_whose_layout_block_is_not_its_models_is_refused(cli, tmp_path, model, layout, message):
    """Before: a CNN plan carrying an LLM layout block launched cloudfit.train_llm without a word."""
    def edit(d):
        d["workload"]["model"] = model
        d["layout"] = layout
    path = _mutate(write_plan(tmp_path / "p.json", [ClusterConfig(offering(price=None, per_node=1), 2, False)],
                              budget_usd=30), edit)
    for extra in (["--dry-run"], ["--yes", "--steps", "2"]):
        r = cli("launch", str(path), "--name", "mix", *extra)
        assert r.exit_code == 2, r.output
        assert message in r.output and "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1
    assert StateStore().clusters() == []
