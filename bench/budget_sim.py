"""Does the budget guard hold, and how much of the budget does it let a run use?

    python bench/budget_sim.py            # 10,000 simulated runs
    python bench/budget_sim.py -n 2000 --seed 3

Each run draws a budget ($0.5–500), 1–8 nodes, $0.1–40/h per node with 0–4 price changes,
stockouts (fallback through up to 3 configs), preemptions (0–5 per node-hour), provisioning and
deletion delays, late checks and, in 30% of runs, a launcher that dies; see
``cloudfit/executors/budget_sim.py``. Prints a Markdown section for bench/RESULTS_executors.md.
"""

from __future__ import annotations

import argparse
import collections
import platform
import statistics
import subprocess
import time

from cloudfit.executors.budget_sim import simulate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t0 = time.perf_counter()
    runs = simulate(a.n, seed=a.seed)
    wall = time.perf_counter() - t0
    reasons = collections.Counter(r.reason for r in runs)
    worst = max(r.billed_usd / r.budget_usd for r in runs)
    over = sum(not r.within_budget for r in runs)
    print(f"## Budget guard simulation ({subprocess.run(['date'], capture_output=True, text=True).stdout.strip()})\n")
    print(f"`python bench/budget_sim.py -n {a.n} --seed {a.seed}` on {platform.machine()}, "
          f"{__import__('os').cpu_count()} cores, no GPU: {wall:.1f} s.\n")
    print(f"- runs that spent past their budget: **{over} of {a.n}**; highest spend/budget: {worst:.6f}")
    print("- how runs ended: " + ", ".join(f"{k} {v}" for k, v in reasons.most_common()))
    print(f"- preemptions simulated: {sum(r.preemptions for r in runs):,}; stockout fallbacks: {sum(r.fallbacks for r in runs):,}")
    for reason in ("budget", "launcher-died"):
        used = sorted(r.billed_usd / r.budget_usd for r in runs if r.reason == reason)
        if used:
            q = statistics.quantiles(used, n=10)
            print(f"- budget used when the run ended by `{reason}`: median {statistics.median(used):.1%}, "
                  f"10th percentile {q[0]:.1%}, 90th {q[-1]:.1%}")
    print("\nReading: the launcher stops a run once one more check interval plus teardown could pass the budget, "
          "so a run ended by the budget uses most but never all of it; a run whose launcher died is ended by "
          "the VMs' max_run_duration caps, which are conservative (they assume the worst price and full teardown).")


if __name__ == "__main__":
    main()
