"""The surrogate: every hardware point's predicted throughput, given the probes so far.

By default (``"gp"``) the performance model's prediction (anchored on the input profile's
measurements) is the prior mean of a Gaussian process on log throughput whose prior spread is the
model's calibrated band, conditioned on the probes: one probe moves and narrows the predictions of
related points (same accelerator, similar device and node counts), and probes that miss by more
than the band widen every band (amplitude by maximum likelihood). ``"anchor"`` re-anchors the model
on the probes instead (single-node ones only, as the model uses them). Probed points use their
measured throughput with no uncertainty.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from cloudfit.errors import InfeasibleError
from cloudfit.active.record import Point
from cloudfit.units import Z90

SURROGATES = ("gp", "anchor")
#: Gaussian-process correlation of two points' model errors (log throughput), chosen a priori: a share
#: common to every point (the model misjudges this workload), one per accelerator, one for scaling
#: (similar device and node counts, any accelerator) and one for scaling on the same accelerator.
GP_WEIGHTS = {"common": 0.35, "accelerator": 0.25, "scaling": 0.25, "accelerator_scaling": 0.15}
GP_LENGTH_LOG2 = 1.0  # a doubling of devices or nodes → correlation × e^-½ on the scaling terms
GP_NOISE_LOG = 0.05  # a probe's own noise (log throughput): two probes of one point differ by ~5%

_COLUMNS = ("offering", "shape", "nodes", "spot", "price_per_hour", "samples_per_second", "low", "high",
            "hazard_per_node_hour")


class Surrogate:
    """The space a round of active search plans on: ``space(measured, profile)``.

    The prior space (the model anchored on the input profile, restricted to ``allowed`` points) is
    built once; the GP correction is re-done per round (cheap). ``"anchor"`` rebuilds the space from
    the profile with every probe in it.
    """

    def __init__(self, workload, base_profile, catalog, *, kind: str = "gp", allowed: set[Point] | None = None,
                 use_measurements: bool = True) -> None:
        self.workload, self.base_profile, self.catalog = workload, base_profile, catalog
        self.kind, self.allowed, self.use_measurements = kind, allowed, use_measurements
        self._prior = None

    def space(self, measured: dict[Point, float], profile):
        from cloudfit.search.space import build_space

        if self.kind == "anchor" and self.use_measurements:  # the model re-anchored on every probe
            return with_measured(restrict(build_space(self.workload, profile, self.catalog), self.allowed), measured)
        if self._prior is None:  # the model as it was (anchored on the input profile only) is the prior
            self._prior = restrict(build_space(self.workload, self.base_profile, self.catalog), self.allowed)
        sp = gp_corrected(self._prior, measured) if self.use_measurements else self._prior
        return with_measured(sp, measured)


def with_measured(space, measured: dict[Point, float]):
    """The space with measured points' throughput in place of predictions (zero uncertainty)."""
    if not measured:
        return space
    keys, inv = space.point_ids("hardware")
    sps, low, high = space.samples_per_second.copy(), space.low.copy(), space.high.copy()
    for j, k in enumerate(keys):
        if k in measured:
            sel = inv == j
            sps[sel] = low[sel] = high[sel] = measured[k]
    return replace(space, samples_per_second=sps, low=low, high=high, _cache={})


def restrict(space, allowed: set[Point] | None):
    """The space cut to the hardware points ``allowed`` (a replay world); None keeps all."""
    if allowed is None:
        return space
    keys, inv = space.point_ids("hardware")
    keep = np.array([k in allowed for k in keys], dtype=bool)[inv] if keys else np.zeros(0, bool)
    if not keep.any():
        raise InfeasibleError("no catalog configuration matches a row of the replay table")
    return replace(space, **{k: getattr(space, k)[keep] for k in _COLUMNS}, _cache={})


def gp_correlation(a: list[Point], b: list[Point]) -> np.ndarray:
    """Prior correlation of the model's log-throughput errors between points ``a`` and ``b``."""
    w = GP_WEIGHTS
    acc_a = np.array([p[0] for p in a], dtype=object)
    acc_b = np.array([p[0] for p in b], dtype=object)
    xa = np.log2(np.array([[p[1], p[2]] for p in a], dtype=float).reshape(-1, 2))
    xb = np.log2(np.array([[p[1], p[2]] for p in b], dtype=float).reshape(-1, 2))
    same = (acc_a[:, None] == acc_b[None, :]).astype(float)
    d2 = ((xa[:, None, :] - xb[None, :, :]) ** 2).sum(-1)
    rbf = np.exp(-d2 / (2 * GP_LENGTH_LOG2 ** 2))
    return w["common"] + w["accelerator"] * same + w["scaling"] * rbf + w["accelerator_scaling"] * same * rbf


def gp_corrected(space, measured: dict[Point, float]):
    """The space's predictions corrected by a GP on the probes' log-residuals (prior mean: the model).

    Every point's log throughput is the model's plus an error with the model's own spread (its band)
    and the correlations of ``gp_correlation``; conditioning on the probes moves the mean of every
    point and narrows its band in proportion to what the probes say about it.
    """
    if not measured:
        return space
    keys, inv = space.point_ids("hardware")
    n = len(keys)
    log_pred = np.log(space.samples_per_second)
    sigma_candidate = space.log_sigma
    # per point: mean log prediction and the widest band among its candidates (zones, shapes, spot)
    count = np.bincount(inv, minlength=n)
    mean = np.bincount(inv, weights=log_pred, minlength=n) / np.maximum(count, 1)
    sigma = np.zeros(n)
    np.maximum.at(sigma, inv, sigma_candidate)
    sigma = np.maximum(sigma, 1e-3)
    observed = [j for j, k in enumerate(keys) if k in measured]
    if not observed:
        return space
    residual = np.array([math.log(measured[keys[j]]) - mean[j] for j in observed])
    probed = [keys[j] for j in observed]
    cov = gp_correlation(probed, probed) * np.outer(sigma[observed], sigma[observed])
    noise = GP_NOISE_LOG ** 2 * np.eye(len(observed))
    # Amplitude by maximum likelihood, never below the model's own band: probes that miss by more than
    # the band says widen every point's band (the model is worse on this workload than it claims).
    amplitude2 = max(1.0, float(residual @ np.linalg.solve(cov + noise, residual)) / len(observed))
    sigma = sigma * math.sqrt(amplitude2)
    k_obs = cov * amplitude2 + noise
    k_cross = gp_correlation(keys, probed) * np.outer(sigma, sigma[observed])  # n × m
    chol = np.linalg.cholesky(k_obs)
    alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, residual))
    shift = k_cross @ alpha
    v = np.linalg.solve(chol, k_cross.T)
    var = np.maximum(sigma ** 2 - (v ** 2).sum(0), 1e-8)
    ratio = np.sqrt(var) / sigma * math.sqrt(amplitude2)  # posterior sd ÷ the model's own sd
    sps = space.samples_per_second * np.exp(shift[inv])
    sig = np.maximum(sigma_candidate, 1e-3) * ratio[inv]
    return replace(space, samples_per_second=sps, low=sps * np.exp(-Z90 * sig), high=sps * np.exp(Z90 * sig), _cache={})
