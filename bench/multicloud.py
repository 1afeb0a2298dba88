"""Recommend across clouds (issue 26): time against GCP alone, a replay check over 10 jobs, single-GPU B200.

    python bench/multicloud.py [--repeats 5] [--skip-timing]

1. Time: ``cloudfit recommend`` (the CLI, a fresh process each run, ``--json`` to /dev/null) for the
   ResNet-50 example and ``llama3-8b --tokens 1e11 --seq-len 8192 --deadline 7d``, ``--clouds gcp`` and
   ``--clouds all`` interleaved; medians of ``--repeats`` runs. Target: all ≤ 1.5 × gcp.
2. Replay check: 10 deadline jobs planned in-process on GCP alone and on every cloud; the cross-cloud
   plan's expected cost must never exceed the GCP-only plan's (the union's space holds every GCP candidate
   with the same numbers), and the table says by how much it is cheaper and where it runs.
3. ``--max-gpus 1`` with B200 only: some cloud sells a single B200 (GCP sells B200 only in eights).
Prints a markdown report (pasted into bench/RESULTS_multicloud.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TIMED = {
    "resnet50": "--model resnet50 --epochs 90 --dataset-size 1281167 --deadline 24h",
    "llama3-8b": "--model llama3-8b --tokens 1e11 --seq-len 8192 --deadline 7d",
}
JOBS = [  # (model, samples, deadline)
    ("resnet50", 1.15e8, "24h"), ("resnet50", 5e7, "6h"), ("bert-large", 2e7, "12h"), ("gpt2", 1e7, "8h"),
    ("transformer-base", 3e7, "6h"), ("vgg16", 1e8, "24h"), ("bert-base", 3e7, "8h"), ("resnet152", 6e7, "12h"),
    ("mobilenet_v2", 2e8, "4h"), ("gpt2-medium", 5e6, "48h"),
]


def _time(args: str, clouds: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "cloudfit", "recommend", *args.split(), "--clouds", clouds, "--json"],
                   check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - t


def timing(repeats: int) -> list[str]:
    out = ["| workload | gcp (s, median) | all clouds (s, median) | ratio |", "|---|---:|---:|---:|"]
    for name, args in TIMED.items():
        _time(args, "gcp"), _time(args, "all")  # warm the file cache
        g, a = [], []
        for _ in range(repeats):
            g.append(_time(args, "gcp"))
            a.append(_time(args, "all"))
        mg, ma = statistics.median(g), statistics.median(a)
        out.append(f"| {name} | {mg:.2f} | {ma:.2f} | {ma / mg:.2f}× |")
    return out


def replay(spot: str = "allow") -> tuple[list[str], bool]:
    from cloudfit import catalog
    from cloudfit.plan import recommend
    from cloudfit.workload import make_workload

    cats = {c: catalog.load(clouds=c) for c in [("gcp",), ("gcp", "aws", "lambda", "runpod", "nebius")]}
    rows = [f"spot policy: {spot}", "", "| job | GCP-only plan | $ | cross-cloud plan | $ | cheaper by |",
            "|---|---|---:|---|---:|---:|"]
    ok = True
    for model, samples, deadline in JOBS:
        plans = {}
        for clouds, cat in cats.items():
            w = make_workload(model=model, samples=samples, deadline=deadline, clouds=clouds, spot=spot)
            plans[len(clouds)] = recommend(w, catalog=cat)
        g, a = plans[1], plans[5]
        ok &= a.chosen.cost_usd <= g.chosen.cost_usd * (1 + 1e-9)

        def where(p):
            c = p.chosen.config
            return f"{c.offering.cloud} {c.nodes}× {c.offering.machine_type}{' spot' if c.spot else ''}"

        saved = 1 - a.chosen.cost_usd / g.chosen.cost_usd
        rows.append(f"| {model} {samples:.3g} samples, {deadline} | {where(g)} | {g.chosen.cost_usd:,.2f} | {where(a)} | "
                    f"{a.chosen.cost_usd:,.2f} | {saved:.0%} |")
    return rows, ok


def single_b200() -> str:
    from cloudfit import catalog
    from cloudfit.plan import recommend
    from cloudfit.workload import make_workload

    w = make_workload(model="resnet50", samples=2e7, deadline="24h", max_gpus=1, accelerators=["B200"], clouds="all")
    p = recommend(w, catalog=catalog.load(clouds=w.clouds))
    c = p.chosen.config
    return (f"`--max-gpus 1 --accelerators B200 --clouds all` (resnet50, 2e7 samples, 24 h): chosen "
            f"{c.offering.cloud} {c.nodes}× {c.offering.machine_type} ({c.offering.accelerators_per_node}×"
            f"{c.offering.accelerator}) at ${c.price_per_hour:.2f}/h, ${p.chosen.cost_usd:.2f} expected.")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--skip-timing", action="store_true")
    a = ap.parse_args()
    if not a.skip_timing:
        print("\n".join(timing(a.repeats)), "\n")
    ok = True
    for policy in ("allow", "never"):
        rows, good = replay(policy)
        ok &= good
        print("\n".join(rows), "\n")
    print(f"\ncross-cloud never dearer than GCP-only: {'yes' if ok else 'NO'}\n")
    print(single_b200())
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
