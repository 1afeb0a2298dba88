"""``StackJob``: a plan's layout block in every stack's hands — read from real plans, validated, re-laid out on
another cluster with the global batch kept; events and the after-warm-up median."""

from __future__ import annotations

import dataclasses

import pytest

from cloudfit.errors import UsageError
from cloudfit.llm import zoo
from cloudfit.plan.llm import LLMJob, recommend_llm
from cloudfit.stacks.base import CheckpointSaved, Progress, StackJob, median_rate, relayout
from cloudfit.workload import make_workload


@pytest.fixture(scope="module")
def plan():
    job = LLMJob(zoo.get("llama3-70b"), 2e10, 8192, layout="tp=8,pp=4,vp=2")
    w = make_workload(model="llama3-70b", samples=2e10 / 8192, deadline="30d", budget=None, regions=["us-central1"],
                      precision="bf16")
    return recommend_llm(w, job)


def test_from_plan_keeps_the_plans_layout(plan):
    L, d = plan.layout, plan.layout["degrees"]
    j = StackJob.from_plan(plan)
    assert (j.dp_replicate, j.dp_shard, j.tp, j.pp, j.cp, j.micro_batch, j.grad_accum, j.ac) == (
        d["dp_replicate"], d["dp_shard"], d["tp"], d["pp"], d["cp"], d["micro_batch"], d["grad_accum"], d["ac"])
    assert j.virtual_stages == 2 and j.pp_schedule == "interleaved"
    assert j.global_batch == L["global_batch"] and j.steps == L["steps"] and j.seq_len == 8192
    assert j.gpus == L["gpus"] == j.world and j.nodes == plan.chosen.config.nodes
    assert j.model == "llama3-70b" and j.shape["layers"] == 80 and j.trainer_model_args[:2] == ("--shape", "llama3-70b")
    # the checkpoint interval in steps is the plan's Young/Daly hours at the plan's speed
    step_s = L["global_batch"] * 8192 / L["tokens_per_second"]
    assert j.checkpoint_every_steps == max(1, round(L["checkpoint"]["interval_h"] * 3600 / step_s))
    assert j.to_dict()["layout"] == j.layout_text()


def test_another_cluster_keeps_the_global_batch(plan):
    j = StackJob.from_plan(plan)
    cfg = plan.chosen.config
    fewer = dataclasses.replace(cfg, nodes=cfg.nodes // 2)
    k = StackJob.from_plan(plan, fewer)
    assert k.gpus == fewer.accelerators and k.world == k.gpus
    assert k.tp == j.tp and k.global_batch >= j.global_batch and k.global_batch < j.global_batch + k.dp * k.micro_batch
    assert relayout({"dp_replicate": 1, "dp_shard": 4, "tp": 8, "pp": 1, "cp": 1, "micro_batch": 2, "grad_accum": 4},
                    32, 16, 4) == {"dp_replicate": 1, "dp_shard": 16, "tp": 1, "pp": 1, "cp": 1, "micro_batch": 2,
                                   "grad_accum": 1}  # tp=8 does not fit a 4-GPU node: FSDP over all 16


@pytest.mark.parametrize("change,why", [
    ({"layout": None}, "no layout block"),
    ({"layout": {"degrees": {"tp": 1}}}, "malformed"),
    ({"layout": "text"}, "no layout block"),
])
def test_a_bad_plan_is_one_line(plan, change, why):
    bad = dataclasses.replace(plan, **change)
    with pytest.raises(UsageError, match=why) as e:
        StackJob.from_plan(bad)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kw,why", [
    ({"tp": 0}, "tp must be a positive integer"), ({"ac": "some"}, "ac must be"), ({"precision": "int4"}, "precision"),
    ({"dp_shard": 3}, "cover"), ({"pp": 2, "pp_schedule": None, "dp_shard": 4}, "schedule"),
    ({"finetune": "lora"}, "lora_rank"), ({"virtual_stages": 2}, "pp > 1"), ({"checkpoint_every_steps": 0}, "positive"),
])
def test_a_malformed_job_is_refused(kw, why):
    base = dict(model="m", shape={"layers": 2}, seq_len=128, nodes=1, gpus_per_node=8, dp_shard=8)
    with pytest.raises(UsageError, match=why):
        StackJob(**{**base, **kw})


def test_median_rate_skips_warm_up_and_takes_the_peak_memory():
    evs = [Progress(1, tokens_per_second_per_gpu=100.0, memory_gib=5.0), Progress(2, tokens_per_second_per_gpu=900.0),
           Progress(4, tokens_per_second_per_gpu=1000.0, memory_gib=7.0, mfu=0.3), CheckpointSaved(4),
           Progress(5, tokens_per_second_per_gpu=1100.0, memory_gib=6.0, mfu=0.4),
           Progress(6, tokens_per_second_per_gpu=1050.0, mfu=0.35)]
    r = median_rate(evs, gpus=8)
    assert r["steps"] == [4, 5, 6] and r["tokens_per_second"] == 1050.0 * 8 and r["mfu"] == 0.35
    assert r["memory_gib"] == 7.0 and r["warmup_lines"] == 2
    assert median_rate([Progress(10, tokens_per_second=5.0)], gpus=8)["tokens_per_second"] == 5.0  # one line: itself
    assert median_rate([CheckpointSaved(3)], gpus=8) == {}
