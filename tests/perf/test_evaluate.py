"""The cross-validation harness: no leakage across folds, and a report with every method and regime."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cloudfit.catalog import hardware
from cloudfit.perf import evaluate, fit
from cloudfit.perf.data import load_table


@pytest.fixture(scope="module")
def small():
    """Lambda's and Sailor's rows: 165 measurements on 6 accelerators, fast to cross-validate."""
    t = load_table()
    idx = np.where(np.isin(t["source"], ["lambda", "sailor"]))[0]
    return fit.prepare(t.take(idx))


def test_anchors_come_from_other_accelerators_of_the_same_workload(small):
    t = small.table
    n_anchored = 0
    for i, anchors in enumerate(small.anchors):
        for j in anchors:
            assert t["accelerator"][j] != t["accelerator"][i]
            # never a board of the same accelerator (Lambda's A100 80GB PCIe for its SXM4 rows)
            assert hardware.accelerator_of(t["accelerator"][j]) != hardware.accelerator_of(t["accelerator"][i])
            assert t["workload"][j] == t["workload"][i] and t["source"][j] == t["source"][i]
            assert t["precision"][j] == t["precision"][i]
            assert t["count"][j] * t["nodes"][j] == 1
        n_anchored += bool(len(anchors))
    assert n_anchored > 0.9 * len(t)


@pytest.mark.parametrize("scheme, col", [("accelerator", "accelerator"), ("model", "model_group")])
def test_folds_partition_the_rows_by_group(small, scheme, col):
    rows = np.arange(len(small.y))
    folds = fit.group_folds(small, rows, scheme)
    seen = np.concatenate([h for _, h in folds])
    assert sorted(seen.tolist()) == rows.tolist()
    group = small.table[col]
    if scheme == "accelerator":  # a board variant is held out with its accelerator
        group = np.array([hardware.accelerator_of(a) for a in group], dtype=object)
    for g, held in folds:
        assert set(group[held]) == {g}
        train = np.setdiff1d(rows, held)
        assert g not in set(group[train])


def test_a_board_variant_is_held_out_and_anchored_as_its_accelerator(small):
    """Lambda measured the A100 80GB as PCIe and SXM4 boards (hardware.BOARD_OF): holding out the A100-80GB
    holds out both, and neither anchors the other, so a held-out GPU is never predicted from its twin."""
    t = small.table
    pcie = np.where(t["accelerator"] == "A100-80GB-PCIe")[0]
    sxm = np.where(t["accelerator"] == "A100-80GB")[0]
    assert len(pcie) and len(sxm)
    folds = dict(fit.group_folds(small, np.arange(len(t)), "accelerator"))
    assert "A100-80GB-PCIe" not in folds
    assert set(pcie) | set(sxm) == set(folds["A100-80GB"].tolist())
    for i in np.concatenate([pcie, sxm]):
        assert not set(small.anchors[i].tolist()) & (set(pcie) | set(sxm))


def test_prior_calibration_sees_only_its_rows(small):
    rows = np.arange(len(small.y))
    a = fit.calibrate_prior(small, rows)
    held = rows[small.table["accelerator"] == "H100"]
    b = fit.calibrate_prior(small, np.setdiff1d(rows, held))
    # Changing rows outside the training set must not change a calibration on the training set.
    scrambled = fit.dataclasses.replace(small, measured=np.where(np.isin(rows, held), 1.0, small.measured))
    assert fit.calibrate_prior(scrambled, np.setdiff1d(rows, held)) == b
    assert set(a) == set(b)


def test_report_has_every_method_and_regime(small):
    report = evaluate.run(prep=small, inner=False, schemes=("accelerator",))
    json.dumps(report)  # JSON-able for `cloudfit model eval --json`
    regimes = report["schemes"]["accelerator"]
    assert {"single-anchored", "single-stats-only", "multi-anchored", "multi-stats-only"} <= set(regimes)
    for blk in regimes.values():
        for m in evaluate.METHODS:
            assert 0 <= blk[m]["mdape"] and np.isfinite(blk[m]["mape"])
        assert sum(g["n"] for g in blk["groups"].values()) == blk["n"]


@pytest.mark.slow
def test_nested_calibration_reports_band_coverage(small):
    report = evaluate.run(prep=small, inner=True, schemes=("accelerator",), keep_records=True)
    recs = report["records"]["accelerator"]
    for regime, blk in report["schemes"]["accelerator"].items():
        multi, kind = regime.startswith("multi"), regime.split("-", 1)[1]
        sel = [r for r in recs if r["multi"] == multi and not np.isnan(r["cloudfit"][kind])]
        # every held-out row carries a band from its own fold's inner calibration: below and above the prediction
        for r in sel:
            lo, hi = r["band"][kind]
            assert lo < 0 < hi, (regime, r["group"], lo, hi)
        # the reported coverage is the share of held-out measurements inside their band, recomputed here
        inside = [r["cloudfit"][kind] * np.exp(r["band"][kind][0]) <= r["measured"]
                  <= r["cloudfit"][kind] * np.exp(r["band"][kind][1]) for r in sel]
        assert blk["coverage"] == pytest.approx(np.mean(inside))
        # and per held-out accelerator, the coverages average back to the whole (weighted by rows)
        groups = blk["groups"]
        assert sum(g["coverage"] * g["n"] for g in groups.values()) / blk["n"] == pytest.approx(blk["coverage"])
    # the band is not degenerate: some held-out rows fall inside it and some outside (on this small subset,
    # Lambda + Sailor only, coverage is 43–89% by regime)
    cov = [b["coverage"] for b in report["schemes"]["accelerator"].values()]
    assert all(0.0 < c < 1.0 for c in cov), cov


def test_scaling_pairs_are_the_same_workload_on_the_same_accelerator(small):
    t = small.table
    n_pairs = 0
    for i, partners in enumerate(small.scaling_pairs):
        if not small.multi[i]:
            assert len(partners) == 0
        for j in partners:
            assert t["accelerator"][j] == t["accelerator"][i]
            assert t["workload"][j] == t["workload"][i] and t["source"][j] == t["source"][i]
            assert t["count"][j] * t["nodes"][j] == 1
            n_pairs += 1
    assert n_pairs > 0


def test_comm_calibration_sees_only_its_rows(small):
    rows = np.arange(len(small.y))
    held = rows[small.table["workload"] == small.table["workload"][np.argmax(small.multi)]]
    train = np.setdiff1d(rows, held)
    b = fit.calibrate_prior(small, train)
    scrambled = fit.dataclasses.replace(small, measured=np.where(np.isin(rows, held), 1.0, small.measured))
    assert fit.calibrate_prior(scrambled, train) == b
    assert set(fit.CALIBRATED_COMM) <= set(b)


def test_overhead_pairs_differ_only_in_batch_or_workload(small):
    t = small.table
    n_batch = n_workload = 0
    for i, partners in enumerate(small.overhead_pairs):
        for j in partners:
            assert j > i  # each pair once
            assert t["source"][j] == t["source"][i] and t["accelerator"][j] == t["accelerator"][i]
            assert t["precision"][j] == t["precision"][i]
            if t["workload"][j] == t["workload"][i]:
                assert t["batch_per_device"][j] != t["batch_per_device"][i]
                assert (t["count"][j], t["nodes"][j]) == (t["count"][i], t["nodes"][i])
                n_batch += 1
            else:
                assert t["count"][i] * t["nodes"][i] == 1 and t["count"][j] * t["nodes"][j] == 1
                n_workload += 1
    assert n_batch > 0 and n_workload > 0


def test_overhead_calibration_sees_only_its_rows(small):
    rows = np.arange(len(small.y))
    held = rows[small.table["accelerator"] == "A100"]
    train = np.setdiff1d(rows, held)
    b = fit.calibrate_prior(small, train)
    scrambled = fit.dataclasses.replace(small, measured=np.where(np.isin(rows, held), 1.0, small.measured))
    assert fit.calibrate_prior(scrambled, train) == b
    assert set(fit.CALIBRATED_OVERHEAD) <= set(b)
