"""The transition prior (issue 33): fitted with provenance by `cloudfit model fit`, applied only to accelerators
with no measured row, and never moving a measured accelerator's prediction."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cloudfit.catalog import hardware
from cloudfit.perf import HardwareQuery, features, predict_many
from cloudfit.perf import model as perf_model
from cloudfit.profiling import io as pio


@pytest.fixture(scope="module")
def profiles():
    return {n: pio.load_profile(p) for n, p in sorted(pio.shipped_profiles().items())}


@pytest.fixture(scope="module")
def without_transition(tmp_path_factory):
    doc = json.loads(perf_model.model_path().read_text())
    doc.pop("transition_prior")
    path = tmp_path_factory.mktemp("model") / "model.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_the_shipped_transition_prior_has_its_provenance():
    doc = json.loads(perf_model.model_path().read_text())
    tp = doc["transition_prior"]
    assert tp["terms"] == list(features.TRANSITION_TERMS)
    assert min(tp["c"]) >= 0.0 and tp["c"][0] > 0  # more of a spec never predicts a slower step
    trained = set(doc["training"]["accelerators"])
    assert len(tp["pairs"]) >= 300
    for source, workload, a, b in tp["pairs"]:  # every pair names two measured (accelerator, precision, batch) points
        assert a.split(":")[0] in trained and b.split(":")[0] in trained and a != b and source and workload


def test_measured_accelerators_keep_the_shipped_prediction(profiles, without_transition):
    accs = sorted(hardware.ACCELERATORS)
    m = perf_model.load_model()
    for name in ("resnet50", "bert-large", "mlp", "gnmt"):
        prof = profiles[name]
        for count, nodes in ((1, 1), (8, 1), (8, 2)):
            qs = [HardwareQuery(a, count, nodes, 100.0, p) for a in accs for p in ("fp32", "fp16", "fp8")]
            new, old = predict_many(prof, qs), predict_many(prof, qs, model_file=without_transition)
            measured = np.array([m.measured(q.accelerator) for q in qs])
            assert np.array_equal(new.samples_per_second[measured], old.samples_per_second[measured])
            assert not np.array_equal(new.samples_per_second[~measured], old.samples_per_second[~measured])
            for b, ok in zip(new.basis, measured):
                if not ok:
                    assert b.endswith("no measured rows, spec-based"), b


def test_a_carried_gpu_stays_between_its_reference_and_the_shipped_extrapolation(profiles, without_transition):
    # the transition takes back part of the shipped model's jump from the nearest measured GPU, never reverses or
    # exceeds it, before the spec-order clamp; checked where no accelerator of the catalog clamps (T4 from V100)
    for name, prof in profiles.items():
        qs = [HardwareQuery(a, 1, 1, 0.0, "fp16") for a in ("T4", "V100")]
        new = predict_many(prof, qs)
        old = predict_many(prof, qs, model_file=without_transition)
        if not new.fits.all():
            continue
        assert perf_model.load_model().measured("V100") and not perf_model.load_model().measured("T4")
        t4, v100, t4_old = new.samples_per_second[0], new.samples_per_second[1], old.samples_per_second[0]
        assert min(t4_old, v100) * (1 - 1e-9) <= t4 <= max(t4_old, v100) * (1 + 1e-9), (name, t4_old, t4, v100)
