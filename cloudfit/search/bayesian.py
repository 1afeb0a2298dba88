"""Bayesian optimisation over the configuration space with a seeded, constrained optuna study.

The study searches what decides throughput — hardware shape, node count, spot or on-demand —
and each evaluation prices that point in every zone that offers it (an exact inner minimisation:
zones differ only in price and preemption hazard). For spaces too large to enumerate, and the
basis of active search, where every evaluation is a paid probe run.

Whenever a trial finds a better feasible point, its unpriced neighbours are queued as the next trials
(``study.enqueue_trial``, inside the same trial budget): the same machine at one node more or fewer and
on the other pricing mode, and the same accelerator in VMs of another size at about the same GPU count.
TPE samples the shape as an unordered category, so on its own it may settle on an 8-GPU VM while the
same GPUs in 1- or 2-GPU VMs are cheaper (a seeded 300-trial study stopped 10% above the exhaustive
optimum that way, tests/search/test_contract.py): the queue makes the search a local search around its
incumbent as well as a global one.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from cloudfit.search.problem import Problem, SearchResult, rank, score, violation


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
        gpus = {f"{sh.machine_type}/{sh.accelerators_per_node}x{sh.accelerator}": (sh.accelerator, sh.accelerators_per_node)
                for sh in space.shapes}
        if self.sampler == "gp":
            sampler = optuna.samplers.GPSampler(seed=self.seed, n_startup_trials=10)
        else:
            sampler = optuna.samplers.TPESampler(seed=self.seed, multivariate=True, n_startup_trials=10)
        study = optuna.create_study(direction="minimize", sampler=sampler)

        seen: dict[tuple, tuple[float, float, np.ndarray]] = {}
        evaluated: list[np.ndarray] = []
        best_val, first_hit = math.inf, None
        queued: set[tuple] = set()
        worst = 1.0
        for _ in range(self.n_trials):
            if len(seen) == len(groups):
                break  # every point priced: nothing left to learn
            trial = study.ask()
            s = trial.suggest_categorical("shape", shape_names)
            n = trial.suggest_int("nodes", 1, max_nodes, log=True)
            sp = trial.suggest_categorical("spot", modes) if len(modes) > 1 else modes[0]
            key = (s, n, sp)
            if key not in seen:
                ids = groups.get(key)
                if ids is None:  # not offered (e.g. no spot price, or does not fit)
                    seen[key] = (math.inf, 1.0, np.empty(0, dtype=np.int64))
                else:
                    seen[key] = _evaluate(space, problem, ids)
                    evaluated.append(ids)
                    v, viol, _ = seen[key]
                    if viol <= 0 and v < best_val:
                        best_val = v
                        first_hit = len(evaluated)
                        for nb in _neighbours(key, groups, gpus, max_nodes, len(modes) > 1):
                            if nb not in seen and nb not in queued:
                                queued.add(nb)
                                params = {"shape": nb[0], "nodes": nb[1]}
                                if len(modes) > 1:
                                    params["spot"] = nb[2]
                                study.enqueue_trial(params)
            value, violation, _ = seen[key]
            if math.isfinite(value):
                worst = max(worst, value)
            trial.set_constraint("limits", violation)
            study.tell(trial, value if math.isfinite(value) else 10.0 * worst)

        ids = np.concatenate(evaluated) if evaluated else np.empty(0, dtype=np.int64)
        order = np.empty(0, dtype=np.int64)
        if ids.size:
            a = space.assess(problem, ids)
            order = rank(a, problem, ids)
        return SearchResult(order=order, evaluations=len(evaluated), searcher=f"bayes-{self.sampler}",
                            trials=len(study.trials), first_hit=first_hit)


def _neighbours(key: tuple[str, int, bool], groups, gpus: dict[str, tuple[str, int]], max_nodes: int,
                both_modes: bool) -> list[tuple[str, int, bool]]:
    """Offered points next to ``key`` (machine shape, nodes, spot): the same shape at ±1 node and in the
    other pricing mode, and every other shape of the same accelerator at the node counts that put its GPU
    count nearest to ``key``'s (from below and from above)."""
    shape, nodes, spot = key
    acc, per_node = gpus[shape]
    total = per_node * nodes
    out = [(shape, n, spot) for n in (nodes - 1, nodes + 1) if 1 <= n <= max_nodes]
    if both_modes:
        out.append((shape, nodes, not spot))
    for other, (a, c) in sorted(gpus.items()):
        if a == acc and other != shape:
            lo, hi = max(1, total // c), min(max_nodes, -(-total // c))
            out += [(other, n, spot) for n in sorted({lo, hi}) if 1 <= n <= max_nodes]
    return [k for k in out if k in groups]


def _groups(space) -> dict[tuple[str, int, bool], np.ndarray]:
    """Candidate ids per (machine shape, nodes, spot): the zones offering that point."""
    names = [s.machine_type + f"/{s.accelerators_per_node}x{s.accelerator}" for s in space.shapes]
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
