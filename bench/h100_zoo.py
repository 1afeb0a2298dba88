"""How good is the stats-only prediction on a GPU nobody profiled? Judge it against cloudfit's own H100
profile runs of the zoo (`bench/device/gpu_session.sh`: `cloudfit profile run MODEL --device cuda
--precision bf16`, one H100 80GB HBM3, torch 2.11.0+cu130).

For each shipped profile holding a measured H100 row, every measurement on the H100's chip is removed (so
nothing anchors on it) and `cloudfit predict --profile … --accelerator H100 --precision bf16 --batch-size B
--json` is asked for the same point; the table gives measured vs predicted, the 10–90% band, whether the truth
falls in it, and what the step is made of: the kernels per step the stats profile counted, the launch floor
they set (kernels × ``prior.LAUNCH_S_PER_KERNEL``), the measured and the predicted step.

Held out of the fit too: the shipped model is fitted on ``data/measurements.csv`` alone (the bench checks the
model file's recorded digest against that file, and that no row of it comes from a cloudfit profile).

    python bench/h100_zoo.py            # prints a markdown table and the summary

The same check on the H200 rows of the 2026-11-27 session (`bench/device/gpu_session2.sh`):
``--target H200`` (stats-only: every GPU measurement removed) and ``--target H200 --anchor H100`` (every GPU
measurement but the H100's removed: the prediction carried from the model's own measured H100 row to a GPU with
no row in the training table — the transition prior's case).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _target_rows(doc: dict, target: str) -> list[dict]:
    return [m for m in doc["measurements"] if m["accelerator"] == target and m["source"] == "measured"
            and target in (m.get("device_name") or "")]


def _held_out(m: dict, anchor: str | None) -> bool:
    """Every measurement on a GPU is held out (stats-only), but the ``anchor`` GPU's own rows."""
    from cloudfit.catalog import hardware
    from cloudfit.errors import UsageError

    try:
        name = hardware.canonical_name(m["accelerator"])
    except UsageError:
        return True
    return name != "cpu" and name != anchor


def check_held_out() -> str:
    """One line saying why the H100 rows cannot have taught the shipped model (raises if they could)."""
    import csv
    import hashlib

    from cloudfit.perf.model import model_path

    table = REPO / "data" / "measurements.csv"
    doc = json.loads(model_path().read_text())
    digest = hashlib.sha256(table.read_bytes()).hexdigest()
    if doc["training"]["measurements_sha256"] != digest:
        raise SystemExit("the shipped model was not fitted on data/measurements.csv: refit it (`cloudfit model fit`)")
    with open(table, newline="") as f:
        sources = sorted({r["source"] for r in csv.DictReader(f)})
    if any("cloudfit" in s or "profile" in s for s in sources):
        raise SystemExit(f"the training table holds cloudfit profile rows ({sources})")
    return (f"model fitted on data/measurements.csv (sha256 {digest[:16]}…; sources {', '.join(sources)}); "
            "no cloudfit profile row in it")


def _predict(doc: dict, m: dict, tmp: Path, target: str, anchor: str | None) -> dict:
    held_out = dict(doc, measurements=[x for x in doc["measurements"] if not _held_out(x, anchor)])
    path = tmp / f"{doc['model']}.json"
    path.write_text(json.dumps(held_out))
    out = subprocess.run([sys.executable, "-m", "cloudfit", "predict", "--profile", str(path), "--accelerator", target,
                          "--count", str(m["count"]), "--nodes", str(m["nodes"]), "--precision", m["precision"],
                          "--batch-size", str(m["batch_size_per_device"]), "--json"],
                         capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout)


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="H100", help="the GPU whose measured rows are predicted (H100, H200)")
    ap.add_argument("--anchor", default=None, help="keep this GPU's measured rows (an anchored check); default none")
    a = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from cloudfit.perf.prior import LAUNCH_S_PER_KERNEL

    held = check_held_out()
    rows, kernels = [], {}
    with tempfile.TemporaryDirectory() as d:
        for f in sorted((REPO / "profiles").glob("*.json")):
            doc = json.loads(f.read_text())
            for m in _target_rows(doc, a.target):
                p = _predict(doc, m, Path(d), a.target, a.anchor)
                rows.append((doc["model"], m, p))
                kernels[doc["model"]] = doc["stats"].get("kernels_per_step")
    print(held + "\n")
    print(f"target {a.target}; " + (f"anchored on each model's measured {a.anchor} row" if a.anchor
                                    else "stats-only: every GPU measurement held out") + "\n")
    print("| model | batch | kernels / step | launch floor ms | measured step ms | predicted step ms "
          "| measured samples/s | predicted (10–90%) | predicted ÷ measured | in band |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|:-:|")
    ratios, inside = [], 0
    for name, m, p in rows:
        got, pred = m["samples_per_second"], p["samples_per_second"]
        ok = p["low"] <= got <= p["high"]
        inside += ok
        ratios.append(pred / got)
        b, k = m["batch_size_per_device"], kernels[name]
        floor = f"{k * LAUNCH_S_PER_KERNEL * 1e3:.2f}" if k else "—"
        print(f"| {name} | {b} | {k or '—'} | {floor} | {b / got * 1e3:.1f} | {b / pred * 1e3:.1f} "
              f"| {got:,.0f} | {pred:,.0f} ({p['low']:,.0f}–{p['high']:,.0f}) | {pred / got:.2f} | {'yes' if ok else 'no'} |")
    ape = [abs(r - 1) for r in ratios]
    print(f"\n{len(rows)} models; median |error| {100 * statistics.median(ape):.1f}%, mean {100 * statistics.mean(ape):.1f}%; "
          f"over-predicted {sum(r > 1 for r in ratios)}/{len(rows)}; truth inside the 10–90% band {inside}/{len(rows)} "
          f"({100 * inside / len(rows):.0f}%); basis of every prediction: {sorted({p['basis'] for _, _, p in rows})}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
