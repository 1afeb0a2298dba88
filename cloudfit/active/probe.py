"""One probe: a short measurement run of a hardware point through the executor, recorded as a ``Trial``.

The probe runs on the point's cheapest on-demand offering with a budget of ``probe_seconds`` at its
price. A failed probe (stockout, quota, missing from a replay table) is a failed trial with its
reason, never a measurement. A probe cut by Ctrl-C or SIGTERM (the executor tears it down) is a
failed trial charged what the executor recorded, and the interrupt goes on up.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cloudfit.active.record import Point, Trial
from cloudfit.active.resume import recorded_spend
from cloudfit.errors import BudgetExceeded, LaunchError
from cloudfit.types import ClusterConfig, Workload


@dataclass(frozen=True)
class ProbeRequest:
    """What one probe runs: the point, its configuration and cap, and the workload it measures."""

    number: int  # the study's trial number
    point: Point
    config: ClusterConfig
    cap_usd: float
    predicted_samples_per_second: float
    workload: Workload
    batch: int
    steps: int
    seconds: float
    checkpoint_dir: str | None


def backend_of(executor) -> str:
    """The executor's backend name (the Executor protocol's ``.backend``)."""
    return str(executor.backend)


def probe_spec(req: ProbeRequest):
    """The executor's ``RunSpec`` of the probe, named after its trial."""
    from cloudfit.executors.base import default_name, probe_spec as make_spec

    w = req.workload
    spec = make_spec(req.config, model=w.model, steps=req.steps, budget_usd=req.cap_usd, timeout_s=req.seconds,
                     batch_size_per_device=req.batch, name=f"{default_name('probe-' + w.model)}-{req.number}")
    checkpoint = f"{req.checkpoint_dir.rstrip('/')}/{spec.name}" if req.checkpoint_dir else None
    return replace(spec, job=replace(spec.job, precision=w.precision, checkpoint_dir=checkpoint))


def pending_record(req: ProbeRequest, run: str) -> dict:
    """The trial's record before its probe runs (a resume charges a killed probe from it)."""
    return {"number": req.number, "accelerator": req.point[0], "accelerators_per_node": req.point[1],
            "nodes": req.point[2], "machine_type": req.config.offering.machine_type, "zone": req.config.offering.zone,
            "predicted_samples_per_second": req.predicted_samples_per_second, "probe_cost_usd": float(req.cap_usd),
            "run": run}


def run_probe(executor, req: ProbeRequest, spec, base: dict) -> Trial:
    """Run the probe; its ``Trial`` (ok with a throughput, or failed with the reason).

    Ctrl-C or another exception during the run raises ``ProbeInterrupted`` carrying the failed
    ``Trial`` (the caller records it, then re-raises the cause).
    """
    from cloudfit.executors.base import RunResult

    try:
        result = executor.run(spec)
    except (LaunchError, BudgetExceeded) as e:  # stockout, quota, too small a cap: a failed probe
        result = RunResult(spec.name, backend_of(executor), "no-capacity" if isinstance(e, LaunchError) else "budget",
                           recorded_spend(executor, spec.name, 0.0), 0.0, req.config, detail=str(e))
    except BaseException as e:  # Ctrl-C (the executor tore the probe down) or an error
        what = "interrupted" if isinstance(e, KeyboardInterrupt) else f"error ({type(e).__name__}: {e})"
        tr = Trial(**{**base, "probe_cost_usd": recorded_spend(executor, spec.name, req.cap_usd)}, status="failed",
                   samples_per_second=None, reason=f"{what}: the search stopped during this probe")
        raise ProbeInterrupted(tr) from e
    # a probe stopped by its timeout or its cap after measuring is still a measurement
    ok = result.reason in ("completed", "timeout", "budget") and bool(result.samples_per_second)
    return Trial(**{**base, "probe_cost_usd": float(result.spend_usd)}, status="ok" if ok else "failed",
                 samples_per_second=float(result.samples_per_second) if ok else None,
                 reason="" if ok else f"{result.reason}: {result.detail}".rstrip(": "))


class ProbeInterrupted(Exception):
    """The search stopped during a probe; ``trial`` is its failed record. The cause is ``__cause__``."""

    def __init__(self, trial: Trial) -> None:
        super().__init__(trial.reason)
        self.trial = trial
