"""Write replay tables for `cloudfit search --backend replay` from data/measurements.csv.

    python scripts/build_replay.py      # → data/replay/<workload>-<source>-bs<batch>-<precision>.csv

One table per replay world (cloudfit.executors.replay.worlds_from_measurements): the measured
hardware points of one workload, batch, precision and source that the GCP catalog offers.
"""

from __future__ import annotations

import csv
from pathlib import Path

from cloudfit.executors.replay import worlds_from_measurements

ROOT = Path(__file__).resolve().parents[1]
KEEP = {"resnet50@64 fp32 (gavel)", "bert-large@64 tf32 (lambda)", "gavel-transformer-multi30k@64 fp32 (gavel)"}


def main() -> None:
    out = ROOT / "data" / "replay"
    out.mkdir(parents=True, exist_ok=True)
    for w in worlds_from_measurements():
        if w["name"] not in KEEP:
            continue
        src = w["name"].split("(")[1].rstrip(")")
        path = out / f"{w['profile'].model}-{src}-bs{w['batch']}-{w['precision']}.csv"
        with open(path, "w", newline="") as f:
            wr = csv.writer(f)
            wr.writerow(["accelerator", "accelerators_per_node", "nodes", "batch_size_per_device", "precision",
                         "samples_per_second"])
            for (a, c, n, b, p), v in sorted(w["table"].items()):
                wr.writerow([a, c, n, b, p, f"{v:.6g}"])
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
