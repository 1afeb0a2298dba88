"""The whole bill (issue 35): sourced egress/storage prices, data transfer in each plan's cost and hours,
checkpoint storage, the model's way back, and GPU quotas (a table, or live through the fake Compute server)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from cloudfit.bill import Bill, parse_location, parse_size_gb
from cloudfit.bill import plan as bill_plan
from cloudfit.catalog import egress
from cloudfit.errors import UsageError
from cloudfit.resources import shipped
from cloudfit.search import Problem
from cloudfit.workload import make_workload

BASE = ["recommend", "--model", "resnet50", "--epochs", "90", "--dataset-size", "1281167", "--deadline", "24h"]


def _workload(clouds=("all",)):
    return make_workload(model="resnet50", epochs=90, dataset_size=1281167, deadline="24h", clouds=list(clouds))


def _plan(gb: str, clouds=("all",)):
    return bill_plan.recommend(_workload(clouds), Bill.of("gs://bkt/imagenet", gb, None, 2, None), None)


# ------------------------------------------------------------------ prices

def test_every_price_row_names_its_source_and_the_readme_dates_them():
    for name in ("egress.csv", "storage.csv"):
        with open(shipped(f"catalogs/{name}"), newline="") as f:
            rows = list(csv.DictReader(f))
        assert rows and all(r["source"].strip() for r in rows), name
    readme = shipped("catalogs/README.md").read_text()
    assert "## Data transfer and storage" in readme and "2026-11-27" in readme
    assert "a790cb61187ec7aa11ee5cdb746c8b4a3dc7c437" in readme or "005261080a6b8102f3d95ff2147a855250f40272" in readme


def test_egress_rules_same_region_free_inter_region_cheap_cross_cloud_tiered():
    assert egress.egress_usd(150, "gcp", "us-central1", "gcp", "us-central1") == 0.0
    assert egress.egress_usd(150, "gcp", "us-central1", "gcp", "us-east4") == pytest.approx(150 * 0.02)
    assert egress.egress_usd(150, "gcp", "us-central1", "aws", "us-east-1") == pytest.approx(150 * 0.12)
    # AWS internet egress is tiered: each GB at its own tier's rate
    assert egress.egress_usd(20000, "aws", "us-east-1", "gcp", "us-central1") == pytest.approx(
        10240 * 0.09 + (20000 - 10240) * 0.085)
    # more data never costs less, and crossing a continent never costs less than staying on it
    sizes = np.linspace(0, 200_000, 41)
    cost = [egress.egress_usd(g, "aws", "us-east-1", "gcp", "us-central1") for g in sizes]
    assert all(b >= a for a, b in zip(cost, cost[1:]))
    assert (egress.egress_usd(100, "gcp", "us-central1", "gcp", "europe-west4")
            >= egress.egress_usd(100, "gcp", "us-central1", "gcp", "us-east4"))
    # uploading from the user's machine is free ingress, but takes time at the stated rate
    assert egress.egress_usd(150, "local", "local", "aws", "us-east-1") == 0.0
    assert egress.transfer_hours(150, "ingress") == pytest.approx(150 / egress.TRANSFER_GBPS / 3600)
    assert egress.transfer_hours(150, "free") == 0.0


def test_sizes_and_locations_parse_or_fail_in_one_line():
    assert parse_size_gb("150GB") == 150 and parse_size_gb("1.5 TB") == 1500
    assert parse_size_gb("4TiB") == pytest.approx(4 * 1024 ** 4 / 1e9)
    for bad in ("-5GB", "lots", "3 parsecs", "nan"):
        with pytest.raises(UsageError):
            parse_size_gb(bad)
    loc = parse_location("s3://b/x")
    assert (loc.cloud, loc.region, loc.region_assumed) == ("aws", "us-east-1", True)
    assert parse_location("gs://b/x", "europe-west4").region == "europe-west4"
    for bad in ("ftp://b/x", "gs:///x"):
        with pytest.raises(UsageError):
            parse_location(bad)


# ------------------------------------------------------------------ the bill in every candidate

def test_plans_in_the_data_region_pay_nothing_and_the_rest_pay_transfer_time_and_storage():
    r = _plan("150GB")
    space, bill = r.space, r.bill
    problem = Problem.of(_workload())
    billed, plain = space.assess(problem), space.assess_at(problem.deadline_hours)
    regions = np.array([o.region for o in space.catalog.offerings])[space.offering]
    clouds = np.array([o.cloud for o in space.catalog.offerings])[space.offering]
    home = (clouds == "gcp") & (regions == "us-central1")
    assert home.any() and (~home).any()
    extra = np.asarray(billed.cost_usd) - np.asarray(plain.cost_usd)
    dh = np.asarray(billed.hours) - np.asarray(plain.hours)
    assert np.all(dh[home] == 0) and np.allclose(dh[~home], 150 / egress.TRANSFER_GBPS / 3600)
    ckpt_gb = space.checkpoint_bytes / 1e9 * 2
    assert np.allclose(extra[home], ckpt_gb * 0.020 / 730 * np.asarray(plain.hours)[home])  # storage only
    aws = clouds == "aws"
    assert np.all(extra[aws] >= 150 * 0.12)  # the whole copy, at GCP's internet rate
    # the copy eats into the deadline: never more likely on time than without it
    assert np.all(np.asarray(billed.p_on_time) <= np.asarray(plain.p_on_time) + 1e-12)


def test_crossover_small_data_moves_to_aws_large_data_keeps_gcp():
    """ResNet-50 on ImageNet-sized data in a GCS bucket: AWS's cheaper H200 spot wins while moving the data
    costs less than the saving; above a crossover size GCP (near the data) wins, and the explanation names
    both numbers."""
    small, large = _plan("150GB"), _plan("400GB")
    assert small.plan.chosen.config.offering.cloud == "aws"
    assert large.plan.chosen.config.offering.cloud == "gcp"
    assert any(line.startswith("Moving 150 GB from GCP us-central1 to AWS") and "saves $" in line
               for line in small.lines)
    assert any(line.startswith("Staying near the data is cheaper: moving 400 GB") and "costs $" in line
               and "would save $" in line for line in large.lines)
    # the Pareto front ranks the whole bill: every AWS point on it carries the 400 GB copy, and its cheapest point
    # is on GCP (without the bill, AWS's $18 of compute is the cheapest)
    front = large.plan.pareto
    assert all(e.cost_usd >= 400 * 0.12 for e in front if e.config.offering.cloud == "aws")
    assert min(front, key=lambda e: e.cost_usd).config.offering.cloud == "gcp"
    lo, hi = 150.0, 400.0  # bisect the crossover: below it AWS, above it GCP
    for _ in range(6):
        mid = (lo + hi) / 2
        if _plan(f"{mid}GB").plan.chosen.config.offering.cloud == "aws":
            lo = mid
        else:
            hi = mid
    assert 150 < lo < hi < 400 and hi - lo < 5


def test_checkpoints_kept_and_the_model_sent_back_are_billed():
    w = _workload(("gcp",))
    none = bill_plan.recommend(w, Bill.of(None, None, None, 0, "gs://home/out"), None)
    more = bill_plan.recommend(w, Bill.of(None, None, None, 8, "gs://home/out"), None)
    e0, e8 = none.plan.chosen, more.plan.chosen
    s0, s8 = none.split(e0), more.split(e8)
    assert s0["storage_usd"] == 0.0 and s8["storage_usd"] > 0
    assert sum(s8[k] for k in ("compute_usd", "transfer_usd", "storage_usd")) == pytest.approx(e8.cost_usd)
    if e0.config.offering.region != "us-central1":  # the model leaves its region: egress back is billed
        assert s0["transfer_usd"] > 0


# ------------------------------------------------------------------ the command line

def test_cli_cost_split_in_table_json_and_bad_input(cli, monkeypatch, tmp_path):
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)  # no credentials: a bucket's size is not read
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    monkeypatch.delenv("CLOUDFIT_STORAGE_ENDPOINT", raising=False)
    r = cli(*BASE, "--clouds", "all", "--data", "gs://bkt/imagenet", "--data-size", "150GB", "--json", "--top", "3")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    for row in d["candidates"]:
        s = row["cost_split"]
        assert s["compute_usd"] + s["transfer_usd"] + s["storage_usd"] == pytest.approx(row["cost_usd"])
    assert d["plan"]["provenance"]["bill"]["data_gb"] == 150 and d["bill"]
    r = cli(*BASE, "--clouds", "all", "--data", "gs://bkt/imagenet", "--data-size", "150GB", "--wide")
    assert r.exit_code == 0 and "data $" in r.stdout and "Bill of #1: compute $" in r.stdout
    for args, words in ((["--data", "ftp://x/y", "--data-size", "1GB"], "unknown URL scheme"),
                        (["--data", "gs://b/x", "--data-size", "-5GB"], "must not be negative"),
                        (["--data", "gs://b/x"], "size not read"),
                        (["--data-size", "3GB"], "need --data")):
        r = cli(*BASE, *args)
        assert r.exit_code == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)


def test_local_data_size_is_read_from_disk(cli, tmp_path):
    (tmp_path / "a.bin").write_bytes(b"\0" * 3_000_000)
    r = cli(*BASE, "--data", str(tmp_path), "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["plan"]["provenance"]["bill"]["data_gb"] == pytest.approx(0.003)


def test_no_bill_options_leave_recommend_unchanged(cli):
    a = json.loads(cli(*BASE, "--json").stdout)
    assert set(a) == {"plan", "candidates"} and "bill" not in a["plan"]["provenance"]
    assert all("cost_split" not in c for c in a["candidates"])


# ------------------------------------------------------------------ quotas

def _quota_moves(cli, args: list[str], q) -> tuple[dict, dict, dict]:
    """(first choice, the plan's JSON with a quota of 0 where the first choice runs, its new #1)."""
    first = json.loads(cli(*args, "--json", "--top", "1").stdout)["candidates"][0]
    q.write_text("cloud,region,gpu,mode,limit\n"
                 f"gcp,{first['region']},{first['accelerator']},{'spot' if first['spot'] else 'on-demand'},0\n")
    r = cli(*args, "--quota", str(q), "--json", "--top", "3")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    c = d["candidates"][0]
    assert (c["region"], c["accelerator"], c["spot"]) != (first["region"], first["accelerator"], first["spot"])
    assert any("your quota there is 0" in line for line in d["bill"])
    return first, d, c


def test_a_quota_table_that_forbids_the_first_choice_moves_the_plan(cli, tmp_path):
    q = tmp_path / "quota.csv"
    first, d, c = _quota_moves(cli, BASE, q)
    assert c["cost_usd"] >= first["cost_usd"] - 1e-9
    assert any(f"in {first['region']} needs" in line and "your quota there is 0" in line for line in d["bill"])
    j = tmp_path / "quota.json"
    j.write_text(json.dumps([{"cloud": "gcp", "region": first["region"], "gpu": first["accelerator"],
                              "mode": "spot" if first["spot"] else "on-demand", "limit": 0}]))
    assert json.loads(cli(*BASE, "--quota", str(j), "--json").stdout)["candidates"][0]["zone"] == c["zone"]
    for text in ("just words\n", "cloud,region,gpu,mode,limit\ngcp,us-east4,H100,spot,-1\n", "[1, 2]"):
        q.write_text(text)
        r = cli(*BASE, "--quota", str(q))
        assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.fixture
def fake_compute(monkeypatch):
    from tests.fakes.compute_server import FakeCompute

    with FakeCompute() as f:
        monkeypatch.setenv("CLOUDFIT_COMPUTE_ENDPOINT", f.endpoint)
        yield f


def test_live_gcp_quotas_through_regions_get_move_the_plan(cli, fake_compute):
    first = json.loads(cli(*BASE, "--json", "--top", "1").stdout)["candidates"][0]
    from cloudfit.bill.quota import GCP_METRIC

    pre = ("PREEMPTIBLE_" if first["spot"] else "") + GCP_METRIC[first["accelerator"]]
    fake_compute.region_quotas[first["region"]] = {pre: (16.0, 16.0), "CPUS": (1000.0, 0.0)}  # all 16 in use
    r = cli(*BASE, "--quota", "gcp", "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    c = d["candidates"][0]
    assert (c["region"], c["spot"]) != (first["region"], first["spot"]) or c["accelerator"] != first["accelerator"]
    assert any("your quota there is 0" in line and "live GCP quotas" in line for line in d["bill"])
    assert fake_compute.count("GET", r"/regions/") >= 1
    fake_compute.http_errors(403, 1, path_re=r"/regions/")
    r = cli(*BASE, "--quota", "gcp")
    assert r.exit_code == 2 and "HTTP 403" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_without_credentials_quotas_are_said_not_checked(cli, monkeypatch, tmp_path):
    monkeypatch.delenv("CLOUDFIT_COMPUTE_ENDPOINT", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))
    r = cli(*BASE, "--quota", "gcp")
    assert r.exit_code == 0, r.stderr
    assert "Quota: not checked" in r.stdout


# ------------------------------------------------------------------ large-model (token) workloads

LLM = ["recommend", "--model", "llama3-8b", "--tokens", "1e11", "--seq-len", "8192", "--deadline", "7d"]


def test_llm_plans_bill_their_sharded_checkpoints_and_the_data(cli):
    runs = {}
    for keep in ("1", "4"):
        r = cli(*LLM, "--data", "gs://corpus/tokens", "--data-size", "4TB", "--data-region", "us-east4",
                "--keep-checkpoints", keep, "--json", "--top", "2")
        assert r.exit_code == 0, r.stderr
        runs[keep] = json.loads(r.stdout)
    for d in runs.values():
        for row in d["candidates"]:
            s = row["cost_split"]
            assert s["compute_usd"] + s["transfer_usd"] + s["storage_usd"] == pytest.approx(row["cost_usd"])
        assert d["layouts"] and d["bill"][0].startswith("Bill of #1")
    ckpt_gb = runs["1"]["plan"]["layout"]["checkpoint"]["bytes"] / 1e9
    assert ckpt_gb > 50  # llama3-8b with Adam: ~14 bytes per parameter
    s1, s4 = runs["1"]["plan"]["cost_split"], runs["4"]["plan"]["cost_split"]
    assert s4["storage_usd"] > s1["storage_usd"] > 0


def test_llm_quota_moves_the_first_choice(cli, tmp_path):
    first, d, c = _quota_moves(cli, LLM, tmp_path / "q.csv")
    assert d["layouts"] and c["cost_usd"] >= first["cost_usd"] - 1e-9


def test_under_a_budget_the_bill_counts_and_the_comparison_gives_hours_and_dollars(cli):
    r = cli("recommend", "--model", "resnet50", "--epochs", "90", "--dataset-size", "1281167", "--budget", "60",
            "--clouds", "all", "--data", "gs://bkt/imagenet", "--data-size", "150GB", "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["plan"]["chosen"]["cost_usd"] <= 60
    assert any("(minimising time)" in line and "for $" in line for line in d["bill"])


# ------------------------------------------------------------------ bucket sizes from the listing

@pytest.fixture
def fake_gcs(monkeypatch):
    """A Cloud Storage JSON API ``objects.list`` on loopback: bucket → {object name: size}, two objects a page."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import parse_qs, urlsplit

    state = {"buckets": {}, "status": 200, "requests": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            state["requests"] += 1
            u = urlsplit(self.path)
            q = {k: v[0] for k, v in parse_qs(u.query).items()}
            parts = u.path.split("/")  # '', storage, v1, b, BUCKET, o
            bucket = parts[4] if len(parts) == 6 and parts[5] == "o" else None
            if state["status"] != 200:
                return self._send(state["status"], {"error": {"code": state["status"]}})
            if bucket not in state["buckets"]:
                return self._send(404, {"error": {"code": 404, "message": "The specified bucket does not exist."}})
            names = sorted(n for n in state["buckets"][bucket] if n.startswith(q.get("prefix", "")))
            start = int(q.get("pageToken", 0))
            page = {"items": [{"size": str(state["buckets"][bucket][n])} for n in names[start:start + 2]]}
            if start + 2 < len(names):
                page["nextPageToken"] = str(start + 2)
            return self._send(200, page)

        def _send(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("CLOUDFIT_STORAGE_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    yield state
    server.shutdown()
    server.server_close()


def test_a_bucket_size_is_read_from_the_listing_page_by_page(cli, fake_gcs):
    fake_gcs["buckets"]["bkt"] = {"imagenet/a": 40_000_000_000, "imagenet/b": 60_000_000_000,
                                  "imagenet/c": 50_000_000_000, "other/x": 7}
    r = cli(*BASE, "--data", "gs://bkt/imagenet", "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["plan"]["provenance"]["bill"]["data_gb"] == pytest.approx(150.0)
    assert fake_gcs["requests"] == 2 and any("read from the bucket listing" in line for line in d["bill"])
    for bucket, status, words in (("nope", 200, "no such bucket"), ("bkt/empty", 200, "no objects"),
                                  ("bkt", 403, "size not read")):
        fake_gcs["status"] = status
        r = cli(*BASE, "--data", f"gs://{bucket}")
        assert r.exit_code == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
