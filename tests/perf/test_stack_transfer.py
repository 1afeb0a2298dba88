"""Stats-only predictions of a profile: a stack no training source ran (issue 33, bench/h100_zoo.py).

The learned correction is kept only as far as leave-one-source-out says it carries to another stack; the band
is that check's; and a step is never predicted faster than its counted kernels can be launched, nor faster
for more work."""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
import pytest

from cloudfit.perf import HardwareQuery, data, fit, predict_many, prior
from cloudfit.perf.model import load_model
from cloudfit.profiling.io import load_profile
from cloudfit.resources import shipped

ZOO = ("alexnet", "resnet18", "resnet50", "bert-base", "gnmt", "ncf", "mlp")


@pytest.fixture(scope="module")
def table() -> data.Table:
    return data.load_table()


def _with_measured(t: data.Table, measured: np.ndarray) -> fit.Prepared:
    return fit.prepare(data.Table(dict(t.columns, samples_per_second=measured), t.stats))


def test_stats_lambda_keeps_only_what_carries_to_another_source(table):
    """λ_s is learned, not set: where every source runs its rows at its own constant speed over the prior (a
    stack effect the correction memorises but another stack does not share), leave-one-source-out keeps none
    of it; where the rows follow one smooth law of the batch in every source, it keeps it."""
    t0 = time.perf_counter()
    base = fit.prepare(table, with_variants=False).prior_sps
    src = table["source"]
    names = sorted(set(src))
    offset = np.array([(-0.6, 0.6)[names.index(s) % 2] for s in src])
    rows = np.arange(len(base))
    lam_stack, band = fit.calibrate_stats_lambda(_with_measured(table, base * np.exp(offset)), rows, rounds=40)
    assert lam_stack == 0.0
    assert band["single-stats-only"][0] < -0.3 and band["single-stats-only"][1] > 0.3  # the stacks' spread
    law = 0.4 * (np.log(table["batch_per_device"]) - np.log(table["batch_per_device"]).mean())
    lam_law, _ = fit.calibrate_stats_lambda(_with_measured(table, base * np.exp(law)), rows, rounds=40)
    assert lam_law >= 0.5
    assert time.perf_counter() - t0 < 60


def test_the_shipped_model_learned_its_stats_lambda_from_sources():
    m = load_model()
    assert m.stats_lambda in fit.LAMBDA_GRID
    assert set(m.source_quantiles) == {"single-stats-only", "multi-stats-only"}
    for lo, hi in m.source_quantiles.values():
        assert lo < 0 < hi


def test_launch_floor_never_contradicts_a_measurement(table):
    """The per-launch cost is a floor: no training row, and no GPU row of a shipped profile, ran a step faster
    than its counted kernels × LAUNCH_S_PER_KERNEL (all of them run ≥ 49 µs per counted kernel)."""
    w = fit.prepare(table, with_variants=False).work
    devices = table["count"] * table["nodes"]
    step = devices * table["batch_per_device"] / table["samples_per_second"]
    ok = np.isfinite(w.kernels)
    assert ok.sum() > 700
    assert np.all(step[ok] >= w.kernels[ok] * prior.LAUNCH_S_PER_KERNEL)
    n = 0
    for f in sorted(shipped("profiles").glob("*.json")):
        doc = json.loads(f.read_text())
        k = doc["stats"].get("kernels_per_step")
        for meas in doc["measurements"]:
            if k and meas["accelerator"].lower() != "cpu" and meas["samples_per_second"] > 0:
                n += 1
                assert meas["batch_size_per_device"] / meas["samples_per_second"] >= k * prior.LAUNCH_S_PER_KERNEL
    assert n >= 10


@pytest.fixture(scope="module")
def zoo():
    return {name: load_profile(shipped("profiles") / f"{name}.json") for name in ZOO}


@pytest.mark.parametrize("acc", ["T4", "H100", "B200"])
def test_a_batch_1_step_never_beats_its_launch_floor(zoo, acc):
    """At batch 1 a tiny model's step is its kernel launches: never predicted faster, band included, with or
    without the profile's measurements."""
    for name in ("mlp", "ncf", "alexnet"):
        p = zoo[name]
        k = p.stats.kernels_per_step
        bound = 1.0 / (k * prior.LAUNCH_S_PER_KERNEL)
        for prof in (p, dataclasses.replace(p, measurements=())):
            r = predict_many(prof, [HardwareQuery(acc, 1, 1, 0.0, "bf16", 1)])
            assert r.samples_per_second[0] <= bound * (1 + 1e-9), (name, acc)
            assert r.high[0] <= bound * (1 + 1e-9), (name, acc)


@pytest.mark.parametrize("acc", ["T4", "A100", "H100"])
def test_more_work_per_step_never_predicts_a_faster_step(zoo, acc):
    """Stats-only: a larger batch never takes a shorter step, nor does the same model with every op class's
    FLOPs and bytes doubled (or its kernel count doubled)."""
    batches = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    for name, p in zoo.items():
        prof = dataclasses.replace(p, measurements=())
        t = predict_many(prof, [HardwareQuery(acc, 1, 1, 0.0, "bf16", b) for b in batches])
        fits = t.fits
        step = np.array(batches)[fits] / t.samples_per_second[fits]  # a batch that does not fit has no step
        assert np.all(np.diff(step) >= -1e-12 * step[1:]), (name, acc, step)
        s = p.stats
        heavier = dataclasses.replace(s, flops_per_sample=2 * s.flops_per_sample,
                                      forward_flops_per_sample=2 * s.forward_flops_per_sample,
                                      op_classes={c: dataclasses.replace(v, flops=2 * v.flops, bytes=2 * v.bytes)
                                                  for c, v in s.op_classes.items()})
        more_kernels = dataclasses.replace(s, kernels_per_step=2 * s.kernels_per_step)
        q = [HardwareQuery(acc, 1, 1, 0.0, "bf16", 8)]
        one = predict_many(prof, q).samples_per_second[0]
        for other in (heavier, more_kernels):
            assert predict_many(dataclasses.replace(prof, stats=other), q).samples_per_second[0] <= one * (1 + 1e-9), name
