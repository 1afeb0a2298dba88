"""What a recommendation rests on where nothing was measured (issue 33, item 4).

A candidate is *measured* when its GPU (or a GPU with the same chip and specs) has a measurement of this
model family: a row of the training table (``data/measurements.csv``, grouped by its ``model_group``) or
a measurement in the profile itself (what anchors the prediction). Elsewhere its prediction is
spec-based. This is decided once per GPU, not per candidate.

When the chosen plan rests on an unmeasured GPU, :func:`facts` names the best plan on measured rows,
re-ranks every candidate at the low end of its 10–90% band (its pessimistic speed), and prices the
probe ``cloudfit search`` would run first on the chosen hardware (its cheapest on-demand offering for
``PROBE_SECONDS``). ``--risk p90`` (:func:`pessimistic`) plans on that low end for every candidate.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
from typing import Any, Iterable

import numpy as np

from cloudfit.errors import UsageError

#: ``--risk``: ``median`` plans on the predicted speed (the band's middle), ``p90`` on the speed each
#: candidate beats 9 times in 10 (the band's 10% end).
RISKS = ("median", "p90")

#: The table's mark after an unmeasured GPU.
MARK = "†"

#: The length of one probe: ``cloudfit search``'s default ``--probe-minutes`` (``cloudfit.active.record.PROBE_SECONDS``,
#: which this layer may not import; tests/plan/test_unknown.py holds them equal).
PROBE_SECONDS = 600.0


def check_risk(risk: str, *, tokens: bool = False) -> str:
    """``risk`` checked (one of ``RISKS``); ``tokens``: for a large-model plan, which chooses on the median only."""
    r = (risk or "").strip().lower()
    if r not in RISKS:
        raise UsageError(f"--risk must be {' or '.join(RISKS)}, got {risk!r}")
    if tokens and r != "median":
        raise UsageError(f"--risk {r} plans profiled models (samples); large-model plans choose on the median")
    return r


@functools.lru_cache(maxsize=4)
def _table(path: str) -> tuple[dict[str, str], dict[str, frozenset[str]]]:
    """(workload → model group, model group → accelerators with rows) of a measurement table."""
    group_of: dict[str, str] = {}
    accs: dict[str, set[str]] = {}
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            g = row.get("model_group") or row["workload"]
            group_of[row["workload"]] = g
            accs.setdefault(g, set()).add(row["accelerator"])
    return group_of, {g: frozenset(a) for g, a in accs.items()}


def family(model: str, measurements: str | None = None) -> tuple[str, frozenset[str]]:
    """(model family, accelerators the training table measured it on) for a profile's model name: the group
    of the table's workload of that name, else the group of that name, else the name with no rows."""
    from cloudfit.resources import shipped

    group_of, accs = _table(str(measurements or shipped("data/measurements.csv")))
    g = group_of.get(model, model)
    return g, accs.get(g, frozenset())


@functools.lru_cache(maxsize=128)
def _chip(accelerator: str) -> tuple:
    """Same chip, same specs (as ``cloudfit.perf.model`` counts a GPU measured); the name if unknown."""
    from cloudfit.catalog import hardware

    try:
        a = hardware.get(accelerator)
    except Exception:  # an accelerator cloudfit has no spec of: only its own name matches
        return (accelerator,)
    return (a.arch, a.fp32_tflops, a.fp16_tflops, a.memory_bandwidth_gbps, a.sms)


def measured_gpus(profile, accelerators: Iterable[str], measurements: str | None = None) -> dict[str, bool]:
    """Per accelerator: whether this profile's model family was measured on it (or on the same chip)."""
    _, table_accs = family(profile.model, measurements)
    seen = set(table_accs)
    for m in profile.measurements:
        if str(m.accelerator).lower() != "cpu" and m.samples_per_second > 0:
            seen.add(str(m.accelerator))
    chips = {_chip(a) for a in seen}
    return {a: _chip(a) in chips for a in sorted(set(accelerators))}


def measured_mask(space, measured: dict[str, bool]) -> np.ndarray:
    """Per candidate of ``space``: whether its GPU is measured (looked up per VM shape)."""
    per_shape = np.array([measured.get(s.accelerator, False) for s in space.shapes], dtype=bool)
    return per_shape[space.shape] if len(space) else np.zeros(0, dtype=bool)


def pessimistic(space):
    """``space`` with every candidate at the low end of its band (its band left as it is): what ``--risk p90``
    plans on. The per-shape columns and price groups, which do not depend on speed, are kept."""
    return dataclasses.replace(space, samples_per_second=np.minimum(space.low, space.samples_per_second),
                               _cache=space.speed_free_cache())


def _keys(a, problem, knee: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(feasible, primary, secondary, tertiary) keys of assessed candidates, lower is better, as the planner ranks:
    the objective, then the other (``cloudfit.search.problem.score``), or under the cost × time knee its score,
    then hours, then cost (``cloudfit.plan.knee.knee_order``)."""
    from cloudfit.search.problem import score

    feasible, primary, secondary = score(a, problem)
    if not knee:
        return feasible, primary, secondary, secondary
    from cloudfit.plan.knee import knee_key

    cost, hours = np.asarray(a.cost_usd, dtype=float), np.asarray(a.hours, dtype=float)
    return feasible, np.round(knee_key(cost, hours), 9), hours, cost


def _best(a, problem, knee: bool, mask: np.ndarray | None = None, ids: np.ndarray | None = None) -> int | None:
    """The best candidate (among ``mask``) of an assessment ``a`` of candidates ``ids`` (default: the whole space)
    that meets the limits, ranked as the planner ranks (:func:`_keys`, then id); its position in ``a``; None if
    none does."""
    feasible, primary, secondary, tertiary = _keys(a, problem, knee)
    ok = np.flatnonzero(feasible if mask is None else feasible & mask)
    if ok.size == 0:
        return None
    p = primary[ok]
    tie = ok[p == np.nanmin(p)] if not np.isnan(p).all() else ok
    key = tie if ids is None else ids[tie]
    return int(tie[np.lexsort((key, tertiary[tie], secondary[tie]))[0]])


def _at_low_end(space, problem, a, chosen: int, knee: bool) -> tuple[dict[str, Any], dict[str, Any] | None, bool]:
    """(the chosen plan at the low end of the bands, the best plan there or None, whether it is the chosen cluster).

    Slower never costs less nor takes less time (``test_pessimistic_keeps_the_band_and_the_space``), so a candidate
    whose median objective is already worse than the chosen plan's at the low end cannot beat it there: only the
    others are priced again (a few hundred of the space, not all of it), unless the chosen plan itself misses the
    limits at the low end (then the whole space is)."""
    low = pessimistic(space)
    one = np.array([chosen])
    ca = low.assess(problem, one)
    feasible, primary, _, _ = _keys(ca, problem, knee)
    if feasible[0]:
        _, median, _, _ = _keys(a, problem, knee)
        ids = np.flatnonzero(median <= primary[0])
        ids = ids if (ids == chosen).any() else np.append(ids, chosen)
        la = low.assess(problem, ids)
    else:
        ids, la = np.arange(len(low)), low.assess(problem)
    b = _best(la, problem, knee, ids=ids)
    best = None if b is None else _plan_of(low, la, int(ids[b]), b)
    return _plan_of(low, ca, chosen, 0), best, b is not None and _same(low, int(ids[b]), chosen)


def _cloud(off) -> dict[str, str]:
    """The cloud of an offering as plans write it: absent for GCP (plans before other clouds had no such field)."""
    return {} if off.cloud == "gcp" else {"cloud": off.cloud}


def _plan_of(space, a, i: int, row: int | None = None) -> dict[str, Any]:
    """Candidate ``i`` of ``space`` with its cost and hours from row ``row`` of ``a`` (default: ``i``)."""
    r = i if row is None else row
    o = space.shapes[int(space.shape[i])]
    off = space.catalog.offerings[int(space.offering[i])]
    return {**_cloud(off), "zone": off.zone, "machine_type": o.machine_type, "accelerator": o.accelerator,
            "accelerators_per_node": int(o.accelerators_per_node), "nodes": int(space.nodes[i]),
            "spot": bool(space.spot[i]), "cost_usd": float(a.cost_usd[r]), "hours": float(a.hours[r])}


def probe(space, chosen: int) -> dict[str, Any] | None:
    """The probe ``cloudfit search`` runs first on the chosen hardware (accelerator, GPUs per node, nodes):
    its cheapest on-demand offering (spot where none) for ``PROBE_SECONDS``. GCP offerings first: that is
    where ``cloudfit search`` runs probes; ``on_gcp`` says whether it can."""
    o = space.shapes[int(space.shape[chosen])]
    same = np.array([(s.accelerator, s.accelerators_per_node) == (o.accelerator, o.accelerators_per_node)
                     for s in space.shapes], dtype=bool)[space.shape] & (space.nodes == space.nodes[chosen])
    gcp = np.array([s.cloud == "gcp" for s in space.shapes], dtype=bool)[space.shape]
    on_gcp = bool((same & gcp).any())
    ids = np.flatnonzero(same & gcp if on_gcp else same)
    if ids.size == 0:
        return None
    order = np.lexsort((ids, space.price_per_hour[ids], space.spot[ids]))  # on-demand first, then cheapest
    i = int(ids[order[0]])
    off = space.catalog.offerings[int(space.offering[i])]
    price = float(space.price_per_hour[i])
    return {"usd": price * PROBE_SECONDS / 3600, "minutes": PROBE_SECONDS / 60, "price_per_hour": price,
            **_cloud(off), "zone": off.zone, "machine_type": off.machine_type, "nodes": int(space.nodes[i]),
            "spot": bool(space.spot[i]), "on_gcp": on_gcp}


def search_command(workload, p: dict[str, Any], accelerator: str) -> str:
    """The ``cloudfit search`` command whose first probe is ``p``: the same workload and limits on ``accelerator``
    alone (its plan on GCP, where the search probes, is the hardware of ``p`` when GCP plans as the other clouds
    did), one probe, a probe budget that pays for it."""
    w = workload
    args = ["cloudfit search", f"--profile {w.profile_path}" if w.profile_path else f"--model {w.model}",
            f"--samples {w.samples:.0f}"]
    if w.deadline_hours is not None:
        args.append(f"--deadline {w.deadline_hours:g}h")
    if w.budget_usd is not None:
        args.append(f"--budget {w.budget_usd:.2f}")
    if w.objective != "cost" or w.budget_usd is not None:  # a budget's default objective is time
        args.append(f"--objective {w.objective}")
    if w.confidence != 0.9:
        args.append(f"--confidence {w.confidence:g}")
    if w.regions:
        args.append(f"--regions {','.join(w.regions)}")
    args += {"allow": [], "never": ["--no-spot"], "only": ["--spot-only"]}.get(w.spot, [])
    if w.max_nodes != 64:
        args.append(f"--max-nodes {w.max_nodes}")
    if w.precision != "fp16":
        args.append(f"--precision {w.precision}")
    if w.batch_size_per_device is not None:
        args.append(f"--batch-size {w.batch_size_per_device}")
    budget = max(0.01, np.ceil(p["usd"] * 100) / 100)
    return " ".join([*args, f"--accelerators {accelerator}", f"--probe-budget {budget:.2f}", "--max-trials 1",
                     "--backend gcp", "--checkpoint-dir gs://BUCKET/PATH"])


def facts(space, problem, chosen: int, *, risk: str = "median", measured: dict[str, bool] | None = None,
          family_name: str | None = None, with_probe: bool = True) -> dict[str, Any]:
    """What the plan whose chosen candidate is ``chosen`` rests on (plan provenance ``unknown``):

    - ``family``, ``measured`` (per GPU of the space: a measurement of this family on it; given for large models,
      see :func:`llm_measured`), ``accelerator`` and ``chosen_measured``;
    - when the chosen GPU is unmeasured: ``measured_alternative`` (the best plan on measured GPUs, None if
      none meets the limits), ``pessimistic`` (the best plan with every candidate at its band's low end,
      and the chosen plan's cost and hours there; left out under ``risk="p90"``, which chose on it) and
      ``probe`` (see :func:`probe`, with its ``command``; not ``with_probe``: ``cloudfit search`` has no such probe).
    """
    fam = family_name or family(space.profile.model)[0]
    if measured is None:
        measured = measured_gpus(space.profile, (s.accelerator for s in space.shapes))
    acc = space.shapes[int(space.shape[chosen])].accelerator
    out: dict[str, Any] = {"family": fam, "measured": measured, "risk": risk, "accelerator": acc,
                           "chosen_measured": measured[acc]}
    if measured[acc]:
        return out
    a = space.assess(problem)
    knee = getattr(space.workload, "objective", "cost") == "time"  # the planner ranks on the cost × time knee
    alt = _best(a, problem, knee, measured_mask(space, measured))
    out["measured_alternative"] = None if alt is None else _plan_of(space, a, alt)
    if risk != "p90":
        at_chosen, best, same = _at_low_end(space, problem, a, chosen, knee)
        out["pessimistic"] = {"chosen": at_chosen, "best": best, "same": same}
    if with_probe:
        p = probe(space, chosen)
        if p is not None:  # a command only where `cloudfit search` can run this probe (on GCP's offering)
            p["command"] = search_command(space.workload, p, acc) if p["on_gcp"] else None
            p["accelerator"] = acc
        out["probe"] = p
    return out


@functools.lru_cache(maxsize=4)
def _llm_gpus(path: str) -> frozenset[str]:
    with open(path, newline="", encoding="utf-8") as f:
        return frozenset(row["accelerator"] for row in csv.DictReader(f))


def llm_measured(accelerators: Iterable[str], anchored_on: Iterable[str] = (),
                 path: str | None = None) -> dict[str, bool]:
    """Per accelerator: whether a large-model run was measured on it (the step model's calibration table,
    ``data/llm/measurements.csv``, or an anchor of the user's profile), on it or on the same chip."""
    from cloudfit.resources import shipped

    chips = {_chip(a) for a in _llm_gpus(str(path or shipped("data/llm/measurements.csv"))) | set(anchored_on)}
    return {a: _chip(a) in chips for a in sorted(set(accelerators))}


def _same(space, i: int, j: int) -> bool:
    """The same cluster (VM shape, nodes, spot); the zone may differ."""
    return (int(space.shape[i]), int(space.nodes[i]), bool(space.spot[i])) == \
        (int(space.shape[j]), int(space.nodes[j]), bool(space.spot[j]))


def describe(p: dict[str, Any]) -> str:
    """"aws 8×H200 ×2 spot ($20.57, 58 min)"."""
    from cloudfit.units import format_hours

    n = f" ×{p['nodes']}" if p["nodes"] > 1 else ""
    return (f"{p.get('cloud', 'gcp')} {p['accelerators_per_node']}×{p['accelerator']}{n} {'spot' if p['spot'] else 'on demand'} "
            f"(${p['cost_usd']:,.2f}, {format_hours(p['hours'])})")


def lines(u: dict[str, Any] | None) -> list[str]:
    """The one or two sentences ``recommend`` prints under "Why #1" (none when #1 rests on measured rows)."""
    if not u or u.get("chosen_measured", True):
        return []
    alt = u.get("measured_alternative")
    head = (f"Unmeasured: #1 rests on {u['accelerator']}, with no {u['family']} run measured on it (spec-based). "
            + (f"Best plan on measured rows: {describe(alt)}." if alt
               else "No plan on measured GPUs meets the limits."))
    pess = u.get("pessimistic")
    if pess:
        c = pess["chosen"]
        if pess["same"]:
            head += (f" At its band's pessimistic end (10% speed) #1 still wins: ${c['cost_usd']:,.2f}, "
                     f"{_hours(c['hours'])}.")
        elif pess["best"] is not None:
            head += (f" At the bands' pessimistic end (10% speed) #1 takes {_hours(c['hours'])} for "
                     f"${c['cost_usd']:,.2f} and {describe(pess['best'])} wins: --risk p90 chooses so.")
        else:
            head += " At the bands' pessimistic end (10% speed) no plan meets the limits."
    out = [head]
    p = u.get("probe")
    if p:
        where = (f"{p['minutes']:g} min on {p['nodes']}× {p['machine_type']} {'spot' if p['spot'] else 'on demand'}"
                 f" in {p.get('cloud', 'gcp')} {p['zone']}")
        if p["on_gcp"]:
            out.append(f"measure first: ~${p['usd']:,.2f} ({where}): {p['command']}")
        else:
            out.append(f"measure first: ~${p['usd']:,.2f} ({where}; `cloudfit search` probes on GCP only, "
                       f"which does not offer this {p['accelerator']} cluster)")
    return out


def _hours(h: float) -> str:
    from cloudfit.units import format_hours

    return format_hours(h)
