"""``recommend`` with the whole bill: the planner's space with a ``Bill`` attached (every assessment adds
data transfer and storage) and, with quotas, the candidates over them left out — then the one planner
(``cloudfit.plan.planner.recommend(space=…)``) ranks, explains and builds the plan as always."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from cloudfit.bill import Bill
from cloudfit.bill.quota import Quotas
from cloudfit.errors import InfeasibleError
from cloudfit.types import Plan

#: Per-candidate columns of ``Space`` that a subset keeps.
_COLUMNS = ("offering", "shape", "nodes", "spot", "price_per_hour", "samples_per_second", "low", "high",
            "hazard_per_node_hour")


@dataclass
class Billed:
    """A plan made with the whole bill, and what its explanation and split read."""

    plan: Plan
    space: Any
    bill: Bill | None
    quotas: Quotas | None
    lines: list[str] = field(default_factory=list)  # sentences for the explanation, in order

    def split(self, e) -> dict[str, float]:
        if self.bill is None:
            return {"compute_usd": e.cost_usd, "transfer_usd": 0.0, "storage_usd": 0.0, "transfer_hours": 0.0}
        return self.bill.split(self.space, e)


def recommend(workload, bill: Bill | None, quotas: Quotas | None, *, catalog=None, searcher: str = "exhaustive",
              searcher_options: dict | None = None, quota_note: str = "", risk: str = "median") -> Billed:
    """The plan of ``workload`` (samples, or a token workload) with ``bill`` in every cost and within ``quotas``."""
    from cloudfit.plan import planner
    from cloudfit.search import Problem

    tokens = workload.kind == "tokens"
    limits = workload.limits if tokens else workload
    limits.require_limit()
    problem = Problem.of(limits)
    lines: list[str] = []
    spaces: list = []
    adjust = _adjuster(bill, quotas, problem, searcher, searcher_options, lines, spaces)
    if not quotas and quota_note:
        lines.append(quota_note)
    if tokens:
        from cloudfit.plan.llm import recommend_llm
        from cloudfit.plan.unknown import check_risk

        check_risk(risk, tokens=True)
        plan = recommend_llm(limits, workload.job, catalog=catalog, adjust=adjust)
        prov = dict(plan.provenance)
    else:
        space, _, profile_file = planner._space_of(workload, None, catalog)
        if risk == "p90":  # before the bill: its explanation compares plans at the speed they were chosen on
            from cloudfit.plan.unknown import pessimistic

            space = pessimistic(space)
        plan = planner.recommend(workload, catalog=catalog, searcher=searcher, searcher_options=searcher_options,
                                 space=adjust(space), risk=risk)
        prov = dict(plan.provenance, profile_file=profile_file)
    if quotas is not None:
        prov["quota"] = quotas.source
    space = next((s for s in reversed(spaces) if _index_of(s, plan.chosen) is not None), spaces[-1])
    if bill is not None:
        prov["bill"] = {**bill.provenance(), **_data_step(bill, space, plan.chosen)}
    plan = replace(plan, provenance=prov)
    billed = Billed(plan, space, bill, quotas, lines)
    if bill is not None:
        billed.lines[:0] = explain(billed, problem)
    return billed


def _data_step(bill: Bill, space, chosen) -> dict:
    """What the plan assumed about moving the data (``plan.json`` provenance, shown by ``launch --dry-run``):
    the chosen offering's copy — from where to where, GB, USD, hours — and its cost split."""
    s = bill.split(space, chosen)
    out: dict = {"cost_split": s}
    if bill.data is not None:
        o = chosen.config.offering
        col = bill.per_offering(space)
        i = _offering_of(space, chosen)
        out["data_step"] = {"from": bill.data.url, "from_cloud": bill.data.cloud, "from_region": bill.data.region,
                            "to_cloud": o.cloud, "to_region": o.region, "gb": bill.data_gb,
                            "usd": float(col["transfer_usd"][i]), "hours": float(col["transfer_hours"][i]),
                            "moves": bool(col["moved"][i])}
    return out


def _adjuster(bill, quotas, problem, searcher, searcher_options, lines: list, spaces: list):
    """space → the space with ``bill`` attached and the candidates over ``quotas`` left out; the first call
    also says, in ``lines``, when the quota moved the first choice."""
    from cloudfit.search import get_searcher

    def adjust(space):
        space = replace(space, bill=bill, _cache=space.speed_free_cache())
        if quotas is not None:
            over, lim = quotas.over(space)
            if not spaces:
                lines.append(_quota_line(space, over, lim, quotas, problem,
                                         get_searcher(searcher if not hasattr(space, "job") else "exhaustive",
                                                      **(searcher_options or {}))))
            if over.all():
                raise InfeasibleError(f"every candidate needs more GPUs than your quota allows ({quotas.source})")
            if over.any():
                space = subset(space, ~over, f"over your GPU quota ({quotas.source})")
        spaces.append(space)
        return space

    return adjust


def _quota_line(space, over, lim, quotas: Quotas, problem, searcher) -> str:
    if not over.any():
        return f"Quota: every candidate fits ({quotas.source})."
    first = searcher.search(space, problem)
    if not first.n_feasible or not over[int(first.head(1)[0])]:
        return f"Quota: {int(over.sum()):,} candidates need more GPUs than allowed ({quotas.source}); not the first choice."
    i = int(first.head(1)[0])
    c = space.config(i)
    o = c.offering
    need = int(space.gpus_per_node[i] * space.nodes[i])
    return (f"Quota: first choice {c.nodes}× {o.machine_type} ({o.accelerators_per_node}×{o.accelerator}"
            f"{' spot' if c.spot else ''}) in {o.region} needs {need} GPU{'s' if need != 1 else ''}; your quota "
            f"there is {lim[i]:g} ({quotas.source}), so the plan is the best one it allows.")


def subset(space, keep: np.ndarray, reason: str):
    """``space`` with only the candidates ``keep``; the others counted under ``reason``; price groups kept
    (an ``LLMSpace``'s per-candidate checkpoint write and restart seconds too)."""
    from cloudfit.search.space import _GROUPS

    idx = np.flatnonzero(keep)
    cache = {k: space._cache[k] for k in ("per_shape",) if k in space._cache}
    groups = space.price_groups
    if groups is not None:
        _, inv = groups
        uniq, new_inv = np.unique(inv[idx], return_inverse=True)
        rep = np.empty(uniq.size, dtype=np.int64)
        rep[new_inv.reshape(-1)] = np.arange(idx.size)
        cache[_GROUPS] = (rep, new_inv.reshape(-1))
    excluded = dict(space.excluded)
    excluded[reason] = excluded.get(reason, 0) + int(len(space) - idx.size)
    cols = [k for k in _COLUMNS + ("write_s", "restart_s") if getattr(space, k, None) is not None]
    return replace(space, **{k: np.asarray(getattr(space, k))[idx] for k in cols}, excluded=excluded, _cache=cache)


def _where(o) -> str:
    return f"{o.cloud.upper() if o.cloud in ('gcp', 'aws') else o.cloud} {o.region}"


def explain(billed: Billed, problem) -> list[str]:
    """The bill's sentences: the chosen plan's split, and when data are given, whether staying near the data
    or moving them wins against the best feasible plan on the other side, with both numbers."""
    from cloudfit.search.problem import score
    from cloudfit.search.space import estimate

    space, bill, chosen = billed.space, billed.bill, billed.plan.chosen
    s = bill.split(space, chosen)
    out = [f"Bill of #1: compute ${s['compute_usd']:,.2f} + data transfer ${s['transfer_usd']:,.2f} + storage "
           f"${s['storage_usd']:,.2f} = ${chosen.cost_usd:,.2f} expected"
           + (f"; the copy takes {s['transfer_hours'] * 60:,.0f} min before training starts (in its hours)."
              if s["transfer_hours"] > 0 else ".")]
    out.extend(bill.notes)
    if bill.data is None:
        return out
    a = space.assess(problem)
    feasible, primary, _ = score(a, problem)
    moved = bill.per_offering(space)["moved"][space.offering]
    ci = _index_of(space, chosen)
    here = bool(moved[ci]) if ci is not None else s["transfer_usd"] > 0
    other = feasible & (moved != here)
    gb = f"{bill.data_gb:,.0f} GB"
    src = f"{bill.data.cloud.upper() if bill.data.cloud != 'local' else 'your machine'}" + (
        f" {bill.data.region}" if bill.data.cloud != "local" else "")
    if not other.any():
        out.append(f"Every plan that meets the limits {'moves' if here else 'stays near'} the data ({gb} in {src}).")
        return out
    if not here and bill.data.cloud != "local":  # staying: compare with the best plan on another cloud when there is one
        clouds = np.array([o.cloud for o in space.catalog.offerings])[space.offering]
        if (other & (clouds != bill.data.cloud)).any():
            other = other & (clouds != bill.data.cloud)
    j = int(np.flatnonzero(other)[np.argmin(primary[other])])
    ej = estimate(space, j, a)
    sj = bill.split(space, ej)
    o, oj = chosen.config.offering, ej.config.offering
    col = bill.per_offering(space)
    move_c = float(col["transfer_usd"][_offering_of(space, chosen)])
    move_j = float(col["transfer_usd"][_offering_of(space, ej)])
    if problem.objective == "time":  # ranked on time (or the cost × time knee): give both plans' hours and dollars
        from cloudfit.units import format_hours

        def both(e) -> str:
            return f"{format_hours(e.hours)} for ${e.cost_usd:,.2f}"

        tail = (f"the best plan {'near the data' if here else 'in ' + _where(oj)} ({ej.config.nodes}× {oj.machine_type}) "
                f"takes {both(ej)}, #1 {both(chosen)} (minimising time).")
        head = (f"Moving {gb} from {src} to {_where(o)} costs ${move_c:,.2f}" if here else
                f"Staying near the data: moving {gb} from {src} to {_where(oj)} would cost ${move_j:,.2f}")
        out.append(f"{head}; {tail}")
    elif here:  # the data move to the chosen plan: what moving costs, what the plan saves in compute and in all
        saving = sj["compute_usd"] - s["compute_usd"]
        out.append(f"Moving {gb} from {src} to {_where(o)} costs ${move_c:,.2f}; the {_where(o)} plan saves "
                   f"${saving:,.2f} of compute, so still ${ej.cost_usd - chosen.cost_usd:,.2f} in all, against the best "
                   f"plan near the data ({ej.config.nodes}× {oj.machine_type} in {oj.zone}: ${ej.cost_usd:,.2f} expected).")
    else:
        saving = s["compute_usd"] - sj["compute_usd"]
        what = (f"would save ${saving:,.2f} of compute but cost" if saving > 0 else
                f"would cost ${-saving:,.2f} more in compute too, and")
        out.append(f"Staying near the data is cheaper: moving {gb} from {src} to {_where(oj)} costs ${move_j:,.2f}; "
                   f"the {_where(oj)} plan ({ej.config.nodes}× {oj.machine_type}) {what} ${ej.cost_usd:,.2f} in all "
                   f"(with the ${move_j:,.2f} transfer) against ${chosen.cost_usd:,.2f}.")
    return out


def _offering_of(space, e) -> int:
    from cloudfit.bill import _offering_index

    return _offering_index(space, e.config.offering)


def _index_of(space, e) -> int | None:
    """The candidate id of estimate ``e`` in ``space`` (its offering, nodes and spot)."""
    c = e.config
    try:
        oi = space.catalog.offerings.index(c.offering)
    except ValueError:
        return None
    hit = np.flatnonzero((space.offering == oi) & (space.nodes == c.nodes) & (space.spot == c.spot))
    return int(hit[0]) if hit.size else None
