"""Build catalogs/<cloud>.csv (AWS, Lambda, RunPod, Nebius) from the transcribed SkyPilot catalog rows.

    python scripts/build_cloud_catalogs.py      # data/raw/catalog/<cloud>_v8_*.csv -> catalogs/<cloud>.csv

One row per (instance type, zone) in cloudfit's catalog schema (catalogs/README.md) plus the ``cloud``
column. Rules (also in catalogs/README.md, "Other clouds"):

* accelerator names are mapped to cloudfit's canonical names where the source name is ambiguous: Lambda's
  ``gpu_1x_h100_pcie`` and RunPod's ``H100`` (its GpuInfo says "H100 PCIe") are ``H100-PCIe``; RunPod's
  ``A100-80GB`` ("A100 PCIe") is ``A100-80GB-PCIe``, its ``A100-80GB-SXM`` is ``A100-80GB``, its ``H100-SXM``
  is ``H100``;
* a zone is the source's AvailabilityZone (AWS zone ids such as ``use1-az4``, RunPod data centres), or the
  region where the cloud has no zones (Lambda, Nebius);
* a spot price equal to the on-demand price in *every* row of a cloud (RunPod) records no spot market: left
  empty; AWS spot prices are kept as the source has them (outliers are flagged at load time);
* rows without an on-demand price (AWS p5e) and AWS Local Zones (``use1-atl2-az1``, ``usw2-lax1-az1``: a zone
  id with a location between region and AZ) are left out.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cloudfit.catalog.loader import write_catalog  # noqa: E402
from cloudfit.types import Offering  # noqa: E402

RAW = REPO / "data" / "raw" / "catalog"
NAMES = {
    ("lambda", "gpu_1x_h100_pcie"): "H100-PCIe",
    ("runpod", "H100"): "H100-PCIe",
    ("runpod", "A100-80GB"): "A100-80GB-PCIe",
    ("runpod", "A100-80GB-SXM"): "A100-80GB",
    ("runpod", "H100-SXM"): "H100",
}


def _num(x: str) -> float | None:
    x = (x or "").strip()
    return float(x) if x else None


def offerings(cloud: str, path: Path) -> list[Offering]:
    out = []
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    no_spot_market = all(_num(r.get("SpotPrice", "")) in (None, _num(r["Price"])) for r in rows)
    for r in rows:
        price = _num(r["Price"])
        zone = (r.get("AvailabilityZone") or r["Region"]).strip()
        if price is None or (cloud == "aws" and zone.count("-") >= 2):
            continue
        acc = NAMES.get((cloud, r["InstanceType"])) or NAMES.get((cloud, r["AcceleratorName"])) or r["AcceleratorName"]
        spot = None if no_spot_market else _num(r.get("SpotPrice", ""))
        out.append(Offering(machine_type=r["InstanceType"], accelerator=acc,
                            accelerators_per_node=int(float(r["AcceleratorCount"])), vcpus=float(r["vCPUs"]),
                            memory_gib=float(r["MemoryGiB"]), region=r["Region"].strip(), zone=zone,
                            price_per_hour=price, spot_price_per_hour=spot, cloud=cloud))
    return out


SOURCES = {
    "aws": "aws_v8_vms_gpu_subset.csv",
    "lambda": "lambda_v8_vms_gpu_subset.csv",
    "nebius": "nebius_v8_vms_gpu.csv",
    "runpod": "runpod_v8_vms_gpu_subset.csv",
}


def main() -> None:
    for cloud, name in SOURCES.items():
        offs = offerings(cloud, RAW / name)
        cat = write_catalog(offs, REPO / "catalogs" / f"{cloud}.csv")
        print(f"catalogs/{cloud}.csv: {len(cat)} offerings, {len(cat.accelerators)} accelerators, "
              f"{len(cat.regions)} regions")


if __name__ == "__main__":
    main()
