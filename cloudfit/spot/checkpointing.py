"""When to checkpoint: the Young/Daly interval the plan priced, re-estimated from measured writes.

The planner prices spot risk with checkpoints every τ compute hours, τ the exact minimiser of Daly's
model (``cloudfit.spot.model.optimal_interval_hours``; Young's √(2C/Λ) to first order) for the
cluster's revocation rate Λ (nodes × the per-node hazard of its GPU and region) and the checkpoint
write time C. ``launch`` hands the trainer Λ and the planned τ; after each write the trainer
re-computes τ from the write time it measured. On-demand clusters (Λ = 0) still checkpoint every
``MAX_INTERVAL_S`` (a stop always writes one more).
"""

from __future__ import annotations

import math

MIN_INTERVAL_S = 5.0
MAX_INTERVAL_S = 3600.0


def young_daly_s(hazard_per_hour: float, write_s: float) -> float:
    """Seconds of training between checkpoints for cluster hazard Λ (per hour) and write time C (s)."""
    if not (hazard_per_hour > 0 and math.isfinite(hazard_per_hour)):
        return MAX_INTERVAL_S
    from cloudfit.spot.model import optimal_interval_hours

    tau_h = float(optimal_interval_hours(hazard_per_hour, max(write_s, 0.0) / 3600.0))
    if not math.isfinite(tau_h):
        return MAX_INTERVAL_S
    return min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, tau_h * 3600.0))


def cluster_hazard_per_hour(config) -> float:
    """Λ for a cluster config: nodes × per-node revocation rate (0 on demand)."""
    if not config.spot:
        return 0.0
    from cloudfit.spot.hazard import hazards

    o = config.offering
    return float(hazards([o.accelerator], [o.region], cloud=o.cloud)[0]) * config.nodes


def planned_write_s(model: str) -> float:
    """Checkpoint write time the planner assumes for a shipped profile (weights + 2 Adam moments, fp32);
    the overhead model's intercept when the model has no shipped profile."""
    from cloudfit.spot.model import DEFAULT_OVERHEADS

    try:
        from cloudfit.profiling.io import load_profile, resolve_profile

        params = load_profile(resolve_profile(model)).stats.parameters
    except Exception:  # no shipped profile (a zoo toy, a user model): the intercept alone
        return DEFAULT_OVERHEADS.checkpoint_base_s
    return DEFAULT_OVERHEADS.checkpoint_s(12.0 * params)


def planned_interval(config, model: str) -> tuple[float, float, float]:
    """``(interval_s, hazard_per_hour, write_s)`` the plan priced for this config and model."""
    lam = cluster_hazard_per_hour(config)
    c = planned_write_s(model)
    return young_daly_s(lam, c), lam, c
