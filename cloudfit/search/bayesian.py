"""Bayesian optimisation over the configuration space with a seeded, constrained optuna study.

The study searches what decides throughput — hardware shape, node count, spot or on-demand —
and each evaluation prices that point in every zone that offers it (an exact inner minimisation:
zones differ only in price and preemption hazard). For spaces too large to enumerate. Its evaluations
are model predictions, cheap; active search, where every evaluation is a paid probe run, has its own loop
(``cloudfit.active``) and does not use this searcher.

Two additions to TPE, neither of which steers its sampling (TPE is told only its own proposals):

- **Every trial prices a new point.** TPE often proposes a point it has already seen (a seeded 300-trial
  study on 384 points priced only 143 of them); such a trial then prices an unpriced offered point drawn at
  random (seeded), so ``n_trials`` trials price up to ``n_trials`` points.
- **A local polish after the study**: the best feasible point's unpriced neighbours — the same machine at
  one node more or fewer and on the other pricing mode, the same accelerator in VMs of another size at
  about half, once and twice the GPU count — are priced, and the search moves to the best of them while one
  improves (at most ``POLISH_ROUNDS`` rounds, a few dozen evaluations beyond ``n_trials``). TPE samples the
  shape as an unordered category, so on its own it may settle on a 2-GPU VM while one 1-GPU VM is cheaper
  (tests/search/test_bayesian.py). Neighbours never change the accelerator, so the polish then starts again
  from every other accelerator's best feasible point: two accelerators can be a near-tie (resnet50 in
  us-central1 by 3 h: 3 VMs of 4 T4 1.9% dearer than one VM of 8 L4, where seed 1 stopped before).

Queuing the neighbours as trials instead (``study.enqueue_trial``) was measured and dropped: it narrowed TPE
onto its first incumbent's neighbourhood and cost up to 62% regret on bench/search_evals.py's
transformer-base case.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from cloudfit.search.problem import Problem, SearchResult, rank, score, violation


#: Rounds of the local polish after the study (each prices the incumbent's unpriced neighbours).
POLISH_ROUNDS = 5


@dataclass
class BayesianSearcher:
    n_trials: int = 200
    seed: int = 0
    sampler: str = "tpe"  # "tpe" or "gp"
    name: str = "bayes"

    def search(self, space, problem: Problem) -> SearchResult:
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # optuna's GP is 4–8× slower with many threads here
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        groups = _groups(space)
        shape_names = sorted({k[0] for k in groups})
        modes = sorted({k[2] for k in groups})
        max_nodes = int(space.nodes.max())
        gpus = {_shape_name(sh): (sh.accelerator, sh.accelerators_per_node) for sh in space.shapes}
        if self.sampler == "gp":
            sampler = optuna.samplers.GPSampler(seed=self.seed, n_startup_trials=10)
        else:
            sampler = optuna.samplers.TPESampler(seed=self.seed, multivariate=True, n_startup_trials=10)
        study = optuna.create_study(direction="minimize", sampler=sampler)

        seen: dict[tuple, tuple[float, float, np.ndarray]] = {}
        evaluated: list[np.ndarray] = []
        best_val, first_hit = math.inf, None
        best_key = None
        worst = 1.0
        offered = sorted(groups)
        rng = np.random.default_rng(self.seed)

        def price(k: tuple) -> bool:
            """Price the offered point ``k``; whether it is the new best feasible one."""
            nonlocal best_val, best_key, first_hit
            seen[k] = _evaluate(space, problem, groups[k])
            evaluated.append(groups[k])
            v, viol, _ = seen[k]
            if viol <= 0 and v < best_val:
                best_val, best_key, first_hit = v, k, len(evaluated)
                return True
            return False

        for _ in range(self.n_trials):
            if len(seen) == len(groups):
                break  # every point priced: nothing left to learn
            trial = study.ask()
            s = trial.suggest_categorical("shape", shape_names)
            n = trial.suggest_int("nodes", 1, max_nodes, log=True)
            sp = trial.suggest_categorical("spot", modes) if len(modes) > 1 else modes[0]
            key = (s, n, sp)
            if key not in seen:
                if key in groups:
                    price(key)
                else:  # not offered (e.g. no spot price, or does not fit)
                    seen[key] = (math.inf, 1.0, np.empty(0, dtype=np.int64))
            else:
                # TPE proposed a point it has seen: the trial still prices something new, drawn at random
                # among the unpriced offered points (TPE is told only its own proposal, so its sampling is
                # what it would be without this).
                fresh = [k for k in offered if k not in seen]
                if fresh:
                    price(fresh[int(rng.integers(len(fresh)))])
            value, violation, _ = seen[key]
            if math.isfinite(value):
                worst = max(worst, value)
            trial.set_constraint("limits", violation)
            study.tell(trial, value if math.isfinite(value) else 10.0 * worst)

        # Local polish around the incumbent, then around each other accelerator's best point (see the module
        # docstring): neighbours never change the accelerator, and two accelerators may be a near-tie.
        tops: dict[str, tuple] = {}
        for k, (v, viol, _) in seen.items():
            if viol <= 0 and math.isfinite(v) and k in groups:
                acc = gpus[k[0]][0]
                if acc not in tops or v < seen[tops[acc]][0]:
                    tops[acc] = k
        for start in sorted(tops.values(), key=lambda k: (seen[k][0], k)):
            cur = start
            for _ in range(POLISH_ROUNDS):
                new = [nb for nb in _neighbours(cur, groups, gpus, max_nodes, len(modes) > 1) if nb not in seen]
                for nb in new:
                    price(nb)
                better = [nb for nb in new if seen[nb][1] <= 0 and seen[nb][0] < seen[cur][0]]
                if not better:
                    break
                cur = min(better, key=lambda k: (seen[k][0], k))

        ids = np.concatenate(evaluated) if evaluated else np.empty(0, dtype=np.int64)
        order = np.empty(0, dtype=np.int64)
        if ids.size:
            a = space.assess(problem, ids)
            order = rank(a, problem, ids)
        return SearchResult(order=order, evaluations=len(evaluated), searcher=f"bayes-{self.sampler}",
                            trials=len(study.trials), first_hit=first_hit)


def _shape_name(sh) -> str:
    """The study's category for a machine shape (machine type, GPUs per node, accelerator)."""
    return f"{sh.machine_type}/{sh.accelerators_per_node}x{sh.accelerator}"


def _neighbours(key: tuple[str, int, bool], groups, gpus: dict[str, tuple[str, int]], max_nodes: int,
                both_modes: bool) -> list[tuple[str, int, bool]]:
    """Offered points next to ``key`` (machine shape, nodes, spot): the same shape at ±1 node and in the
    other pricing mode, and every other shape of the same accelerator at the node counts that put its GPU
    count nearest (from below and from above) to half, once and twice ``key``'s."""
    shape, nodes, spot = key
    acc, per_node = gpus[shape]
    total = per_node * nodes
    out = [(shape, n, spot) for n in (nodes - 1, nodes + 1) if 1 <= n <= max_nodes]
    if both_modes:
        out.append((shape, nodes, not spot))
    for other, (a, c) in sorted(gpus.items()):
        if a == acc and other != shape:
            ns = {n for t in (total / 2, total, total * 2) for n in (max(1, math.floor(t / c)), math.ceil(t / c))}
            out += [(other, n, spot) for n in sorted(ns) if 1 <= n <= max_nodes]
    return list(dict.fromkeys(k for k in out if k in groups))


def _groups(space) -> dict[tuple[str, int, bool], np.ndarray]:
    """Candidate ids per (machine shape, nodes, spot): the zones offering that point."""
    names = [_shape_name(s) for s in space.shapes]
    keys, inv = space.point_ids("cluster")
    order = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(len(keys) + 1))
    out: dict[tuple[str, int, bool], list[np.ndarray]] = {}
    for j, (shape, nodes, spot) in enumerate(keys):
        out.setdefault((names[shape], nodes, spot), []).append(order[bounds[j]:bounds[j + 1]])
    return {k: np.concatenate(v).astype(np.int64) for k, v in out.items()}


def _evaluate(space, problem: Problem, ids: np.ndarray) -> tuple[float, float, np.ndarray]:
    """Best objective value among ``ids`` (log scale) and the constraint violation (≤ 0 feasible)."""
    a = space.assess(problem, ids)
    feasible, primary, _ = score(a, problem)
    if feasible.any():
        return float(np.log(primary[feasible].min())), 0.0, ids
    viol = violation(a, problem)  # infeasible: how far the least-bad zone is from meeting the limits
    j = int(np.argmin(viol))
    return float(np.log(primary[j])), float(max(viol[j], 1e-9)), ids
