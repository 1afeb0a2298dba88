"""The prior's cross-accelerator calibration weighs every accelerator the same (issue 15)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cloudfit.perf import fit


@pytest.fixture(scope="module")
def prep():
    return fit.prepare()


def test_per_accelerator_weights_give_each_accelerator_the_same_total():
    acc = np.array(["K80"] * 6 + ["A100"] * 2 + ["H100"], dtype=object)
    w = fit.per_accelerator_weights(acc)
    assert w.mean() == pytest.approx(1.0)
    totals = {a: w[acc == a].sum() for a in ("K80", "A100", "H100")}
    assert totals["K80"] == pytest.approx(totals["A100"]) == pytest.approx(totals["H100"])
    assert len(fit.per_accelerator_weights(np.array([], dtype=object))) == 0


def test_more_pairs_on_one_accelerator_do_not_move_the_calibration(prep):
    """Listing every K80 row's anchors three times (as a data set with three times the K80 rows would) leaves
    κ and η_mem where they were: the old accelerators' many TensorFlow-era rows cannot outvote the few
    Ampere/Hopper ones on how accelerators compare."""
    rows = np.arange(len(prep.measured))
    base = fit.calibrate_prior(prep, rows)
    k80 = prep.table["accelerator"] == "K80"
    tripled = [np.concatenate([a, a, a]) if k80[i] else a for i, a in enumerate(prep.anchors)]
    more = fit.calibrate_prior(dataclasses.replace(prep, anchors=tripled), rows)
    for k in fit.CALIBRATED:
        assert more[k] == base[k], k
