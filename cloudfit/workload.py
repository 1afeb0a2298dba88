"""Build a ``Workload`` from what a user types (shared by recommend, launch and search).

The ``Workload`` checks its own limits when it is made (``Workload.__post_init__``); this module checks
only how the options combine (samples vs. epochs × dataset size, profile vs. model, units).
"""

from __future__ import annotations

from cloudfit.errors import UsageError
from cloudfit.types import PRECISIONS, Workload
from cloudfit.units import parse_hours, parse_usd


def parse_clouds(text: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """``"gcp,aws"`` / ``["gcp", "aws"]`` / ``"all"`` → known clouds, first-mention order (default: GCP
    alone); ``UsageError`` naming an unknown cloud."""
    from cloudfit.types import CLOUDS, check_clouds

    if text is None:
        return ("gcp",)
    names: list[str] = []
    for item in [text] if isinstance(text, str) else list(text):
        for x in str(item).split(","):
            x = x.strip().lower()
            names.extend(CLOUDS if x == "all" else [x] if x else [])
    return check_clouds(tuple(dict.fromkeys(names)))


def default_objective(deadline_hours: float | None, budget_usd: float | None) -> str:
    """Cost under a deadline, time under a budget (only a budget → time)."""
    return "time" if deadline_hours is None and budget_usd is not None else "cost"


def make_workload(
    *,
    model: str | None = None,
    profile: str | None = None,
    samples: float | None = None,
    epochs: float | None = None,
    dataset_size: int | None = None,
    deadline: str | float | None = None,
    budget: str | float | None = None,
    objective: str | None = None,
    regions: list[str] | tuple[str, ...] = (),
    accelerators: list[str] | tuple[str, ...] = (),
    spot: str = "allow",
    max_nodes: int = 64,
    confidence: float = 0.9,
    precision: str = "fp16",
    batch_size: int | None = None,
    max_gpus: int | None = None,
    allow_outlier_prices: bool = False,
    clouds: str | list[str] | tuple[str, ...] | None = None,
) -> Workload:
    """Check the options together and return the Workload (``UsageError`` on anything wrong)."""
    if (model is None) == (profile is None):
        raise UsageError("give exactly one of --model NAME (a shipped profile) or --profile PATH")
    if samples is not None and (epochs is not None or dataset_size is not None):
        raise UsageError("give either --samples or --epochs with --dataset-size, not both")
    if samples is None:
        if epochs is None or dataset_size is None:
            raise UsageError("give --samples N, or --epochs E with --dataset-size D")
        if epochs <= 0 or dataset_size <= 0:
            raise UsageError("--epochs and --dataset-size must be positive")
        samples = float(epochs) * float(dataset_size)
    deadline_h = None if deadline is None else (float(deadline) if isinstance(deadline, (int, float)) else parse_hours(deadline))
    budget_usd = None if budget is None else (float(budget) if isinstance(budget, (int, float)) else parse_usd(budget))
    if precision not in PRECISIONS:
        raise UsageError(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if batch_size is not None and batch_size < 1:
        raise UsageError(f"--batch-size must be a positive integer, got {batch_size}")
    name = model
    if profile is not None:
        from pathlib import Path

        name = Path(profile).stem
    return Workload(  # validates its own limits
        model=str(name),
        samples=float(samples),
        deadline_hours=deadline_h,
        budget_usd=budget_usd,
        objective=objective or default_objective(deadline_h, budget_usd),  # type: ignore[arg-type]
        regions=tuple(regions or ()),
        accelerators=tuple(accelerators or ()),
        spot=spot,  # type: ignore[arg-type]
        max_nodes=int(max_nodes),
        confidence=float(confidence),
        precision=precision,
        batch_size_per_device=batch_size,
        profile_path=None if profile is None else str(profile),
        max_gpus=None if max_gpus is None else int(max_gpus),
        allow_outlier_prices=bool(allow_outlier_prices),
        clouds=parse_clouds(clouds),
    ).require_limit()
