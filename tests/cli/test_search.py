"""`cloudfit search` end to end: the replay backend in process, gcp against the fake Compute server."""

from __future__ import annotations

import json

import numpy as np

from cloudfit.executors.replay import worlds_from_measurements
from tests.active.test_active import write_table


def _world():
    return [w for w in worlds_from_measurements() if w["name"].startswith("resnet50@64 fp32")][0]


def _args(w, table, *extra):
    samples = float(np.median(list(w["table"].values()))) * 36000
    return ["search", "--model", "resnet50", "--samples", str(samples), "--deadline", "40h", "--batch-size", "64",
            "--precision", "fp32", "--max-nodes", "8", "--probe-budget", "20", "--max-trials", "3",
            "--backend", "replay", "--replay-data", str(table), *extra]


def test_search_json_reports_trials_spend_and_plan(cli, tmp_path):
    from cloudfit.plan.io import load_plan
    from cloudfit.profiling.io import load_profile

    w = _world()
    table = write_table(tmp_path / "t.csv", w)
    r = cli(*_args(w, table), "--json", "--out", str(tmp_path / "plan.json"), "--save-profile", str(tmp_path / "p.json"))
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert 1 <= len(d["trials"]) <= 3 and d["stop_reason"] in ("max-trials", "expected-improvement", "probe-budget")
    t = d["trials"][0]
    assert {"accelerator", "accelerators_per_node", "nodes", "machine_type", "zone", "status", "samples_per_second",
            "probe_cost_usd"} <= set(t) and t["status"] == "ok" and t["samples_per_second"] > 0
    assert d["probe_spend_usd"] == sum(t["probe_cost_usd"] for t in d["trials"]) <= 20
    assert abs(d["total_expected_usd"] - (d["probe_spend_usd"] + d["plan_expected_cost_usd"])) < 1e-9
    plan = load_plan(tmp_path / "plan.json")
    assert plan.chosen.cost_usd == d["plan_expected_cost_usd"] and plan.provenance["searcher"] == "active"
    probes = [m for m in load_profile(tmp_path / "p.json").measurements if m.source == "probe"]
    assert len(probes) == sum(t["status"] == "ok" for t in d["trials"])
    r = cli(*_args(w, table))
    assert r.exit_code == 0 and "Total with probes" in r.output


def test_search_resumes_from_storage(cli, tmp_path):
    w = _world()
    table = write_table(tmp_path / "t.csv", w)
    store = ["--storage", f"sqlite:///{tmp_path / 's.db'}", "--json"]
    first = json.loads(cli(*_args(w, table), *store).output)
    again = json.loads(cli(*_args(w, table), *store).output)
    assert again["trials"] == first["trials"] and again["probe_spend_usd"] == first["probe_spend_usd"]


def test_search_bad_input(cli, tmp_path):
    base = ["search", "--model", "resnet50", "--samples", "1e7", "--deadline", "10h"]
    r = cli(*base, "--probe-budget", "5")
    assert r.exit_code == 2 and "--replay-data" in r.output
    r = cli(*base, "--probe-budget", "-1", "--replay-data", str(tmp_path / "x.csv"))
    assert r.exit_code == 2
    r = cli(*base, "--probe-budget", "5", "--replay-data", str(tmp_path / "missing.csv"))
    assert r.exit_code == 2 and "not found" in r.output
    r = cli(*base, "--probe-budget", "5", "--backend", "gcp", "--project", "p")
    assert r.exit_code == 2 and "--checkpoint-dir gs://" in r.output
    r = cli(*base, "--probe-budget", "5", "--backend", "aws")
    assert r.exit_code == 2 and "replay, local or gcp" in r.output
    table = write_table(tmp_path / "t.csv", _world())
    r = cli(*base, "--probe-budget", "5", "--replay-data", str(table), "--storage", "nonsense")
    assert r.exit_code == 2 and "--storage 'nonsense'" in r.output and "Traceback" not in r.output
    assert not list(tmp_path.glob("*.json"))


def test_search_on_gcp_probes_real_vms_and_records_a_stockout(cli, tmp_path):
    """The real google-cloud-compute client against the fake Compute server: the first probe's zone is
    out of capacity (a failed trial, charged nothing), the next probes measure what the VM reports."""
    from tests.fakes.compute_server import FakeCompute

    with FakeCompute(op_delay_s=0.02, simulate_job_s=0.3) as fake:
        for z in ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"):
            fake.stockout(z, count=1)  # each zone refuses its first VM
        r = cli("search", "--model", "resnet50", "--samples", "1e8", "--deadline", "30h", "--accelerators", "T4",
                "--regions", "us-central1", "--max-nodes", "2", "--probe-budget", "5", "--max-trials", "2",
                "--backend", "gcp", "--project", "test-project", "--compute-endpoint", fake.endpoint,
                "--checkpoint-dir", "gs://bucket/probes", "--check-interval", "0.1", "--json")
        assert r.exit_code == 0, r.output
        d = json.loads(r.output)
        first, second = d["trials"]
        assert first["status"] == "failed" and "capacity" in first["reason"].lower() and first["probe_cost_usd"] == 0
        assert second["status"] == "ok" and second["samples_per_second"] == 1234.0  # what the fake VM reported
        assert (second["accelerator"], second["accelerators_per_node"], second["nodes"]) != (
            first["accelerator"], first["accelerators_per_node"], first["nodes"])
        assert all(b["labels"]["cloudfit-purpose"] == "probe" for b in fake.inserted)
        assert fake.vms() == []  # every probe VM torn down
        assert 0 < d["probe_spend_usd"] <= 5


def test_search_on_the_local_backend_rehearses_probes_with_real_processes(cli):
    """Local probes are real torch.distributed runs on CPU (the zoo's tiny mlp): the mechanics of a probe,
    charged at the configuration's price; their CPU throughput does not feed the GPU predictions."""
    r = cli("search", "--model", "mlp", "--samples", "1e7", "--deadline", "10h", "--accelerators", "T4",
            "--max-nodes", "1", "--probe-budget", "5", "--max-trials", "1", "--probe-steps", "5",
            "--backend", "local", "--check-interval", "0.2", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    (t,) = d["trials"]
    assert t["status"] == "ok" and t["samples_per_second"] > 0 and 0 < t["probe_cost_usd"] <= 5
    assert d["stop_reason"] == "max-trials" and d["chosen"]["accelerator"] == "T4"
