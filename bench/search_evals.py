"""How many evaluations optuna needs to find the exhaustive optimum of `cloudfit recommend`.

    python bench/search_evals.py [--seeds 5] [--trials 300] [--gp-seeds 3] [--gp-trials 100] [--out FILE]

For several workloads and limits over the full shipped catalog (max 64 nodes; deadline and budget;
models from profiles/), ``recommend(..., searcher="bayes", searcher_options={sampler, n_trials,
seed})`` is run over seeds next to the exhaustive oracle. The study searches (machine shape, nodes,
spot); one *evaluation* prices a new such point in every zone offering it (a repeated point is a
trial but costs nothing). Reported per case and sampler: how often the searcher saw the exhaustive
optimum's point within its trials, the evaluations and optuna trials it took (the searcher's own
``SearchResult.first_hit`` is checked against the bench's count), the regret of the plan it
returned, the regret of its best-so-far after k evaluations, and the same for uniform random search
over the points (the reference a sampler must beat), with wall times.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")  # optuna's GP sampler is 4–8× slower with more threads here
sys.path.insert(0, str(Path(__file__).resolve().parent))

CASES = [
    dict(model="resnet50", epochs=90, dataset_size=1_281_167, deadline="24h"),
    dict(model="resnet50", epochs=90, dataset_size=1_281_167, budget="100"),
    dict(model="bert-large", samples=5e7, deadline="12h"),
    dict(model="gpt2", samples=2e7, budget="600", spot="never"),
    dict(model="transformer-base", samples=1e8, deadline="6h", confidence=0.95),
    dict(model="vgg16", epochs=30, dataset_size=1_281_167, budget="60"),
]
CHECKPOINTS = (10, 25, 50, 100, 200)
RANDOM_RUNS = 2000


class _Recorder:
    """Wraps the bayes searcher: its SearchResult, and the trial number of every evaluation it makes."""

    def __init__(self) -> None:
        import optuna

        from cloudfit.search import bayesian

        self.result = None
        self.asks = 0
        self.evals: list[tuple[int, np.ndarray]] = []  # (trials asked so far, candidate ids priced)
        rec = self
        orig_search, orig_eval, orig_ask = bayesian.BayesianSearcher.search, bayesian._evaluate, optuna.study.Study.ask

        def search(self_, space, problem):
            rec.result = orig_search(self_, space, problem)
            return rec.result

        def evaluate(space, problem, ids):
            rec.evals.append((rec.asks, np.asarray(ids)))
            return orig_eval(space, problem, ids)

        def ask(self_, *a, **k):
            rec.asks += 1
            return orig_ask(self_, *a, **k)

        bayesian.BayesianSearcher.search = search
        bayesian._evaluate = evaluate
        optuna.study.Study.ask = ask

    def reset(self) -> None:
        self.result, self.asks, self.evals = None, 0, []


def _point_values(space, problem):
    """Per candidate: point id (shape, nodes, spot); per point: best primary value among its feasible zones."""
    from cloudfit.search.problem import score

    a = space.assess(problem)
    feasible, primary, _ = score(a, problem)
    key = (space.shape.astype(np.int64) * 1000 + space.nodes.astype(np.int64)) * 2 + space.spot.astype(np.int64)
    uniq, point = np.unique(key, return_inverse=True)
    best = np.full(uniq.size, np.inf)
    np.minimum.at(best, point[feasible], primary[feasible])
    return point, best, primary


def run(args) -> tuple[list[dict], list[dict]]:
    from cloudfit import catalog
    from cloudfit.errors import InfeasibleError
    from cloudfit.plan import load_workload_profile, recommend
    from cloudfit.search import Problem, get_searcher
    from cloudfit.search.space import build_space
    from cloudfit.workload import make_workload

    cat = catalog.load()
    rec = _Recorder()
    rng = np.random.default_rng(0)
    rows, cases = [], []
    for case in CASES:
        w = make_workload(**case)
        if w.objective == "time":  # the searcher's optimum is the literal fastest; the knee re-ranks after it
            from dataclasses import replace as _replace

            w = _replace(w, objective="fastest")
        space = build_space(w, load_workload_profile(w), cat)
        problem = Problem.of(w)
        t = time.perf_counter()
        ex = get_searcher("exhaustive").search(space, problem)
        t_ex = time.perf_counter() - t
        t = time.perf_counter()
        recommend(w, space=space)
        t_rec = time.perf_counter() - t
        point, best, primary = _point_values(space, problem)
        opt_i = int(ex.order[0])
        opt_point, opt = int(point[opt_i]), float(primary[opt_i])
        n_points = int(best.size)
        # uniform random search without replacement over the points: evaluations to the optimum, anytime regret
        perms = np.argsort(rng.random((RANDOM_RUNS, n_points)), axis=1)
        hit = np.argmax(perms == opt_point, axis=1) + 1
        run_min = np.minimum.accumulate(best[perms], axis=1)
        rand_curve = {k: float(np.median(run_min[:, min(k, n_points) - 1] / opt - 1)) for k in CHECKPOINTS}
        cases.append({"case": _name(case), "points": n_points, "candidates": len(space),
                      "feasible_points": int(np.isfinite(best).sum()), "objective": problem.objective,
                      "exhaustive_s": t_ex, "recommend_s": t_rec, "random_hit_median": float(np.median(hit)),
                      "random_curve": rand_curve})
        for sampler, seeds, trials in (("tpe", args.seeds, args.trials), ("gp", args.gp_seeds, args.gp_trials)):
            for seed in range(seeds):
                rec.reset()
                t = time.perf_counter()
                try:
                    plan = recommend(w, space=space, searcher="bayes",
                                     searcher_options={"sampler": sampler, "n_trials": trials, "seed": seed})
                    got = plan.chosen
                except InfeasibleError:
                    got = None
                wall = time.perf_counter() - t
                r = rec.result
                seq = [(asks, int(point[ids[0]])) for asks, ids in rec.evals if len(ids)]
                first = next((j for j, (_, p) in enumerate(seq) if p == opt_point), None)
                vals = np.array([best[p] for _, p in seq]) if seq else np.array([np.inf])
                run_best = np.minimum.accumulate(vals)
                curve = {k: float(run_best[min(k, len(run_best)) - 1] / opt - 1) for k in CHECKPOINTS}
                ret = math.inf if got is None else float(primary[int(r.order[0])]) / opt - 1
                rows.append({"case": _name(case), "sampler": sampler, "seed": seed, "trials_budget": trials,
                             "found": first is not None, "evals_to_opt": None if first is None else first + 1,
                             "trials_to_opt": None if first is None else seq[first][0],
                             "first_hit": r.first_hit, "evaluations": r.evaluations, "trials": r.trials,
                             "regret": ret, "curve": curve, "wall_s": wall})
                print(f"{_name(case)} {sampler} seed {seed}: {wall:.1f} s, evaluations {r.evaluations}/{r.trials} "
                      f"trials, optimum at evaluation {None if first is None else first + 1}, regret {ret:.1%}",
                      file=sys.stderr, flush=True)
    return rows, cases


def _name(case: dict) -> str:
    limits = ", ".join(f"{k} {v}" for k, v in case.items() if k in ("deadline", "budget", "spot", "confidence"))
    return f"{case['model']} ({limits})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5, help="TPE seeds")
    ap.add_argument("--trials", type=int, default=300, help="TPE trials per run")
    ap.add_argument("--gp-seeds", type=int, default=3,
                    help="GP seeds (a GP run takes 12–25 s at 100 trials; the defaults take ~6 min in all)")
    ap.add_argument("--gp-trials", type=int, default=100, help="GP trials per run")
    ap.add_argument("--out", default=None, help="write the report's section into this Markdown file")
    args = ap.parse_args()
    t0 = time.time()
    rows, cases = run(args)
    report = render(rows, cases, args, time.time() - t0)
    print(report)
    if args.out:
        from recommend_regret import write_section

        write_section(Path(args.out), "search-evals", report)


def _med(xs) -> str:
    xs = [x for x in xs if x is not None]
    return "—" if not xs else f"{np.median(xs):g}"


def _pct(x: float) -> str:
    return "none feasible" if not math.isfinite(x) else f"{x:.1%}"


def render(rows, cases, args, wall) -> str:
    cmd = (f"python bench/search_evals.py --seeds {args.seeds} --trials {args.trials} --gp-seeds {args.gp_seeds} "
           f"--gp-trials {args.gp_trials} --out bench/RESULTS_recommend.md")
    lines = [
        "## Optuna searcher against the exhaustive oracle", "",
        f"Command: `{cmd}`. Date: {dt.date.today()}. Machine: {platform.machine()}, {os.cpu_count()} cores, no GPU, "
        f"24 GiB, Python {platform.python_version()}, OMP_NUM_THREADS=1. Wall time {wall:.0f} s.", "",
        "`recommend(w, searcher=\"bayes\", searcher_options={sampler, n_trials, seed})` on the full shipped catalog "
        "(≤ 64 nodes, spot allowed unless stated; TPE is optuna's multivariate TPESampler, GP its GPSampler, both "
        "with 10 random start-up trials). A *point* is (machine shape, nodes, spot); an *evaluation* prices a new "
        "point in every zone offering it; a trial that repeats a point costs nothing. 'to optimum' = evaluations "
        "(and optuna trials) until the exhaustive optimum's point was first priced, median [min–max] over the "
        "seeds that found it; 'returned' = regret of the plan recommend() returned (objective: expected cost, or "
        "expected hours under a budget); random = uniform random search over the points without replacement "
        f"(median of {RANDOM_RUNS} orders).", "",
        "| case | points (feasible) | sampler | runs found optimum | evaluations to optimum | trials to optimum | "
        "evaluations / trials used | returned regret: median (worst) | wall s | exhaustive s (recommend() s) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    mismatch = []
    for c in cases:
        for sampler in ("tpe", "gp"):
            rs = [r for r in rows if r["case"] == c["case"] and r["sampler"] == sampler]
            if not rs:
                continue
            ev = [r["evals_to_opt"] for r in rs if r["found"]]
            tr = [r["trials_to_opt"] for r in rs if r["found"]]
            span = f"{_med(ev)} [{min(ev)}–{max(ev)}]" if ev else "—"
            regs = [r["regret"] for r in rs]
            mismatch += [r for r in rs if r["found"] and r["first_hit"] != r["evals_to_opt"]]
            lines.append(
                f"| {c['case']} | {c['points']} ({c['feasible_points']}) | {sampler} ({rs[0]['trials_budget']} trials) | "
                f"{len(ev)}/{len(rs)} | {span} | {_med(tr)} | {_med([r['evaluations'] for r in rs])} / "
                f"{_med([r['trials'] for r in rs])} | {_pct(float(np.median(regs)))} ({_pct(max(regs))}) | "
                f"{np.median([r['wall_s'] for r in rs]):.1f} | {c['exhaustive_s']:.3f} ({c['recommend_s']:.2f}) |")
        lines.append(f"| {c['case']} | {c['points']} ({c['feasible_points']}) | random | — | "
                     f"{c['random_hit_median']:g} | — | — | — | — | — |")
    lines += ["", "Median regret of the best feasible point found after k evaluations (a run that stopped earlier "
              "counts with what it found), over cases and seeds; random: median over cases of the median over "
              "orders:", "",
              "| sampler | " + " | ".join(f"k = {k}" for k in CHECKPOINTS) + " |", "|---|" + "---:|" * len(CHECKPOINTS)]
    for sampler in ("tpe", "gp"):
        rs = [r for r in rows if r["sampler"] == sampler]
        if rs:
            lines.append(f"| {sampler} | " + " | ".join(_pct(float(np.median([r['curve'][k] for r in rs])))
                                                        for k in CHECKPOINTS) + " |")
    lines.append("| random | " + " | ".join(_pct(float(np.median([c['random_curve'][k] for c in cases])))
                                            for k in CHECKPOINTS) + " |")
    lines += ["", "The searcher's `SearchResult.first_hit` agrees with the bench's count of evaluations to the optimum "
              f"in {sum(r['found'] for r in rows) - len(mismatch)}/{sum(r['found'] for r in rows)} runs that found it."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
