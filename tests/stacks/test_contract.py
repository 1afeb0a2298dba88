"""One contract every registered stack passes (a stack added to ``cloudfit.stacks.REGISTRY`` joins it by itself):
it renders the planner's plans or refuses them in one line, parses its own sample log into progress with a step and
a speed, names a known framework, and its module imports nothing heavy."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cloudfit import stacks
from cloudfit.errors import UsageError
from cloudfit.llm import zoo
from cloudfit.llm.step import FRAMEWORKS
from cloudfit.plan.llm import LLMJob, recommend_llm
from cloudfit.stacks import CheckpointSaved, Progress, Stack, StackCommand, StackJob
from cloudfit.stacks.base import FRAMEWORKS as BASE_FRAMEWORKS
from cloudfit.workload import make_workload

NAMES = stacks.available()
HEAVY = ("torch", "torchtitan", "megatron", "accelerate", "transformers", "numpy", "sky", "google.cloud")


def _plan(model, layout=None, tokens=2e10, precision="bf16"):
    job = LLMJob(zoo.get(model), tokens, 8192, layout=layout, precision=precision)
    w = make_workload(model=model, samples=tokens / 8192, deadline="30d", budget=None, regions=["us-central1"],
                      precision=precision)
    return recommend_llm(w, job)


@pytest.fixture(scope="module")
def jobs() -> list[StackJob]:
    out = [StackJob.from_plan(_plan("llama3-8b")),
           StackJob.from_plan(_plan("llama3-8b", "tp=2,pp=1,ac=full")),
           StackJob.from_plan(_plan("llama3-70b", "tp=8,pp=4,vp=1")),
           StackJob.from_plan(_plan("llama3-70b", "tp=8,pp=4,vp=2")),
           StackJob.from_plan(_plan("llama3-8b", "cp=2,tp=1,pp=1")),
           StackJob.from_plan(_plan("llama3-8b", "tp=1,pp=1", precision="fp8"))]
    return [j.replace(checkpoint_dir="gs://bucket/run/checkpoints") for j in out]


def test_the_registry_names_the_stacks_the_issue_asks_for():
    assert set(stacks.names()) >= {"torchtitan", "megatron", "accelerate", "custom", "cloudfit"}
    assert {"torchtitan", "custom", "cloudfit"} <= set(NAMES)
    assert BASE_FRAMEWORKS == FRAMEWORKS or set(BASE_FRAMEWORKS) == set(FRAMEWORKS)
    with pytest.raises(UsageError, match="unknown stack") as e:
        stacks.get("deepspeed-chat")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name", NAMES)
def test_names_framework_and_guarantee(name):
    s = stacks.get(name)
    assert isinstance(s, Stack) and s.name == name
    assert s.framework in FRAMEWORKS
    assert s.guarantee and "\n" not in s.guarantee
    assert s.launcher in ("torchrun", "accelerate", "none")
    assert stacks.get(name.upper()) is s


@pytest.mark.parametrize("name", NAMES)
def test_renders_each_plan_or_refuses_in_one_line(name, jobs):
    s = stacks.get(name)
    rendered = 0
    for j in jobs:
        why = s.refuse(j)
        if why is not None:
            assert isinstance(why, str) and why and "\n" not in why and len(why) <= 300, why
            with pytest.raises(UsageError) as e:
                s.command(j)
            assert str(e.value) == why
            continue
        cmd = s.command(j, ["--user-flag"] if name != "custom" else ["python", "train.py"])
        assert isinstance(cmd, StackCommand) and all(isinstance(a, str) for a in cmd.argv)
        assert cmd.argv and ("--user-flag" in cmd.argv or cmd.argv == ("python", "train.py"))
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in {**cmd.files, **cmd.env}.items())
        assert all("\n" not in n for n in cmd.notes) and cmd.guarantee
        assert all(not p.startswith("/") and ".." not in p.split("/") for p in cmd.files)  # inside the run folder
        rendered += 1
    assert rendered >= 1, f"{name} refused every plan"


@pytest.mark.parametrize("name", NAMES)
def test_layout_ok_agrees_with_refuse_and_is_cheap(name, jobs):
    import time

    from cloudfit.llm.layout import parse

    s = stacks.get(name)
    lay = parse("fsdp=8,tp=8,pp=4,vp=2,mb=1,ga=8,schedule=interleaved", gpus=256)
    shape = zoo.get("llama3-70b").to_dict()
    t = time.perf_counter()
    for _ in range(1000):
        s.layout_ok(lay, shape)
    assert time.perf_counter() - t < 0.5  # the planner may ask per candidate layout
    why = s.layout_ok(lay, shape)
    assert why is None or ("\n" not in why and why)
    assert isinstance(s.pins(shape), dict)


@pytest.mark.parametrize("name", NAMES)
def test_parses_its_own_sample_log(name):
    s = stacks.get(name)
    lines = s.sample_log()
    assert lines, f"{name} has no sample log"
    evs = list(s.parse_log(lines))
    prog = [e for e in evs if isinstance(e, Progress)]
    assert all(p.step >= 0 for p in prog)
    speed = [p for p in prog if p.job_tokens_per_second(8) is not None]  # (a memory-only line may carry none)
    assert len(speed) >= 2 and all(p.job_tokens_per_second(8) > 0 for p in speed)
    assert [p.step for p in speed] == sorted(p.step for p in speed)
    assert all(isinstance(e, (Progress, CheckpointSaved)) for e in evs)
    assert s.parse_line("") is None and s.parse_line("unrelated text 12 34") is None
    for p in prog:
        assert p.mfu is None or 0 < p.mfu < 1
        assert p.memory_gib is None or 0 < p.memory_gib < 1000


@pytest.mark.parametrize("name", NAMES)
def test_no_heavy_import_at_module_import(name):
    code = (f"import sys; import cloudfit.stacks as s; s.get({name!r}); "
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().replace("'", '"')) == []


def test_a_missing_stack_module_is_one_line(monkeypatch):
    monkeypatch.setitem(stacks.REGISTRY, "ghost", "no_such_module")
    with pytest.raises(UsageError, match="not available") as e:
        stacks.get("ghost")
    assert "\n" not in str(e.value)


def test_custom_hands_over_the_layout_and_reads_the_progress_format(jobs):
    from cloudfit.executors.sky import PROGRESS_TAG
    from cloudfit.stacks.custom import LAYOUT_FILE, PROGRESS_TAG as TAG, progress_line

    assert TAG == PROGRESS_TAG  # one progress format for cloudfit's lines and a user's
    j = jobs[3]
    cmd = stacks.get("custom").command(j, ["python", "train.py"])
    e = cmd.env
    assert (e["CLOUDFIT_DP_SHARD"], e["CLOUDFIT_TP"], e["CLOUDFIT_PP"], e["CLOUDFIT_VP"]) == (
        str(j.dp_shard), str(j.tp), str(j.pp), str(j.virtual_stages))
    assert e["CLOUDFIT_GLOBAL_BATCH"] == str(j.global_batch) and e["CLOUDFIT_SEQ_LEN"] == "8192"
    assert e["CLOUDFIT_CHECKPOINT_DIR"] == j.checkpoint_dir and e["CLOUDFIT_LAYOUT_FILE"] == LAYOUT_FILE
    d = json.loads(cmd.files[LAYOUT_FILE])
    assert d["global_batch"] == j.global_batch and d["shape"]["layers"] == 80 and d["pp_schedule"] == "interleaved"
    from cloudfit.llm.layout import parse

    assert parse(e["CLOUDFIT_LAYOUT"], gpus=j.gpus).global_batch == j.global_batch  # the text reads back
    s = stacks.get("custom")
    assert s.parse_line(progress_line(5, tokens_per_second=1e5, mfu=0.4)) == Progress(5, tokens_per_second=1e5, mfu=0.4)
    assert s.parse_line('CLOUDFIT_PROGRESS {"checkpoint_step": 7}') == CheckpointSaved(7)
    assert s.parse_line("CLOUDFIT_PROGRESS {not json") is None
    assert s.parse_line('CLOUDFIT_PROGRESS {"step": "x"}') is None


def test_cloudfits_own_stack_emits_what_its_trainer_parses(jobs):
    from cloudfit.train_llm import parse_args

    own = stacks.get("cloudfit")
    j = jobs[1]
    cmd = own.command(j)
    a = parse_args(list(cmd.argv[2:]), world_size=j.gpus)
    assert (a.dp_shard, a.tp, a.pp, a.cp, a.ac, a.micro_batch, a.grad_accum) == (
        j.dp_shard, j.tp, j.pp, j.cp, j.ac, j.micro_batch, j.grad_accum)
    assert a.steps == j.steps and a.checkpoint_dir == j.checkpoint_dir
    assert "interleaved" in own.refuse(jobs[3]) and "fp8" in own.refuse(jobs[5])
