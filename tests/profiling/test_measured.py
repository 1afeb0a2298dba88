"""Every launch is a profile (issue 32 item 5): a run's measured speed becomes a measurement of the plan's profile
(or one kept under $CLOUDFIT_HOME/profiles/), status compares it with the plan's band, and the next plan anchors
on it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from cloudfit.errors import ProfileError, UsageError
from cloudfit.llm import anchor, zoo
from cloudfit.plan.llm import LLMJob, recommend_llm
from cloudfit.profiling import io as pio
from cloudfit.profiling import measured as M
from cloudfit.stacks import get
from cloudfit.types import LLMProfile
from cloudfit.workload import make_workload


def _workload(tokens=1e11, seq_len=8192):
    return make_workload(model="llama3-8b", samples=tokens / seq_len, deadline="7d", budget=None,
                         regions=["us-central1"], precision="bf16")


@pytest.fixture(scope="module")
def plan():
    return recommend_llm(_workload(), LLMJob(zoo.get("llama3-8b"), 1e11, 8192))


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("CLOUDFIT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_planned_speed_is_the_plans_for_the_cluster_that_runs(plan, home):
    f = M.planned_speed(plan, stack="torchtitan")
    json.dumps(f)  # goes into the state record
    assert f["tokens_per_second"] == pytest.approx(plan.layout["tokens_per_second"])
    assert f["low"] < f["tokens_per_second"] < f["high"]
    assert f["nodes"] == plan.chosen.config.nodes and f["accelerator"] == plan.chosen.config.offering.accelerator
    assert f["batch_size"] * f["nodes"] * f["gpus_per_node"] == plan.layout["global_batch"]  # fsdp over every GPU
    assert f["profile"] == str(home / "profiles" / "llama3-8b.json") and f["framework"] == "fsdp"
    # an alternative cluster: its own estimate's speed and band
    alt = plan.alternatives[0]
    fa = M.planned_speed(plan, alt.config)
    assert fa["tokens_per_second"] == pytest.approx(alt.samples_per_second * 8192) and fa["nodes"] == alt.config.nodes


def test_compare_inside_and_outside_the_band(plan, home):
    f = M.planned_speed(plan, stack="megatron")
    inside = M.compare(f, f["tokens_per_second"] * 0.95)
    assert not inside.outside and "within its band" in inside.line and inside.ratio == pytest.approx(0.95)
    slow = M.compare(f, f["tokens_per_second"] / 2.7)  # the issue's own trainer: ~2.7× the planned hours
    assert slow.outside and "below its band" in slow.line
    assert slow.hours_now == pytest.approx(plan.chosen.hours * 2.7) and slow.cost_now == pytest.approx(
        plan.chosen.cost_usd * 2.7)
    assert "--stack megatron" in slow.line and f"--profile {f['profile']}" in slow.line and "\n" not in slow.line
    fast = M.compare(f, f["high"] * 1.01)
    assert fast.outside and "above its band" in fast.line
    assert M.compare(plan, f["tokens_per_second"]).ratio == pytest.approx(1.0)  # a plan works as well as its facts
    with pytest.raises(UsageError):
        M.compare(f, 0.0)


def test_progress_counts_only_after_warm_up():
    assert M.measured_tokens_per_second({"step": 3, "tokens_per_second": 1e5}) is None
    assert M.measured_tokens_per_second({"step": 4, "tokens_per_second": 1e5}) == 1e5
    assert M.measured_tokens_per_second({"step": 9, "samples_per_second": 10.0}, seq_len=8192) == 81920.0
    assert M.measured_tokens_per_second({"step": 9}) is None and M.measured_tokens_per_second(None) is None
    st = get("megatron")
    med = M.from_events(st.parse_log(st.sample_log()), gpus=16, warmup_steps=10)
    assert med["tokens_per_second"] == pytest.approx(64 * 4096 / 3.9) and med["steps"] == [20]


def test_a_launch_becomes_a_measurement_that_the_next_plan_anchors_on(plan, home):
    f = M.planned_speed(plan, stack="torchtitan")
    slow = f["tokens_per_second"] * 0.3
    path, m = M.record_launch(None, f, slow, cluster="llama-run", memory_gib=60.0, steps=(10, 40))
    assert path == home / "profiles" / "llama3-8b.json"
    prof = pio.load_profile(path, llm_ok=True)
    assert isinstance(prof, LLMProfile) and prof.model == "llama3-8b" and prof.origin == "zoo"
    (got,) = prof.measurements
    assert got.source == "measured" and got.tokens_per_second == pytest.approx(slow) and got.memory_gib == 60.0
    assert got.note.startswith("launch llama-run on torchtitan") and "steps 10–40" in got.note
    assert (got.nodes, got.gpus_per_node, got.accelerator) == (f["nodes"], f["gpus_per_node"], f["accelerator"])
    # the same cluster relaunched replaces its measurement; another cluster adds one
    M.record_launch(None, f, slow * 1.1, cluster="llama-run")
    M.record_launch(None, f, slow * 1.2, cluster="llama-run-2")
    ms = pio.load_profile(path, llm_ok=True).measurements
    assert [x.host for x in ms] == ["llama-run", "llama-run-2"] and ms[0].tokens_per_second == pytest.approx(slow * 1.1)
    # `recommend --profile` anchors on it: the stack runs at ~0.3× the shipped constants, so the next plan buys more
    # GPUs for the same deadline and promises less per GPU
    prof = pio.load_profile(path, llm_ok=True)
    c, basis, peaks = anchor.for_search(prof, zoo.get("llama3-8b"), [])
    assert "anchored on" in basis
    job = replace(LLMJob(zoo.get("llama3-8b"), 1e11, 8192), anchored=c, anchor_basis=basis,
                  memory_anchors=tuple(peaks))
    again = recommend_llm(_workload(), job)
    per_gpu = lambda p: p.layout["tokens_per_second"] / p.layout["gpus"]  # noqa: E731
    assert per_gpu(again) < 0.6 * per_gpu(plan)
    assert again.layout["gpus"] > plan.layout["gpus"]


def test_a_measurement_that_breaks_physics_or_belongs_to_another_model_is_refused(plan, home, tmp_path):
    f = M.planned_speed(plan)
    with pytest.raises(ProfileError, match="peak"):
        M.record_launch(None, f, f["tokens_per_second"] * 50, cluster="x")
    with pytest.raises(ProfileError, match="memory"):
        M.record_launch(None, f, f["tokens_per_second"], cluster="x", memory_gib=10_000)
    assert not (home / "profiles" / "llama3-8b.json").exists()  # nothing half-written
    other = tmp_path / "other.json"
    pio.save_profile(pio.new_llm_profile(zoo.get("llama3-70b"), "zoo"), other)
    before = other.read_text()
    with pytest.raises(ProfileError, match="llama3-70b"):
        M.record_launch(other, f, f["tokens_per_second"], cluster="x")
    assert other.read_text() == before


def test_the_plans_own_llm_profile_is_where_launches_go(plan, home, tmp_path):
    mine = tmp_path / "my-stack.json"
    pio.save_profile(pio.new_llm_profile(zoo.get("llama3-8b"), "zoo"), mine)
    with_profile = replace(plan, workload=replace(plan.workload, profile_path=str(mine)))
    assert M.default_profile_path(with_profile) == mine
    f = M.planned_speed(with_profile)
    path, _ = M.record_launch(None, f, f["tokens_per_second"], cluster="r")
    assert path == mine and len(pio.load_profile(mine, llm_ok=True).measurements) == 1
    assert M.default_profile_path(plan, tmp_path / "explicit.json") == tmp_path / "explicit.json"


def test_a_plan_records_its_profile_in_its_layout_validated_on_load(plan, home, tmp_path):
    """`recommend --profile P` writes `layout.profile`; a launch's row goes there. Old plans (none) still load;
    anything but a path is refused in one line."""
    from cloudfit.errors import PlanError
    from cloudfit.plan.io import load_plan, plan_to_dict

    mine = tmp_path / "mine.json"
    pio.save_profile(pio.new_llm_profile(zoo.get("llama3-8b"), "zoo"), mine)
    d = plan_to_dict(plan)
    assert "profile" not in d["layout"]
    (tmp_path / "old.json").write_text(json.dumps(d))
    assert M.default_profile_path(load_plan(tmp_path / "old.json")) == home / "profiles" / "llama3-8b.json"
    d["layout"]["profile"] = str(mine)
    (tmp_path / "new.json").write_text(json.dumps(d))
    assert M.planned_speed(load_plan(tmp_path / "new.json"))["profile"] == str(mine)
    for bad in (5, "", ["a"]):
        d["layout"]["profile"] = bad
        (tmp_path / "bad.json").write_text(json.dumps(d))
        with pytest.raises(PlanError, match="layout.profile"):
            load_plan(tmp_path / "bad.json")


def test_a_local_rehearsal_is_not_recorded_and_a_run_before_warm_up_says_so(plan, home):
    """A rehearsal runs a shrunk model on CPU: its speed is not the plan model's on the plan's GPUs."""
    from types import SimpleNamespace

    from cloudfit.launcher import Launch, record_measured

    class Store:
        info: dict = {"progress": {"step": 2, "tokens_per_second": 9000.0}}

        def find_cluster(self, name):
            return SimpleNamespace(info=self.info)

        def update_cluster(self, name, info=None, **kw):
            self.info.update(info or {})

    f = M.planned_speed(plan)
    spec = SimpleNamespace(name="r", record={"planned_speed": f, "rehearsal": {"planned": "x"}}, configs=(None,))
    ex = SimpleNamespace(store=Store(), backend="gcp")
    result = SimpleNamespace(config=None)
    assert "shrunk model on CPU" in record_measured(Launch(spec, ex), result)
    spec.record.pop("rehearsal")
    local = SimpleNamespace(store=Store(), backend="local")  # this machine has none of the plan's GPUs
    assert "the local backend ran on this machine, which has no" in record_measured(Launch(spec, local), result)
    assert "no speed after warm-up (step 2" in record_measured(Launch(spec, ex), result)
    assert not (home / "profiles" / "llama3-8b.json").exists()
    Store.info["progress"] = {"step": 9, "tokens_per_second": f["tokens_per_second"] * 100}  # beyond the GPUs' peak
    line = record_measured(Launch(spec, ex), result)
    assert line.startswith("not recorded in a profile:") and "peak" in line and "\n" not in line
    Store.info["progress"] = {"step": 9, "tokens_per_second": f["tokens_per_second"] * 0.8}
    line = record_measured(Launch(spec, ex), result)
    assert "recorded in" in line and len(pio.load_profile(home / "profiles" / "llama3-8b.json", llm_ok=True).measurements) == 1
