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
import sys
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
        readme_section()


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


class SafetyNetWatch:
    """The rule before issue 27, for comparison: move to on-demand as soon as the time left is below the
    work after the checkpoint at on-demand speed + restart + one check — every check, whether or not
    on-demand keeps the deadline, with the speed since the segment's start (boot included)."""

    def __init__(self, spec, total_steps: int, *, margin_s: float, t0: float) -> None:
        self.spec, self.total, self.margin_s, self.t0 = spec, total_steps, margin_s, t0
        self.seg = None

    def lost(self) -> None:
        self.seg = None

    restarted = lost

    def observe(self, now, progress, config, *, up=True, budget_left_usd=None):
        from cloudfit.executors.deadline import Decision

        step, safe = int(progress.get("step") or 0), int(progress.get("checkpoint_step") or 0)
        if self.seg is None:
            self.seg = (now, step)
        rate = ((step - self.seg[1]) / (now - self.seg[0]) if step > self.seg[1] and now > self.seg[0]
                else 1.0 / self.spec.planned_step_s)
        needs = (self.total - safe) / rate + self.spec.restart_s + self.margin_s
        if config.spot and self.spec.deadline_s - (now - self.t0) < needs:
            return Decision("on-demand", "behind", None, None, {}, to=self.spec.on_demand)
        return Decision("stay", "", None, None, {})


def deadline_section(a) -> None:
    n = a.deadline_runs
    t0 = time.perf_counter()
    rows = {sw: simulate_deadline(n, seed=a.seed, switching=sw, deaths=True) for sw in (False, True)}
    rows["old"] = simulate_deadline(n, seed=a.seed, switching=True, deaths=True, watch_cls=SafetyNetWatch)
    wall = time.perf_counter() - t0
    print(f"## Deadline kept at run time ({subprocess.run(['date'], capture_output=True, text=True).stdout.strip()})\n")
    print(f"`python bench/budget_sim.py --deadline-runs {n} --only-deadline --seed {a.seed}` on {platform.machine()}, "
          f"{__import__('os').cpu_count()} cores, no GPU: {wall:.1f} s. The same {n:,} spot jobs (same draws, same "
          "preemptions, capacity outages and launcher deaths until a run leaves spot) without and with the deadline "
          "rule (`cloudfit.executors.deadline.DeadlineWatch`, after Can't Be Late, Wu et al., NSDI 2024), under the "
          "real budget guard. In 30% of the runs the launcher is killed 1–3 times; 0.5–4 h later the cluster is "
          "brought down and the same plan relaunched with the budget its earlier launches left "
          "(`cloudfit/executors/budget_sim.py:simulate_deadline_run`).\n")
    print("| launcher | deadline kept | stopped by the budget | moved to on-demand | on-demand cluster-hours bought "
          "| runs with launcher deaths (deaths) | over budget | highest spend/budget | mean spend |")
    print("|---|---|---|---|---|---|---|---|---|")
    for sw, rs in rows.items():
        kept = sum(r.deadline_kept for r in rs)
        died = [r for r in rs if r.launcher_deaths]
        name = {False: "spot only (recreate on spot)", True: "deadline rule (this one)",
                "old": "the rule before (safety net every check, boot counted as speed)"}[sw]
        print(f"| {name} | **{kept / n:.1%}** ({kept}) | "
              f"{sum(r.reason == 'budget' for r in rs)} | {sum(r.switched for r in rs)} | "
              f"{sum(r.on_demand_hours for r in rs):,.0f} | {len(died)} ({sum(r.launcher_deaths for r in rs)}) | "
              f"**{sum(not r.within_budget for r in rs)}** | {max(r.billed_usd / r.budget_usd for r in rs):.4f} | "
              f"${statistics.mean(r.billed_usd for r in rs):,.0f} |")
    a_, b_ = rows[False], rows[True]
    saved = sum(1 for x, y in zip(a_, b_) if not x.deadline_kept and y.deadline_kept)
    lost = sum(1 for x, y in zip(a_, b_) if x.deadline_kept and not y.deadline_kept)
    moved = [r for r in b_ if r.switched]
    print(f"\nPer job: the rule kept {saved} deadlines spot-only missed and missed {lost} that spot-only kept. "
          f"Runs it moved: {len(moved)}, {sum(r.deadline_kept for r in moved)} of them on time, "
          f"{sum(r.on_demand_hours for r in moved) / max(1, len(moved)):,.1f} on-demand cluster-hours each on average. "
          "Spend carried across relaunches: the recorded per-plan spend (the guards' sum) is never below what the "
          f"cloud billed by more than {max((r.billed_usd - r.spend_recorded_usd) / r.budget_usd for r in b_):.2%} "
          "of the budget.")


def readme_section() -> None:
    """The README's LLM plan (issue 27's panic case) through its own deadline rule on simulated time."""
    import dataclasses
    import tempfile
    from pathlib import Path

    from cloudfit.executors.base import plan_configs
    from cloudfit.executors.budget_sim import simulate_plan_deadline
    from cloudfit.executors.deadline import deadline_spec
    from cloudfit.plan.io import load_plan

    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "plan.json"
        args = ["--model", "llama3-8b", "--tokens", "1e11", "--seq-len", "8192", "--deadline", "7d"]
        subprocess.run([sys.executable, "-m", "cloudfit", "recommend", *args, "--out", str(out)], check=True,
                       capture_output=True)
        plan = load_plan(out)
    configs = plan_configs(plan)
    spec = deadline_spec(plan, configs)
    steps = int(plan.layout["steps"])
    print(f"\n### The README's LLM plan (`cloudfit recommend {' '.join(args)}`: {plan.chosen.hours:.1f} h planned on "
          f"{configs[0].label()}, 60 s boot)\n")
    print("| speed | deadline | switches | finished | on-demand hours | spend |")
    print("|---|---|---|---|---|---|")
    for speed, hours in ((1.0, 168.0), (0.5, 172.0), (0.5, 168.0)):
        sp = dataclasses.replace(spec, deadline_s=hours * 3600.0)
        r = simulate_plan_deadline(sp, steps, configs[0], speed=speed, boot_s=60.0)
        fin = f"{r.finished_s / 3600:.1f} h" if r.finished_s else "no"
        print(f"| {speed:g}× planned | {hours:g} h | {len(r.switches)} | {fin} ({'kept' if r.deadline_kept else 'missed'})"
              f" | {r.on_demand_hours:.1f} | ${r.spend_usd:,.0f} |")
        for why in r.switches:
            print(f"|  | | reason: {why} | | | |")


if __name__ == "__main__":
    main()
