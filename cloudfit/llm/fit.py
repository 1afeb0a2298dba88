"""Fit the step model's constants to the public LLM runs (deterministic least squares in log space).

``fit(table) -> Constants``: per accelerator × precision efficiency, per-framework efficiency and overlap
constants, per-framework FP8 cast traffic (where the framework has FP8 rows), the GEMM-size saturations (t0,
alpha, w0, beta_w), attention efficiency and its key-block saturation (k0), recompute cost, NIC parallelism,
per-layer launch time, per-step overhead, achieved network fraction, CP overlap and pipeline send exposure; each
pulled weakly toward its physical prior (so a constant the training rows cannot see stays at its prior). Rows are
weighted so that every source counts equally, and inside a source every precision. Then the efficiency prior for
accelerators the fit has not seen: a per-precision intercept over the fitted per-accelerator efficiencies, with a
fixed slope of 0.5 in log(memory bandwidth ÷ peak) (``BW_SLOPE``); cloudfit's own trainer takes PyTorch FSDP's
constants (``step.BORROWS``). ``write(constants, band)`` stores ``cloudfit/llm/calibration.json``
(``scripts/fit_llm.py`` does both).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from cloudfit.llm.data import Table, predict_table
from cloudfit.llm.step import Constants

PRIOR = Constants()
PRIOR_WEIGHT = 0.05


def _logit(p):
    p = min(max(p, 1e-4), 1 - 1e-4)
    return math.log(p / (1 - p))


def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def _spec(t: Table):
    """(name, to-constant transform, prior value in the fitted space) for every free parameter."""
    keys = sorted(set(t.keys))
    fws = sorted(set(t.framework))
    spec = []
    for k in keys:
        prec = k.split("/")[1]
        spec.append((("eff", k), "exp", math.log(PRIOR.eff_prior.get(prec, 0.5))))
    for f in fws:
        if f == "megatron-deepspeed":  # vTrain's 2022-era stack (fp16, fused softmax); Megatron-Core and FSDP
            spec.append((("fw_eff", f), "exp", 0.0))  # share the per-accelerator efficiency (not separable:
            # every Megatron-Bridge row is fp8, so a free multiplier would leak into bf16 predictions)
        spec.append((("tp_exposed", f), "sig", _logit(PRIOR.tp_exposed[f])))
        spec.append((("dp_overlap", f), "sig", _logit(PRIOR.dp_overlap[f])))
        spec.append((("fsdp_overlap", f), "sig", _logit(PRIOR.fsdp_overlap[f])))
        spec.append((("attn_eff", f), "exp", math.log(PRIOR.attn_eff[f])))
        if any(fw == f and k.endswith("/fp8") for fw, k in zip(t.framework, t.keys)):
            spec.append((("fp8_cast", f), "exp", math.log(PRIOR.fp8_cast[f])))  # the stack's FP8 cast traffic
    for name, kind, val in (("t0", "exp", math.log(PRIOR.t0)), ("alpha", "exp", math.log(PRIOR.alpha)),
                            ("w0", "exp", math.log(PRIOR.w0)), ("beta_w", "exp", math.log(PRIOR.beta_w)),
                            ("recompute", "sig", _logit(0.95)), ("mem_traffic", "exp", math.log(PRIOR.mem_traffic)), ("nic_parallel", "sig", _logit(PRIOR.nic_parallel)),
                            ("nvlink_eff", "sig", _logit(PRIOR.nvlink_eff)),  # ≤ 1: NCCL's bus figure is a ceiling
                            ("tau_s", "exp", math.log(PRIOR.tau_s)),
                            ("step_overhead_s", "exp", math.log(PRIOR.step_overhead_s)),
                            ("net_eff", "sig", _logit(PRIOR.net_eff)), ("cp_overlap", "sig", _logit(PRIOR.cp_overlap)),
                            ("p2p_exposed", "exp", 0.0), ("k0", "exp", math.log(PRIOR.k0))):
        spec.append(((name,), kind, val))
    return spec


def _constants(theta, spec, base: Constants) -> Constants:
    d = base.to_dict()
    d = {k: (dict(v) if isinstance(v, dict) else v) for k, v in d.items()}
    for (name, kind, _), x in zip(spec, theta):
        v = math.exp(x) if kind == "exp" else _sigmoid(x)
        if len(name) == 2:
            d[name[0]][name[1]] = v
        else:
            d[name[0]] = v
    return Constants.from_dict(d)


#: Total weight of each source in the fit (its rows share it equally); others get 1.
SOURCE_WEIGHT: dict[str, float] = {}


def _weights(t: Table) -> np.ndarray:
    """Row weights: every source counts as much as the others, × ``SOURCE_WEIGHT``; inside a source every
    precision counts equally (llm-foundry's 7 FP8 rows are what says what FP8 gains on its stack: among 209
    bf16 rows at 1 / 216 each they would not move the FP8 constants)."""
    src = t.column("source")
    prec = np.array([k.split("/")[1] for k in t.keys])
    w = np.ones(len(src))
    for s in set(src):
        m = src == s
        groups = sorted(set(prec[m]))
        for g in groups:
            mg = m & (prec == g)
            w[mg] = SOURCE_WEIGHT.get(str(s), 1.0) / len(groups) / mg.sum()
    return w


def fit(t: Table, *, base: Constants | None = None) -> Constants:
    """Constants fitted to table ``t`` (deterministic: fixed start at the priors, trust-region least squares)."""
    from scipy.optimize import least_squares

    base = base or PRIOR
    spec = _spec(t)
    x0 = np.array([s[2] for s in spec])
    w = np.sqrt(_weights(t))
    logm = np.log(t.measured)

    def resid(theta):
        c = _constants(theta, spec, base)
        pred = predict_table(t, c)["tokens_per_second"]
        r = w * (np.log(np.maximum(pred, 1e-9)) - logm)
        return np.concatenate([r, PRIOR_WEIGHT * (theta - x0)])

    sol = least_squares(resid, x0, method="trf", x_scale=1.0, diff_step=1e-4, max_nfev=400, xtol=1e-8, ftol=1e-10)
    c = _constants(sol.x, spec, base)
    return _fit_eff_prior(c, t).borrowed()  # cloudfit's trainer: PyTorch FSDP's constants


#: Efficiency of an accelerator the fit has not seen scales as (memory GB/s per peak TFLOP)^0.5 relative to the
#: seen ones: a fixed roofline-style prior (a workload mixing compute- and memory-bound kernels gains about the
#: square root of the machine balance), not fitted — with 2–3 accelerators per precision a fitted slope is noise.
BW_SLOPE = 0.5


def _fit_eff_prior(c: Constants, t: Table) -> Constants:
    """Per-precision intercept (geometric mean of the fitted efficiencies, normalised to H100's balance by the
    fixed slope ``BW_SLOPE``) for accelerators without fitted efficiency."""
    bw = {k: b for k, b in zip(t.keys, t.bw_per_tflop)}
    prior = dict(c.eff_prior)
    by_prec: dict[str, list[float]] = {}
    for k in sorted(c.eff):
        prec = k.split("/")[1]
        ref = 3350.0 / (1979.0 if prec == "fp8" else 989.0)
        by_prec.setdefault(prec, []).append(math.log(c.eff[k]) - BW_SLOPE * math.log(bw[k] / ref))
    for prec, vals in by_prec.items():
        prior[prec] = float(math.exp(sum(vals) / len(vals)))
    if "bf16" in prior:
        prior["fp16"] = prior["bf16"]
    beta, gamma = realised_exponents(c.eff)
    return replace(c, eff_prior=prior, eff_bw_slope=BW_SLOPE, eff_peak_exp=beta, eff_bw_exp=gamma)


#: Pull of the extrapolation exponents toward ``step.EXTRAPOLATION_PRIOR`` (the shared peak exponent and the
#: bandwidth exponent: weak) and of each precision's peak exponent toward the shared one (one measured key of a
#: precision says nothing of its slope: it borrows the others').
REALISED_PRIOR_WEIGHT = 0.3
REALISED_PRECISION_WEIGHT = 1.0


def realised_exponents(eff: dict) -> tuple[dict, float]:
    """How much of a newer GPU's spec advantage the fitted efficiencies realised, learned from the transitions
    between the measured accelerators of each precision (A100 → H100 in bf16, H100 → B200 / GB200 / GB300 in
    fp8): least squares of log eff = a_precision + β_precision · log peak + γ · log memory bandwidth (a per-
    precision intercept, so only same-precision differences — the transitions — inform β and γ), β_precision
    pulled toward a shared β and both toward the roofline prior. Returns ({precision: β, "all": shared β}, γ),
    β clipped to [−1, 0] (a higher peak never slows a step and never gains more than its ratio) and γ to [0, 1].
    The realised fraction of the peak ratio is 1 + β."""
    from cloudfit.llm.step import EXTRAPOLATION_PRIOR, _spec

    keys = sorted(eff)
    precs = sorted({k.split("/")[1] for k in keys})
    P = len(precs)
    n = 2 * P + 2  # intercepts, shared β, per-precision deviations, γ
    rows, y = [], []
    for k in keys:
        pk, bw = _spec(k)
        i = precs.index(k.split("/")[1])
        r = np.zeros(n)
        r[i], r[P], r[P + 1 + i], r[-1] = 1.0, math.log(pk), math.log(pk), math.log(bw)
        rows.append(r)
        y.append(math.log(eff[k]))
    b0, g0 = EXTRAPOLATION_PRIOR
    for j, target, w in ([(P, b0, REALISED_PRIOR_WEIGHT), (n - 1, g0, REALISED_PRIOR_WEIGHT)]
                         + [(P + 1 + i, 0.0, REALISED_PRECISION_WEIGHT) for i in range(P)]):
        r = np.zeros(n)
        r[j] = w
        rows.append(r)
        y.append(w * target)
    x = np.linalg.lstsq(np.array(rows), np.array(y), rcond=None)[0]
    clip_b = lambda b: float(min(max(b, -1.0), 0.0))  # noqa: E731
    beta = {p: clip_b(x[P] + x[P + 1 + i]) for i, p in enumerate(precs)}
    beta["all"] = clip_b(x[P])
    return beta, float(min(max(x[-1], 0.0), 1.0))


def band_from_residuals(log_ratios: np.ndarray) -> tuple[float, float]:
    """10% / 90% quantiles of log(measured ÷ predicted) from cross-validation: the prediction band."""
    q = np.quantile(np.asarray(log_ratios), [0.1, 0.9])
    return float(q[0]), float(q[1])


def widen_to_cover(band: tuple[float, float], log_ratios: np.ndarray, target: float = 0.8) -> float:
    """The smallest margin w (log) so that (band[0] − w, band[1] + w) holds ``target`` of ``log_ratios``: how much
    wider than the measured band a prediction must be where it extrapolates (the generation hops' residuals)."""
    r = np.asarray(log_ratios, dtype=float)
    lo, hi = band
    need = np.sort(np.maximum(np.maximum(lo - r, r - hi), 0.0))  # margin each residual needs to be inside
    return float(need[max(int(math.ceil(target * len(need))) - 1, 0)])


def write(c: Constants, path: str | Path, *, rows: int, source_digest: str, cv: dict | None = None) -> Path:
    doc = {"schema_version": 1, "constants": c.to_dict(), "training": {"rows": rows, "measurements_sha256": source_digest},
           "cv": cv or {}}
    text = json.dumps(doc, indent=1, sort_keys=True)
    doc["version"] = "llm-" + hashlib.sha256(text.encode()).hexdigest()[:10]
    p = Path(path)
    p.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return p
