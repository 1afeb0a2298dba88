"""The numpy tree evaluator equals xgboost's own predictions."""

from __future__ import annotations

import numpy as np
import pytest

from cloudfit.perf import features, fit
from cloudfit.perf.trees import Forest, export_booster


@pytest.fixture(scope="module")
def prep():
    return fit.prepare()


def _train(X, y, w, rounds=60, **extra):
    import xgboost as xgb

    params = dict(fit.XGB_PARAMS, **extra)
    params["monotone_constraints"] = "(" + ",".join(str(m) for m in features.MONOTONE) + ")"
    d = xgb.DMatrix(X.astype(np.float32), label=y.astype(np.float32), weight=w.astype(np.float32))
    return xgb.train(params, d, num_boost_round=rounds)


def test_numpy_forest_matches_xgboost_on_training_features(prep):
    import xgboost as xgb

    booster = _train(prep.X, prep.y, prep.weight)
    forest = Forest.from_dict(export_booster(booster))
    ours = forest.predict(prep.X)
    theirs = booster.predict(xgb.DMatrix(prep.X.astype(np.float32)))
    assert np.max(np.abs(ours - theirs)) < 1e-5
    # xgboost sums 300 leaves in float32, we in float64: ~300 roundings of 6e-8 each (a wrong path is off by
    # a leaf value, ~1e-2 and more)
    assert np.max(np.abs(ours - theirs) / np.maximum(np.abs(theirs), 1e-3)) < 5e-5


def test_shipped_model_forest_matches_a_refit(prep):
    """fit_forest_dict → Forest is what predict_many evaluates; compare with xgboost on the same data."""
    import xgboost as xgb

    booster = _train(prep.X, prep.y, prep.weight, rounds=40, max_depth=6)
    forest = Forest.from_dict(export_booster(booster))
    rng = np.random.default_rng(0)
    # Perturbed rows exercise thresholds away from the training values too.
    X = prep.X * rng.uniform(0.9, 1.1, size=prep.X.shape)
    theirs = booster.predict(xgb.DMatrix(X.astype(np.float32)))
    assert np.max(np.abs(forest.predict(X) - theirs)) < 1e-5


def test_missing_values_follow_xgboosts_default_direction(prep):
    import xgboost as xgb

    booster = _train(prep.X, prep.y, prep.weight, rounds=30)
    forest = Forest.from_dict(export_booster(booster))
    X = prep.X[:50].copy()
    X[::3, 0] = np.nan
    X[1::4, 5] = np.nan
    theirs = booster.predict(xgb.DMatrix(X.astype(np.float32), missing=np.nan))
    assert np.max(np.abs(forest.predict(X) - theirs)) < 1e-5


def test_empty_forest_predicts_base_score():
    f = Forest.from_dict({"base_score": 0.25, "trees": []})
    assert np.allclose(f.predict(np.zeros((3, 4))), 0.25)
