"""Rebuild catalogs/gcp.csv from the SkyPilot v8 GCP rows in data/raw/catalog (deterministic).

    python scripts/build_catalog.py [--source data/raw/catalog/gcp_v8_vms_gpu_subset.csv] [--out catalogs/gcp.csv]

One row per (machine type with its attached accelerators) × zone. The pricing rule and every
derived size are documented in catalogs/README.md.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COLUMNS = [
    "machine_type", "accelerator", "accelerators_per_node", "vcpus", "memory_gib",
    "region", "zone", "price_per_hour", "spot_price_per_hour",
]

# Bundled (accelerator-optimised) machine types: the GPUs come with the shape.
_BUNDLED = [
    (r"a2-highgpu-(\d+)g", "A100"),
    (r"a2-megagpu-(16)g", "A100"),
    (r"a2-ultragpu-(\d+)g", "A100-80GB"),
    (r"a3-highgpu-(\d+)g", "H100"),
    (r"a3-edgegpu-(8)g", "H100"),
    (r"a3-megagpu-(8)g", "H100-MEGA"),
    (r"a3-ultragpu-(8)g", "H200"),
    (r"a4-highgpu-(8)g", "B200"),
]
# G2: one shape per L4 count; prices are linear in vCPUs (g2-standard-8 = 2 × g2-standard-4 to the
# cent in every region), so missing shapes are derived from g2-standard-8.
_G2 = {"g2-standard-4": 1, "g2-standard-8": 1, "g2-standard-24": 2, "g2-standard-48": 4, "g2-standard-96": 8}
_G2_SHAPES = {"g2-standard-4": (4, 16), "g2-standard-8": (8, 32), "g2-standard-24": (24, 96),
              "g2-standard-48": (48, 192), "g2-standard-96": (96, 384)}
# N1 hosts for attachable GPUs: n1-highmem with 8 vCPUs per GPU (SkyPilot's default host family),
# within GCP's per-GPU vCPU limits (V100: 12 per GPU; T4/P4/P100 more). Price per vCPU is the
# region's n1-highmem-64 price / 64 (N1 prices are linear in vCPUs within a family).
_N1_HOST = {1: "n1-highmem-8", 2: "n1-highmem-16", 4: "n1-highmem-32", 8: "n1-highmem-64"}
_N1_GPUS = {"T4", "V100", "P100", "P4"}
_N1_MEM_PER_VCPU = 6.5  # GiB, n1-highmem


def _f(x: str) -> float | None:
    return None if x.strip() == "" else float(x)


def _money(x: float | None) -> str:
    return "" if x is None else f"{x:.5f}"


def build(source: Path) -> list[dict[str, str]]:
    hosts: dict[tuple[str, str], dict] = {}  # (machine type, zone) -> row
    accels: dict[tuple[str, int, str], dict] = {}  # (accelerator, count, zone) -> row
    with source.open(newline="") as fh:
        for r in csv.DictReader(fh):
            if r["InstanceType"]:
                hosts[(r["InstanceType"], r["AvailabilityZone"])] = r
            else:
                accels[(r["AcceleratorName"], int(float(r["AcceleratorCount"])), r["AvailabilityZone"])] = r

    out: list[dict[str, str]] = []

    def add(machine, acc, n, vcpus, mem, region, zone, od, spot):
        out.append({
            "machine_type": machine, "accelerator": acc, "accelerators_per_node": str(n),
            "vcpus": f"{vcpus:g}", "memory_gib": f"{mem:g}", "region": region, "zone": zone,
            "price_per_hour": _money(od), "spot_price_per_hour": _money(spot),
        })

    def total(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else a + b

    # Bundled A2/A3/A4: host row + accelerator row in the same zone.
    for (machine, zone), h in sorted(hosts.items()):
        for pattern, acc in _BUNDLED:
            m = re.fullmatch(pattern, machine)
            if not m:
                continue
            n = int(m.group(1))
            a = accels.get((acc, n, zone))
            if a is None:
                continue
            add(machine, acc, n, float(h["vCPUs"]), float(h["MemoryGiB"]), h["Region"], zone,
                total(_f(h["Price"]), _f(a["Price"])), total(_f(h["SpotPrice"]), _f(a["SpotPrice"])))

    # G2: per-zone host price; derived shapes from g2-standard-8 scaled by vCPUs.
    g2_zones = sorted({z for (m, z) in hosts if m == "g2-standard-8"})
    for zone in g2_zones:
        base = hosts[("g2-standard-8", zone)]
        for machine, n in _G2.items():
            a = accels.get(("L4", n, zone))
            if a is None:
                continue
            vcpus, mem = _G2_SHAPES[machine]
            h = hosts.get((machine, zone))
            if h is not None:
                od, spot = _f(h["Price"]), _f(h["SpotPrice"])
            else:
                scale = vcpus / 8.0
                od = None if _f(base["Price"]) is None else _f(base["Price"]) * scale
                spot = None if _f(base["SpotPrice"]) is None else _f(base["SpotPrice"]) * scale
            add(machine, "L4", n, vcpus, mem, base["Region"], zone,
                total(od, _f(a["Price"])), total(spot, _f(a["SpotPrice"])))

    # N1 + attachable GPUs: per-region vCPU price from n1-highmem-64.
    per_vcpu: dict[str, tuple[float | None, float | None]] = {}
    for (machine, zone), h in hosts.items():
        if machine == "n1-highmem-64":
            od, spot = _f(h["Price"]), _f(h["SpotPrice"])
            per_vcpu[h["Region"]] = (None if od is None else od / 64, None if spot is None else spot / 64)
    for (acc, n, zone), a in sorted(accels.items()):
        if acc not in _N1_GPUS or n not in _N1_HOST:
            continue
        region = a["Region"]
        if region not in per_vcpu:
            continue
        machine = _N1_HOST[n]
        vcpus = float(machine.rsplit("-", 1)[1])
        od_v, spot_v = per_vcpu[region]
        add(machine, acc, n, vcpus, vcpus * _N1_MEM_PER_VCPU, region, zone,
            total(None if od_v is None else od_v * vcpus, _f(a["Price"])),
            total(None if spot_v is None else spot_v * vcpus, _f(a["SpotPrice"])))

    out.sort(key=lambda r: (r["accelerator"], int(r["accelerators_per_node"]), r["machine_type"], r["zone"]))
    return out


def write_csv(rows: list[dict[str, str]], out: Path) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(buf.getvalue())
    os.replace(tmp, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, default=ROOT / "data/raw/catalog/gcp_v8_vms_gpu_subset.csv")
    ap.add_argument("--out", type=Path, default=ROOT / "catalogs/gcp.csv")
    args = ap.parse_args()
    rows = build(args.source)
    write_csv(rows, args.out)
    print(f"wrote {len(rows)} offerings to {args.out}")


if __name__ == "__main__":
    main()
