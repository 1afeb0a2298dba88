"""The cross-validation predicts through the same path `predict_many` ships: anchors, λ, the linear-scaling
cap and the band (per regime, per workload novelty, widened with the hardware jump)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cloudfit.perf import HardwareQuery, fit, predict_many
from cloudfit.perf.model import anchor_weights, load_model
from cloudfit.types import Measurement, Profile


@pytest.fixture(scope="module")
def shipped():
    """The training table under the shipped model: its prior constants, forest and λ, on every row."""
    m = load_model()
    prep = fit.prepare(constants=m.constants)
    v = prep.variants
    fm = fit.FoldModel(prep.prior_sps, m.forest.predict(prep.X), v.prior_sps, m.forest.predict(v.X))
    return m, prep, fm


def _profile_and_query(prep: fit.Prepared, i: int) -> tuple[Profile, HardwareQuery]:
    t = prep.table
    stats = t.stats[f"{t['workload'][i]}@{int(t['batch_per_device'][i])}"]
    meas = tuple(Measurement(str(t["accelerator"][a]), 1, 1, int(t["batch_per_device"][a]), str(t["precision"][a]),
                             float(t["samples_per_second"][a])) for a in prep.anchors[i])
    net = 0.0 if t["nodes"][i] == 1 else float(t["network_gbps"][i])
    intra = None if math.isnan(t["intra_gbps"][i]) else float(t["intra_gbps"][i])
    q = HardwareQuery(str(t["accelerator"][i]), int(t["count"][i]), int(t["nodes"][i]), net, str(t["precision"][i]),
                      int(t["batch_per_device"][i]), intra, str(t["parallelism"][i]))
    return Profile(str(t["workload"][i]), stats, meas), q


def _rows(prep: fit.Prepared) -> list[int]:
    """PyTorch all-reduce rows with anchors (the predict path has no framework flag): single device,
    several devices on one node, and one device on each of several nodes."""
    t = prep.table
    ok = [i for i in range(len(t)) if len(prep.anchors[i]) and t["framework"][i] == "pytorch"
          and t["parallelism"][i] == "allreduce"]
    kinds = {}
    for i in ok:
        kinds.setdefault((t["count"][i] > 1, t["nodes"][i] > 1, t["source"][i]), []).append(i)
    assert len(kinds) >= 4
    return [rows[len(rows) // 2] for _, rows in sorted(kinds.items())]


def test_eval_predictions_equal_predict_many(shipped):
    m, prep, fm = shipped
    rows = np.array(_rows(prep))
    anch, stat = fit.shipped_predictions(prep, fm, rows, dict(m.anchor_lambda, stats=m.stats_lambda))
    jump = fit.anchor_jump(prep, fm, rows)
    for k, i in enumerate(rows):
        prof, q = _profile_and_query(prep, int(i))
        a = predict_many(prof, [q])
        s = predict_many(Profile(prof.model, prof.stats), [q])
        assert a.basis[0].startswith("anchored on"), a.basis[0]
        assert a.samples_per_second[0] == pytest.approx(anch[k], rel=1e-6)
        assert s.samples_per_second[0] == pytest.approx(stat[k], rel=1e-6)
        # the band: the regime's seen-workload quantiles, scaled by the jump from the anchors
        regime = f"{'multi' if prep.multi[i] else 'single'}-anchored|seen"
        lo = m.log_quantiles[regime][0] * fit.band_scale(jump[k], m.jump_slope)
        assert a.low[0] == pytest.approx(anch[k] * math.exp(lo), rel=1e-6)


def test_eval_applies_the_linear_scaling_cap(shipped):
    m, prep, fm = shipped
    rows = np.arange(len(prep.measured))[prep.multi]
    capped, _ = fit.shipped_predictions(prep, fm, rows, m.anchor_lambda)
    raw, _ = fit.shipped_predictions(prep, fm, rows, m.anchor_lambda, cap=False)
    ok = ~np.isnan(raw)
    assert np.all(capped[ok] <= raw[ok] * (1 + 1e-12))
    assert np.any(capped[ok] < raw[ok] * (1 - 1e-6)), "the cap never binds: the test no longer tests it"


def test_anchor_weight_matrix_matches_the_anchored_formula(shipped):
    _, prep, _ = shipped
    base = prep.prior_sps
    rows = np.array([i for i in range(len(base)) if len(prep.anchors[i]) > 1][:20])
    anch, _ = fit.predictions(prep, base, rows)
    lb = np.log(prep.aux["batch"])
    for k, i in enumerate(rows):
        a = prep.anchors[i]
        # base × exp(Σ wₐ·log(measuredₐ / baseₐ)), weights as predict_many computes them
        want = base[i] * np.exp(anchor_weights(lb[i:i + 1], lb[a])[0] @ np.log(prep.measured[a] / base[a]))
        assert anch[k] == pytest.approx(want, rel=1e-12)


def test_a_profile_gets_the_leave_one_source_out_stats_only_band(shipped):
    """A profile's stack is none of the training sources': its stats-only band is the leave-one-source-out one,
    whether or not its workload is in the table, and no narrower than the in-distribution band of a workload
    the table holds (which knows the source's own speed)."""
    m, prep, _ = shipped
    assert m.source_quantiles, "the shipped model has no leave-one-source-out band: refit it"
    t = prep.table
    stats = t.stats["resnet50@256"] if "resnet50@256" in t.stats else next(iter(t.stats.values()))
    seen = Profile("known", stats)
    # Same FLOPs, parameter count doubled: not a workload the model was trained on.
    unknown = Profile("unknown", stats.__class__(**{**stats.__dict__, "parameters": stats.parameters * 2}))
    q = [HardwareQuery("A100", 1, 1, 0.0, "fp16", 32)]
    a, b = predict_many(seen, q), predict_many(unknown, q)
    assert not m.novel(fit.features.work_from_stats(seen.stats))
    assert m.novel(fit.features.work_from_stats(unknown.stats))
    lo, hi = m.source_quantiles["single-stats-only"]
    for p in (a, b):
        assert p.low[0] == pytest.approx(p.samples_per_second[0] * math.exp(lo), rel=1e-9)
        assert p.high[0] == pytest.approx(p.samples_per_second[0] * math.exp(hi), rel=1e-9)
    qs = m.log_quantiles["single-stats-only|seen"]
    assert hi - lo >= qs[1] - qs[0]


def test_novelty_of_held_out_groups():
    prep = fit.prepare()
    rows = np.arange(len(prep.measured))
    for scheme, want in (("accelerator", False), ("model", True)):
        for _, held in fit.group_folds(prep, rows, scheme)[:3]:
            new = fit.novel(prep, np.setdiff1d(rows, held), held)
            assert new.mean() == (1.0 if want else 0.0)


def test_jump_slope_fit():
    jump = np.linspace(0, 2, 50)
    assert fit.fit_jump_slope(0.2 * (1 + 0.5 * jump), jump) == pytest.approx(0.5, abs=1e-3)
    assert fit.fit_jump_slope(0.2 - 0.05 * jump, jump) == 0.0
    assert fit.fit_jump_slope(np.ones(5), np.arange(5.0)) == 0.0  # too few residuals
