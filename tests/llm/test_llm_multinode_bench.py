"""bench/llm_multinode.py (issue 33: multi-node, leave-one-source-out by fabric) never lets a held-out row into
what predicts it: not into the fit, not into the band's quantiles, not into the stack-generic margin.

A stand-in fit that depends on *every* training row's measurement (so any leak moves its constants) replaces the
real least squares: fast, and a held-out row that reached it would change the held-out predictions."""

from __future__ import annotations

import importlib.util
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from cloudfit.llm import data
from cloudfit.llm.predict import constants

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def B():
    spec = importlib.util.spec_from_file_location("llm_multinode", ROOT / "bench" / "llm_multinode.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def table():
    return data.table()


def sensitive_fit(tr: data.Table):
    """Shipped constants with the achieved network fraction and per-step overhead set from the training rows'
    measurements (any change to any training row moves them)."""
    s = float(np.sum(np.log(tr.measured)))
    c = constants()
    return replace(c, net_eff=0.3 + 0.6 * (s % 1.0), step_overhead_s=0.01 + 0.1 * ((7.0 * s) % 1.0))


def poisoned(t: data.Table, rows: np.ndarray, factor: float = 10.0) -> data.Table:
    meas = t.measured.copy()
    meas[rows] *= factor
    return replace(t, measured=meas)


def test_the_splits_hold_out_exactly_each_groups_multinode_rows_and_keep_its_single_node_rows(B, table):
    src, sysm, mn = table.column("source"), table.column("system"), B.multinode(table)
    seen = np.zeros(len(table.rows), int)
    for name, train, held in B.splits(table, "system"):
        assert held.any() and not (train & held).any() and (train | held).all()
        s, y = name.split(" ")
        assert (held == (mn & (src == s) & (sysm == y))).all()
        single = ~mn & (sysm == y) & np.isin(src, [s, "vtrain-single"])
        assert (train[single]).all()  # the same cluster's single-node rows stay in the fit
        seen += held
    assert (seen == mn).all()  # every multi-node row held out exactly once
    for name, train, held in B.splits(table, "source"):
        assert (held == (mn & (src == name))).all() and not (train & held).any()


@pytest.mark.parametrize("by", ["system", "source"])
def test_a_held_out_rows_measurement_never_reaches_its_own_prediction(B, table, by):
    """Multiply one group's multi-node measurements by 10: that group's predictions do not move (they would if
    any of its rows were in the fit that predicts it); the other groups' do (the stand-in fit does see them)."""
    ref = B.holdout(table, by=by, fit=sensitive_fit)
    for name, _, held in B.splits(table, by):
        res = B.holdout(poisoned(table, held), by=by, fit=sensitive_fit)
        assert np.array_equal(res["pred"][held], ref["pred"][held]), name
        others = B.multinode(table) & ~held
        assert not np.allclose(res["pred"][others], ref["pred"][others])  # the test can fail


def test_the_bands_of_a_group_ignore_its_own_residuals_and_measurements(B, table):
    cvr, sf = B.band_inputs(table, fit=sensitive_fit)
    ref = B.holdout(table, fit=sensitive_fit, inputs=(cvr, sf))
    assert set(ref["band"]) == {n for n, _, _ in B.splits(table)}
    for name, _, held in B.splits(table):
        bad = cvr.copy()
        bad[held & np.isfinite(cvr)] = 5.0
        res = B.holdout(poisoned(table, held, 3.0), fit=sensitive_fit, inputs=(bad, sf))
        assert res["band"][name] == ref["band"][name]
        assert res["widen"][name] == ref["widen"][name]
        assert np.array_equal(res["shipped_lo"][held], ref["shipped_lo"][held])
        lo, hi = ref["band"][name]
        assert -1.0 < lo < 0.0 < hi < 1.0 and math.isfinite(ref["widen"][name])
