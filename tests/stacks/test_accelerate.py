"""The accelerate stack: planner layouts → an ``accelerate launch`` command and FSDP2 / ParallelismConfig YAML that
Accelerate's own config loader, launch parser and plugins accept; one-line refusals; the node's shell runs it."""

from __future__ import annotations

import os
import stat
import subprocess

import pytest
import yaml

from cloudfit.errors import UsageError
from cloudfit.llm import zoo
from cloudfit.plan.llm import LLMJob, recommend_llm
from cloudfit.stacks import get
from cloudfit.stacks.accelerate import CONFIG_FILE, launch_argv
from cloudfit.stacks.base import StackJob
from cloudfit.workload import make_workload

STACK = get("accelerate")
accelerate = pytest.importorskip("accelerate", reason="accelerate is not installed (pip install accelerate)")


def _plan(model, layout=None, tokens=1e11, deadline="7d", precision="bf16", seq_len=8192, **kw):
    job = LLMJob(zoo.get(model), tokens, seq_len, layout=layout, precision=precision, **kw)
    w = make_workload(model=model, samples=tokens / seq_len, deadline=deadline, budget=None,
                      regions=["us-central1"], precision=precision)
    return recommend_llm(w, job)


PLANS = {  # id: (model, pinned layout, tokens, deadline, precision, LLMJob extras)
    "8b-fsdp-full-ac": ("llama3-8b", "ac=full", 1e11, "7d", "bf16", {}),
    "8b-fsdp-tp2": ("llama3-8b", "ac=none,tp=2", 1e11, "7d", "bf16", {}),
    "8b-fsdp-cp2-fp8": ("llama3-8b", "ac=full,cp=2", 1e11, "7d", "fp8", {}),
    "8b-lora": ("llama3-8b", "ac=none", 1e10, "3d", "bf16", {"finetune": "lora"}),
    "1b-zero0": ("llama3-1b", "zero=0,ac=none", 1e10, "7d", "bf16", {}),
    "70b-fsdp-no-ac": ("llama3-70b", "ac=none", 1e12, "30d", "bf16", {}),
    "70b-fsdp64-tp2": ("llama3-70b", "fsdp=64,tp=2,ac=full", 1e12, "30d", "bf16", {}),
}


@pytest.fixture(scope="module")
def jobs():
    return {k: StackJob.from_plan(_plan(m, lay, tok, dl, prec, **kw)) for k, (m, lay, tok, dl, prec, kw)
            in PLANS.items()}


@pytest.mark.parametrize("key", list(PLANS))
def test_planner_layouts_pass_accelerates_own_loader_parser_and_plugins(jobs, key):
    job = jobs[key]
    cmd = STACK.command(job, ("train.py", "--lr", "1e-4"))
    assert cmd.launcher == "accelerate" and CONFIG_FILE in cmd.files
    v = STACK.validate(cmd)
    assert v["num_processes"] == job.gpus and v["num_machines"] == job.nodes and v["machine_rank"] == 0
    assert v["mixed_precision"] == {"bf16": "bf16", "fp8": "fp8", "fp32": "no"}[job.precision]
    assert v["script"] == "train.py" and v["script_args"] == ["--lr", "1e-4"]
    assert v["env.ACCELERATE_GRADIENT_ACCUMULATION_STEPS"] == str(job.grad_accum)
    sharded = job.dp_shard > 1 and job.zero > 0
    if sharded or job.tp > 1 or job.cp > 1:
        assert v["distributed_type"] == "FSDP" and v["fsdp.version"] == 2
        assert v["fsdp.activation_checkpointing"] == (job.ac == "full")
        assert v["fsdp.reshard_after_forward"] == (job.zero == 3 or not sharded)
    if job.tp > 1 or job.cp > 1:
        assert (v["parallelism.tp"], v["parallelism.cp"]) == (job.tp, job.cp)
        assert v["parallelism.total_size"] == job.gpus
    if job.precision == "fp8":
        assert v["env.ACCELERATE_FP8_BACKEND"] == "AO" and v["env.ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER"] == "True"


def test_the_layouts_cover_fsdp_tp_cp_fp8_lora_and_both_ac_modes(jobs):
    js = list(jobs.values())
    assert any(j.tp > 1 for j in js) and any(j.cp > 1 for j in js) and any(j.precision == "fp8" for j in js)
    assert any(j.finetune == "lora" for j in js) and {j.ac for j in js} == {"none", "full"}
    assert any(j.dp_shard > 1 and j.zero == 3 and j.tp == 1 and j.cp == 1 for j in js)


def test_hsdp_ddp_single_gpu_and_compile(jobs):
    base = jobs["70b-fsdp-no-ac"]
    hsdp = base.replace(dp_replicate=2, dp_shard=base.dp_shard // 2)
    v = STACK.validate(STACK.command(hsdp))
    assert (v["parallelism.dp_replicate"], v["parallelism.dp_shard"]) == (2, base.dp_shard // 2)
    ddp = StackJob(model="llama3-1b", shape=zoo.get("llama3-1b").to_dict(), seq_len=4096, nodes=1,
                   gpus_per_node=8, dp_replicate=8, ac="none", steps=10, zero=0)
    v = STACK.validate(STACK.command(ddp))
    assert v["distributed_type"] == "MULTI_GPU" and not v["use_fsdp"]
    one = ddp.replace(gpus_per_node=1, dp_replicate=1)
    assert STACK.validate(STACK.command(one))["distributed_type"] == "NO"
    v = STACK.validate(STACK.command(base.replace(compile=True)))
    assert v["env.ACCELERATE_DYNAMO_BACKEND"] == "INDUCTOR"
    zero1 = STACK.command(base.replace(zero=1))
    assert STACK.validate(zero1)["fsdp.reshard_after_forward"] is False and any("ZeRO-2" in n for n in zero1.notes)


def test_accelerates_loader_catches_what_cloudfit_could_get_wrong(jobs, tmp_path):
    """The checks are Accelerate's own: they fail a bad key, a bad value and a mesh that does not add up."""
    cmd = STACK.command(jobs["8b-fsdp-tp2"])
    cfg = yaml.safe_load(cmd.files[CONFIG_FILE])

    def with_cfg(c):
        return type(cmd)(argv=cmd.argv, launcher=cmd.launcher, files={**cmd.files, CONFIG_FILE: yaml.safe_dump(c)},
                         env=cmd.env)

    with pytest.raises(UsageError, match="unknown keys"):
        STACK.validate(with_cfg({**cfg, "fsdp_sharding": "FULL"}))
    with pytest.raises(UsageError, match="not an accelerate launch option"):
        STACK.validate(with_cfg({**cfg, "fsdp_config": {**cfg["fsdp_config"], "fsdp_reshard": True}}))
    with pytest.raises(UsageError, match="ranks"):
        STACK.validate(with_cfg({**cfg, "parallelism_config": {**cfg["parallelism_config"],
                                                               "parallelism_config_tp_size": 4}}))
    with pytest.raises(UsageError, match="rejects"):
        STACK.validate(with_cfg({**cfg, "fsdp_config": {**cfg["fsdp_config"], "fsdp_reshard_after_forward": "maybe"}}))


def test_refusals_are_one_line(jobs):
    j = jobs["8b-fsdp-full-ac"]
    shape = zoo.get("llama3-8b").to_dict()
    cases = {
        "pipeline": StackJob(model="llama3-8b", shape=shape, seq_len=8192, nodes=3, gpus_per_node=8, tp=8, pp=3,
                             ac="none", pp_schedule="1f1b", steps=10, zero=0),  # the planner's zero=0,tp=8 layout
        "selective": j.replace(ac="selective"),
        "tp_without_fsdp": StackJob(model="llama3-8b", shape=shape, seq_len=8192, nodes=1, gpus_per_node=8, tp=8,
                                    ac="none", steps=10),
        "tp_beside_replicas": StackJob(model="llama3-8b", shape=shape, seq_len=8192, nodes=1, gpus_per_node=8,
                                       dp_replicate=2, tp=4, ac="none", steps=10, zero=0),
        "cp_seq": jobs["8b-fsdp-cp2-fp8"].replace(seq_len=8190),
    }
    for name, job in cases.items():
        why = STACK.refuse(job)
        assert why and "\n" not in why and why.startswith("accelerate"), (name, why)
        with pytest.raises(UsageError, match="accelerate"):
            STACK.command(job)
    from cloudfit.llm.layout import parse

    default = StackJob.from_plan(_plan("llama3-8b"))  # the planner's default 8B layout uses selective AC
    assert default.ac == "selective" and "selective" in STACK.layout_ok(parse(default.layout_text(),
                                                                                gpus=default.gpus), shape)


def test_the_node_shell_expands_rank_and_head_and_passes_the_script_unchanged(jobs, tmp_path):
    """The command as the launcher runs it (no shell of its own): bash gives accelerate the node's rank and the
    head's address from the environment; the script's words arrive as given, spaces and $ included."""
    fake = tmp_path / "bin" / "accelerate"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    cmd = STACK.command(jobs["8b-fsdp-full-ac"], ("train.py", "--name", "my run $HOME"))
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}", "NODE_RANK": "3", "MASTER_ADDR": "10.1.2.3",
           "MASTER_PORT": "29400"}
    out = subprocess.run(list(cmd.argv), env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == launch_argv(cmd, {"NODE_RANK": "3", "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29400"})
    assert out[out.index("--machine_rank") + 1] == "3" and out[out.index("--main_process_ip") + 1] == "10.1.2.3"
    assert out[-3:] == ["train.py", "--name", "my run $HOME"]


def test_progress_and_the_layout_are_the_custom_stacks(jobs):
    """Accelerate runs the user's script: it reads the layout as a custom command does and reports progress on
    cloudfit's one-line format."""
    from cloudfit.stacks.custom import environment, progress_line

    custom = get("custom")
    job = jobs["8b-fsdp-tp2"]
    cmd = STACK.command(job)
    assert {k: cmd.env[k] for k in environment(job)} == environment(job)
    assert cmd.files["cloudfit_layout.json"] == custom.command(job).files["cloudfit_layout.json"]
    lines = [progress_line(5, tokens_per_second=41_000.0, loss=2.5, memory_gib=70.5),
             "step 5 ordinary line", progress_line(checkpoint_step=5, checkpoint_path="ckpt/step-5")]
    assert list(STACK.parse_log(lines)) == list(custom.parse_log(lines))
    prog, saved = list(STACK.parse_log(lines))
    assert prog.tokens_per_second == 41_000.0 and prog.memory_gib == 70.5 and saved.step == 5
