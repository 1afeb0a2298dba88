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


def preemption_notice(cloud: str, *, spot: bool, write_s: float, interval_h: float, hazard_per_hour: float,
                      preemptions: float, step_s: float = 0.0) -> dict | None:
    """Does the stop's checkpoint (the step in progress, then the write) fit the cloud's preemption notice?
    ``None`` on demand. Either way the price counts, per preemption, the work since the last interval
    checkpoint (Daly's model: the mean of a truncated exponential over τ + C, ≈ half of it): a notice is
    best effort (AWS says so; a host failure gives none), so a SIGTERM save that fits is a bonus, never priced;
    one that does not fit cannot finish before the kill, and then the lost work is what the preemption costs.
    ``cloudfit.catalog.clouds`` holds each cloud's notice and its source (``catalogs/README.md``)."""
    if not spot:
        return None
    import numpy as np

    from cloudfit.catalog.clouds import get
    from cloudfit.spot.model import _trunc_mean

    notice = get(cloud).preemption_notice_s
    save_s = float(step_s) + float(write_s)
    length_h = float(interval_h) + float(write_s) / 3600.0 if math.isfinite(interval_h) else float("nan")
    lost_h = (float(length_h * _trunc_mean(np.asarray(hazard_per_hour * length_h)))
              if hazard_per_hour > 0 and math.isfinite(length_h) else 0.0)
    fits = notice is not None and save_s <= notice
    name = {"gcp": "GCP", "aws": "AWS", "runpod": "RunPod"}.get(cloud, cloud.capitalize())
    what = (f"The stop's checkpoint ({_secs(step_s)} step + {_secs(write_s)} write)" if step_s
            else f"The stop's checkpoint ({_secs(write_s)})")
    lost = (f"≈{_mins(lost_h)} of work since the last interval checkpoint per preemption "
            f"({preemptions:.2g} expected: ≈{_mins(lost_h * preemptions)})")
    if notice is None:
        note = f"{name} publishes no preemption notice, so {what[0].lower() + what[1:]} is not counted on: the price counts {lost}."
    elif fits:
        note = f"{what} fits {name}'s {notice:g} s preemption notice; the price still counts {lost}: a notice is best effort."
    else:
        note = f"{what} cannot finish in {name}'s {notice:g} s preemption notice: the price counts {lost}."
    return {"notice_s": notice, "save_s": round(save_s, 3), "step_s": round(float(step_s), 3),
            "write_s": round(float(write_s), 3), "fits": fits, "interval_h": float(interval_h),
            "lost_per_preemption_h": lost_h, "expected_preemptions": float(preemptions),
            "expected_lost_h": lost_h * float(preemptions), "lost_work_priced": True, "note": note}


def _secs(s: float) -> str:
    return f"{s:.3g} s" if s < 100 else f"{s:,.0f} s"


def _mins(h: float) -> str:
    m = h * 60.0
    return f"{m:.2g} min" if m < 100 else f"{m:,.0f} min"
