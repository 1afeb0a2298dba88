"""Does the budget guard hold, and how much of the budget does it let a run use?

    python bench/budget_sim.py            # 10,000 simulated runs
    python bench/budget_sim.py -n 2000 --seed 3
    python bench/budget_sim.py --deadline-runs 1000 --only-deadline   # the deadline rule, with and without

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

from cloudfit.executors.budget_sim import simulate, simulate_deadline


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--deadline-runs", type=int, default=1000, help="spot jobs under a deadline (0: skip)")
    ap.add_argument("--only-deadline", action="store_true")
    a = ap.parse_args()
    if not a.only_deadline:
        budget_section(a)
    if a.deadline_runs:
        deadline_section(a)


def budget_section(a) -> None:
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


def deadline_section(a) -> None:
    n = a.deadline_runs
    t0 = time.perf_counter()
    rows = {sw: simulate_deadline(n, seed=a.seed, switching=sw) for sw in (False, True)}
    wall = time.perf_counter() - t0
    print(f"## Deadline kept at run time ({subprocess.run(['date'], capture_output=True, text=True).stdout.strip()})\n")
    print(f"`python bench/budget_sim.py --deadline-runs {n} --only-deadline --seed {a.seed}` on {platform.machine()}, "
          f"{__import__('os').cpu_count()} cores, no GPU: {wall:.1f} s. The same {n:,} spot jobs (same draws, same "
          "preemptions and capacity outages until a run leaves spot) without and with Can't Be Late's rule "
          "(`cloudfit/executors/budget_sim.py:simulate_deadline_run`).\n")
    print("| launcher | deadline kept | kept among runs not stopped by the budget | stopped by the budget | "
          "moved to on-demand | over budget | highest spend/budget | mean spend |")
    print("|---|---|---|---|---|---|---|---|")
    for sw, rs in rows.items():
        done = [r for r in rs if r.reason != "budget"]
        kept = sum(r.deadline_kept for r in rs)
        print(f"| {'switching rule' if sw else 'spot only (recreate on spot)'} | **{kept / n:.1%}** ({kept}) | "
              f"{sum(r.deadline_kept for r in done) / max(1, len(done)):.1%} | {n - len(done)} | "
              f"{sum(r.switched for r in rs)} | {sum(not r.within_budget for r in rs)} | "
              f"{max(r.billed_usd / r.budget_usd for r in rs):.4f} | ${statistics.mean(r.billed_usd for r in rs):,.0f} |")
    a_, b_ = rows[False], rows[True]
    saved = sum(1 for x, y in zip(a_, b_) if not x.deadline_kept and y.deadline_kept)
    lost = sum(1 for x, y in zip(a_, b_) if x.deadline_kept and not y.deadline_kept)
    print(f"\nPer job: the rule kept {saved} deadlines spot-only missed and missed {lost} that spot-only kept "
          "(those: the on-demand price used the budget up before the end).")


if __name__ == "__main__":
    main()
