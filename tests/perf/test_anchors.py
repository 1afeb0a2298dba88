"""Anchors at the query's scale (issue 15): a profile's measurement on several GPUs carries its measured
scaling to a query at that device count, a one-GPU query leans on one-GPU runs, and the two physical
rules of tests/perf/test_physics.py hold whatever device counts the anchors were measured at."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cloudfit import catalog
from cloudfit.catalog import hardware
from cloudfit.perf import HardwareQuery, predict_many
from cloudfit.perf import model as model_mod
from cloudfit.profiling.io import load_profile, resolve_profile
from cloudfit.types import Measurement


@pytest.fixture(scope="module")
def base():
    p = load_profile(resolve_profile("resnet50"))
    return dataclasses.replace(p, measurements=())


def _with(profile, *runs):
    """``runs``: (count, samples/s) on V100 at batch BATCH, fp32."""
    return dataclasses.replace(profile, measurements=tuple(
        Measurement("V100", c, 1, BATCH, "fp32", sps, source="reported") for c, sps in runs))


BATCH = 64  # fits a 16 GB V100 in fp32


def _sps(profile, acc, count, nodes=1, net=0.0):
    t = predict_many(profile, [HardwareQuery(acc, count, nodes, net, "fp32", BATCH)])
    assert t.fits[0]
    return float(t.samples_per_second[0])


def test_anchor_weights_prefer_the_query_device_count():
    lb = np.log([32.0, 32.0])
    w = model_mod.anchor_weights(np.log([32.0, 32.0]), lb, np.log([1.0, 4.0]), np.log([1.0, 4.0]))
    assert w[0, 0] > 0.75 and w[1, 1] > 0.75  # each query leans on the run at its own count
    same = model_mod.anchor_weights(np.log([32.0]), lb)  # no counts: batch only, as before
    assert np.allclose(same, 0.5)


def test_a_multi_gpu_measurement_carries_its_scaling_to_another_accelerator(base):
    one = _sps(base, "V100", 1) * 1.1
    only_one = _with(base, (1, one))
    both = _with(base, (1, one), (4, 2.4 * one))  # measured 0.6 of linear on 4 V100s
    eff_prior = _sps(only_one, "A100", 4) / (4 * _sps(only_one, "A100", 1))
    eff_both = _sps(both, "A100", 4) / (4 * _sps(both, "A100", 1))
    assert eff_both < eff_prior - 0.1, (eff_prior, eff_both)
    # the one-GPU query leans on the one-GPU run: within 25% of what that run alone says
    assert abs(np.log(_sps(both, "A100", 1) / _sps(only_one, "A100", 1))) < 0.25


@pytest.mark.parametrize("ratio", [2.0, 4.0, 8.0])  # 8 V100s measured at 0.25 / 0.5 / 1.0 of linear
def test_physics_holds_with_anchors_at_several_counts(base, ratio):
    one = _sps(base, "V100", 1)
    prof = _with(base, (1, one), (8, ratio * one))
    cat = catalog.load()
    shapes = sorted({(o.machine_type, o.accelerator, o.accelerators_per_node, o.vcpus) for o in cat.offerings
                     if o.accelerator in ("V100", "A100", "H100", "T4")})
    nodes = np.arange(1, 17)
    for mt, acc, count, vcpus in shapes:  # more nodes never raise per-GPU throughput
        net = hardware.vm_network_gbps(mt, acc, count, vcpus)
        t = predict_many(prof, [HardwareQuery(acc, count, int(n), net, "fp32", BATCH) for n in nodes])
        per_gpu = t.samples_per_second / nodes
        if t.fits[0]:
            assert np.all(np.diff(per_gpu) <= 1e-9 * per_gpu[:-1]), (ratio, mt, per_gpu)
    by_acc: dict[str, dict[int, tuple]] = {}
    for s in shapes:
        cur = by_acc.setdefault(s[1], {}).get(s[2])
        if cur is None or s[3] > cur[3]:
            by_acc[s[1]][s[2]] = s
    for v in by_acc.values():  # N one-GPU VMs never beat one N-GPU VM
        if 1 not in v:
            continue
        for n, big in v.items():
            if n == 1:
                continue
            spread = HardwareQuery(big[1], 1, n, hardware.vm_network_gbps(*v[1]), "fp32", BATCH)
            single = HardwareQuery(big[1], n, 1, 0.0, "fp32", BATCH)
            t = predict_many(prof, [spread, single])
            if t.fits[1]:
                assert t.samples_per_second[0] <= t.samples_per_second[1] * (1 + 1e-9), (ratio, big)


@pytest.fixture(scope="module")
def table():
    from cloudfit.perf import data

    return data.load_table()


def test_same_scale_anchors_are_other_accelerators_at_the_row_scale(table):
    from cloudfit.perf import fit

    cands = fit.anchor_candidates(table, same_scale=True)
    multi = table["count"] * table["nodes"] > 1
    assert sum(len(c) > 0 for c in cands) > 400  # most multi-device rows have one (537 of 610 today)
    for i, c in enumerate(cands):
        if not multi[i]:
            assert len(c) == 0
        for j in c:
            assert table["accelerator"][j] != table["accelerator"][i]
            for col in ("source", "workload", "precision", "count", "nodes", "parallelism", "ps_count"):
                assert str(table[col][j]) == str(table[col][i]), col  # ps_count is NaN without servers


def test_the_issue_regime_keeps_its_single_device_anchors_and_weights(table):
    # "multi-anchored" = anchored on single-device runs: the device term weighs them all alike
    from cloudfit.perf import fit

    anchors = fit.anchor_candidates(table)
    lb, lc = np.log(table["batch_per_device"]), np.log(table["count"])
    assert all(np.all(table["count"][a] * table["nodes"][a] == 1) for a in anchors)
    assert np.allclose(fit.anchor_weight_matrix(anchors, lb, lc), fit.anchor_weight_matrix(anchors, lb))


def test_the_eval_reports_the_same_scale_regime_beside_the_issue_regime(table):
    from cloudfit.perf import evaluate, fit

    idx = np.where(np.isin(table["source"], ["lambda", "sailor"]))[0]
    small = fit.prepare(table.take(idx))
    report = evaluate.run(prep=small, inner=False, schemes=("accelerator",), keep_records=True)
    regimes = report["schemes"]["accelerator"]
    same = fit.anchor_candidates(small.table, same_scale=True)
    assert regimes["multi-anchored-same-scale"]["n"] == sum(len(a) > 0 for a in same) > 0
    assert regimes["multi-anchored"]["n"] == sum(bool(m) and len(a) > 0 for m, a in zip(small.multi, small.anchors))
    recs = {r["row"]: r for r in report["records"]["accelerator"]}
    frame = evaluate.to_frame(report, kind="anchored-same-scale")
    assert len(frame) == regimes["multi-anchored-same-scale"]["n"] and frame["multi"].all()
    assert all(np.isnan(recs[i]["cloudfit"]["anchored-same-scale"]) for i in np.flatnonzero(~small.multi))


def _two_chips(base, h100, h200):
    return dataclasses.replace(base, measurements=(
        Measurement("H100", 1, 1, 256, "bf16", h100, source="measured"),
        Measurement("H200", 1, 1, 256, "bf16", h200, source="measured")))


@pytest.mark.parametrize("h200_over_h100", [0.9, 1.1, 1.5])
def test_a_chip_the_profile_measured_is_predicted_at_its_own_measurement(base, h200_over_h100):
    """Two GPUs measured at one batch: each one, asked at its measured point (either 16-bit precision), reads
    its own number — not a blend with the other GPU's run (H100 read 8% below its own measurement when an H200
    run weighed as much) — and says it rests on its own run, not on "no measured rows"."""
    h100 = 2200.0
    p = _two_chips(base, h100, h100 * h200_over_h100)
    for acc, want in (("H100", h100), ("H200", h100 * h200_over_h100)):
        for prec in ("bf16", "fp16"):
            t = predict_many(p, [HardwareQuery(acc, 1, 1, 0.0, prec, 256)])
            assert float(t.samples_per_second[0]) == pytest.approx(want, rel=1e-6), (acc, prec)
            assert t.basis[0] == f"anchored on {acc}×1 bs256 bf16", t.basis[0]
            assert t.low[0] < want < t.high[0]
    # a chip the profile did not measure still leans on both runs, and says what it is
    t = predict_many(p, [HardwareQuery("B200", 1, 1, 0.0, "bf16", 256)])
    assert "(+1 more)" in t.basis[0] and "B200: no measured rows" in t.basis[0]
    # another arithmetic on a measured chip is not its own measurement
    t32 = predict_many(p, [HardwareQuery("H200", 1, 1, 0.0, "fp32", 256)])
    assert "(+1 more)" in t32.basis[0]


def test_own_chip_anchors_keep_the_physics_rules(base):
    """Anchored on its own run, a measured chip still never gains per-GPU speed from more nodes, and N one-GPU
    VMs never beat one N-GPU VM (the envelope of ``anchor_shift`` with the own-chip weights)."""
    p = dataclasses.replace(base, measurements=(
        Measurement("H100", 1, 1, 256, "bf16", 2200.0, source="measured"),
        Measurement("H100", 8, 1, 256, "bf16", 8 * 2200.0 * 0.7, source="measured"),
        Measurement("A100", 1, 1, 256, "bf16", 1300.0, source="measured")))
    qs = [HardwareQuery("H100", c, n, 200.0, "bf16", 256) for c in (1, 8) for n in (1, 2, 4, 8)]
    t = predict_many(p, qs)
    per = {(q.count, q.nodes): float(s) / (q.count * q.nodes) for q, s in zip(qs, t.samples_per_second)}
    for c in (1, 8):
        seq = [per[c, n] for n in (1, 2, 4, 8)]
        assert all(b <= a * (1 + 1e-9) for a, b in zip(seq, seq[1:])), (c, seq)
    assert per[1, 8] <= per[8, 1] * (1 + 1e-9)
    assert abs(np.log(per[8, 1] / (2200.0 * 0.7))) < 0.05  # leans on its own 8-GPU run (0.7 of linear)
