"""``recommend --profile`` respects the profile's measured peaks (issue 24 item 4): the cluster search refuses the
layouts the stack's real memory would not hold, and reports the anchored peak of the layout it picks."""

from __future__ import annotations

import json

import pytest

from cloudfit.llm import anchor as A
from cloudfit.llm import memory as mem
from cloudfit.llm.layout import Layout
from cloudfit.llm.predict import constants
from cloudfit.llm.stats import token_stats
from cloudfit.llm.zoo import get

SETUP = A.Setup("H100", 8, 1, "bf16", 8192, 1, "fsdp=8,mb=1,ac=selective", "fsdp")
ARGS = ("--tokens", "1e10", "--seq-len", "8192", "--deadline", "7d", "--accelerators", "H100")


def _model():
    """The stack-generic prediction at the profile's setup: a run at its speed anchors speed 1×."""
    return A._predict(get("llama3-8b"), SETUP, constants())


def _profile(cli, path, ratio: float | None):
    """A profile of one 8×H100 run at the modelled speed, its peak ``ratio`` × the modelled one (None: no peak)."""
    m = _model()
    extra = () if ratio is None else ("--memory-gib", repr(m.memory.total_gib * ratio))
    r = cli("profile", "add", str(path), "--model", "llama3-8b", "--accelerator", "H100", "--count", "8", "--nodes",
            "1", "--precision", "bf16", "--seq-len", "8192", "--batch-size", "1", "--framework", "fsdp", "--layout",
            SETUP.layout, "--tokens-per-second", repr(m.tokens_per_second), *extra)
    assert r.exit_code == 0, r.stderr
    return path


def _plan(cli, *args):
    r = cli("recommend", *args, *ARGS, "--json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def _generic_gib(layout: dict) -> float:
    """The stack-generic peak of a plan's layout (the trainer's stack, as the search models it)."""
    lay = Layout.from_dict(layout["degrees"])
    return mem.estimate(token_stats(get("llama3-8b"), 8192), lay, capacity_gib=80.0).total_gib


def test_a_peak_above_the_model_refuses_layouts_it_would_overflow(cli, tmp_path):
    plain = _plan(cli, "--profile", str(_profile(cli, tmp_path / "plain.json", None)))
    up = _plan(cli, "--profile", str(_profile(cli, tmp_path / "up.json", 1.4)))
    P, U = plain["plan"]["layout"], up["plan"]["layout"]
    assert U["memory_gib_per_device"] >= _generic_gib(U) * 1.05  # the anchored peak, above the model's
    assert U["memory_gib_per_device"] <= U["memory_capacity_gib"]
    # the layout the unanchored search picked would need more than the GPU holds on this stack
    fit = A.fit_memory([A.memory_point(_model().memory, float(json.loads((tmp_path / "up.json").read_text())
                                                                   ["measurements"][0]["memory_gib"]))])
    was = A.apply_memory(mem.estimate(token_stats(get("llama3-8b"), 8192), Layout.from_dict(P["degrees"]),
                                      capacity_gib=80.0), fit)
    assert not was.fits and U["text"] != P["text"]
    assert up["plan"]["chosen"]["cost_usd"] >= plain["plan"]["chosen"]["cost_usd"]  # fewer layouts: never cheaper
    for row in U["ranking"]:
        assert row["memory_gib_per_device"] <= U["memory_capacity_gib"]
    assert U["ranking"][0]["memory_gib_per_device"] == pytest.approx(U["memory_gib_per_device"])
    assert up["candidates"][0]["memory_gib_per_device"] == U["memory_gib_per_device"]
    basis = up["plan"]["provenance"]["prediction_basis"]
    assert "memory anchored on 1 measured peak" in basis and "memory anchored" not in \
        plain["plan"]["provenance"]["prediction_basis"]
    text = cli("recommend", "--profile", str(tmp_path / "up.json"), *ARGS).stdout
    assert f"{U['memory_gib_per_device']:,.1f} of 80 GiB per GPU" in text.split("Layout #1:")[1].splitlines()[0]


def test_a_peak_at_the_model_plans_as_without_one(cli, tmp_path):
    plain = _plan(cli, "--profile", str(_profile(cli, tmp_path / "plain.json", None)))
    at = _plan(cli, "--profile", str(_profile(cli, tmp_path / "at.json", 1.0)))
    P, T = plain["plan"]["layout"], at["plan"]["layout"]
    assert T["text"] == P["text"] and T["tokens_per_second"] == P["tokens_per_second"]
    assert T["memory_gib_per_device"] == pytest.approx(P["memory_gib_per_device"], rel=1e-5)
    assert at["plan"]["chosen"]["config"] == plain["plan"]["chosen"]["config"]
    assert at["plan"]["chosen"]["cost_usd"] == pytest.approx(plain["plan"]["chosen"]["cost_usd"], rel=1e-9)
    assert [r["layout"] for r in T["ranking"]] == [r["layout"] for r in P["ranking"]]


def test_a_lower_peak_never_refuses_what_the_model_let_fit(cli, tmp_path):
    plain = _plan(cli, "--profile", str(_profile(cli, tmp_path / "plain.json", None)))
    down = _plan(cli, "--profile", str(_profile(cli, tmp_path / "down.json", 0.8)))
    P, D = plain["plan"]["layout"], down["plan"]["layout"]
    assert D["memory_gib_per_device"] <= _generic_gib(D)
    assert down["plan"]["provenance"]["layouts_fit"] >= plain["plan"]["provenance"]["layouts_fit"]
    assert down["plan"]["chosen"]["cost_usd"] <= plain["plan"]["chosen"]["cost_usd"] * (1 + 1e-9)


@pytest.mark.parametrize("value", ["-5", "\"lots\"", "1e9"])
def test_a_bad_peak_in_the_profile_is_one_line_exit_2(cli, tmp_path, value):
    f = _profile(cli, tmp_path / "p.json", 1.2)
    d = json.loads(f.read_text())
    f.write_text(json.dumps(d).replace(f'"memory_gib": {d["measurements"][0]["memory_gib"]}', f'"memory_gib": {value}'))
    assert f.read_text() != json.dumps(d)
    r = cli("recommend", "--profile", str(f), *ARGS)
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
