"""Catalog loading, validation and cluster pricing."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from cloudfit import catalog
from cloudfit.errors import CatalogError
from cloudfit.types import ClusterConfig

SHIPPED = catalog.load()
HEADER = ",".join(catalog.COLUMNS)
GOOD_ROW = "a2-highgpu-8g,A100,8,96,680,us-central1,us-central1-a,29.38708,14.43080"


def write(tmp_path: Path, *rows: str, header: str = HEADER) -> Path:
    p = tmp_path / "cat.csv"
    p.write_text("\n".join([header, *rows]) + "\n")
    return p


def test_shipped_catalog_covers_required_families_and_gpus():
    accs = set(SHIPPED.accelerators)
    assert {"T4", "L4", "V100", "P100", "P4", "A100", "A100-80GB", "H100", "H100-MEGA", "H200", "B200"} <= accs
    families = {o.machine_type.split("-")[0] for o in SHIPPED.offerings}
    assert families == {"a2", "a3", "a4", "g2", "n1"}
    assert len(SHIPPED) > 700 and len(SHIPPED.regions) > 25
    assert SHIPPED.digest.startswith("sha256:") and len(SHIPPED.digest) == 71


def test_shipped_catalog_matches_its_source_for_a_known_row():
    # a2-highgpu-8g us-central1: host 5.91582 + A100×8 23.47126 (data/raw/catalog/PROVENANCE.md)
    [o] = [o for o in SHIPPED.offerings if o.machine_type == "a2-highgpu-8g" and o.zone == "us-central1-a"]
    assert o.accelerator == "A100" and o.accelerators_per_node == 8
    assert o.price_per_hour == pytest.approx(5.91582 + 23.47126, abs=1e-5)


def test_n1_hosts_are_priced_linearly_per_vcpu():
    src = Path(__file__).resolve().parents[2] / "data/raw/catalog/gcp_v8_vms_gpu_subset.csv"
    rows = list(csv.DictReader(src.open()))
    hm64 = next(r for r in rows if r["InstanceType"] == "n1-highmem-64" and r["Region"] == "us-central1")
    t4 = next(r for r in rows if r["AcceleratorName"] == "T4" and r["AcceleratorCount"] == "1"
              and r["AvailabilityZone"] == "us-central1-a")
    [o] = [o for o in SHIPPED.offerings if o.machine_type == "n1-highmem-8" and o.accelerator == "T4"
           and o.zone == "us-central1-a"]
    assert o.price_per_hour == pytest.approx(float(hm64["Price"]) * 8 / 64 + float(t4["Price"]), abs=1e-5)
    assert o.memory_gib == 52 and o.vcpus == 8


def test_every_offering_is_sane():
    for o in SHIPPED.offerings:
        assert o.price_per_hour > 0 and math.isfinite(o.price_per_hour)
        assert o.spot_price_per_hour is None or o.spot_price_per_hour > 0
        assert o.zone.startswith(o.region + "-")


def test_cluster_pricing_nodes_times_host_plus_accelerators_and_spot():
    o = next(o for o in SHIPPED.offerings if o.machine_type == "a2-highgpu-8g" and o.zone == "us-central1-a")
    assert ClusterConfig(o, nodes=3).price_per_hour == pytest.approx(3 * o.price_per_hour)
    assert ClusterConfig(o, nodes=3, spot=True).price_per_hour == pytest.approx(3 * o.spot_price_per_hour)
    assert ClusterConfig(o, nodes=3).accelerators == 24
    assert catalog.price_per_hour(ClusterConfig(o, 2, True)) == pytest.approx(2 * o.spot_price_per_hour)


def test_cluster_without_spot_price_cannot_be_priced_as_spot():
    o = next(o for o in SHIPPED.offerings if o.spot_price_per_hour is None)
    with pytest.raises(ValueError):
        ClusterConfig(o, 1, spot=True).price_per_hour


def test_load_good_file_and_empty_spot(tmp_path):
    cat = catalog.load(write(tmp_path, GOOD_ROW, GOOD_ROW.rsplit(",", 1)[0] + ","))
    assert len(cat) == 2 and cat.offerings[1].spot_price_per_hour is None


@pytest.mark.parametrize(
    "row, message",
    [
        (GOOD_ROW.replace("29.38708", "-1"), "price_per_hour must be positive"),
        (GOOD_ROW.replace("29.38708", "nan"), "price_per_hour is nan"),
        (GOOD_ROW.replace("29.38708", ""), "empty price_per_hour"),
        (GOOD_ROW.replace("29.38708", "abc"), "is not a number"),
        (GOOD_ROW.replace("14.43080", "-2"), "spot_price_per_hour must be positive"),
        (GOOD_ROW.replace(",A100,", ",Z80,"), "unknown accelerator 'Z80'"),
        (GOOD_ROW.replace(",8,96", ",0,96"), "accelerators_per_node must be positive"),
        (GOOD_ROW.replace(",8,96", ",1.5,96"), "whole number"),
        (GOOD_ROW.replace("us-central1-a", "europe-west4-a"), "is not in region"),
    ],
)
def test_bad_row_names_file_and_line(tmp_path, row, message):
    p = write(tmp_path, GOOD_ROW, row)
    with pytest.raises(CatalogError) as e:
        catalog.load(p)
    assert f"{p}:3:" in str(e.value) and message in str(e.value)


def test_missing_column_and_missing_file(tmp_path):
    p = write(tmp_path, "a,b", header="machine_type,accelerator")
    with pytest.raises(CatalogError, match=r"cat.csv:1: missing column\(s\) accelerators_per_node"):
        catalog.load(p)
    with pytest.raises(CatalogError, match="cannot read catalog"):
        catalog.load(tmp_path / "nope.csv")
    with pytest.raises(CatalogError, match="no offerings"):
        catalog.load(write(tmp_path))


def test_filter_by_globs_and_aliases():
    h = SHIPPED.filter(accelerators=["h100"], regions=["us-*"])
    assert h.accelerators == ["H100"] and all(o.region.startswith("us-") for o in h.offerings)
    assert set(SHIPPED.filter(accelerators=["A100*"]).accelerators) == {"A100", "A100-80GB"}
    assert SHIPPED.filter(accelerators=["nvidia-tesla-t4"]).accelerators == ["T4"]
    assert all(o.spot_price_per_hour for o in SHIPPED.filter(spot=True).offerings)
    with pytest.raises(CatalogError, match="no region in the catalog matches 'mars-\\*'"):
        SHIPPED.filter(regions=["mars-*"])
    with pytest.raises(CatalogError, match="unknown accelerator"):
        SHIPPED.filter(accelerators=["Z80"])


def test_blank_lines_padding_and_extra_columns_are_accepted(tmp_path):
    """Spaces around values, an empty line, an extra column and a lower-case alias all load."""
    quirky = write(tmp_path, GOOD_ROW, "", " n1-standard-8 , v100 ,1, 8 ,30, us-east1 ,us-east1-c, 2.86 ,",
                   "g2-standard-4,L4,1,4,16,europe-west4,europe-west4-a,0.7,0.28,extra",
                   header=HEADER + ",note")
    c = catalog.load(quirky)
    assert len(c) == 3 and c.offerings[1].accelerator == "V100"
    assert c.offerings[1].spot_price_per_hour is None
