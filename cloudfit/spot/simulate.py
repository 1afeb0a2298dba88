"""A seeded event simulator of one training run on a spot (or on-demand) cluster.

It exists to check ``assess()``: it shares the *policy* (checkpoint every ``tau`` compute hours,
final save at the end, restart = replacement VM + restore) and the overhead numbers, but none of
the analytic approximations. Every node carries its own exponential revocation clock; a revoked
node is replaced and its replacement gets a fresh clock, the others keep theirs. Any revocation
stops the whole (synchronous data-parallel) cluster: the work since the last completed checkpoint
is lost, and the cluster resumes ``restart`` hours after the *last* revocation (a revocation during
a restart means one more VM to replace). Runs are vectorised across the batch; each loop step
handles one event per run (a revocation or the end of a restart/the job), jumping over whole
checkpoint intervals that finish before the next revocation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cloudfit.errors import UsageError
from cloudfit.spot.model import DEFAULT_OVERHEADS, Overheads, optimal_interval_hours


@dataclass(frozen=True)
class SimulationResult:
    hours: np.ndarray  # wall hours per run
    preemptions: np.ndarray  # cluster interruptions per run
    compute_hours: np.ndarray  # the run's realised compute hours (throughput draw)
    checkpoint_interval_h: float

    def mean(self) -> float:
        return float(self.hours.mean())

    def quantile(self, q: float) -> float:
        return float(np.quantile(self.hours, q))

    def p_on_time(self, deadline_hours: float | None) -> float:
        return 1.0 if deadline_hours is None else float(np.mean(self.hours <= deadline_hours))


def simulate(
    *,
    compute_hours: float,
    hazard_per_node_hour: float,
    nodes: int = 1,
    spot: bool = True,
    log_sigma: float = 0.0,
    checkpoint_bytes: float = 0.0,
    overheads: Overheads | None = None,
    checkpoint_interval_h: float | None = None,
    runs: int = 2000,
    seed: int = 0,
    max_events: int = 2_000_000,
) -> SimulationResult:
    """Simulate ``runs`` independent runs; returns per-run wall hours and interruptions.

    ``checkpoint_interval_h`` defaults to the interval ``assess()`` plans (the optimum for the
    cluster hazard, capped at the median compute hours). The realised compute hours of each run are
    ``compute_hours × exp(log_sigma × N(0,1))`` (throughput uncertainty).
    """
    if compute_hours <= 0 or hazard_per_node_hour < 0 or nodes < 1 or runs < 1 or log_sigma < 0:
        raise UsageError("simulate(): need compute_hours > 0, hazard >= 0, nodes >= 1, runs >= 1, log_sigma >= 0")
    ov = overheads or DEFAULT_OVERHEADS
    rng = np.random.default_rng(seed)
    C = ov.checkpoint_s(checkpoint_bytes) / 3600.0
    R = (ov.restart_s + ov.restore_s(checkpoint_bytes)) / 3600.0
    S = (ov.start_spot_s if spot else ov.start_on_demand_s) / 3600.0
    lam = hazard_per_node_hour if spot else 0.0
    if checkpoint_interval_h is None:
        tau = float(np.minimum(optimal_interval_hours(np.array([nodes * lam]), C)[0], compute_hours))
        tau = tau if tau > 0 else 1e-9 * compute_hours
    else:
        tau = float(checkpoint_interval_h)
    w = tau + C

    W = compute_hours * np.exp(log_sigma * rng.standard_normal(runs))
    t = np.full(runs, S)
    done = np.zeros(runs)  # compute hours safely checkpointed
    restarting = np.zeros(runs, dtype=bool)
    restart_end = np.zeros(runs)
    finished = np.zeros(runs, dtype=bool)
    count = np.zeros(runs, dtype=np.int64)
    if lam > 0:
        clocks = S + rng.exponential(1.0 / lam, size=(runs, nodes))
    else:
        clocks = np.full((runs, nodes), np.inf)
    next_rev = clocks.min(axis=1)

    events = 0
    while not finished.all():
        events += 1
        if events > max_events:
            raise UsageError(f"simulate(): more than {max_events} events; the run barely progresses")
        active = ~finished
        work = active & ~restarting
        rest = active & restarting
        # working: does the rest of the job (segments of tau + C, the last one shorter) finish first?
        rem = W - done
        n_full = np.maximum(np.ceil(rem / tau - 1e-12) - 1, 0)
        total = n_full * w + (rem - n_full * tau) + C
        ends = work & (next_rev >= t + total)
        t = np.where(ends, t + total, t)
        finished |= ends
        hit = work & ~ends
        k = np.minimum(np.floor((next_rev - t) / w), n_full)
        done = np.where(hit, done + k * tau, done)
        # restarting: does the restart complete before the next revocation?
        back = rest & (next_rev >= restart_end)
        t = np.where(back, restart_end, t)
        restarting &= ~back
        hit |= rest & ~back
        if hit.any():
            i = np.flatnonzero(hit)
            t[i] = next_rev[i]
            restarting[i] = True
            restart_end[i] = t[i] + R
            count[i] += 1
            j = clocks[i].argmin(axis=1)
            clocks[i, j] = t[i] + rng.exponential(1.0 / lam, size=i.size)  # the replacement's clock
            next_rev[i] = clocks[i].min(axis=1)
    return SimulationResult(hours=t, preemptions=count, compute_hours=W, checkpoint_interval_h=tau)
