"""Replay worlds for the recommender and active-search benchmarks (shared helpers, not a bench itself).

A world is one workload (model, batch, precision, data source) of data/measurements.csv with at least
four measured hardware points the GCP catalog offers. Its *truth* is the measured throughput of those
points; configurations are the catalog's offerings of those points × spot/on-demand, priced with the
same preemption model as cloudfit. The performance model used to *predict* a world is refit without
the world's model family (leave-one-model-out), so it has never seen the world's measurements.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import math
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def worlds(min_points: int = 4) -> list[dict]:
    from cloudfit.executors.replay import worlds_from_measurements

    return worlds_from_measurements(min_points=min_points)


def model_family(workload: str) -> str:
    with open(ROOT / "data" / "measurements.csv", newline="") as f:
        for r in csv.DictReader(f):
            if r["workload"] == workload:
                return r["model_group"]
    raise KeyError(workload)


@functools.lru_cache(maxsize=None)
def held_out_model(family: str) -> str:
    """Path of a performance model fitted without ``family``'s measurements (cached per family)."""
    from cloudfit.perf import fit

    src = ROOT / "data" / "measurements.csv"
    tmp = Path(tempfile.mkdtemp(prefix="cloudfit-lomo-"))
    with open(src, newline="") as f:
        rows = list(csv.DictReader(f))
    keep = [r for r in rows if r["model_group"] != family]
    out = tmp / "measurements.csv"
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(keep)
    doc = fit.fit_model(measurements=out)
    return str(fit.write_model(doc, tmp / "model.json"))


@contextlib.contextmanager
def using_model(path: str | None):
    """Make cloudfit's predictions use the model file ``path`` (None: the shipped one)."""
    from cloudfit.perf import model as pm

    if path is None:
        yield
        return
    orig = pm.model_path
    pm.model_path = lambda: Path(path)
    pm.load_model.cache_clear()
    try:
        yield
    finally:
        pm.model_path = orig
        pm.load_model.cache_clear()


def workload_for(world: dict, *, hours: float = 10.0, deadline_factor: float = 1.0, max_nodes: int = 8,
                 spot: str = "allow", allow_outlier_prices: bool = False):
    """A cost-under-deadline workload sized so the world's median point needs ``hours``."""
    from cloudfit.workload import make_workload

    med = float(np.median(list(world["table"].values())))
    samples = med * 3600 * hours
    return make_workload(model=world["profile"].model, samples=samples,
                         deadline=hours * deadline_factor, batch_size=world["batch"], precision=world["precision"],
                         max_nodes=max_nodes, spot=spot, allow_outlier_prices=allow_outlier_prices)


def anchored_profile(world: dict):
    """The world's profile with its one-GPU measurements (what a user who ran on one GPU of each type knows)."""
    from cloudfit.types import Measurement

    p = world["profile"]
    for (a, c, n, b, prec), v in sorted(world["table"].items()):
        if c == 1 and n == 1:
            p = p.with_measurement(Measurement(accelerator=a, count=1, nodes=1, batch_size_per_device=b,
                                               precision=prec, samples_per_second=v, source="reported"))
    return p


def spaces(world: dict, workload, *, model_file: str | None, profile=None):
    """(predicted space, true space) restricted to the world's points."""
    from cloudfit import catalog as catalog_mod
    from cloudfit.active.surrogate import restrict as _restrict, with_measured as _with_measured
    from cloudfit.search.space import build_space

    cat = catalog_mod.load()
    with using_model(model_file):
        pred = _restrict(build_space(workload, profile or world["profile"], cat), world["points"])
    truth_sps = {k[:3]: v for k, v in world["table"].items()}
    truth = _with_measured(pred, truth_sps)
    return pred, truth


def true_outcome(truth, problem, config) -> tuple[float, bool]:
    """(true expected cost, meets the limits at the confidence under the truth) of ``config``."""
    from cloudfit.search.problem import score

    ids = [i for i in range(len(truth)) if truth.config(i) == config]
    if not ids:
        return math.inf, False
    a = truth.assess(problem, np.asarray(ids))
    feasible, _, _ = score(a, problem)
    return float(a.cost_usd[0]), bool(feasible[0])


def optimum(truth, problem) -> tuple[float, object]:
    from cloudfit.search.problem import rank

    a = truth.assess(problem)
    order = rank(a, problem, np.arange(len(truth)))
    if order.size == 0:
        return math.inf, None
    i = int(order[0])
    return float(a.cost_usd[i]), truth.config(i)


def cheapest_offering(space, point, *, spot: bool = False):
    """The cheapest config of hardware point ``point`` (on-demand unless ``spot``)."""
    best = None
    for i in range(len(space)):
        c = space.config(i)
        if (c.offering.accelerator, c.offering.accelerators_per_node, c.nodes) != point or bool(c.spot) != spot:
            continue
        if best is None or space.price_per_hour[i] < best[0]:
            best = (space.price_per_hour[i], c)
    return None if best is None else best[1]


__all__ = ["worlds", "model_family", "held_out_model", "using_model", "workload_for", "spaces", "true_outcome",
           "optimum", "cheapest_offering", "replace"]
