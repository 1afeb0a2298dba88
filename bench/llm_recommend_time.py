"""Wall time of `cloudfit recommend` for a large model over the whole GCP catalog, as a ratio to
`python -c "import typer, rich, numpy"` (issue 17: ≤ 1 s on this machine), measured side by side.

    python bench/llm_recommend_time.py                 # llama3-70b, 2e11 tokens, 30 days, all regions, ≤ 64 nodes, spot
    python bench/llm_recommend_time.py --rounds 9 -- recommend --model llama3-8b --tokens 1e11 --deadline 7d

Runs baseline and command alternately (drift hits both), after one warm-up of each; prints medians of wall
time and of CPU time (user + sys of the child, less sensitive to other load on a shared machine) and ratios.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

BASELINE = [sys.executable, "-c", "import typer, rich, numpy"]
ARGS = ["recommend", "--model", "llama3-70b", "--tokens", "2e11", "--seq-len", "8192", "--deadline", "30d"]
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run(argv: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=ENV)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("args", nargs="*")
    ns = ap.parse_args()
    cmd = [sys.executable, "-m", "cloudfit"] + (ns.args or ARGS)
    run(BASELINE), run(cmd)
    b, c = [], []
    for _ in range(ns.rounds):
        b.append(run(BASELINE))
        c.append(run(cmd))
    bw, bc = statistics.median(x[0] for x in b), statistics.median(x[1] for x in b)
    cw, cc = statistics.median(x[0] for x in c), statistics.median(x[1] for x in c)
    print(f"| `cloudfit {' '.join(cmd[3:])}` | {cw:.3f} s | {bw:.3f} s | {cw / bw:.2f}× | {cc:.3f} s | {bc:.3f} s | "
          f"{cc / bc:.2f}× | {ns.rounds} |")


if __name__ == "__main__":
    main()
