"""How good is the stats-only prediction on a GPU nobody profiled? Judge it against cloudfit's own H100
profile runs of the zoo (`bench/device/gpu_session.sh`: `cloudfit profile run MODEL --device cuda
--precision bf16`, one H100 80GB HBM3, torch 2.11.0+cu130).

For each shipped profile holding a measured H100 row, the row is removed (so nothing anchors on it) and
`cloudfit predict --profile … --accelerator H100 --precision bf16 --batch-size B --json` is asked for the
same point; the table gives measured vs predicted, the 10–90% band, and whether the truth falls in it.

    python bench/h100_zoo.py            # prints a markdown table and the summary
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _h100_rows(doc: dict) -> list[dict]:
    return [m for m in doc["measurements"] if m["accelerator"] == "H100" and m["source"] == "measured"
            and "H100" in (m.get("device_name") or "")]


def _predict(doc: dict, m: dict, tmp: Path) -> dict:
    held_out = dict(doc, measurements=[x for x in doc["measurements"] if x not in _h100_rows(doc)])
    path = tmp / f"{doc['model']}.json"
    path.write_text(json.dumps(held_out))
    out = subprocess.run([sys.executable, "-m", "cloudfit", "predict", "--profile", str(path), "--accelerator", "H100",
                          "--count", str(m["count"]), "--nodes", str(m["nodes"]), "--precision", m["precision"],
                          "--batch-size", str(m["batch_size_per_device"]), "--json"],
                         capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout)


def main() -> int:
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for f in sorted((REPO / "profiles").glob("*.json")):
            doc = json.loads(f.read_text())
            for m in _h100_rows(doc):
                p = _predict(doc, m, Path(d))
                rows.append((doc["model"], m, p))
    print("| model | batch | measured samples/s | predicted (10–90%) | predicted ÷ measured | in band |")
    print("|---|---:|---:|---:|---:|:-:|")
    ratios, inside = [], 0
    for name, m, p in rows:
        got, pred = m["samples_per_second"], p["samples_per_second"]
        ok = p["low"] <= got <= p["high"]
        inside += ok
        ratios.append(pred / got)
        print(f"| {name} | {m['batch_size_per_device']} | {got:,.0f} | {pred:,.0f} ({p['low']:,.0f}–{p['high']:,.0f}) "
              f"| {pred / got:.2f} | {'yes' if ok else 'no'} |")
    ape = [abs(r - 1) for r in ratios]
    print(f"\n{len(rows)} models; median |error| {100 * statistics.median(ape):.1f}%, mean {100 * statistics.mean(ape):.1f}%; "
          f"over-predicted {sum(r > 1 for r in ratios)}/{len(rows)}; truth inside the 10–90% band {inside}/{len(rows)} "
          f"({100 * inside / len(rows):.0f}%); basis of every prediction: {sorted({p['basis'] for _, _, p in rows})}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
