"""Words for a plan: why the chosen cluster, what a looser limit would buy, and why nothing fits."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from cloudfit.errors import InfeasibleError
from cloudfit.search import Problem
from cloudfit.search.problem import Ranking, cost_quantile
from cloudfit.search.space import Space, estimate
from cloudfit.types import ClusterConfig, Estimate
from cloudfit.units import format_hours

DEADLINE_SLACK_HOURS = 2.0
#: ... or this share of a shorter deadline (2 h more on a 3-minute deadline says nothing useful)
DEADLINE_SLACK_SHARE = 0.25
BUDGET_SLACK = 0.10


def deadline_slack_hours(deadline_hours: float) -> float:
    """How much later the sensitivity line's looser deadline is: 2 h, or a quarter of a shorter deadline."""
    return min(DEADLINE_SLACK_HOURS, DEADLINE_SLACK_SHARE * deadline_hours)


def check_length(space: Space, amount: str | None = None) -> None:
    """``UsageError`` (exit 2) when even the fastest candidate of ``space`` needs longer than a year
    (``cloudfit.types.MAX_JOB_HOURS``) to compute the workload's samples: no deadline or budget can make such
    a job a plan (``--samples 1e30`` would otherwise be priced in the 10²⁷ dollars). ``amount``: what the
    workload trains, in words (default: its samples)."""
    from cloudfit.errors import UsageError
    from cloudfit.types import MAX_JOB_HOURS

    if not len(space):
        return
    hours = space.compute_hours
    j = int(np.argmin(hours))
    if float(hours[j]) > MAX_JOB_HOURS:
        what = amount or f"{space.workload.samples:,.3g} samples"
        raise UsageError(f"{what} take at least {float(hours[j]) / MAX_JOB_HOURS:,.3g} years on the fastest cluster "
                         f"searched ({_describe_config(space.config(j))}); cloudfit plans jobs of up to a year")


def _describe(e: Estimate) -> str:
    return _describe_config(e.config)


def _describe_config(c: ClusterConfig) -> str:
    o = c.offering
    nodes = f"{c.nodes}× " if c.nodes > 1 else ""
    return f"{nodes}{o.machine_type} ({o.accelerators_per_node}×{o.accelerator}{', spot' if c.spot else ''})"


def explain(chosen: Estimate, runner: Estimate | None, problem: Problem) -> str:
    """One sentence on why ``chosen`` beats ``runner`` (the best different hardware)."""
    if runner is None:
        return f"{_describe(chosen)} is the only hardware that meets the limits."
    speed = chosen.samples_per_second / runner.samples_per_second
    price = chosen.config.price_per_hour / runner.config.price_per_hour
    pace = f"{abs(speed - 1) * 100:.0f}% {'faster' if speed >= 1 else 'slower'}"
    per_hour = f"{abs(price - 1) * 100:.0f}% {'cheaper' if price <= 1 else 'dearer'} per hour"
    risk = ""
    if chosen.config.spot or runner.config.spot:
        risk = f"; P(on time) {chosen.p_on_time:.0%} vs {runner.p_on_time:.0%}"
    if problem.objective == "time":
        gain = runner.hours - chosen.hours
        if format_hours(chosen.hours) == format_hours(runner.hours) or gain * 3600 < 1:
            # a difference the rounding hides is no reason: say it is a tie and what broke it
            cheaper = chosen.cost_usd <= runner.cost_usd
            return (f"{_describe(chosen)} and the runner-up {_describe(runner)} both take about "
                    f"{format_hours(chosen.hours)} (a difference of {gain * 3600:.1f} s); "
                    f"#1 is {'cheaper' if cheaper else 'chosen on the seconds'} "
                    f"(${chosen.cost_usd:,.2f} vs ${runner.cost_usd:,.2f}){risk}.")
        return (f"{_describe(chosen)} finishes {format_hours(gain)} sooner than the runner-up {_describe(runner)} "
                f"({format_hours(chosen.hours)} vs {format_hours(runner.hours)}): it is {pace} and {per_hour}{risk}.")
    gain = runner.cost_usd - chosen.cost_usd
    return (f"{_describe(chosen)} costs ${gain:,.2f} less than the runner-up {_describe(runner)} "
            f"(${chosen.cost_usd:,.2f} vs ${runner.cost_usd:,.2f} expected): it is {pace} and {per_hour}, "
            f"so each sample costs less{risk}.")


#: What the knee's note says when the knee is also the fastest feasible plan of the whole space.
FASTEST_WITHIN = "It is also the fastest plan within the limits."


def explain_knee(space: Space, problem: Problem, chosen: Estimate, a, ids: np.ndarray | None = None) -> tuple[str, str]:
    """(why the knee, what the literal fastest and the cheapest would be) for the knee objective."""
    from cloudfit.plan.knee import KNEE_ELASTICITY, cheapest_id, fastest_id

    fid, cid = fastest_id(a, problem, ids), cheapest_id(a, problem, ids)
    fast = None if fid is None else estimate(space, fid, a)
    cheap = None if cid is None else estimate(space, cid, a)
    rule = ("the knee of cost × time: a faster plan would cost more than "
            f"{KNEE_ELASTICITY:g}% more money per 1% of time saved")
    why = (f"{_describe(chosen)} in {chosen.config.offering.zone} takes {format_hours(chosen.hours)} for "
           f"${chosen.cost_usd:,.2f} expected: {rule}.")
    notes = []
    faster = fast is not None and fast.hours < chosen.hours * (1 - 1e-6)
    if faster and fast.cost_usd > chosen.cost_usd + 0.005:
        ratio = fast.cost_usd / max(chosen.cost_usd, 1e-9)
        notes.append(f"The literal fastest, {_describe(fast)}, takes {format_hours(fast.hours)} for ${fast.cost_usd:,.2f} "
                     f"({ratio:,.1f}× the cost to save {format_hours(chosen.hours - fast.hours)}, "
                     f"{(1 - fast.hours / chosen.hours):.0%}); --objective fastest picks it.")
    elif not faster:  # said only when no feasible plan (of those searched) is faster
        notes.append(FASTEST_WITHIN if ids is None else "It is also the fastest plan found within the limits.")
    if cheap is not None and cheap.cost_usd < chosen.cost_usd - 0.005 and cheap.hours > chosen.hours * (1 + 1e-6):
        notes.append(f"The cheapest, {_describe(cheap)}, takes {format_hours(cheap.hours)} for ${cheap.cost_usd:,.2f}.")
    return why, " ".join(notes)


def _best(space: Space, problem: Problem) -> tuple[int, Any] | None:
    a = space.assess(problem)
    head = Ranking(a, problem, np.arange(len(space))).head(1)
    return (int(head[0]), a) if head.size else None


def _best_later_deadline(space: Space, problem: Problem, looser: Problem, chosen_id: int | None) -> tuple[int, Any] | None:
    """``_best(space, looser)`` where ``looser`` is ``problem`` with a later deadline.

    The deadline moves only P(on time): costs and hours are those of the assessment already made
    (returned in its place). If the chosen candidate stays feasible (checked), the answer is among
    the candidates no dearer than it, and only their groups are re-priced at the later deadline.
    """
    groups = space.price_groups
    if groups is None or chosen_id is None or space.assessed(looser):
        return _best(space, looser)
    rep, inv = groups
    now = space.assess(problem)
    cost = np.asarray(now.cost_usd)
    cand = np.flatnonzero(cost <= cost[chosen_id])
    used = np.zeros(rep.size, dtype=bool)
    used[inv[cand]] = True
    gs = np.flatnonzero(used)
    row = np.zeros(rep.size, dtype=np.int64)
    row[gs] = np.arange(gs.size)
    p_on = np.asarray(space.assess(looser, rep[gs]).p_on_time)[row[inv[cand]]]
    view = replace(now.take(cand), p_on_time=p_on)
    scored = Ranking(view, looser, cand)
    at = int(np.searchsorted(cand, chosen_id))
    if at == cand.size or cand[at] != chosen_id or not scored.feasible[at]:
        return _best(space, looser)
    return int(scored.head(1)[0]), now


def sensitivity(space: Space, problem: Problem, chosen: Estimate, chosen_id: int | None = None) -> str:
    """What a looser limit buys: a deadline 2 h later (cost objective) or a 10% larger budget (time).

    ``chosen_id`` (``chosen``'s candidate id in ``space``) lets the later deadline re-price only
    what could beat it.
    """
    if problem.objective == "cost" and problem.deadline_hours is not None:
        slack = deadline_slack_hours(problem.deadline_hours)
        later = format_hours(slack)
        looser = replace(problem, deadline_hours=problem.deadline_hours + slack)
        best = _best_later_deadline(space, problem, looser, chosen_id)
        if best is None:  # cannot happen: a looser deadline keeps every feasible candidate
            return ""
        j, a = best
        saved = chosen.cost_usd - float(a.cost_usd[j])
        if saved <= 0.005:
            return f"A deadline {later} later would not save anything."
        return (f"A deadline {later} later saves ${saved:,.2f} "
                f"({saved / chosen.cost_usd:.0%}) with {_describe_config(space.config(j))}"
                f"{' — much cheaper for nearly the same time' if saved >= 0.3 * chosen.cost_usd and slack < DEADLINE_SLACK_HOURS else ''}.")
    if problem.budget_usd is not None:
        looser = replace(problem, budget_usd=problem.budget_usd * (1 + BUDGET_SLACK))
        best = _best(space, looser)
        if best is None:
            return ""
        j, a = best
        if problem.objective == "time":
            sooner = chosen.hours - float(a.hours[j])
            if sooner <= 1 / 3600:
                return f"A budget {BUDGET_SLACK:.0%} larger would not finish sooner."
            return (f"A budget {BUDGET_SLACK:.0%} larger (${looser.budget_usd:,.0f}) finishes {format_hours(sooner)} sooner "
                    f"with {_describe_config(space.config(j))}.")
        saved = chosen.cost_usd - float(a.cost_usd[j])
        return "" if saved <= 0.005 else f"A budget {BUDGET_SLACK:.0%} larger saves ${saved:,.2f} in expectation."
    return ""


# --------------------------------------------------------------------------------------------
# Infeasible limits


def _needed_deadline(space: Space, problem: Problem, a_budget_ok: np.ndarray) -> float | None:
    """Smallest deadline (h) at which some candidate that fits the budget meets the confidence."""
    if not a_budget_ok.any():
        return None
    lo, hi = problem.deadline_hours or 0.0, max(problem.deadline_hours or 1.0, 1.0)
    ids = np.flatnonzero(a_budget_ok)

    def ok(d: float) -> bool:
        pa = space.assess(replace(problem, deadline_hours=d), ids)
        good = np.asarray(pa.p_on_time) >= problem.confidence
        if problem.budget_usd is not None:
            good &= cost_quantile(pa, problem.confidence) + pa.reserve_usd <= problem.budget_usd
        return bool(good.any())

    for _ in range(60):
        if ok(hi):
            break
        lo, hi = hi, hi * 2
    else:
        return None
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def _hours_arg(h: float) -> str:
    """A deadline the user can paste into ``--deadline``, rounded up so that it is enough."""
    if h < 1:
        return f"{math.ceil(h * 60)}m"
    return f"{math.ceil(h * 10) / 10:g}h"


#: The infeasibility message suggests a lower --confidence only down to this probability of finishing on time.
MIN_SUGGESTED_CONFIDENCE = 0.5


def infeasible(space: Space, problem: Problem) -> InfeasibleError:
    """An ``InfeasibleError`` naming the closest configurations and which limit to relax by how much."""
    a = space.assess(problem)
    conf = problem.confidence
    on_time = np.ones(len(space), dtype=bool) if problem.deadline_hours is None else np.asarray(a.p_on_time) >= conf
    cost_q = cost_quantile(a, conf) + a.reserve_usd  # what the budget must cover
    within = np.ones(len(space), dtype=bool) if problem.budget_usd is None else cost_q <= problem.budget_usd
    hints = []
    if problem.deadline_hours is not None:
        d = _needed_deadline(space, problem, within)
        if d is not None:
            from cloudfit.units import parse_hours

            arg = _hours_arg(d)
            then = _best(space, replace(problem, deadline_hours=parse_hours(arg)))
            with_ = ""
            if then is not None:
                j, aj = then
                with_ = (f", with {_describe_config(space.config(j))} in {space.config(j).offering.zone}: "
                         f"{format_hours(float(aj.hours[j]))}, ${float(aj.cost_usd[j]):,.2f} expected")
            hints.append(f"a deadline of {arg} (+{format_hours(parse_hours(arg) - problem.deadline_hours)}{with_})")
    if problem.budget_usd is not None and on_time.any():
        need = float(cost_q[on_time].min())
        hints.append(f"a budget of ${need:,.2f} (+${need - problem.budget_usd:,.2f}; the budget must cover "
                     f"the {conf:.0%} cost quantile)")
    if problem.deadline_hours is not None:
        best_p = math.floor((float(np.asarray(a.p_on_time)[within].max()) if within.any() else 0.0) * 100) / 100
        # A plan more likely late than on time is no plan: below an even chance, relax the other limits.
        if MIN_SUGGESTED_CONFIDENCE <= best_p < conf:
            hints.append(f"--confidence {best_p:.2f}")
    # closest: the most likely to be on time within budget, then the fastest (then the cheapest)
    if problem.deadline_hours is not None:
        p_shown = np.floor(np.asarray(a.p_on_time) * 100.0)  # as printed: 0.3% and 0.0001% both read 0%
        # fastest by expected hours: with a capacity wait the P90 can sit below the mean (a rare long wait)
        key = np.lexsort((np.asarray(a.cost_usd), np.asarray(a.hours_p90), np.asarray(a.hours), -p_shown * within))
    else:
        key = np.argsort(cost_q, kind="stable")
    _, cluster = space.point_ids("cluster")  # one per VM shape × nodes × spot, whatever the zone
    seen, closest = set(), []
    for i in key:
        k = int(cluster[i])
        if k in seen:
            continue
        seen.add(k)
        e = estimate(space, int(i), a, int(i), feasible=False)
        closest.append(e)
        if len(closest) == 3:
            break
    limits = []
    if problem.deadline_hours is not None:
        limits.append(f"a {format_hours(problem.deadline_hours)} deadline at {conf:.0%} confidence")
    if problem.budget_usd is not None:
        limits.append(f"a ${problem.budget_usd:,.2f} budget")
    # floored, so that a candidate just below the confidence never reads as meeting it
    on_time = ((lambda e: f", P(on time) {math.floor(e.p_on_time * 100):.0f}%") if problem.deadline_hours is not None
               else (lambda e: ""))
    near = "; ".join(f"{_describe(e)} in {e.config.offering.zone}: {format_hours(e.hours)}, ${e.cost_usd:,.2f} expected, "
                     f"${e.cost_p90_usd:,.2f} P90{on_time(e)}" for e in closest)
    relax = (" Relax to " + " or ".join(hints) + ".") if hints else ""
    return InfeasibleError(f"no configuration meets {' and '.join(limits)}.{relax} Closest: {near}.",
                           closest=tuple(closest))


def preemption_notice(space: Space, a, i: int, chosen: Estimate, *, write_s: float, step_s: float = 0.0) -> dict | None:
    """``plan.json``'s ``provenance.preemption_notice`` for the chosen candidate ``i`` (``a``: the space's
    assessment): does the stop's checkpoint fit its cloud's notice, and the lost work the price counts
    (``cloudfit.spot.checkpointing.preemption_notice``). ``None`` on demand."""
    from cloudfit.spot.checkpointing import preemption_notice as notice

    c = chosen.config
    return notice(c.offering.cloud, spot=c.spot, write_s=write_s, step_s=step_s,
                  interval_h=float(a.checkpoint_interval_h[i]),
                  hazard_per_hour=float(space.hazard_per_node_hour[i]) * c.nodes,
                  preemptions=float(a.expected_preemptions[i]))
