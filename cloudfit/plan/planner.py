"""``recommend(workload) -> Plan``: the cheapest cluster under a deadline, or the fastest under a budget.

The one planner entry point. A workload knows its kind: ``"samples"`` (a ``Workload``: a profiled model,
counted in samples) is planned here; ``"tokens"`` (a ``cloudfit.plan.llm.TokenWorkload``: a large model,
counted in tokens, cluster *and* parallel layout) by ``cloudfit.plan.llm``. Both rank with
``cloudfit.plan.rank``; neither imports this module.

Planning is a pure function of the workload, the profile, the catalog and the shipped performance
and preemption models: build the space (every offering × nodes × spot), let a searcher rank it,
then explain the winner, price a looser limit, and keep ranked alternatives for launch fallback.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import replace
from pathlib import Path
from typing import Any

from cloudfit import __version__
from cloudfit.catalog import Catalog
from cloudfit.errors import CloudfitError
from cloudfit.plan.explain import check_length, infeasible
from cloudfit.plan.rank import N_ALTERNATIVES, N_PARETO, ZONES_PER_CONFIG, Ranked, pareto_front, rank  # noqa: F401
from cloudfit.search import Problem, get_searcher
from cloudfit.search.space import Space, build_space
from cloudfit.types import Plan, Profile, Workload


def _profile_file(workload: Workload) -> str:
    from cloudfit.profiling.io import resolve_profile

    return str(resolve_profile(workload.profile_path or workload.model))


def load_workload_profile(workload: Workload) -> Profile:
    from cloudfit.profiling.io import load_profile, resolve_profile

    return load_profile(resolve_profile(workload.profile_path or workload.model))


def recommend(
    workload: Workload | Any,
    *,
    catalog: Catalog | str | Path | None = None,
    profile: Profile | None = None,
    searcher: str = "exhaustive",
    searcher_options: dict[str, Any] | None = None,
    space: Space | None = None,
    risk: str = "median",
) -> Plan:
    """Search the catalog for the best cluster for ``workload``; raise ``InfeasibleError`` if none.

    ``workload`` is a ``Workload`` (samples) or a ``cloudfit.plan.llm.TokenWorkload`` (tokens; the plan
    then carries its parallel layout in ``Plan.layout``).

    The returned Plan holds the chosen estimate, up to 30 ranked alternatives (launch falls back
    through them), the cost × time Pareto front, a one-sentence explanation and sensitivity, and
    provenance (catalog digest, performance-model version, searcher, evaluations).
    ``risk="p90"`` plans every candidate at the low end of its 10–90% band (``cloudfit.plan.unknown``).
    """
    from cloudfit.plan import unknown

    risk = unknown.check_risk(risk)
    if workload.kind == "tokens":
        unknown.check_risk(risk, tokens=True)
        return _recommend_tokens(workload, catalog=catalog, profile=profile, searcher=searcher, space=space)
    from cloudfit import catalog as catalog_mod
    from cloudfit import spot

    workload.require_limit()
    profile_file = model_version = None
    if space is None:
        space, model_version, profile_file = _space_of(workload, profile, catalog)
    if risk == "p90":
        space = unknown.pessimistic(space)
    check_length(space)
    problem = Problem.of(workload)
    result = get_searcher(searcher, **(searcher_options or {})).search(space, problem)
    if result.n_feasible == 0:
        raise infeasible(space, problem)

    r = rank(space, problem, workload, result)
    chosen = r.chosen
    pareto = pareto_front(space, problem)
    provenance = {
        "cloudfit_version": __version__,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "catalog": space.catalog.path,
        "catalog_digest": space.catalog.digest,
        "prices": _price_date(space.catalog.path),
        "model_version": model_version or _model_version(),
        "spot_model_version": getattr(spot, "MODEL_VERSION", ""),
        "profile_model": space.profile.model,
        "profile_file": profile_file,
        "prediction_basis": space.basis,
        "searcher": result.searcher,
        "evaluations": int(result.evaluations),
        "space_size": len(space),
        "feasible": result.n_feasible if result.searcher == "exhaustive" else None,
        "excluded": dict(space.excluded),
    }
    provenance.update(r.provenance)
    provenance["unknown"] = unknown.facts(space, problem, int(r.picked[0]), risk=risk)
    explanation = r.explanation
    notice = _notice(space, r)
    if notice is not None:
        provenance["preemption_notice"] = notice
        explanation = f"{explanation} {notice['note']}"
    plan = Plan(workload=workload, chosen=chosen, alternatives=r.alternatives, pareto=pareto,
                provenance=provenance, explanation=explanation)
    return replace(plan, sensitivity=r.sensitivity(space, problem))


def _notice(space, r) -> dict | None:
    """The chosen spot cluster's stop checkpoint against its cloud's preemption notice (None on demand)."""
    from cloudfit.plan.explain import preemption_notice
    from cloudfit.spot import DEFAULT_OVERHEADS

    return preemption_notice(space, r.assessment, int(r.picked[0]), r.chosen,
                             write_s=DEFAULT_OVERHEADS.checkpoint_s(space.checkpoint_bytes))


def _space_of(workload: Workload, profile: Profile | None, catalog) -> tuple[Space, str, str | None]:
    """(space, performance-model version, profile file) for ``recommend``: a space built before from the same
    catalog bytes, profile file and options is read back (``cloudfit.cache``) without parsing the catalog;
    otherwise the catalog is loaded, then the profile (errors in that order), and the space built."""
    from cloudfit import cache
    from cloudfit import catalog as catalog_mod

    profile_file = None
    if profile is None and cache.enabled() and not isinstance(catalog, Catalog):
        found = catalog_mod.fingerprint(catalog, clouds=workload.clouds)
        try:
            profile_file = _profile_file(workload)
        except CloudfitError:  # the profile's error comes after the catalog's, as below
            profile_file = None
        hit = None if profile_file is None else cache.get("space", _space_key(workload, *found, profile_file))
        if hit is not None:
            space, version = hit
            space.workload, space.profile = workload, load_workload_profile(workload)
            return space, version, profile_file
    cat = catalog if isinstance(catalog, Catalog) else catalog_mod.load(catalog, clouds=workload.clouds)
    prof = profile or load_workload_profile(workload)
    profile_file = None if profile is not None else _profile_file(workload)
    return (*_space(workload, prof, cat, profile_file), profile_file)


def _space_key(w: Workload, catalog_path: str, catalog_digest: str, profile_file: str) -> str:
    """The cache key of the space of ``w`` on this catalog and profile file (see ``_space``)."""
    from cloudfit import cache

    return cache.key("space", catalog_path, catalog_digest, cache.file_digest(profile_file), _model_file(), w.model,
                     w.profile_path, w.accelerators, w.regions, w.spot, w.precision, w.batch_size_per_device,
                     w.max_nodes, w.max_gpus, w.allow_outlier_prices, w.clouds)


def _space(workload: Workload, profile: Profile, cat: Catalog, profile_file: str | None) -> tuple[Space, str]:
    """``build_space`` and the performance model's version — read back from ``cloudfit.cache`` when the
    catalog, the profile file, the package (code, model.json) and the options that shape the space are
    those of an earlier call (the space does not depend on the samples, limits or objective)."""
    from cloudfit import cache

    if profile_file is None or not cat.digest:
        return build_space(workload, profile, cat), _model_version()
    k = _space_key(workload, cat.path, cat.digest, profile_file)
    hit = cache.get("space", k)
    if hit is None:
        hit = (_derived(build_space(workload, profile, cat)), _model_version())
        cache.put("space", k, hit)
    space, version = hit
    space.workload, space.profile = workload, profile
    return space, version


def _derived(space: Space) -> Space:
    """``space`` with the per-shape columns every plan derives from it alone (GPUs per VM, zones offering
    each shape) computed once, so that they are stored with it (the per-candidate arrays are cheap from them)."""
    space.shape_columns()
    return space


def _model_file() -> tuple:
    """The performance model file's path, size and modification time (without importing the model)."""
    import os
    import sys

    pm = sys.modules.get("cloudfit.perf.model")  # imported (and perhaps pointed elsewhere) already
    path = pm.model_path() if pm is not None else Path(__file__).resolve().parents[1] / "perf" / "model.json"
    st = os.stat(path)
    return str(path), st.st_size, st.st_mtime_ns


def _model_version() -> str:
    from cloudfit import perf

    return perf.model_version()


def _recommend_tokens(workload, *, catalog, profile, searcher, space) -> Plan:
    """A large-model token workload: every candidate at its best parallel layout (``cloudfit.plan.llm``)."""
    from cloudfit.errors import UsageError
    from cloudfit.plan.llm import recommend_llm

    if searcher != "exhaustive":
        raise UsageError("large-model recommend searches exhaustively (every offering × nodes × layout)")
    if profile is not None:
        raise UsageError("a large-model workload is described by its shape, not a profile")
    return recommend_llm(workload.limits, workload.job, catalog=catalog, space=space)


def _price_date(path: str) -> str:
    from cloudfit.catalog.dates import price_date

    return price_date(path)


