"""Active search: a few short, paid probe runs chosen by Bayesian optimisation, starting from the model.

The study (optuna, ask/tell, one trial per probe) searches hardware points — (accelerator, accelerators
per node, nodes); zones and spot only change the price and the preemption risk, so they are priced
exactly, never probed. Each round:

1. the surrogate (``surrogate``) predicts every point: by default (``surrogate="gp"``) the performance model's
   prediction (anchored on the input profile's measurements) is the prior mean of a Gaussian process
   on log throughput whose prior spread is the model's calibrated band, conditioned on the probes so
   far — this is the refit: one probe moves and narrows the predictions of related points (same
   accelerator, similar device and node counts), and probes that miss by more than the band widen
   every band (amplitude by maximum likelihood). ``"anchor"`` instead re-anchors the model on the
   probes (the profile's measurements; single-node ones only, as the model uses them). Probed points
   use their measured throughput with no uncertainty;
2. the plan is ``recommend`` on that space (``search``), under the workload's budget minus the probe spend;
3. (``choose``) if the plan's hardware point has not been probed, probe it (enqueued: the search starts from the
   model's prediction, not from random points, and a plan ends on a measured point unless a stop
   intervenes); otherwise probe the unprobed point of largest expected improvement net of its probe's
   cost — a lookahead re-pricing the point's best offerings as if it measured each of 13 quantiles
   of its predicted throughput (``acquisition="tpe"`` lets optuna's seeded TPE sampler choose
   instead). With no plan at all, probe the point most likely to meet the limits (the model may be wrong);
4. (``probe``) the probe runs through the executor the caller passes in (replay, local or gcp) on the point's cheapest on-demand
   offering, with a budget of ``probe_seconds`` at its price; every successful probe is appended to
   the profile as a ``probe`` measurement. A failed probe (stockout, quota, missing from a replay
   table) is a FAIL trial with its reason, never a measurement, and its point is not probed again.

Stopping (first that applies): ``max_trials`` probes; the next probe would overrun the probe budget
(``probe-budget``) or leave the workload's budget unable to pay for any plan (``budget``); no unprobed
point's expected improvement is worth its probe (``expected-improvement``; for the time objective an
hour is valued at the plan's price per hour); nothing left to probe (``exhausted``).

With an optuna storage (``sqlite:///study.db``) an interrupted search resumes (``resume``): finished probes are
read back, not run again. A probe cut by Ctrl-C or SIGTERM (the executor tears it down) is a failed
trial charged what the executor recorded; one whose search process was killed is found still running
in the study on resume, its leftovers are deleted and it is charged its whole cap. Either may be
probed again. A study remembers the model, batch and precision it measured and refuses to resume for
another. One search process per study.

Modules: ``record`` (Trial, ActiveResult, points), ``surrogate``, ``choose``, ``probe``, ``resume`` and
``search`` (the loop). Active search sits above ``plan`` and ``executors``: it plans with ``recommend``
and probes with an executor it is given; ``cloudfit.search`` itself launches nothing.
"""

from __future__ import annotations

from cloudfit.active.record import PROBE_SECONDS, STOP_REASONS, ActiveResult, Point, Trial
from cloudfit.active.search import active_search

__all__ = ["PROBE_SECONDS", "STOP_REASONS", "ActiveResult", "Point", "Trial", "active_search"]
