"""Trade-off tables for notebooks and plots: what a deadline, spot or a region buys.

Each function builds the workload's configuration space once (the performance model is asked once)
and re-prices it, so a sweep over twenty deadlines costs about as much as two ``recommend`` calls.
Results are pandas DataFrames.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Sequence

import numpy as np

from cloudfit.search.problem import Problem, score
from cloudfit.search.space import Space, build_space
from cloudfit.types import Workload


def space_for(workload: Workload, *, catalog=None, profile=None) -> Space:
    """The priced configuration space of ``workload`` (as ``recommend`` builds it)."""
    from cloudfit import catalog as catalog_mod
    from cloudfit.plan import load_workload_profile

    cat = catalog if isinstance(catalog, catalog_mod.Catalog) else catalog_mod.load(catalog)
    return build_space(workload, profile or load_workload_profile(workload), cat)


def _best_row(space: Space, problem: Problem, mask: np.ndarray) -> dict | None:
    a = space.assess(problem)
    feasible, primary, secondary = score(a, problem)
    ok = feasible & mask
    if not ok.any():
        return None
    ids = np.flatnonzero(ok)
    i = int(ids[np.lexsort((ids, secondary[ids], primary[ids]))[0]])
    c = space.config(i)
    return {"config": c.label(), "accelerator": c.offering.accelerator,
            "accelerators_per_node": c.offering.accelerators_per_node, "nodes": c.nodes, "zone": c.offering.zone,
            "hours": float(a.hours[i]), "cost_usd": float(a.cost_usd[i]), "cost_p90_usd": float(a.cost_p90_usd[i]),
            "p_on_time": float(a.p_on_time[i])}


def deadline_sweep(workload: Workload, deadlines_hours: Iterable[float], *, space: Space | None = None,
                   catalog=None, profile=None):
    """Cheapest plan for each deadline, separately with spot and with on-demand VMs only.

    Columns: deadline_hours, mode (``spot`` / ``on-demand``), feasible, config, accelerator,
    accelerators_per_node, nodes, zone, hours, cost_usd, cost_p90_usd, p_on_time (NaN where no
    configuration meets the deadline at the workload's confidence).
    """
    import pandas as pd

    sp = space or space_for(workload, catalog=catalog, profile=profile)
    rows = []
    for d in deadlines_hours:
        problem = Problem("cost", float(d), workload.budget_usd, workload.confidence)
        for mode, mask in (("spot", sp.spot), ("on-demand", ~sp.spot)):
            best = _best_row(sp, problem, mask) if mask.any() else None
            rows.append({"deadline_hours": float(d), "mode": mode, "feasible": best is not None,
                         **(best or {"cost_usd": np.nan, "hours": np.nan, "p_on_time": np.nan})})
    return pd.DataFrame(rows)


def region_table(workload: Workload, *, space: Space | None = None, catalog=None, profile=None):
    """Best plan per region under the workload's limits (cost or time objective), best first."""
    import pandas as pd

    sp = space or space_for(workload, catalog=catalog, profile=profile)
    problem = Problem.of(workload)
    regions = np.array([o.region for o in sp.catalog.offerings])[sp.offering]
    rows = []
    for r in sorted(set(regions.tolist())):
        best = _best_row(sp, problem, regions == r)
        if best is not None:
            rows.append({"region": r, **best})
    key = "hours" if problem.objective == "time" else "cost_usd"
    return pd.DataFrame(rows).sort_values(key, kind="stable").reset_index(drop=True) if rows else pd.DataFrame(rows)


def risk_frame(workload: Workload, *, space: Space | None = None, catalog=None, profile=None, per_config: bool = True):
    """Expected cost against P(on time) for every hardware config (its cheapest zone), spot and on-demand.

    Columns: accelerator, accelerators_per_node, nodes, spot, zone, hours, cost_usd, cost_p90_usd,
    p_on_time, feasible. Needs a deadline (P(on time) is 1 without one).
    """
    import pandas as pd

    sp = space or space_for(workload, catalog=catalog, profile=profile)
    problem = Problem.of(workload)
    a = sp.assess(problem)
    feasible, _, _ = score(a, problem)
    ids = np.arange(len(sp))
    if per_config:  # cheapest zone of each (shape, nodes, spot)
        order = np.lexsort((np.asarray(a.cost_usd), sp.spot, sp.nodes, sp.shape))
        key = np.stack([sp.shape[order], sp.nodes[order], sp.spot[order].astype(int)], axis=1)
        first = np.ones(len(order), dtype=bool)
        first[1:] = np.any(key[1:] != key[:-1], axis=1)
        ids = order[first]
    offs = sp.catalog.offerings
    return pd.DataFrame({
        "accelerator": [offs[int(sp.offering[i])].accelerator for i in ids],
        "accelerators_per_node": [offs[int(sp.offering[i])].accelerators_per_node for i in ids],
        "nodes": sp.nodes[ids], "spot": sp.spot[ids],
        "zone": [offs[int(sp.offering[i])].zone for i in ids],
        "hours": np.asarray(a.hours)[ids], "cost_usd": np.asarray(a.cost_usd)[ids],
        "cost_p90_usd": np.asarray(a.cost_p90_usd)[ids], "p_on_time": np.asarray(a.p_on_time)[ids],
        "feasible": feasible[ids],
    })


def with_limits(workload: Workload, **changes) -> Workload:
    """``workload`` with other limits (deadline_hours, budget_usd, objective, spot, regions …)."""
    from cloudfit.workload import default_objective

    w = replace(workload, **changes)
    if "objective" not in changes:
        w = replace(w, objective=default_objective(w.deadline_hours, w.budget_usd))
    return w


__all__: Sequence[str] = ("deadline_sweep", "region_table", "risk_frame", "space_for", "with_limits")
