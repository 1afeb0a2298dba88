"""``recommend`` reads its parsed catalog and built space back from ``cloudfit.cache`` (issue 25: speed) —
and never a stale or corrupt entry: a changed catalog, profile or option is a miss; a broken entry is a miss."""

from __future__ import annotations

import shutil

import pytest

from cloudfit import cache
from cloudfit.plan import recommend
from cloudfit.plan.io import plan_to_dict
from cloudfit.resources import default_catalog, profiles_dir
from cloudfit.workload import make_workload


def _w(**kw):
    return make_workload(**{"model": "resnet50", "samples": 3e7, "deadline": "12h", "max_nodes": 4,
                            "accelerators": ["T4", "L4"], **kw})


def _same(a, b) -> bool:
    da, db = plan_to_dict(a), plan_to_dict(b)
    for d in (da, db):
        d["provenance"].pop("created_at")
    return da == db


@pytest.fixture(autouse=True)
def _no_process_memo(monkeypatch):
    """The loader also keeps each parsed file for the process (``loader._PARSED``): start each test without it,
    so that what is tested is the disk cache."""
    from cloudfit.catalog import loader

    monkeypatch.setattr(loader, "_PARSED", {})


def _entries(kind):
    return sorted((cache.folder() / kind).glob("*.pickle"))


def test_a_second_recommend_reads_the_space_back_and_plans_the_same(tmp_path, monkeypatch):
    first = recommend(_w())
    assert len(_entries("space")) == 1 and len(_entries("catalog")) == 1
    again = recommend(_w())
    assert _same(first, again)
    monkeypatch.setenv("CLOUDFIT_CACHE", "0")
    assert _same(first, recommend(_w()))
    # the space does not depend on the samples or the limits: another deadline reuses it
    monkeypatch.delenv("CLOUDFIT_CACHE")
    recommend(_w(samples=5e7, deadline="30h"))
    assert len(_entries("space")) == 1
    recommend(_w(max_nodes=3))  # an option that shapes the space is another entry
    assert len(_entries("space")) == 2


def test_a_changed_catalog_is_never_answered_from_the_cache(tmp_path):
    cat = tmp_path / "gcp.csv"
    shutil.copy(default_catalog(), cat)
    before = recommend(_w(), catalog=cat)
    lines = cat.read_text().splitlines()
    header = lines[0].split(",")
    col = header.index("spot_price_per_hour")
    chosen = before.chosen.config.offering
    for i, line in enumerate(lines[1:], 1):  # the chosen VM's spot price up tenfold in its zone
        f = line.split(",")
        if f[0] == chosen.machine_type and chosen.zone in line and f[col]:
            f[col] = f"{float(f[col]) * 10:.5f}"
            lines[i] = ",".join(f)
    cat.write_text("\n".join(lines) + "\n")
    after = recommend(_w(), catalog=cat)
    assert after.provenance["catalog_digest"] != before.provenance["catalog_digest"]
    assert after.chosen.config.offering.zone != chosen.zone or after.chosen.cost_usd != before.chosen.cost_usd
    assert len(_entries("space")) == 2 and len(_entries("catalog")) == 2


def test_a_changed_profile_file_is_never_answered_from_the_cache(tmp_path, monkeypatch):
    import json

    prof = tmp_path / "resnet50.json"
    shutil.copy(profiles_dir() / "resnet50.json", prof)
    monkeypatch.chdir(tmp_path)
    w = make_workload(profile=str(prof), samples=3e7, deadline="12h", max_nodes=4, accelerators=["T4", "L4"])
    before = recommend(w)
    d = json.loads(prof.read_text())
    d["stats"]["batch_size"] = d["stats"]["batch_size"] // 2  # a smaller batch: another prediction
    prof.write_text(json.dumps(d))
    after = recommend(w)
    assert after.chosen.samples_per_second != before.chosen.samples_per_second
    assert len(_entries("space")) == 2


@pytest.mark.parametrize("garbage", [b"", b"\x80\x05not a pickle", b"\x80\x04\x95" + b"\x00" * 40])
def test_a_corrupt_or_foreign_entry_is_a_miss_not_an_error(garbage):
    first = recommend(_w())
    for kind in ("space", "catalog"):
        for p in _entries(kind):
            p.write_bytes(garbage)
    assert _same(first, recommend(_w()))
    import pickle

    for p in _entries("space"):  # a whole pickle, but under another key
        p.write_bytes(pickle.dumps(("another key", 42)))
    assert _same(first, recommend(_w()))


def test_an_unwritable_cache_folder_only_costs_speed(tmp_path, monkeypatch):
    blocker = tmp_path / "home"
    blocker.write_text("a file where the folder should be")
    monkeypatch.setenv("CLOUDFIT_HOME", str(blocker))
    plan = recommend(_w())
    assert plan.chosen is not None


def test_a_changed_llm_peak_is_never_answered_from_the_cache(cli, tmp_path):
    """Only the measured peak of an LLM profile changes (its speed, hence the anchored constants, do not): the
    space is built again, and the search refuses what the higher peak would overflow."""
    import json

    f = tmp_path / "mine.json"
    r = cli("profile", "add", str(f), "--model", "llama3-8b", "--accelerator", "H100", "--count", "8", "--nodes", "1",
            "--precision", "bf16", "--seq-len", "8192", "--batch-size", "1", "--framework", "fsdp", "--layout",
            "fsdp=8,mb=1,ac=selective", "--tokens-per-second", "50000", "--memory-gib", "50")
    assert r.exit_code == 0, r.stderr
    args = ("recommend", "--profile", str(f), "--tokens", "1e10", "--seq-len", "8192", "--deadline", "7d",
            "--accelerators", "H100", "--json")
    before = json.loads(cli(*args).stdout)["plan"]["layout"]
    n = len(_entries("llm-space"))
    d = json.loads(f.read_text())
    d["measurements"][0]["memory_gib"] = 75.0
    f.write_text(json.dumps(d))
    after = json.loads(cli(*args).stdout)["plan"]["layout"]
    assert len(_entries("llm-space")) > n  # built again (a plan that fills memory also builds its roomy twin)
    assert after["memory_gib_per_device"] != before["memory_gib_per_device"]
    assert after["memory_gib_per_device"] <= after["memory_capacity_gib"]
