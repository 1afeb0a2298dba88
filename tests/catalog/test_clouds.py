"""Other clouds' catalogs (issue 26): one loader, per-cloud network / spot / zones / node limits, and
recommend --clouds: the union's plan is never dearer than GCP's, GCP alone is untouched."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cloudfit import catalog, spot
from cloudfit.catalog import clouds, hardware
from cloudfit.errors import CatalogError, UsageError
from cloudfit.types import CLOUDS
from cloudfit.workload import make_workload, parse_clouds

ALL = catalog.load(clouds=CLOUDS)
GCP = catalog.load()
HEADER = "cloud," + ",".join(catalog.COLUMNS)


def _write(tmp_path: Path, *rows: str) -> Path:
    p = tmp_path / "multi.csv"
    p.write_text("\n".join([HEADER, *rows]) + "\n")
    return p


def test_union_holds_every_cloud_and_gcp_alone_is_the_default_catalog():
    assert sorted(ALL.clouds) == sorted(CLOUDS)
    gcp_rows = [o for o in ALL.offerings if o.cloud == "gcp"]
    assert tuple(gcp_rows) == GCP.offerings
    assert catalog.load(clouds=("gcp",)) == GCP  # same offerings, path and digest
    assert ALL.digest != GCP.digest and len(ALL.path.split(" + ")) == len(CLOUDS)
    for c in CLOUDS:  # every row of a shipped file belongs to that file's cloud and names its hardware
        part = catalog.load(clouds=(c,))
        assert part.clouds == [c] and len(part) > 10
        assert all(hardware.cloud_of_machine_type(o.machine_type) == c for o in part.offerings)


def test_shipped_rows_match_their_sources():
    # data/raw/catalog: AWS p5.48xlarge in use1-az6 (55.04 on-demand, 17.6289 spot); Lambda 1× B200 6.99;
    # RunPod 8× H100 SXM = 8 × 3.29; Nebius 8× H200 28.00 / 11.60 spot
    def one(cloud, mt, zone):
        [o] = [o for o in ALL.offerings if o.cloud == cloud and o.machine_type == mt and o.zone == zone]
        return o

    o = one("aws", "p5.48xlarge", "use1-az6")
    assert (o.accelerator, o.accelerators_per_node, o.price_per_hour, o.spot_price_per_hour) == ("H100", 8, 55.04, 17.6289)
    o = one("lambda", "gpu_1x_b200_sxm6", "us-east-1")
    assert (o.accelerator, o.accelerators_per_node, o.price_per_hour, o.spot_price_per_hour) == ("B200", 1, 6.99, None)
    o = one("runpod", "8x_H100-SXM_SECURE", "US-TX-3")
    assert o.accelerator == "H100" and o.price_per_hour == pytest.approx(8 * 3.29) and o.spot_price_per_hour is None
    o = one("nebius", "gpu-h200-sxm_8gpu-128vcpu-1600gb", "us-central1")
    assert (o.price_per_hour, o.spot_price_per_hour) == (28.0, 11.6)
    # PCIe boards are their own accelerators, not the SXM part of the same name
    assert {o.accelerator for o in ALL.offerings if o.machine_type == "gpu_1x_h100_pcie"} == {"H100-PCIe"}


@pytest.mark.parametrize("row, message", [
    ("aws,p5.48xlarge,H100,8,192,2048,us-east-1,use1-az1,0,", "price_per_hour must be positive"),
    ("aws,p5.48xlarge,H100,8,192,2048,us-east-1,use1-az1,-3,", "price_per_hour must be positive"),
    ("aws,p5.48xlarge,H100,,192,2048,us-east-1,use1-az1,55.04,", "empty accelerators_per_node"),
    ("azure,nd96,H100,8,96,1900,eastus,eastus-1,98.3,", "unknown cloud 'azure'"),
])
def test_bad_rows_of_another_cloud_name_file_and_line(tmp_path, row, message):
    good = "lambda,gpu_1x_a10,A10,1,30,200,us-east-1,us-east-1,1.29,"
    p = _write(tmp_path, good, row)
    with pytest.raises(CatalogError, match=rf"multi.csv:3: .*{message}"):
        catalog.load(p, clouds=CLOUDS)


def test_cli_bad_input_is_one_line_exit_2(cli, tmp_path):
    p = _write(tmp_path, "aws,p5.48xlarge,H100,8,192,2048,us-east-1,use1-az1,0,")
    for args in (["--clouds", "azure"], ["--clouds", "aws", "--catalog", str(p)], ["--clouds", ""]):
        r = cli("recommend", "--model", "resnet50", "--samples", "1e7", "--deadline", "24h", *args)
        assert r.exit_code == 2, r.output
        assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output


def test_parse_clouds():
    assert parse_clouds(None) == ("gcp",) and parse_clouds("all") == CLOUDS
    assert parse_clouds(["aws,gcp", "aws"]) == ("aws", "gcp")
    with pytest.raises(UsageError, match="unknown cloud 'gpc'"):
        parse_clouds("gpc")


def test_network_per_instance_family_with_sources():
    net = hardware.vm_network_gbps
    assert net("p5.48xlarge", "H100", 8, 192) == 3200 and net("p4d.24xlarge", "A100", 8, 96) == 400
    assert net("p3.8xlarge", "V100", 4, 32) == 10 < net("g6.12xlarge", "L4", 4, 48) < net("g6e.12xlarge", "L40S", 4, 48)
    assert net("gpu-h200-sxm_8gpu-128vcpu-1600gb", "H200", 8, 128) == 3200  # InfiniBand
    assert net("gpu_8x_h100_sxm5", "H100", 8, 208) == hardware.DEFAULT_OTHER_CLOUD_GBPS  # no published figure
    assert net("a3-megagpu-8g", "H100-MEGA", 8, 208) == 1800  # GCP unchanged
    assert "no published figure" in hardware.network_source("gpu_8x_h100_sxm5")
    assert "EFA" in hardware.network_source("p5.48xlarge")


def test_hazards_per_cloud_are_named_defaults_where_nothing_is_measured():
    lam = spot.hazards(["H100", "V100", "H100", "H200"], ["us-east-1", "us-east-2", "us-central1", "eu-north1"],
                       clouds=["aws", "aws", "gcp", "nebius"])
    aws_v100 = spot.load_params()["aws"]["V100"]
    assert lam[0] == pytest.approx(aws_v100["rate_per_node_hour"])  # other AWS GPUs: the V100 pooled rate
    assert lam[1] == pytest.approx(aws_v100["regions"]["us-east-2"]["rate_per_node_hour"])  # measured region
    assert lam[2] == pytest.approx(spot.hazards(["H100"], ["us-central1"])[0])  # GCP unchanged
    assert lam[3] == max(lam[0], lam[2])  # no data: the highest pooled rate measured anywhere
    assert "documented default" in spot.hazard_info("H200", "eu-north1", cloud="nebius").detail


def _space(**kw):
    from cloudfit.plan.planner import load_workload_profile
    from cloudfit.search.space import build_space

    w = make_workload(model="resnet50", samples=5e7, deadline="24h", **kw)
    return build_space(w, load_workload_profile(w), catalog.load(clouds=w.clouds))


def test_runpod_is_single_node_and_lambda_regions_are_one_place():
    s = _space(clouds="runpod,lambda", max_nodes=4)
    runpod = np.array([s.catalog.offerings[i].cloud == "runpod" for i in s.offering])
    assert runpod.any() and (s.nodes[runpod] == 1).all() and (s.nodes[~runpod] == 4).any()
    assert any("on runpod" in k for k in s.excluded)
    lam = ~runpod
    assert (s.zones_offering[lam] == 1).all()  # 17 regions listed, none of them a capacity fact
    assert not s.spot.any()  # neither sells spot


def test_gcp_candidates_are_identical_inside_the_union():
    g, a = _space(), _space(clouds="all")
    key = lambda s, i: (s.catalog.offerings[s.offering[i]], int(s.nodes[i]), bool(s.spot[i]))  # noqa: E731
    mine = {key(a, i): i for i in range(len(a)) if a.catalog.offerings[a.offering[i]].cloud == "gcp"}
    assert len(mine) == len(g)
    idx = np.array([mine[key(g, i)] for i in range(len(g))])
    for col in ("price_per_hour", "samples_per_second", "low", "high", "hazard_per_node_hour"):
        np.testing.assert_array_equal(getattr(a, col)[idx], getattr(g, col))
    np.testing.assert_array_equal(a.zones_offering[idx], g.zones_offering)


@pytest.mark.parametrize("model, samples, deadline", [("resnet50", 5e7, "6h"), ("bert-large", 2e7, "12h")])
def test_cross_cloud_plan_is_never_dearer_than_gcp_alone(model, samples, deadline):
    from cloudfit.plan import recommend

    plans = [recommend(make_workload(model=model, samples=samples, deadline=deadline, clouds=c)) for c in ("gcp", "all")]
    assert plans[1].chosen.cost_usd <= plans[0].chosen.cost_usd
    assert plans[0].chosen.config.offering.cloud == "gcp"


def test_max_gpus_1_picks_a_single_b200_where_a_cloud_sells_one():
    from cloudfit.plan import recommend

    w = make_workload(model="resnet50", samples=2e7, deadline="24h", max_gpus=1, accelerators=["B200"], clouds="all")
    c = recommend(w).chosen.config
    assert (c.offering.accelerator, c.accelerators, c.offering.cloud != "gcp") == ("B200", 1, True)
    with pytest.raises(Exception, match="GPUs"):  # GCP sells B200 only in eights
        recommend(make_workload(model="resnet50", samples=2e7, deadline="24h", max_gpus=1, accelerators=["B200"]))


def test_plan_carries_the_cloud_and_launch_refuses_it(cli, tmp_path):
    out = tmp_path / "plan.json"
    r = cli("recommend", "--model", "resnet50", "--samples", "5e7", "--deadline", "24h", "--clouds", "gcp,aws",
            "--json", "--out", str(out))
    assert r.exit_code == 0, r.output
    j = json.loads(r.output)
    assert j["candidates"][0]["cloud"] == "aws" and j["why_cloud"].startswith("Why aws")
    assert "cheaper per hour than gcp" in j["why_cloud"]
    d = json.loads(out.read_text())
    assert d["workload"]["clouds"] == ["gcp", "aws"] and d["chosen"]["config"]["offering"]["cloud"] == "aws"
    from cloudfit.plan.io import load_plan

    assert load_plan(out).chosen.config.offering.cloud == "aws"
    r = cli("launch", str(out), "--backend", "gcp", "--yes")
    assert r.exit_code == 2 and "this plan is for aws" in r.output and len(r.output.strip().splitlines()) == 1
    r = cli("launch", str(out), "--backend", "local", "--dry-run")  # rehearsed here, charged at AWS's price
    assert r.exit_code == 0 and "rehearsal" in r.output and "aws:" in r.output, r.output
    d["chosen"]["config"]["offering"]["cloud"] = "azure"
    out.write_text(json.dumps(d))
    r = cli("launch", str(out), "--backend", "local", "--yes")
    assert r.exit_code == 2 and "cloud must be one of" in r.output


def test_gcp_plans_and_json_carry_no_cloud_field(cli, tmp_path):
    out = tmp_path / "plan.json"
    r = cli("recommend", "--model", "resnet50", "--samples", "5e7", "--deadline", "24h", "--json", "--out", str(out))
    assert r.exit_code == 0
    assert "\"cloud\"" not in r.output and "\"cloud\"" not in out.read_text() and "\"clouds\"" not in out.read_text()


def test_table_gains_a_cloud_column_only_when_several_clouds_are_searched(cli):
    r = cli("recommend", "--model", "resnet50", "--samples", "5e7", "--deadline", "24h", "--clouds", "gcp,aws", "--wide")
    assert r.exit_code == 0 and "cloud" in r.output.splitlines()[2] and "Why " in r.output
    assert "gcp:" in r.output and "aws:" in r.output  # the prices' date of each catalog
    r = cli("recommend", "--model", "resnet50", "--samples", "5e7", "--deadline", "24h", "--wide")
    assert "cloud" not in r.output.splitlines()[2]


def test_catalog_gpus_compares_clouds(cli):
    r = cli("catalog", "gpus", "--cloud", "all", "--json")
    rows = json.loads(r.output)
    b200 = {x["cloud"]: x for x in rows if x["accelerator"] == "B200"}
    assert {"gcp", "lambda", "runpod", "nebius", "aws"} <= set(b200) and 1 in b200["lambda"]["counts_per_vm"]
    assert b200["gcp"]["counts_per_vm"] == [8]
    assert "cloud" not in cli("catalog", "gpus", "--json").output  # GCP alone: as before


def test_cloud_table_is_complete():
    assert set(CLOUDS) == {c.name for c in map(clouds.get, CLOUDS)}
    assert not clouds.get("lambda").sells_spot and clouds.get("runpod").max_nodes == 1


def test_skypilot_task_is_written_for_another_clouds_plan(cli, tmp_path):
    """Before: `--emit-skypilot` refused every plan not on GCP — the clouds SkyPilot exists for (issue 34)."""
    import yaml

    task = tmp_path / "task.yaml"
    out = tmp_path / "plan.json"
    r = cli("recommend", "--model", "resnet50", "--samples", "5e7", "--deadline", "24h", "--clouds", "gcp,aws",
            "--emit-skypilot", str(task), "--out", str(out))
    assert r.exit_code == 0, r.output
    chosen = json.loads(out.read_text())["chosen"]["config"]
    t = yaml.safe_load(task.read_text())
    first = t["resources"]["ordered"][0]
    assert (first["cloud"], first["instance_type"]) == ("aws", chosen["offering"]["machine_type"])
    assert "zone" not in first and t["num_nodes"] == chosen["nodes"]  # AWS zones are AZ ids: SkyPilot picks
    assert t["secrets"] == {"CLOUDFIT_CHECKPOINT_KEY": None} and (tmp_path / "task.key").exists()
    assert [p for p in t["file_mounts"] if p.startswith("/cloudfit-wheel/")] and "cloudfit==" not in t["setup"]


def test_checkpoint_interval_uses_the_clouds_hazard():
    from cloudfit.spot.checkpointing import cluster_hazard_per_hour
    from cloudfit.types import ClusterConfig

    [o] = [o for o in ALL.offerings if o.cloud == "aws" and o.machine_type == "p5.48xlarge" and o.zone == "use1-az6"]
    assert cluster_hazard_per_hour(ClusterConfig(o, 2, True)) == pytest.approx(
        2 * spot.hazards(["H100"], ["us-east-1"], cloud="aws")[0])
