"""Executors: backends that turn a plan into running nodes (see ``base`` for the contract).

``get_executor(backend, **opts)`` is the one place that maps a backend name to its class, so the
CLI (``launch``, ``status``, ``down``, ``search``) never branches on backend names:

- ``local``: torch.distributed processes on this machine (a rehearsal)
- ``gcp``: Compute Engine VMs (``project``, ``endpoint``, ``image``, timing overrides)
- ``replay``: probe runs answered from a table of measurements (``table``, ``probe_seconds``)
- ``sky``: other clouds' plans (AWS, Lambda, RunPod, Nebius) through SkyPilot's Python API (the ``[sky]`` extra)

Options that are ``None`` are dropped, so callers can pass CLI options straight through.
"""

from __future__ import annotations

from typing import Any

BACKENDS = ("replay", "local", "gcp", "sky")


def _cls(backend: str):
    if backend == "local":
        from cloudfit.executors.local import LocalExecutor

        return LocalExecutor
    if backend == "gcp":
        from cloudfit.executors.gcp import GcpExecutor

        return GcpExecutor
    if backend == "replay":
        from cloudfit.executors.replay import ReplayExecutor

        return ReplayExecutor
    if backend == "sky":
        from cloudfit.executors.sky import SkyExecutor

        return SkyExecutor
    from cloudfit.errors import UsageError

    raise UsageError(f"unknown backend {backend!r} (expected {', '.join(BACKENDS[:-1])} or {BACKENDS[-1]})")


def check_backend(backend: str, allowed: tuple[str, ...] = BACKENDS) -> str:
    """``backend`` if it is one of ``allowed``; a one-line ``UsageError`` otherwise."""
    from cloudfit.errors import UsageError

    if backend not in allowed:
        raise UsageError(f"unknown backend {backend!r} (expected {', '.join(allowed[:-1])} or {allowed[-1]})"
                         if len(allowed) > 1 else f"unknown backend {backend!r} (expected {allowed[0]})")
    return backend


def get_executor(backend: str, **opts: Any):
    """An executor of ``backend`` built with ``opts`` (``None`` values dropped)."""
    cls = _cls(backend)
    if backend == "replay" and "table" in opts:
        return cls(opts.pop("table"), **{k: v for k, v in opts.items() if v is not None})
    return cls(**{k: v for k, v in opts.items() if v is not None})


def billing_bounds(backend: str) -> tuple[float, float]:
    """``(min_billed_s, teardown_s)`` the backend's default timing implies, for estimating the spend
    of a cluster whose launcher is gone (``cloudfit status``) without building an executor."""
    return _cls(backend).billing_bounds()


#: The clouds each backend can launch on (a plan names its cloud per offering; absent = gcp). GCP plans keep the
#: native executor; the other clouds' plans launch through SkyPilot (``--backend sky``). The local backend runs
#: any cloud's plan on this machine (a rehearsal on CPU ranks, or the plan's stack on this machine's own GPUs when
#: they are the plan's), charged at the plan's price.
LAUNCHES = {"local": ("gcp", "aws", "lambda", "runpod", "nebius"), "gcp": ("gcp",),
            "replay": ("gcp", "aws", "lambda", "runpod", "nebius"),
            "sky": ("aws", "lambda", "runpod", "nebius")}


def check_launchable(plan, backend: str):
    """The plan with only the fallbacks ``backend`` can launch (a multi-cloud plan's alternatives may be on
    other clouds); a one-line ``UsageError`` (nothing launched) when it cannot launch the chosen cloud."""
    import dataclasses

    ok = LAUNCHES.get(backend, ())
    cloud = plan.chosen.config.offering.cloud
    if cloud not in ok:
        from cloudfit.errors import UsageError

        other = "gcp" if cloud == "gcp" else "sky"
        hint = (" (pip install 'cloudfit[sky]', credentials checked by `sky check`)" if other == "sky" else "")
        raise UsageError(f"this plan is for {cloud}: --backend {backend} launches {', '.join(ok)} plans; "
                         f"use --backend {other}{hint}; nothing launched")
    alts = tuple(e for e in plan.alternatives if e.config.offering.cloud in ok)
    return plan if len(alts) == len(plan.alternatives) else dataclasses.replace(plan, alternatives=alts)


__all__ = ["BACKENDS", "billing_bounds", "check_backend", "check_launchable", "get_executor"]
