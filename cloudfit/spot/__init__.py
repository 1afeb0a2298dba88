"""The preemption model: what spot VMs cost in time, money and deadline risk.

Used by the recommender for every candidate cluster at once (numpy only, no scipy)::

    from cloudfit import spot
    lam = spot.hazards(["V100", "H100"], ["europe-west4", "us-central1-a"])   # per node-hour
    a = spot.assess(compute_hours=..., log_sigma=..., nodes=..., spot=..., hazard_per_node_hour=...,
                    price_per_hour=..., checkpoint_bytes=..., deadline_hours=12.0)
    a.hours, a.hours_p90, a.cost_usd, a.cost_p90_usd, a.p_on_time, a.expected_preemptions

Hazards (``cloudfit/data/spot_hazards.json``, rebuilt by ``python scripts/fit_spot.py``)
-----------------------------------------------------------------------------------------
* GCP GPUs: CM-DARE's lifetimes of 152 preemptible GPU VMs (Feb 2019: 64 K80, 40 P100, 48 V100 in
  7 zones). Preemptible VMs then stopped at 24 h; Spot VMs no longer do, so a VM that reached the cap
  is right-censored there and only earlier ends count as revocations (31% of K80, 20% of P100, 10% of
  V100 VMs). Per accelerator: exponential MLE with censoring, λ = revocations / node-hours
  (K80 0.0162, P100 0.0096, V100 0.0046 per node-hour). A censored Weibull fit gives shapes 0.58–0.86:
  young VMs are revoked more often, so the constant rate is the average over a VM's first day — what a
  run between restarts sees (each restart brings a young VM) — and overstates the hazard of VMs that
  survive longer. Per region: Gamma–Poisson empirical Bayes, shrinking each region's count toward the
  accelerator's rate with a prior weight (≈47 node-hours) fitted by marginal likelihood.
* Fallback: a region without data gets its accelerator's rate; an accelerator without data (T4, L4,
  P4, A100, H100, H200, B200 — i.e. every current GPU) gets the **pooled GPU rate** (33 revocations
  in 3153 node-hours: 0.0105/h, 90% interval 0.0078–0.0138), and the JSON records the measured
  accelerators' spread (0.0046–0.0162) beside it. We found no data to rank newer GPUs by demand: the
  2019 ordering (oldest GPU revoked most) is not evidence either way, so no generation/tier factor
  is invented. The Can't Be Late traces (2023) put AWS V100 spot at 0.06–0.51/h per region and GCP
  Spot c3 CPU VMs at 0.017/h; the AWS numbers are shipped for reference only (``cloud="aws"``), the
  c3 numbers as ``hazards(["CPU"], …)``.
* Multi-node: a synchronous cluster of n nodes stops when ANY node is revoked, so its interruption
  rate is Λ = n·λ (independent nodes; the superposition of n exponential clocks). Revocations come
  in batches in the data (1.4 nodes per event in the 2019 GCP lifetimes, 1.6 in AWS 4-node traces),
  so n·λ overstates the number of interruptions: a conservative choice.

Overheads (``Overheads``; seconds, fitted defaults)
---------------------------------------------------
* Start-up ``S``: CM-DARE's 100 GCE GPU VM launches, provisioning + staging + booting: 71 s on-demand,
  87 s preemptible (mean), paid once by every run. The recommender passes ``startup_s`` per candidate
  instead (``cloudfit.spot.capacity.startup_seconds``): the slowest of n VM starts, node 0 first, the
  inserts and the install, so start-up grows with the node count; it also adds the capacity
  (stockout) prior's wait for fleets beyond one 8-GPU VM (``capacity.wait_terms``).
* Checkpoint write ``C`` and restore: CM-DARE's checkpoints to Cloud Storage, 3.65 s + 19.9 s/GB
  (6–204 MB measured; linear extrapolation above). Restore is taken equal to a write.
* Restart ``R`` = replacement + restore: the mean outage after a GCP Spot revocation in the Can't Be
  Late c3 trace, 420 s (outages of 120, 150 and 990 s: VM start ≈ 87 s plus relaunch and, once, a
  16-minute wait for capacity), plus the restore.
* On-demand runs write only the final save (which every run writes): GCP gives GPU VMs advance
  notice before host maintenance, so a checkpoint can be taken on notice rather than periodically;
  their revocation hazard is 0 and they pay no restart or lost work.

Expected hours (exact for the model)
------------------------------------
Training runs in segments of τ compute hours, each followed by a checkpoint write (length
L = τ + C; the last checkpoint is the final save). A revocation at rate Λ loses the segment so far
and costs a restart R, which itself starts over if another revocation arrives (Daly's model with
failures during restart). Per segment, the number of failed attempts is Geometric(e^{−ΛL}), the time
lost per attempt a truncated exponential, and E[time] = e^{ΛR}(e^{ΛL} − 1)/Λ. τ minimises the expected
wall time per compute hour exactly (Λτ = 1 − e^{−v}, 1 + ΛC = v + e^{−v}; Young's √(2C/Λ) and Daly's
correction are its leading terms), but is never longer than the job (then only the final save is
written). The job is treated as W/τ segments (renewal–reward, continuous in W/τ: within one
checkpoint write of the exact count), so

    E[hours] = S + E[W] · e^{ΛR}(e^{Λ(τ+C)} − 1)/(Λτ),   E[W] = compute_hours · e^{σ²/2},

which never decreases with Λ (a minimum over τ of functions increasing in Λ), and equals
S + W + C at Λ = 0 with σ = 0.

Distribution (P90 and P(on time); approximations)
-------------------------------------------------
W (pure compute hours) is lognormal: median ``compute_hours``, log-sd σ = ``log_sigma`` (the perf
model's 10–90% band). Given W, wall time − S = (1 + C/τ)·W + X, where X (time lost to revocations)
has mean m·W and variance v·W from the per-segment moments (compound geometric sums). With
probability P0(W) = e^{−Λ(1+C/τ)W} nothing is revoked and X = 0 — an atom that matters for short
jobs and low hazards. The wall time is modelled as a two-component mixture: "no revocation" and
"at least one", each component's first two moments integrated over W by 7-point Gauss–Hermite and
matched to a lognormal. P(on time) is the mixture CDF at the deadline; P90 its root (Newton with
bisection). Without revocations the answer is the exact shifted lognormal. ``simulate()`` (an event
simulator with one clock per node) checks these numbers; bench/spot_validation.py reports the fit.
"""

from __future__ import annotations

from cloudfit.spot.hazard import HazardInfo, hazard_info, hazards, load_params
from cloudfit.spot.model import (
    DEFAULT_OVERHEADS,
    Assessment,
    AssessmentRow,
    Overheads,
    assess,
    assess_groups,
    assess_one,
    optimal_interval_hours,
)


def __getattr__(name: str):
    """``simulate`` and ``SimulationResult`` (the event simulator that checks the model), imported on first use:
    ``recommend`` never simulates."""
    if name in ("simulate", "SimulationResult"):
        import importlib

        module = importlib.import_module("cloudfit.spot.simulate")  # (binds the submodule here first)
        globals().update(simulate=module.simulate, SimulationResult=module.SimulationResult)
        return globals()[name]
    raise AttributeError(f"module 'cloudfit.spot' has no attribute {name!r}")


__all__ = [
    "DEFAULT_OVERHEADS", "Assessment", "AssessmentRow", "HazardInfo", "Overheads", "SimulationResult",
    "assess", "assess_groups", "assess_one", "hazard_info", "hazards", "load_params", "optimal_interval_hours", "simulate",
]
