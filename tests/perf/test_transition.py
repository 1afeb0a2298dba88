"""The transition prior and the band by distance (issue 33): fitted with provenance by `cloudfit model fit`, applied
only to accelerators with no measured row, never moving a measured accelerator's prediction or band."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from cloudfit.catalog import hardware
from cloudfit.perf import HardwareQuery, features, predict_many, prior
from cloudfit.perf import model as perf_model
from cloudfit.profiling import io as pio


@pytest.fixture(scope="module")
def profiles():
    return {n: pio.load_profile(p) for n, p in sorted(pio.shipped_profiles().items())}


@pytest.fixture(scope="module")
def without_transition(tmp_path_factory):
    doc = json.loads(perf_model.model_path().read_text())
    doc.pop("transition_prior")
    doc.pop("generation_band")
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
            # measured in the table, or on that chip at that arithmetic by the profile itself (its own run anchors it)
            own = {perf_model.chip_key(x.accelerator, x.precision) for x in prof.measurements if x.accelerator != "cpu"}
            measured = np.array([m.measured(q.accelerator) or perf_model.chip_key(q.accelerator, q.precision) in own
                                 for q in qs])
            for col in ("samples_per_second", "low", "high"):
                assert np.array_equal(getattr(new, col)[measured], getattr(old, col)[measured]), (name, col)
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


#: (older, newer) accelerators of one product line, the newer a successor that is never slower on a training step:
#: every spec of the newer is at least the older's (the physics tests' dominance), or, L4 over T4, the reasons given
#: in tests/perf/test_physics.py::test_l4_is_faster_than_t4_for_every_fp16_workload
SUCCESSORS = (("P4", "T4"), ("T4", "L4"), ("A10G", "L40S"), ("V100", "A100"), ("A100", "H100"), ("H100", "H200"),
              ("H100", "B200"), ("H200", "B200"))


@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
def test_a_newer_gpu_is_never_predicted_slower_than_the_one_it_succeeds(profiles, precision):
    m = perf_model.load_model()
    compared = 0
    for name, prof in profiles.items():
        for anchored in (True, False):
            p = prof if anchored else dataclasses.replace(prof, measurements=())
            for count in (1, 8):
                qs = [HardwareQuery(a, count, 1, 100.0, precision) for pair in SUCCESSORS for a in pair]
                t = predict_many(p, qs)
                for k, (old, new) in enumerate(SUCCESSORS):
                    if m.measured(old) and m.measured(new):
                        continue  # both measured: the data decide
                    o, n = t.samples_per_second[2 * k], t.samples_per_second[2 * k + 1]
                    if not (t.fits[2 * k] and t.fits[2 * k + 1]):
                        continue
                    launch = float(prior.launch_bound_sps(prof.stats.kernels_per_step or np.nan, prof.stats.batch_size, count))
                    if o >= 0.99 * launch:  # bound by the host's kernel launches: the same on both
                        continue
                    assert n >= o * (1 - 1e-9), (name, anchored, count, old, o, new, n)
                    compared += 1
    assert compared >= 100


def test_distance_counts_generation_hops_and_an_unmeasured_precision():
    m = perf_model.load_model()
    assert perf_model.extrapolation_distance(m, "H100", "fp16") == 0  # measured
    assert perf_model.extrapolation_distance(m, "H200", "tf32") == 0  # Hopper, from a measured Hopper
    assert perf_model.extrapolation_distance(m, "B200", "bf16") == 1  # Hopper → Blackwell
    assert perf_model.extrapolation_distance(m, "B200", "fp8") == 2  # + FP8, never measured on a Hopper
    assert perf_model.extrapolation_distance(m, "L4", "fp16") == 2  # Volta → Ada (V100 is nearest in spec)
    assert features.hops("A100", "V100") == 1 and features.hops("L4", "V100") == 2 and features.hops("H200", "H100") == 0


def test_the_band_of_a_farther_extrapolation_is_never_narrower(profiles):
    m = perf_model.load_model()
    for regime, q in m.generation_quantiles.items():
        kind = regime.split("-", 1)[1]
        multi = np.array([regime.startswith("multi")] * 8)
        lo, hi = perf_model.generation_quantiles(m, kind, multi, np.arange(1, 9))
        assert (lo <= 0).all() and (hi >= 0).all(), regime  # the band holds its prediction
        assert (np.diff(lo) <= 0).all() and (np.diff(hi) >= 0).all(), (regime, lo, hi)  # 2 hops ⊇ 1 hop ⊇ …
    # through predict_many: the same GPU one step farther (FP8, never measured) gets a band at least as wide
    for name in ("resnet50", "bert-large", "gpt2"):
        for prof in (profiles[name], dataclasses.replace(profiles[name], measurements=())):
            for count in (1, 8):
                t = predict_many(prof, [HardwareQuery("B200", count, 1, 100.0, p) for p in ("bf16", "fp8")])
                if not t.fits.all():
                    continue
                width = np.log(t.high / t.low)
                assert width[1] >= width[0] - 1e-9, (name, count, width)


def test_an_unmeasured_gpu_a_generation_away_gets_the_calibrated_band(profiles):
    m = perf_model.load_model()
    prof = dataclasses.replace(profiles["resnet50"], measurements=())
    t = predict_many(prof, [HardwareQuery("B200", 1, 1, 0.0, "bf16")])
    lo, hi = m.generation_quantiles["single-stats-only"][0]
    assert t.low[0] == pytest.approx(t.samples_per_second[0] * np.exp(lo), rel=1e-9)
    assert t.high[0] == pytest.approx(min(t.samples_per_second[0] * np.exp(hi), t.high[0]), rel=1e-9)


def test_the_generation_band_has_its_provenance():
    doc = json.loads(perf_model.model_path().read_text())
    gb = doc["generation_band"]
    assert gb["levels"] == [0.1, 0.9] and "leave-one-generation-out" in gb["method"]
    for regime in ("single-stats-only", "multi-stats-only", "single-anchored", "multi-anchored"):
        assert gb["log_quantiles"][regime]["1"] and gb["from"][regime]["1"].endswith("residuals")
    trained = set(doc["training"]["accelerators"])
    assert set(gb["measured_precisions"]) == trained


def test_a_new_workload_keeps_its_wide_band_on_an_unmeasured_gpu(profiles):
    # the generation band's residuals are of workloads measured on older GPUs; one unlike every training workload
    # is never more certain on an unmeasured GPU than on a measured one
    m = perf_model.load_model()
    news = [n for n, p in profiles.items() if m.novel(features.work_from_stats(p.stats))]
    assert news
    for name in news:
        t = predict_many(profiles[name], [HardwareQuery(a, 1, 1, 0.0, "fp16") for a in ("B200", "H100")])
        if not t.fits.all():
            continue
        lo, hi = np.log(t.low / t.samples_per_second), np.log(t.high / t.samples_per_second)
        st = profiles[name].stats
        cap = np.log(float(prior.launch_bound_sps(st.kernels_per_step or np.nan, st.batch_size, 1)) / t.samples_per_second[0])
        assert lo[0] <= lo[1] + 1e-9 and hi[0] >= min(hi[1], cap) - 1e-9, (name, lo, hi, cap)  # high: below the launch cap


def test_the_carried_scaling_only_lowers_an_unmeasured_gpus_anchored_multi_device_speed(profiles, tmp_path):
    doc = json.loads(perf_model.model_path().read_text())
    mu = doc["generation_band"]["carried_scaling"]
    assert 0 < mu <= 1  # fit.calibrate_scaling, on the leave-one-generation-out folds
    doc["generation_band"]["carried_scaling"] = 0.0
    path = tmp_path / "model.json"
    path.write_text(json.dumps(doc))
    m = perf_model.load_model()
    accs = sorted(hardware.ACCELERATORS)
    lowered = 0
    for name in ("resnet50", "bert-large", "gnmt"):
        prof = profiles[name]
        assert prof.measurements  # anchored
        for count, nodes in ((1, 1), (4, 1), (8, 1), (8, 4)):
            qs = [HardwareQuery(a, count, nodes, 100.0, "fp16") for a in accs]
            new, old = predict_many(prof, qs), predict_many(prof, qs, model_file=str(path))
            measured = np.array([m.measured(a) for a in accs])
            assert np.array_equal(new.samples_per_second[measured], old.samples_per_second[measured])
            if count * nodes == 1:
                assert np.array_equal(new.samples_per_second, old.samples_per_second)
            assert (new.samples_per_second <= old.samples_per_second * (1 + 1e-12)).all(), name
            lowered += int((new.samples_per_second < old.samples_per_second * (1 - 1e-6)).sum())
    assert lowered > 0


def test_older_transitions_weigh_less_in_the_transition_prior():
    """fit.fit_transitions weighs a pair TRANSITION_RECENCY per generation between its newer accelerator and the newest
    of the fit (each (source, workload) group otherwise the same): the shipped prior records the weight; on the
    ≤ Ampere rows, which hold pairs ending at Ampere and older ones, the weight moves the coefficients, never the
    pairs, and they stay non-negative whatever it is."""
    from cloudfit.perf import fit as fit_mod

    doc = json.loads(perf_model.model_path().read_text())
    assert doc["transition_prior"]["recency"] == fit_mod.TRANSITION_RECENCY and 0 < fit_mod.TRANSITION_RECENCY < 1
    prep = fit_mod.prepare()
    rows = np.flatnonzero(np.array([features.generation(a) for a in prep.table["accelerator"]]) <= 3)  # ≤ Ampere
    shipped, flat, only_new = (fit_mod.fit_transitions(prep, rows, recency=r) for r in (fit_mod.TRANSITION_RECENCY, 1.0, 0.0))
    assert shipped["c"] != flat["c"] and shipped["c"] != only_new["c"] and shipped["pairs"] == flat["pairs"]
    newest = [p for p in flat["pairs"] if max(features.generation(x.split(":")[0]) for x in p[2:]) == 3]
    assert newest and len(newest) < len(flat["pairs"])
    assert min(shipped["c"]) >= 0.0 and min(only_new["c"]) >= 0.0  # non-negative whatever the weights


def test_an_unmeasured_gpus_anchored_band_is_never_narrower_than_a_measured_one(profiles):
    """An anchored prediction on an accelerator with no measured row carries its anchor's jump too: its band by
    distance holds the band the same query would get on a measured accelerator (the regime band widened with the
    hardware jump from the anchors), which the generation residuals, one or two hops from their anchors, do not see."""
    m = perf_model.load_model()
    far = [a for a in sorted(hardware.ACCELERATORS) if not m.measured(a) and perf_model.extrapolation_distance(m, a, "fp16")]
    assert far
    q_lo, q_hi = m.log_quantiles["single-anchored|seen"]
    g_lo, g_hi = m.generation_quantiles["single-anchored"][0]
    assert q_hi > g_hi  # the generation band alone is narrower on the fast side: the floor is what holds it
    seen = [n for n, p in profiles.items() if p.measurements and not m.novel(features.work_from_stats(p.stats))]
    assert len(seen) >= 3 and "resnet50" in seen
    for name in seen:
        prof = profiles[name]
        t = predict_many(prof, [HardwareQuery(a, 1, 1, 0.0, "fp16") for a in far])
        sps = t.samples_per_second[t.fits]
        st = prof.stats
        cap = np.log(float(prior.launch_bound_sps(st.kernels_per_step or np.nan, st.batch_size, 1)) / sps)
        lo, hi = np.log(t.low[t.fits] / sps), np.log(t.high[t.fits] / sps)
        assert len(sps) and (lo <= min(q_lo, g_lo) + 1e-9).all(), (name, lo)  # the jump scale only widens the band
        assert (hi >= np.minimum(q_hi, cap) - 1e-9).all(), (name, hi, cap)  # high: below the launch cap
