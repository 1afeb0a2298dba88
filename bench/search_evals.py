"""How many evaluations optuna needs to find the exhaustive optimum of `cloudfit recommend`.

    python bench/search_evals.py [--seeds 5] [--trials 300]

For several workloads and limits over the full shipped catalog (max 64 nodes, spot allowed), the
optuna searcher (TPE and GP, seeded) is run next to the exhaustive oracle. An evaluation prices one
(machine shape, nodes, spot) point in every zone that offers it. Reported per sampler: evaluations
until the searcher first saw the exhaustive optimum's point (median over seeds and cases), how often
it found it within the trial budget, the regret of what it returned, and the wall time against the
exhaustive search.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import time

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")

CASES = [
    dict(model="resnet50", epochs=90, dataset_size=1_281_167, deadline="24h"),
    dict(model="resnet50", epochs=90, dataset_size=1_281_167, budget="100"),
    dict(model="bert-large", samples=5e7, deadline="12h"),
    dict(model="gpt2", samples=2e7, budget="500", spot="never"),
    dict(model="transformer-base", samples=1e8, deadline="6h", confidence=0.95),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from cloudfit import catalog
    from cloudfit.plan import load_workload_profile
    from cloudfit.search import Problem, get_searcher
    from cloudfit.search.space import build_space
    from cloudfit.workload import make_workload

    cat = catalog.load()
    rows = []
    for case in CASES:
        w = make_workload(**case)
        space = build_space(w, load_workload_profile(w), cat)
        problem = Problem.of(w)
        t = time.perf_counter()
        ex = get_searcher("exhaustive").search(space, problem)
        t_ex = time.perf_counter() - t
        a = space.assess(problem.deadline_hours)
        key = (lambda i: (int(space.shape[i]), int(space.nodes[i]), bool(space.spot[i])))
        best_i = int(ex.order[0])
        best_val = float(a.hours[best_i] if problem.objective == "time" else a.cost_usd[best_i])
        n_points = len({key(i) for i in range(len(space))})
        for sampler in ("tpe", "gp"):
            for seed in range(args.seeds):
                t = time.perf_counter()
                r = get_searcher("bayes", n_trials=args.trials, seed=seed, sampler=sampler).search(space, problem)
                wall = time.perf_counter() - t
                got = int(r.order[0]) if r.order.size else None
                val = None if got is None else float(a.hours[got] if problem.objective == "time" else a.cost_usd[got])
                found = got is not None and key(got) == key(best_i)
                print(f"{_name(case)} {sampler} seed {seed}: {wall:.1f} s, found={found}", file=sys.stderr, flush=True)
                rows.append({"case": _name(case), "sampler": sampler, "seed": seed, "points": n_points,
                             "found": found, "first_hit": r.first_hit if found else None, "evaluations": r.evaluations,
                             "regret": None if val is None else val / best_val - 1, "wall_s": wall, "exhaustive_s": t_ex})
    report = render(rows, args)
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)


def _name(case: dict) -> str:
    limits = ", ".join(f"{k} {v}" for k, v in case.items() if k in ("deadline", "budget", "spot", "confidence"))
    return f"{case['model']} ({limits})"


def render(rows, args) -> str:
    lines = [
        "## Optuna searcher against the exhaustive oracle (issue 5)", "",
        f"Command: `python bench/search_evals.py --seeds {args.seeds} --trials {args.trials}`. Date: {dt.date.today()}. "
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, no GPU, Python {platform.python_version()}.", "",
        "Full shipped catalog, up to 64 nodes, spot allowed unless stated. An evaluation = one (machine shape, nodes, "
        "spot) point priced in every zone. 'evaluations to optimum' = evaluations until the searcher first priced the "
        "exhaustive optimum's point (median over the seeds that found it).", "",
        "| case | points | sampler | found optimum | evaluations to optimum (median) | median regret returned | "
        "searcher wall s | exhaustive wall s |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for case in dict.fromkeys(r["case"] for r in rows):
        for sampler in ("tpe", "gp"):
            rs = [r for r in rows if r["case"] == case and r["sampler"] == sampler]
            hits = [r["first_hit"] for r in rs if r["found"]]
            regs = [r["regret"] for r in rs if r["regret"] is not None]
            lines.append(f"| {case} | {rs[0]['points']} | {sampler} | {len(hits)}/{len(rs)} | "
                         f"{np.median(hits) if hits else '—'} | {np.median(regs):.1%} | "
                         f"{np.median([r['wall_s'] for r in rs]):.1f} | {rs[0]['exhaustive_s']:.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
