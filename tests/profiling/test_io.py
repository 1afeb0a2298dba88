"""Profile files: round trip, validation with one clear line, atomic writes, shipped names, add."""

from __future__ import annotations

import copy
import json
import os

import pytest

from cloudfit import resources
from cloudfit.errors import ProfileError
from cloudfit.profiling import io
from cloudfit.types import Measurement, ModelStats, OpClassStats, Profile, StepTime


def _profile(**overrides) -> Profile:
    stats = ModelStats(parameters=1000, flops_per_sample=3e6, forward_flops_per_sample=1e6, gradient_bytes=4000,
                       activation_bytes_per_sample=2048.0,
                       op_classes={"matmul": OpClassStats(3e6, 1e5), "elementwise": OpClassStats(100.0, 800.0)},
                       batch_size=32, input="10 features", task="test")
    m = Measurement(accelerator="cpu", count=1, nodes=1, batch_size_per_device=32, precision="fp32",
                    samples_per_second=1234.5, step_time_s=StepTime(0.0259, 0.031), note="n", peak_memory_bytes=10**8,
                    op_time_share={"matmul": 0.75, "elementwise": 0.25}, device_name="CPU x", torch_version="2.13.0",
                    host="h", measured_at="2026-11-22T00:00:00+00:00")
    return Profile(model="toy", stats=overrides.pop("stats", stats), measurements=(m,))


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "toy.json"
    io.save_profile(_profile(), path)
    return path


def test_round_trip(saved):
    d = json.loads(saved.read_text())
    assert d["schema_version"] == 2 and d["kind"] == "cnn" and d["model"] == "toy"
    assert d["measurements"][0]["step_time_s"] == {"median": 0.0259, "p90": 0.031}
    p = io.load_profile(saved)
    assert p == io.profile_from_dict(d) and p.measurements[0].samples_per_second == 1234.5
    assert p.stats.op_classes["matmul"] == OpClassStats(3e6, 1e5)


def _broken(saved, mutate) -> dict:
    d = json.loads(saved.read_text())
    mutate(d)
    return d


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(schema_version=3), "unsupported schema_version 3 (this cloudfit reads 1 and 2)"),
    (lambda d: d.pop("schema_version"), "missing field 'schema_version'"),
    (lambda d: d.pop("stats"), "missing field 'stats'"),
    (lambda d: d["stats"].pop("parameters"), "stats: missing field 'parameters'"),
    (lambda d: d["stats"].update(flops_per_sample=0), "flops_per_sample must be positive, got 0"),
    (lambda d: d["stats"].update(parameters=True), "parameters must be a number, got True"),
    (lambda d: d["stats"].update(batch_size=2.5), "batch_size must be a whole number"),
    (lambda d: d["stats"]["op_classes"].update(tensorcore={"flops": 1, "bytes": 1}), "unknown op class 'tensorcore'"),
    (lambda d: d["stats"].update(forward_flops_per_sample=9e9), "exceeds flops_per_sample"),
    (lambda d: d["measurements"][0].update(samples_per_second=-5), "measurements[0]: samples_per_second must be positive, got -5"),
    (lambda d: d["measurements"][0].update(batch_size_per_device=0), "batch_size_per_device must be positive"),
    (lambda d: d["measurements"][0].pop("accelerator"), "measurements[0]: missing field 'accelerator'"),
    (lambda d: d["measurements"][0].update(precision="fp64"), "precision must be one of"),
    (lambda d: d["measurements"][0]["step_time_s"].update(p90=-1), "p90 must be positive"),
    (lambda d: d["measurements"][0]["op_time_share"].update(matmul=1.5), "at most 1"),
    (lambda d: d.update(measurements={}), "measurements: expected a list"),
])
def test_validation_rejects_with_one_line_naming_the_file(saved, mutate, message):
    saved.write_text(json.dumps(_broken(saved, mutate)))
    with pytest.raises(ProfileError) as e:
        io.load_profile(saved)
    text = str(e.value)
    assert message in text and str(saved) in text and "\n" not in text


def test_corrupt_and_missing_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1, "model": ')
    with pytest.raises(ProfileError, match=r"bad.json: not valid JSON \(Expecting value at line 1"):
        io.load_profile(bad)
    with pytest.raises(ProfileError, match="profile .*missing.json not found"):
        io.load_profile(tmp_path / "missing.json")
    bad.write_text("[1, 2]")
    with pytest.raises(ProfileError, match="expected an object, got list"):
        io.load_profile(bad)


def test_save_is_atomic(saved, monkeypatch):
    before = saved.read_text()

    def crash(src, dst):
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", crash)
    changed = _profile()
    with pytest.raises(OSError):
        io.save_profile(changed.with_measurement(changed.measurements[0]), saved)
    assert saved.read_text() == before  # the old profile is untouched
    assert [p.name for p in saved.parent.iterdir()] == [saved.name]  # and no temporary file is left


def test_resolve_profile(tmp_path, monkeypatch, saved):
    assert io.resolve_profile(str(saved)) == saved
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    (shipped / "resnet50.json").write_text(saved.read_text())
    monkeypatch.setattr(resources, "profiles_dir", lambda: shipped)
    assert io.resolve_profile("resnet50") == shipped / "resnet50.json"
    with pytest.raises(ProfileError, match=r"no shipped profile of that name \(shipped: resnet50\)"):
        io.resolve_profile("resnet5")
    with pytest.raises(ProfileError, match="profile .*nope.json not found"):
        io.resolve_profile(str(tmp_path / "nope.json"))


def test_add_measurement_validates_and_canonicalises(saved):
    m = Measurement(accelerator="nvidia-tesla-a100", count=8, nodes=2, batch_size_per_device=256, precision="fp16",
                    samples_per_second=41000.0, source="reported", note="DLE")
    p = io.add_measurement(saved, m)
    assert len(p.measurements) == 2 and p.measurements[-1].accelerator == "A100"
    assert io.load_profile(saved) == p
    before = saved.read_text()
    for bad, message in [
        (dict(accelerator="Z100"), "unknown accelerator 'Z100'"),
        (dict(samples_per_second=0.0), "samples per second must be a positive number"),
        (dict(count=0), "count must be a positive integer"),
        (dict(batch_size_per_device=-4), "batch size per device must be a positive integer"),
        (dict(source="rumour"), "source must be one of"),
        (dict(precision="int4"), "precision must be one of"),
    ]:
        with pytest.raises(ProfileError, match=message):
            io.add_measurement(saved, Measurement(**{**copy.copy(m.__dict__), **bad}))
        assert saved.read_text() == before


def test_merge_keeps_other_measurements_and_supersedes_the_same_setup():
    old = _profile()
    other = Measurement(accelerator="A100", count=1, nodes=1, batch_size_per_device=256, precision="fp16",
                        samples_per_second=2600.0, source="reported")
    old = old.with_measurement(other)
    new = _profile()
    merged = io.merge_measurements(old, new)
    assert merged.measurements == (other, new.measurements[0])


def test_kernels_per_step_is_optional(tmp_path):
    import dataclasses

    p = _profile()
    counted = dataclasses.replace(p, stats=dataclasses.replace(p.stats, kernels_per_step=57))
    io.save_profile(counted, tmp_path / "k.json")
    assert io.load_profile(tmp_path / "k.json").stats.kernels_per_step == 57
    d = io.profile_to_dict(p)
    del d["stats"]["kernels_per_step"]  # a profile written before the field existed
    assert io.profile_from_dict(d).stats.kernels_per_step is None
    d["stats"]["kernels_per_step"] = -3
    with pytest.raises(ProfileError, match="kernels_per_step must be positive"):
        io.profile_from_dict(d)
