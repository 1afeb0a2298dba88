"""Expected wall hours, P90 and P(on time) of a training run on spot or on-demand VMs (numpy only).

The mathematics is described in the package docstring (``cloudfit.spot``); the names here follow it:
``S`` start-up hours, ``C`` checkpoint-write hours, ``R`` restart hours (replacement VM + restore),
``Lam`` cluster revocation rate (nodes × per-node hazard), ``tau`` compute hours between checkpoints,
``W`` compute hours (lognormal: median ``compute_hours``, log-sd ``log_sigma``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from cloudfit.errors import UsageError
from cloudfit.spot.hazard import load_params
from cloudfit.units import Z90


# 7-point Gauss–Hermite rule for E[f(Z)], Z ~ N(0, 1) (numpy.polynomial.hermite_e.hermegauss(7),
# weights normalised to 1); hard-coded so importing this module does not import numpy.polynomial.
_GH_X = np.array([-3.7504397177257425, -2.366759410734541, -1.1544053947399682, 0.0,
                  1.1544053947399682, 2.366759410734541, 3.7504397177257425])
_GH_W = np.array([0.000548268855972217, 0.03075712396758652, 0.2401231786050127, 0.45714285714285724,
                  0.2401231786050127, 0.03075712396758652, 0.000548268855972217])

_OV = load_params()["overheads"]
# A run that ends exactly at the deadline is on time: compare at 1e-9 relative past it (a point
# mass — no throughput uncertainty, no revocation — sits exactly on its own hours).
_INCLUSIVE = 1e-9


@dataclass(frozen=True)
class Overheads:
    """Seconds a run spends besides training. Defaults are the fitted values in spot_hazards.json.

    ``restart_s``: from a revocation until the replacement VM runs again — the mean outage after the
    GCP Spot revocations in the Can't Be Late c3 trace (2.0, 2.5 and 16.5 min; the VM start alone
    is ``start_spot_s``, CM-DARE's 87 s). Restoring the checkpoint comes on top (``restore_s``).
    Checkpoint write/restore: CM-DARE's 100 TensorFlow checkpoints to Cloud Storage (6–204 MB) fit
    ``3.65 s + 19.9 s/GB``; larger checkpoints extrapolate that line (≈50 MB/s from one writer).
    Restore is assumed to cost what a write costs (same bytes, same store; no separate data).
    """

    restart_s: float = _OV["replacement_s"]
    start_on_demand_s: float = _OV["vm_start_on_demand_s"]
    start_spot_s: float = _OV["vm_start_spot_s"]
    checkpoint_base_s: float = _OV["checkpoint_intercept_s"]
    checkpoint_s_per_gb: float = _OV["checkpoint_s_per_mb"] * 1000.0
    restore_base_s: float = _OV["checkpoint_intercept_s"]
    restore_s_per_gb: float = _OV["checkpoint_s_per_mb"] * 1000.0

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise UsageError(f"Overheads.{f.name} must be a finite number >= 0, got {v!r}")

    def checkpoint_s(self, checkpoint_bytes: float) -> float:
        """Seconds to write one checkpoint of ``checkpoint_bytes`` (0 bytes = no checkpointing)."""
        return 0.0 if checkpoint_bytes <= 0 else self.checkpoint_base_s + self.checkpoint_s_per_gb * checkpoint_bytes / 1e9

    def restore_s(self, checkpoint_bytes: float) -> float:
        """Seconds to load one checkpoint of ``checkpoint_bytes`` on a restarted cluster."""
        return 0.0 if checkpoint_bytes <= 0 else self.restore_base_s + self.restore_s_per_gb * checkpoint_bytes / 1e9


DEFAULT_OVERHEADS = Overheads()


@dataclass(frozen=True)
class AssessmentRow:
    """One candidate's assessment (see ``Assessment`` for the meaning of each field)."""

    hours: float
    hours_p90: float
    cost_usd: float
    cost_p90_usd: float
    p_on_time: float
    expected_preemptions: float
    checkpoint_interval_h: float
    overhead_hours: float


@dataclass(frozen=True)
class Assessment:
    """Per-candidate arrays (same order as the inputs).

    hours: expected wall hours = start-up + compute + checkpoint writes + restarts + lost work.
    hours_p90: 90% quantile of wall hours (throughput uncertainty and revocations together).
    cost_usd / cost_p90_usd: price_per_hour × hours / × hours_p90 (the whole cluster is billed for
    the whole wall time, restarts included).
    p_on_time: P(wall hours ≤ deadline); 1.0 without a deadline.
    expected_preemptions: expected cluster interruptions (revocations of any node, including
    revocations during a restart); 0 for on-demand.
    checkpoint_interval_h: compute hours between checkpoints; equal to compute_hours when only the
    final save is worth writing (on-demand, or a hazard so low the optimum exceeds the job).
    overhead_hours: hours − expected compute hours.
    """

    hours: np.ndarray
    hours_p90: np.ndarray
    cost_usd: np.ndarray
    cost_p90_usd: np.ndarray
    p_on_time: np.ndarray
    expected_preemptions: np.ndarray
    checkpoint_interval_h: np.ndarray
    overhead_hours: np.ndarray

    def __len__(self) -> int:
        return int(self.hours.shape[0])

    def row(self, i: int) -> AssessmentRow:
        return AssessmentRow(**{f.name: float(getattr(self, f.name)[i]) for f in fields(self)})

    def take(self, idx: np.ndarray):
        """The same kind of assessment for the candidates ``idx`` only (every column indexed)."""
        return type(self)(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})


# --------------------------------------------------------------------------------------------
# Small numerical helpers (stable near 0; vectorised)


def _phi_cdf(z: np.ndarray) -> np.ndarray:
    """Standard normal CDF via Abramowitz & Stegun 7.1.26 erf (|error| < 1.5e-7); numpy only."""
    x = np.abs(z) * (1.0 / math.sqrt(2.0))
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    half_erfc = 0.5 * poly * np.exp(-x * x)
    return np.where(z >= 0, 1.0 - half_erfc, half_erfc)


def _phi_pdf(z: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * z * z) * (1.0 / math.sqrt(2.0 * math.pi))


def _small(x: np.ndarray, cut: float, series, direct) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        big = direct(np.where(x < cut, 1.0, x))
    return np.where(x < cut, series(x), big)


def _trunc_mean(x: np.ndarray) -> np.ndarray:
    """E[t]/L for t ~ Exp(Λ) conditioned on t < L, with x = ΛL: 1/x − 1/(eˣ − 1)."""
    return _small(x, 1e-2, lambda s: 0.5 - s / 12 + s**3 / 720, lambda s: 1 / s - 1 / np.expm1(s))


def _trunc_var(x: np.ndarray) -> np.ndarray:
    """Var[t]/L² for the same truncated exponential: 1/x² − 1/(4 sinh²(x/2))."""
    return _small(x, 1e-2, lambda s: 1 / 12 - s**2 / 240 + s**4 / 6048,
                  lambda s: 1 / s**2 - 0.25 / np.sinh(0.5 * s) ** 2)


def _expm1_over(x: np.ndarray) -> np.ndarray:
    """(eˣ − 1)/x, 1 at 0."""
    return _small(x, 1e-8, lambda s: 1 + s / 2, lambda s: np.expm1(s) / s)


def optimal_interval_hours(cluster_hazard_per_hour: np.ndarray, checkpoint_hours: float) -> np.ndarray:
    """Compute hours between checkpoints that minimise expected wall time per compute hour.

    Exact minimiser of Daly's expected-time model with revocations also during restarts,
    E[segment] = e^{ΛR}(e^{Λ(τ+C)} − 1)/Λ per τ of compute: Λτ = 1 − e^{−v} with
    1 + ΛC − v − e^{−v} = 0. Its first terms are Young's √(2C/Λ) and Daly's higher-order
    correction. Independent of the restart time R. ``inf`` where the hazard is 0; 0 where C is 0.
    """
    lam = np.asarray(cluster_hazard_per_hour, dtype=float)
    c = lam * checkpoint_hours
    s = np.sqrt(2.0 * c)
    u_daly = s - s * s / 3 + s**3 / 36  # Daly's series for Λτ; accurate while s is small
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(s < 0.5, -1.2 * np.log1p(-np.minimum(u_daly, 0.5)), 1.0 + c)
        # Newton on the concave decreasing h(v) = c − (v + e^{−v} − 1) from the right of its root
        # converges monotonically; the right start is guaranteed by the 1.2 factor / 1 + c.
        v = np.where(c - (v + np.expm1(-v)) < 0, v, 1.0 + c)
        for _ in range(8):
            h = c - (v + np.expm1(-v))
            v = v - h / np.expm1(-v)
        tau = -np.expm1(-v) / lam
    tau = np.where(lam > 0, tau, np.inf)
    return np.where((checkpoint_hours <= 0) & (lam > 0), 0.0, tau)


class _Segment:
    """Moments of one segment (a plain class: a dataclass costs ~0.5 ms at import, on every CLI run)."""

    __slots__ = ("overhead_mean", "overhead_var", "revocations")

    def __init__(self, overhead_mean: np.ndarray, overhead_var: np.ndarray, revocations: np.ndarray) -> None:
        self.overhead_mean = overhead_mean  # E[T_L] − L
        self.overhead_var = overhead_var  # Var[T_L]
        self.revocations = revocations  # expected revocations per segment (work + restarts)


def _segment(lam: np.ndarray, length: np.ndarray, restart: float) -> _Segment:
    """Moments of the time to get ``length`` hours of uninterrupted work done at revocation rate ``lam``.

    Each revocation loses the work since the segment began (time to failure, truncated
    exponential) and then costs a restart of ``restart`` hours which itself starts over if another
    revocation hits it. K ~ Geometric(e^{−ΛL}) failures: E[K] = e^{ΛL} − 1, Var[K] = E[K] e^{ΛL}.
    """
    x = lam * length
    y = lam * restart
    with np.errstate(over="ignore", invalid="ignore"):
        ek = np.expm1(x)
        vk = ek * np.exp(x)
        et, vt = length * _trunc_mean(x), length**2 * _trunc_var(x)
        ek_r = np.expm1(y)
        et_r, vt_r = restart * _trunc_mean(y), restart**2 * _trunc_var(y)
        ey = restart * _expm1_over(y)  # = R + E[K_r]·E[t_r]
        vy = ek_r * vt_r + ek_r * np.exp(y) * et_r**2
        ez, vz = et + ey, vt + vy
        mean = ek * ez
        var = ek * vz + vk * ez**2
    return _Segment(mean, var, ek * (1.0 + ek_r))


# --------------------------------------------------------------------------------------------
# The assessment


def _lognormal_fit(mean: np.ndarray, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mu, s) of the lognormal with this mean and variance (s floored so a point mass stays a step)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        s2 = np.log1p(np.maximum(var, 0.0) / mean**2)
        mu = np.log(mean) - 0.5 * s2
    return mu, np.maximum(np.sqrt(s2), 1e-12)


def _mixture_cdf(y, pa, mua, sa, pb, mub, sb, shift_b):
    """CDF and density in y = ln(x) of the mixture pa·LN(mua, sa) + pb·(shift_b + LN(mub, sb))."""
    x = np.exp(y)
    xb = x - shift_b
    with np.errstate(divide="ignore", invalid="ignore"):
        ub = np.log(np.maximum(xb, 0.0))
        za, zb = (y - mua) / sa, (ub - mub) / sb
        dens_b = np.where(xb > 0, _phi_pdf(zb) / sb * x / xb, 0.0)
    F = pa * _phi_cdf(za) + pb * np.where(xb > 0, _phi_cdf(zb), 0.0)
    return F, pa * _phi_pdf(za) / sa + pb * dens_b


def _mixture_root(p: float, params: tuple, lo: np.ndarray, hi: np.ndarray, tol: float = 1e-7) -> np.ndarray:
    """y with mixture CDF(y) = p, given a bracket: Newton safeguarded by bisection.

    Rows leave the loop once settled, so the few whose mixture has a near point mass (where Newton
    degrades to bisection) do not keep the others iterating.
    """
    y = 0.5 * (lo + hi)
    rows = np.arange(y.size)
    par = params
    for sweep in range(60):
        ys, los, his = y[rows], lo[rows], hi[rows]
        F, f = _mixture_cdf(ys, *par)
        g = F - p
        los, his = np.where(g < 0, ys, los), np.where(g < 0, his, ys)
        with np.errstate(divide="ignore", invalid="ignore"):
            yn = ys - g / f
        y[rows] = np.where((yn > los) & (yn < his), yn, 0.5 * (los + his))
        lo[rows], hi[rows] = los, his
        if sweep >= 3:  # Newton needs a few steps before it is worth checking
            open_ = (np.abs(g) > tol) & (his - los > tol)
            if not open_.all():
                rows = rows[open_]
                if rows.size == 0:
                    break
                par = tuple(a[rows] if isinstance(a, np.ndarray) else a for a in params)
    return y


def _spot_distribution(W, sig, q, m1, v1, kappa, S, R, deadline):
    """P90 and P(on time) for candidates with revocations (see the package docstring, 'Distribution').

    Wall time − S = qW + X. With probability P0(W) = e^{−κW} nothing is revoked (X = 0): component A.
    Otherwise (component B) X ≥ R, E[X|W] = m1·W and Var[X|W] = v1·W. Each component's first two
    moments are integrated over the lognormal W by 7-point Gauss–Hermite and matched to a lognormal
    (B's shifted by its lower bound R, which keeps the short tail of one lost segment in shape).
    """
    Wj = W[:, None] * np.exp(sig[:, None] * _GH_X)
    kw = kappa[:, None] * Wj
    p0 = np.exp(-kw)
    pbj = -np.expm1(-kw)
    pa = p0 @ _GH_W
    pb = pbj @ _GH_W
    Y = q[:, None] * Wj
    with np.errstate(divide="ignore", invalid="ignore"):
        a1 = ((p0 * Y) @ _GH_W) / pa
        va = ((p0 * (Y - a1[:, None]) ** 2) @ _GH_W) / pa
        mx = m1[:, None] * Wj
        b1 = ((pbj * Y + mx) @ _GH_W) / pb
        d = Y - b1[:, None]
        vb = ((pbj * d * d + 2 * d * mx + mx * mx + v1[:, None] * Wj) @ _GH_W) / pb
    ok_a, ok_b = pa > 1e-300, pb > 1e-300
    mua, sa = _lognormal_fit(np.where(ok_a, a1, 1.0), np.where(ok_a, va, 0.0))
    mub, sb = _lognormal_fit(np.where(ok_b, b1 - R, 1.0), np.where(ok_b, vb, 0.0))
    pa, pb = np.where(ok_a, pa, 0.0), np.where(ok_b, pb, 0.0)

    # P90: root of F(y) = 0.9 in y = ln(hours − S), bracketed by the components' own 90% points.
    qa, qb = mua + Z90 * sa, np.log(R + np.exp(mub + Z90 * sb))
    lo = np.where(ok_a & ok_b, np.minimum(qa, qb), np.where(ok_a, qa, qb))
    hi = np.where(ok_a & ok_b, np.maximum(qa, qb), lo)
    y = _mixture_root(0.9, (pa, mua, sa, pb, mub, sb, R), lo, hi)
    p90 = S + np.exp(y)
    if deadline is None:
        return p90, np.ones_like(W)
    slack = deadline - S
    with np.errstate(divide="ignore"):
        yd = np.log(np.maximum(slack, 0.0)) + _INCLUSIVE
    p_on, _ = _mixture_cdf(yd, pa, mua, sa, pb, mub, sb, R)
    return p90, np.where(slack > 0, p_on, 0.0)


def _as_1d(name: str, x, n: int | None = None, dtype=float) -> np.ndarray:
    a = np.asarray(x, dtype=dtype)
    if a.ndim > 1:
        raise UsageError(f"assess(): {name} must be one-dimensional, got shape {a.shape}")
    return a


def assess(
    *,
    compute_hours: np.ndarray,
    log_sigma: np.ndarray,
    nodes: np.ndarray,
    spot: np.ndarray,
    hazard_per_node_hour: np.ndarray,
    price_per_hour: np.ndarray,
    checkpoint_bytes: float,
    deadline_hours: float | None,
    overheads: Overheads | None = None,
    groups: tuple[np.ndarray, np.ndarray] | None = None,
    startup_s: np.ndarray | None = None,
) -> Assessment:
    """Price and risk-weigh every candidate at once (arrays broadcast; see ``Assessment``).

    compute_hours: median hours of pure training at the predicted throughput (no revocations).
    log_sigma: std-dev of ln(throughput) from the perf model band, (ln high − ln low) / (2 × 1.2816).
    nodes, spot (bool), hazard_per_node_hour: the cluster; on-demand rows ignore the hazard.
    price_per_hour: the cluster's $/h. checkpoint_bytes: model + optimizer state per checkpoint.
    deadline_hours: for p_on_time (None → 1.0).
    groups: (a row of each group, group of each row) for rows known to differ only in price, as
    ``cloudfit.search.space`` builds them once per space; by default the groups are found here.
    startup_s: per-row start-up seconds (e.g. ``cloudfit.spot.capacity.startup_seconds``, which grows
    with the node count); default: the overheads' single-VM start by spot flag.
    """
    ov = overheads or DEFAULT_OVERHEADS
    arrays = [_as_1d("compute_hours", compute_hours), _as_1d("log_sigma", log_sigma), _as_1d("nodes", nodes),
              _as_1d("spot", spot, dtype=bool), _as_1d("hazard_per_node_hour", hazard_per_node_hour),
              _as_1d("price_per_hour", price_per_hour)]
    try:
        W, sig, n, sp, lam, price = np.broadcast_arrays(*arrays)
    except ValueError as e:
        raise UsageError(f"assess(): input arrays do not line up ({e})") from None
    W, sig, n, sp, lam, price = (np.atleast_1d(a) for a in (W, sig, n, sp, lam, price))
    _check(W, sig, n, sp, lam, price, checkpoint_bytes, deadline_hours)
    with np.errstate(invalid="ignore"):
        Lam = np.where(sp, n * lam, 0.0)
    # Rows that differ only in price (the same shape × nodes in other zones) share every answer.
    st = None if startup_s is None else np.broadcast_to(np.atleast_1d(np.asarray(startup_s, dtype=float)), W.shape)
    if groups is None and W.size > 512:
        groups = _groups(W, sig, np.where(sp, Lam, -1.0), *(() if st is None else (st,)))
    if groups is not None:
        first, inverse = groups
        W, sig, Lam, sp = W[first], sig[first], Lam[first], sp[first]
        st = None if st is None else st[first]
    S = (np.where(sp, ov.start_spot_s, ov.start_on_demand_s) if st is None else st) / 3600.0
    return _priced(W, sig, Lam, S, ov, checkpoint_bytes, deadline_hours, None if groups is None else inverse, price)


def assess_groups(*, compute_hours, log_sigma, nodes, spot, hazard_per_node_hour, startup_s, price_per_hour,
                  inverse: np.ndarray, checkpoint_bytes: float, deadline_hours: float | None,
                  overheads: Overheads | None = None) -> Assessment:
    """``assess(..., groups=(first, inverse), startup_s=...)`` given the groups' inputs alone: every column
    but ``price_per_hour`` holds one row per group (what ``assess`` reads at ``first``), ``inverse`` the
    group of each candidate, ``price_per_hour`` each candidate's price. The same numbers, without building
    (and checking) every candidate's inputs first."""
    ov = overheads or DEFAULT_OVERHEADS
    W, sig, n, lam, S = (np.asarray(a, dtype=float) for a in (compute_hours, log_sigma, nodes, hazard_per_node_hour,
                                                              startup_s))
    sp, price = np.asarray(spot, dtype=bool), np.asarray(price_per_hour, dtype=float)
    _check(W, sig, n, sp, lam, price, checkpoint_bytes, deadline_hours)
    with np.errstate(invalid="ignore"):
        Lam = np.where(sp, n * lam, 0.0)
    return _priced(W, sig, Lam, S / 3600.0, ov, checkpoint_bytes, deadline_hours, inverse, price)


def _check(W, sig, n, sp, lam, price, checkpoint_bytes, deadline_hours) -> None:
    """``UsageError`` for inputs outside the model's domain (see ``assess``)."""
    if W.size and not (np.all(W > 0) and np.all(np.isfinite(W))):
        raise UsageError("assess(): compute_hours must be finite and > 0")
    if W.size and (np.any(~(sig >= 0)) or np.any(sp & ~(lam >= 0)) or np.any(~(n >= 1)) or np.any(~(price >= 0))):
        raise UsageError("assess(): log_sigma, hazard_per_node_hour and price_per_hour must be >= 0 and nodes >= 1")
    if not (checkpoint_bytes >= 0 and math.isfinite(checkpoint_bytes)):
        raise UsageError(f"assess(): checkpoint_bytes must be finite and >= 0, got {checkpoint_bytes!r}")
    if deadline_hours is not None and not deadline_hours > 0:
        raise UsageError(f"assess(): deadline_hours must be > 0, got {deadline_hours!r}")


def _priced(W, sig, Lam, S, ov: Overheads, checkpoint_bytes: float, deadline_hours, inverse, price) -> Assessment:
    """The assessment of rows (expanded to candidates by ``inverse`` when given), billed at ``price``."""
    C = ov.checkpoint_s(checkpoint_bytes) / 3600.0
    R = (ov.restart_s + ov.restore_s(checkpoint_bytes)) / 3600.0
    out = assess_rows(W, sig, Lam, S, C, R, deadline_hours, inverse)
    cost, cost_p90 = bill(price, out["hours"]), bill(price, out["hours_p90"])
    return Assessment(cost_usd=cost, cost_p90_usd=cost_p90, **out)


def assess_rows(W, sig, Lam, S, C, R, deadline_hours: float | None, inverse: np.ndarray | None = None) -> dict:
    """``_assess_rows`` where a run that never ends (absurd clusters overflow to inf hours: that is the
    answer) takes inf hours and no chance of finishing on time; ``inverse`` expands group rows to candidates."""
    with np.errstate(all="ignore"):
        out = _assess_rows(W, sig, Lam, S, C, R, deadline_hours)
        lost = ~np.isfinite(out["hours_p90"]) | ~np.isfinite(out["hours"])
        if lost.any():
            for k in ("hours", "hours_p90", "expected_preemptions", "overhead_hours"):
                out[k] = np.where(lost, np.inf, out[k])
            out["p_on_time"] = np.where(lost & (deadline_hours is not None), 0.0, out["p_on_time"])
        if inverse is not None:
            out = {k: v[inverse] for k, v in out.items()}
    return out


def bill(price_per_hour: np.ndarray, hours: np.ndarray) -> np.ndarray:
    """USD for running at ``price_per_hour`` for ``hours`` (``assess``'s cost columns; a free VM
    costs 0 even for a run that never ends)."""
    price, hours = np.asarray(price_per_hour), np.asarray(hours)
    out = np.zeros(np.broadcast_shapes(price.shape, hours.shape), dtype=np.result_type(price, hours, 0.0))
    with np.errstate(all="ignore"):  # multiplied only where the price is > 0 (one pass, not three)
        np.multiply(price, hours, out=out, where=price > 0)
    return out


def _groups(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(first row of each distinct key, group of each row), or None if a hash collision is found.

    A 64-bit hash of the columns' bits is sorted once (≈1 ms per 10⁵ rows); every row is then
    checked against its group's first row, so a collision can only cost speed, never correctness.
    """
    k = np.zeros(cols[0].shape, dtype=np.uint64)
    for c, mult in zip(cols, (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x27D4EB2F165667C5)):
        k ^= np.ascontiguousarray(c, dtype=np.float64).view(np.uint64) * np.uint64(mult)  # wraps mod 2⁶⁴
    order = np.argsort(k)
    ks = k[order]
    new = np.empty(k.size, dtype=bool)
    new[0] = True
    np.not_equal(ks[1:], ks[:-1], out=new[1:])
    gid = np.add.accumulate(new.view(np.uint8), dtype=np.int64) - 1  # group of each sorted row
    starts = np.flatnonzero(new)
    rep = starts[gid]  # sorted position of each sorted row's group representative
    for c in cols:
        cs = c[order]
        if not np.array_equal(cs[rep], cs):
            return None
    inverse = np.empty(k.size, dtype=np.intp)
    inverse[order] = gid
    return order[starts], inverse


def _assess_rows(W, sig, Lam, S, C, R, deadline_hours) -> dict[str, np.ndarray]:
    """Everything but the costs, for rows with cluster hazard ``Lam`` (0 = on-demand)."""
    # Periodic checkpoints every tau compute hours; the last one is the final save. tau is the
    # optimum, but never longer than the job (then only the final save is written).
    tau = np.minimum(optimal_interval_hours(Lam, C), W)
    # Free checkpoints (C == 0): checkpoint (nearly) continuously, so a revocation loses no work.
    tau = np.where(tau > 0, tau, 1e-9 * W)
    seg = _segment(Lam, tau + C, R)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = 1.0 + C / tau
        m1, v1, k1 = seg.overhead_mean / tau, seg.overhead_var / tau, seg.revocations / tau
    EW = W * np.exp(0.5 * sig * sig)
    hours = S + (q + m1) * EW
    preemptions = k1 * EW

    # Distribution: closed form without revocations, a two-component mixture with them.
    p90 = S + q * W * np.exp(Z90 * sig)
    if deadline_hours is None:
        p_on = np.ones_like(W)
    else:
        slack = (deadline_hours - S) / q
        with np.errstate(divide="ignore"):
            z = (np.log(np.maximum(slack, 0.0)) + _INCLUSIVE - np.log(W)) / np.maximum(sig, 1e-12)
        p_on = np.where(slack > 0, _phi_cdf(z), 0.0)
    risky = Lam > 0
    if np.any(risky):
        i = np.flatnonzero(risky)
        p90_r, p_on_r = _spot_distribution(W[i], sig[i], q[i], m1[i], v1[i], Lam[i] * q[i], S[i],
                                           R[i] if np.ndim(R) else R, deadline_hours)  # R per row (LLM restarts)
        # revocations only add time: never better than the same run without them
        p90[i], p_on[i] = np.maximum(p90_r, p90[i]), np.minimum(p_on_r, p_on[i])
    return {"hours": hours, "hours_p90": p90, "p_on_time": p_on, "expected_preemptions": preemptions,
            "checkpoint_interval_h": tau, "overhead_hours": hours - EW}


def assess_one(
    compute_hours: float,
    *,
    log_sigma: float = 0.0,
    nodes: int = 1,
    spot: bool = True,
    hazard_per_node_hour: float | None = None,
    accelerator: str | None = None,
    region: str | None = None,
    price_per_hour: float = 0.0,
    checkpoint_bytes: float = 0.0,
    deadline_hours: float | None = None,
    overheads: Overheads | None = None,
) -> AssessmentRow:
    """``assess`` for one candidate. Give ``hazard_per_node_hour`` or (``accelerator``, ``region``)."""
    if hazard_per_node_hour is None:
        if accelerator is None or region is None:
            hazard_per_node_hour = 0.0 if not spot else None
            if hazard_per_node_hour is None:
                raise UsageError("assess_one(): give hazard_per_node_hour, or accelerator and region")
        else:
            from cloudfit.spot.hazard import hazard_info

            hazard_per_node_hour = hazard_info(accelerator, region).rate_per_node_hour
    a = assess(compute_hours=np.array([compute_hours], dtype=float), log_sigma=np.array([log_sigma], dtype=float),
               nodes=np.array([nodes]), spot=np.array([spot]), hazard_per_node_hour=np.array([hazard_per_node_hour]),
               price_per_hour=np.array([price_per_hour], dtype=float), checkpoint_bytes=checkpoint_bytes,
               deadline_hours=deadline_hours, overheads=overheads)
    return a.row(0)
