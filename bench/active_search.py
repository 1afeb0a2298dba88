"""Active search on replay worlds: trials and probe dollars to reach within 5% of the true optimum.

    python bench/active_search.py [--worlds N] [--seeds S] [--out bench/RESULTS_active.md]

Cases: every replay world of bench/worlds.py (one per model family × data source × precision —
batch variants of one model are near-duplicates), each under three deadlines (the world's median
measured point needs 0.5×, 1× or 2× of it; a case where nothing truly meets the deadline is dropped),
cost-minimising, spot allowed, 90% confidence. The true value of a configuration is cloudfit's own
pricing (preemption model included) of its *measured* throughput; the true optimum is the exhaustive
best over the world's configurations. Probes last 10 minutes and cost the point's cheapest on-demand
price. The search space of every method is the world's measured hardware points (a configuration
missing from the table is never proposed by cloudfit; the baselines' proposals off the table cost
nothing and are not counted).

Methods (a probe = one trial):

* cloudfit — ``active_search`` with the replay backend: starts from the prediction of a performance
  model refit without the world's model family (leave-one-family-out, no leak), GP-corrected after
  each probe (``surrogate="gp"``), and, as an ablation, only re-anchored (``"anchor"``). Run without
  the expected-improvement stop to trace the trajectory to 10 probes, and again with it (the
  default) to see where it stops and how good its plan then is;
* plain BO, CherryPick-style — optuna's GPSampler (3 random starts, then GP + expected improvement)
  over (accelerator, log2 GPUs per node, log2 nodes) with no prior; the incumbent is the best probed
  point. Also optuna's TPE over the points as one categorical;
* random — the points in a random order; incumbent as above;
* model alone — cloudfit's recommendation with no probes.

"Within 5%" = the method's current plan truly meets the deadline at the confidence and truly costs
≤ 1.05 × the optimum.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("OMP_NUM_THREADS", "1")

import worlds as W  # noqa: E402

PROBE_S = 600.0
TOL = 0.05
MAX_TRIALS = 10
DEADLINES = (0.5, 1.0, 2.0)


def _config_of(space, row):
    for i in range(len(space)):
        c = space.config(i)
        o = c.offering
        # an N1 shape takes several GPU types: the accelerator is part of the key
        if (o.zone, o.machine_type, o.accelerator, o.accelerators_per_node, c.nodes, c.spot) == (
                row["zone"], row["machine_type"], row["accelerator"], row["accelerators_per_node"], row["nodes"],
                row["spot"]):
            return c
    raise KeyError(row)


class Case:
    """One world under one deadline: the truth, the optimum and the true value of each point."""

    def __init__(self, world, factor: float, model_file: str, hours: float = 10.0) -> None:
        from cloudfit.active.choose import best_per_point as _best_per_point
        from cloudfit.search.problem import Problem

        self.world, self.factor, self.model_file, self.hours = world, factor, model_file, hours
        self.workload = W.workload_for(world, hours=hours, deadline_factor=factor)
        self.problem = Problem.of(self.workload)
        self.pred, self.truth = W.spaces(world, self.workload, model_file=model_file)
        self.best, _ = W.optimum(self.truth, self.problem)
        self.points = sorted(world["points"])
        vals, _ = _best_per_point(self.truth, self.problem)
        self.value = {k: (v if ok else 10 * v) for k, (v, ok, _) in vals.items()}  # what BO is told
        self.probe_cost = {p: self._probe_cost(p) for p in self.points}
        self._pt = np.array([self.points.index((c.offering.accelerator, c.offering.accelerators_per_node, c.nodes))
                             for c in (self.truth.config(i) for i in range(len(self.truth)))])

    def _probe_cost(self, point) -> float:
        c = W.cheapest_offering(self.truth, point) or W.cheapest_offering(self.truth, point, spot=True)
        return c.price_per_hour * PROBE_S / 3600

    def within(self, config) -> bool:
        cost, ok = W.true_outcome(self.truth, self.problem, config)
        return ok and cost <= self.best * (1 + TOL)

    def incumbent_trace(self, order):
        """Hits and probe costs when points are probed in ``order`` and the best probed point is kept."""
        from cloudfit.search.problem import rank

        a = self.truth.assess(self.problem)
        hits, costs, probed = [False], [], set()
        for p in order[:MAX_TRIALS]:
            costs.append(self.probe_cost[p])
            probed.add(self.points.index(p))
            ids = np.flatnonzero(np.isin(self._pt, list(probed)))
            o = rank(a, self.problem, np.arange(len(self.truth)))
            o = [i for i in o if i in set(ids.tolist())]
            hits.append(bool(o) and float(a.cost_usd[o[0]]) <= self.best * (1 + TOL))
        return hits, costs


def first_hit(hits: list[bool], costs: list[float]) -> tuple[float, float]:
    """(trials, probe $) until the incumbent is first within 5%; inf if never within MAX_TRIALS."""
    for k, h in enumerate(hits):
        if h:
            return k, float(sum(costs[:k]))
    return math.inf, float(sum(costs))


def run_cloudfit(case: Case, *, surrogate: str, ei_stop: bool):
    """(result or None, hits after 0, 1, … probes, probe costs)."""
    from cloudfit.errors import InfeasibleError
    from cloudfit.executors.replay import ReplayExecutor
    from cloudfit.active import active_search

    ex = ReplayExecutor(case.world["table"], probe_seconds=PROBE_S)
    try:
        with W.using_model(case.model_file):
            r = active_search(case.workload, executor=ex, probe_budget_usd=1e6, profile=case.world["profile"],
                              restrict_to=case.world["points"], max_trials=MAX_TRIALS, probe_seconds=PROBE_S,
                              ei_stop=ei_stop, surrogate=surrogate)
    except InfeasibleError:  # never found a plan it believes in: every probe counted, no hit
        return None, [False] * (len(ex.runs) + 1), [PROBE_S / 3600 * s.configs[0].price_per_hour for s in ex.runs]
    hits = [h["chosen"] is not None and case.within(_config_of(case.truth, h["chosen"])) for h in r.history]
    return r, hits, [t.probe_cost_usd for t in r.trials]


def run_bo_gp(case: Case, seed: int):
    """CherryPick-style: GP + EI over (accelerator, log2 per node, log2 nodes), 3 random starts."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    accs = sorted({p[0] for p in case.points})
    max_c = max(int(math.log2(p[1])) for p in case.points)
    max_n = max(int(math.log2(p[2])) for p in case.points)
    pts = set(case.points)
    study = optuna.create_study(sampler=optuna.samplers.GPSampler(seed=seed, n_startup_trials=3,
                                                                  deterministic_objective=False))
    dists = {"accelerator": optuna.distributions.CategoricalDistribution(accs),
             "log2_per_node": optuna.distributions.IntDistribution(0, max_c),
             "log2_nodes": optuna.distributions.IntDistribution(0, max_n)}
    order, seen, worst = [], set(), None
    for _ in range(300):
        if len(order) >= min(MAX_TRIALS, len(pts)):
            break
        t = study.ask(dists)
        p = (t.params["accelerator"], 2 ** t.params["log2_per_node"], 2 ** t.params["log2_nodes"])
        if p not in pts:  # off the table: free, not a probe; told as bad as the worst seen (or failed)
            if worst is None:
                study.tell(t, state=optuna.trial.TrialState.FAIL)
            else:
                study.tell(t, worst)
            continue
        v = case.value[p]
        worst = v if worst is None else max(worst, v)
        study.tell(t, v)
        if p not in seen:
            seen.add(p)
            order.append(p)
    if len(order) < min(MAX_TRIALS, len(pts)):  # the sampler got stuck off the table: finish at random
        rest = [case.points[i] for i in np.random.default_rng(seed).permutation(len(case.points))]
        order += [p for p in rest if p not in seen]
    return case.incumbent_trace(order)


def run_bo_tpe(case: Case, seed: int):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    keys = sorted(f"{a}|{c}|{n}" for a, c, n in case.points)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=3))
    order, seen = [], set()
    for _ in range(300):
        if len(order) >= min(MAX_TRIALS, len(case.points)):
            break
        t = study.ask({"point": optuna.distributions.CategoricalDistribution(keys)})
        a, c, n = t.params["point"].split("|")
        p = (a, int(c), int(n))
        study.tell(t, case.value[p])
        if p not in seen:
            seen.add(p)
            order.append(p)
    return case.incumbent_trace(order)


def run_random(case: Case, seed: int):
    order = [case.points[i] for i in np.random.default_rng(seed).permutation(len(case.points))]
    return case.incumbent_trace(order)


def model_alone(case: Case) -> float:
    """True regret of the no-probe recommendation (inf if it truly misses the deadline)."""
    from cloudfit.errors import InfeasibleError
    from cloudfit.plan import recommend

    try:
        with W.using_model(case.model_file):
            plan = recommend(case.workload, space=case.pred)
    except InfeasibleError:
        return math.inf
    cost, ok = W.true_outcome(case.truth, case.problem, plan.chosen.config)
    return cost / case.best - 1 if ok else math.inf


def stopped(case: Case, surrogate: str) -> dict:
    """cloudfit with its expected-improvement stop: where it stops and the true worth of its plan."""
    r, _, costs = run_cloudfit(case, surrogate=surrogate, ei_stop=True)
    last = None if r is None else r.history[-1]["chosen"]
    regret = math.inf
    if last is not None:
        cost, ok = W.true_outcome(case.truth, case.problem, _config_of(case.truth, last))
        regret = cost / case.best - 1 if ok else math.inf
    usd = float(sum(costs))
    # what the user pays (probes + the plan's true expected cost) over the optimum; ∞ if the plan misses
    return {"reason": "no plan" if r is None else r.stop_reason, "trials": len(costs), "usd": usd,
            "regret": regret, "total": (usd + case.best * (1 + regret)) / case.best - 1}


def evaluate(case: Case, seeds: int) -> dict:
    row = {"world": case.world["name"], "factor": case.factor, "points": len(case.points), "optimum": case.best,
           "model_regret": model_alone(case)}
    row["model"] = (0.0, 0.0) if row["model_regret"] <= TOL else (math.inf, 0.0)
    for sur in ("gp", "anchor"):
        _, hits, costs = run_cloudfit(case, surrogate=sur, ei_stop=False)
        row[f"cf_{sur}"] = first_hit(hits, costs)
        row[f"stop_{sur}"] = stopped(case, sur)
    big = Case(case.world, case.factor, case.model_file, hours=10 * case.hours)  # a 10× larger job
    for sur in ("gp", "anchor"):
        row[f"stop_{sur}_10x"] = stopped(big, sur) if math.isfinite(big.best) else None
    row["model_regret_10x"] = model_alone(big) if math.isfinite(big.best) else None
    for name, fn in (("bo_gp", run_bo_gp), ("bo_tpe", run_bo_tpe), ("random", run_random)):
        runs = [first_hit(*fn(case, s)) for s in range(seeds)]
        row[name] = (float(np.median([x[0] for x in runs])), float(np.median([x[1] for x in runs])))
    return row


METHODS = [("cf_gp", "cloudfit (model prior + GP correction)"), ("cf_anchor", "cloudfit, re-anchoring only (ablation)"),
           ("bo_gp", "plain BO, GP (CherryPick-style), no prior"), ("bo_tpe", "plain BO, TPE, no prior"),
           ("random", "random search"), ("model", "model alone (0 probes)")]


def _fmt_t(x: float) -> str:
    return "∞" if math.isinf(x) else f"{x:g}"


def summary(rows: list[dict], title: str) -> list[str]:
    n = len(rows)
    out = [f"**{title}** ({n} cases)", "",
           "| method | median trials to within 5% | median probe $ to within 5% | within 5% by 6 trials | never within 10 |",
           "|---|---:|---:|---:|---:|"]
    for key, label in METHODS:
        t = [r[key][0] for r in rows]
        usd = [r[key][1] if math.isfinite(r[key][0]) else math.inf for r in rows]
        out.append(f"| {label} | {_fmt_t(float(np.median(t)))} | "
                   f"{'∞' if math.isinf(np.median(usd)) else f'${np.median(usd):.2f}'} | "
                   f"{sum(x <= 6 for x in t)}/{n} | {sum(math.isinf(x) for x in t)}/{n} |")
    return out + [""]


def stop_summary(rows: list[dict]) -> list[str]:
    out = ["| run | stops: reason (cases) | median probes | median probe $ | final plan within 5% | "
           "median regret of the plan | median regret of probes + plan |",
           "|---|---|---:|---:|---:|---:|---:|"]
    for key, label in (("stop_gp", "gp, 10 h job"), ("stop_anchor", "anchor only, 10 h job"),
                       ("stop_gp_10x", "gp, 100 h job (same worlds, 10× the samples)"),
                       ("stop_anchor_10x", "anchor only, 100 h job")):
        st = [r[key] for r in rows if r.get(key) is not None]
        reasons: dict[str, int] = {}
        for s in st:
            reasons[s["reason"]] = reasons.get(s["reason"], 0) + 1
        reg = [s["regret"] for s in st]
        med, tot = float(np.median(reg)), float(np.median([s["total"] for s in st]))
        out.append(f"| {label} | {', '.join(f'{k} ({v})' for k, v in sorted(reasons.items()))} | "
                   f"{np.median([s['trials'] for s in st]):g} | ${np.median([s['usd'] for s in st]):.2f} | "
                   f"{sum(x <= TOL for x in reg)}/{len(st)} | {'∞' if math.isinf(med) else f'{med:.1%}'} | "
                   f"{'∞' if math.isinf(tot) else f'{tot:.1%}'} |")
    for key, label in (("model_regret", "model alone, 10 h job"), ("model_regret_10x", "model alone, 100 h job")):
        reg = [r[key] for r in rows if r.get(key) is not None]
        med = float(np.median(reg))
        m = "∞" if math.isinf(med) else f"{med:.1%}"
        out.append(f"| {label} | — | 0 | $0 | {sum(x <= TOL for x in reg)}/{len(reg)} | {m} | {m} |")
    return out + [""]


def render(rows: list[dict], wall: float, args, skipped: list[str]) -> str:
    big = [r for r in rows if r["points"] > 4]
    small = [r for r in rows if r["points"] <= 4]
    lines = [
        "## Active search (issue 7)", "",
        f"Command: `python bench/active_search.py --seeds {args.seeds}`. Date: {dt.date.today()}. Machine: "
        f"{platform.machine()}, {os.cpu_count()} cores, no GPU, 24 GiB, Python {platform.python_version()}. "
        f"Wall time {wall:.0f} s.", "",
        "Cases: each replay world (one per model family × data source × precision) under three deadlines (the "
        "median measured point needs 0.5×, 1× or 2× of it; cases where nothing truly meets it are dropped), "
        "cost-minimising, spot allowed, 90% confidence. Truth = measured throughput priced by cloudfit "
        "(preemption model included); the optimum is exhaustive over the world. cloudfit predicts with a model "
        "refit without the world's model family. Probes last 10 min at the point's cheapest on-demand price. "
        "'Within 5%' = the current plan truly meets the deadline and truly costs ≤ 1.05 × the optimum; trials "
        f"counted until it first is (∞ if not within {MAX_TRIALS}); baselines: median over {args.seeds} seeds "
        "first, then medians over cases. The trajectories are traced with the expected-improvement stop off.", "",
    ]
    lines += summary(rows, "All cases")
    lines += summary(big, "Worlds with 13 measured points (gavel)")
    lines += summary(small, "Worlds with 4 measured points (lambda): any method finds the optimum by 4 probes")
    lines += ["With the expected-improvement stop on (the default), where cloudfit stops and how good its plan is "
              "then (truly; ∞ = misses the deadline or no plan):", ""]
    lines += stop_summary(rows)
    lines += ["The same, worlds with 13 measured points only:", ""] + stop_summary(big)
    lines += ["Per case (trials to within 5%; cloudfit's default run: stop reason, probes, true regret of its plan):", "",
              "| world | deadline × | points | optimum $ | model alone regret | cloudfit gp | anchor | BO (GP) | BO (TPE) | random | gp with stop |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        mr = "misses" if math.isinf(r["model_regret"]) else f"{r['model_regret']:.1%}"
        s = r["stop_gp"]
        sr = "misses" if math.isinf(s["regret"]) else f"{s['regret']:.1%}"
        lines.append(f"| {r['world']} | {r['factor']:g} | {r['points']} | {r['optimum']:.2f} | {mr} | "
                     f"{_fmt_t(r['cf_gp'][0])} | {_fmt_t(r['cf_anchor'][0])} | {_fmt_t(r['bo_gp'][0])} | "
                     f"{_fmt_t(r['bo_tpe'][0])} | {_fmt_t(r['random'][0])} | {s['reason']}, {s['trials']}, {sr} |")
    if skipped:
        lines += ["", f"Dropped (nothing truly meets the deadline): {', '.join(skipped)}."]
    return "\n".join(lines) + "\n"


#: Heading of the hand-written part of the results file, which a re-run keeps.
READING = "### Reading the numbers"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", type=int, default=0, help="at most this many worlds (0: all)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    t0 = time.time()
    picked, seen = [], set()
    for w in W.worlds():
        key = (W.model_family(w["profile"].model), w["name"].split("(")[1], w["precision"])
        if key not in seen:
            seen.add(key)
            picked.append(w)
    ws = picked[: args.worlds] if args.worlds else picked
    rows, skipped = [], []
    for w in ws:
        model_file = W.held_out_model(W.model_family(w["profile"].model))
        for f in DEADLINES:
            case = Case(w, f, model_file)
            if not math.isfinite(case.best):
                skipped.append(f"{w['name']} ×{f:g}")
                continue
            row = evaluate(case, args.seeds)
            rows.append(row)
            print(f"{w['name']} ×{f:g}: " + ", ".join(f"{k} {_fmt_t(row[k][0])}" for k, _ in METHODS)
                  + f"; stop {row['stop_gp']['reason']} {row['stop_gp']['trials']} regret {row['stop_gp']['regret']:.1%}",
                  file=sys.stderr)
    report = render(rows, time.time() - t0, args, skipped)
    print(report)
    if args.out:
        out = Path(args.out)
        # keep the hand-written reading of an earlier run (it says which run it reads)
        old = out.read_text() if out.exists() else ""
        tail = old[old.index(READING):] if READING in old else ""
        out.write_text(report + ("\n" + tail if tail else ""))


if __name__ == "__main__":
    main()
