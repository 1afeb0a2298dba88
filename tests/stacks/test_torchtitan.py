"""torchtitan as a stack: layouts the real planner produces → torchtitan's command → torchtitan's own config
manager (``ConfigManager.parse_args``, on CPU) reads back the plan's degrees; what it cannot run is refused
in one line; its log lines become progress and checkpoint events.

The validation tests need torchtitan 0.3.0 (``pip install torch==2.13.0 -e '.[titan]'``) and skip without it."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys

import pytest

from cloudfit.errors import UsageError
from cloudfit.llm import zoo
from cloudfit.plan.llm import LLMJob, recommend_llm
from cloudfit.stacks import CheckpointSaved, Progress, StackJob, get
from cloudfit.stacks.torchtitan import SCHEDULES, flavor_of, layers_per_stage
from cloudfit.workload import make_workload

HAVE_TITAN = importlib.util.find_spec("torchtitan") is not None
needs_titan = pytest.mark.skipif(not HAVE_TITAN, reason="torchtitan is not installed (pip install '.[titan]'): "
                                                       "its own config manager cannot be asked")
TT = get("torchtitan")


def _plan(model: str, layout: str | None = None, tokens: float = 2e10, deadline: str = "30d", seq_len: int = 8192,
          precision: str = "bf16"):
    job = LLMJob(zoo.get(model), tokens, seq_len, layout=layout, precision=precision)
    w = make_workload(model=model, samples=tokens / seq_len, deadline=deadline, budget=None,
                      regions=["us-central1"], precision=precision)
    return recommend_llm(w, job)


#: (id, model, pinned layout, precision, what to change on the planner's job: HSDP and the schedules recommend
#: does not search are the planner's layout with those degrees; compile is a launch choice)
CASES = [
    ("8b-fsdp-auto", "llama3-8b", None, "bf16", {}),
    ("8b-fsdp-ac-none", "llama3-8b", "tp=1,pp=1,cp=1,ac=none", "bf16", {}),
    ("8b-fsdp-ac-full", "llama3-8b", "tp=1,pp=1,ac=full", "bf16", {}),
    ("8b-fsdp-eager", "llama3-8b", "tp=1,pp=1,ac=full", "bf16", {"compile": False}),  # compile said off
    ("8b-tp2-compile-asynctp", "llama3-8b", "tp=2,pp=1,ac=selective", "bf16", {"compile": True}),
    ("8b-cp2", "llama3-8b", "cp=2,tp=1,pp=1", "bf16", {}),
    ("8b-float8", "llama3-8b", "tp=1,pp=1", "fp8", {"compile": True}),
    ("8b-hsdp", "llama3-8b", "tp=1,pp=1,cp=1", "bf16", {"hsdp": 2}),
    ("70b-tp8", "llama3-70b", "tp=8,pp=1", "bf16", {}),
    ("70b-pp4-1f1b", "llama3-70b", "tp=8,pp=4,vp=1", "bf16", {}),
    ("70b-pp4-interleaved", "llama3-70b", "tp=8,pp=4,vp=2", "bf16", {}),
    ("70b-pp4-gpipe", "llama3-70b", "tp=8,pp=4,vp=1", "bf16", {"pp_schedule": "gpipe"}),
    ("70b-pp4-looped-bfs", "llama3-70b", "tp=8,pp=4,vp=2", "bf16", {"pp_schedule": "looped-bfs"}),
    ("70b-pp4-interleaved-zb", "llama3-70b", "tp=8,pp=4,vp=2", "bf16", {"pp_schedule": "interleaved-zb"}),
    ("70b-pp4-zbv", "llama3-70b", "tp=8,pp=4,vp=2", "bf16", {"pp_schedule": "zbv"}),
    ("405b-tp8-pp8", "llama3-405b", "tp=8,pp=8", "bf16", {}),
    ("405b-float8-tp8", "llama3-405b", "tp=8,pp=1", "fp8", {}),
]


@pytest.fixture(scope="module")
def jobs() -> dict[str, StackJob]:
    out = {}
    for cid, model, layout, prec, change in CASES:
        plan = _plan(model, layout, precision=prec)
        job = StackJob.from_plan(plan)
        change = dict(change)
        if "hsdp" in change:
            r = change.pop("hsdp")
            job = job.replace(dp_replicate=r, dp_shard=job.dp_shard // r)
        job = job.replace(checkpoint_dir="gs://bucket/run-1/checkpoints", **change)
        out[cid] = job
    return out


def test_the_cases_cover_every_degree_schedule_ac_mode_and_precision(jobs):
    js = list(jobs.values())
    assert {j.model for j in js} == {"llama3-8b", "llama3-70b", "llama3-405b"}
    assert {j.ac for j in js} == {"none", "selective", "full"}
    assert {j.pp_schedule for j in js if j.pp > 1} == set(SCHEDULES)
    assert any(j.tp > 1 for j in js) and any(j.cp > 1 for j in js) and any(j.dp_replicate > 1 for j in js)
    assert any(j.precision == "fp8" for j in js) and any(j.pp == 1 and j.tp == 1 and j.dp_shard == j.gpus for j in js)
    for cid, model, layout, _, _ in CASES:  # the planner kept every pinned degree
        for kv in (layout or "").split(","):
            if kv:
                k, v = kv.split("=")
                got = {"vp": jobs[cid].virtual_stages}.get(k, getattr(jobs[cid], k, None))
                assert str(got) == v, (cid, k, got)
    assert len(jobs) >= 12


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_every_planner_layout_becomes_a_torchtitan_command(jobs, cid):
    j = jobs[cid]
    assert TT.refuse(j) is None
    cmd = TT.command(j)
    a = list(cmd.argv)
    assert a[:6] == ["-m", "torchtitan.train", "--module", "cloudfit_titan", "--config", "cloudfit_job"]
    assert a[a.index("--parallelism.tensor_parallel_degree") + 1] == str(j.tp)
    assert a[-1] == f"activation_checkpoint:{j.ac}"  # the tyro subcommand goes last
    assert "cloudfit_titan.py" in cmd.files and "def cloudfit_job" in cmd.files["cloudfit_titan.py"]
    assert ("Float8LinearConverter" in cmd.files["cloudfit_titan.py"]) == (j.precision == "fp8")
    assert cmd.launcher == "torchrun" and not cmd.checkpoint_on_sigterm and "checkpoint" in cmd.guarantee


@needs_titan
@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_torchtitans_own_config_manager_reads_back_the_plan(jobs, cid, tmp_path):
    j = jobs[cid]
    got = TT.validate(TT.command(j), workdir=str(tmp_path), world_size=j.gpus)
    # torchtitan's ParallelDims built every mesh for the cluster's ranks (fake backend: no GPU)
    mesh = got["mesh"]
    assert mesh.get("tp", 1) == j.tp and mesh.get("pp", 1) == j.pp and mesh.get("cp", 1) == j.cp
    assert mesh.get("dp_shard", 1) == j.dp_shard and mesh.get("dp_replicate", 1) == j.dp_replicate
    assert mesh.get("batch", 1) == j.dp_replicate * j.dp_shard
    flavor = flavor_of(j.shape)[0]
    assert got["model.flavor"] == flavor and got["model.layers"] == j.shape["layers"]
    assert got["model.dim"] == j.shape["hidden"] and got["model.vocab_size"] == j.shape["vocab"]
    assert got["parallelism.data_parallel_replicate_degree"] == j.dp_replicate
    assert got["parallelism.data_parallel_shard_degree"] == j.dp_shard
    assert got["parallelism.tensor_parallel_degree"] == j.tp
    assert got["parallelism.pipeline_parallel_degree"] == j.pp
    assert got["parallelism.context_parallel_degree"] == j.cp
    assert got["training.seq_len"] == j.seq_len and got["training.steps"] == j.steps
    assert got["training.global_batch_size"] == j.global_batch
    assert got["activation_checkpoint"] == j.ac
    assert got["compile.enable"] == (j.compile is not False)  # a plan that does not say compiles
    assert got["compile.enable_async_tensor_parallel"] == (j.compile is not False and j.tp > 1)
    assert got["model.float8"] == (j.precision == "fp8")
    assert got["checkpoint.enable"] and got["checkpoint.folder"] == j.checkpoint_dir
    if j.checkpoint_every_steps:
        assert got["checkpoint.interval"] == j.checkpoint_every_steps
    # torchtitan's own batch arithmetic (trainer.py) gives the plan's accumulation and micro-batches
    dp = j.dp_replicate * j.dp_shard
    local = got["training.local_batch_size"]
    assert got["training.global_batch_size"] % (local * dp) == 0
    if j.pp > 1:
        sched, multi = SCHEDULES[j.pp_schedule]
        assert got["parallelism.pipeline_parallel_schedule"] == sched
        assert local // got["parallelism.pipeline_parallel_microbatch_size"] == j.grad_accum  # pipeline micro-batches
        assert got["training.global_batch_size"] // (local * dp) == 1
        stages = _torchtitan_virtual_stages(got, j)
        assert stages == j.pp * j.virtual_stages == got["pipeline.stages"]  # (the latter: torchtitan's own count)
    else:
        assert local == j.micro_batch and got["training.global_batch_size"] // (local * dp) == j.grad_accum


def _torchtitan_virtual_stages(got: dict, j: StackJob) -> int:
    """The stage count torchtitan's pipeline code computes (its own rule, distributed/pipeline_parallel.py)."""
    import math

    from torchtitan.distributed.pipeline_parallel import get_schedule_class
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle

    single = issubclass(get_schedule_class(got["parallelism.pipeline_parallel_schedule"]), PipelineScheduleSingle)
    per = got["parallelism.pipeline_parallel_layers_per_stage"]
    n = math.ceil((got["model.layers"] + 2) / per) if per else j.pp * (1 if single else 2)
    assert (n // j.pp == 1) == single
    return n


@needs_titan
def test_torchtitans_parser_rejects_what_it_cannot_read(jobs, tmp_path):
    """The check can fail: a flag torchtitan does not have is refused by its own parser."""
    cmd = TT.command(jobs["8b-fsdp-auto"])
    bad = dataclasses.replace(cmd, argv=cmd.argv[:-1] + ("--parallelism.no_such_degree", "2", cmd.argv[-1]))
    with pytest.raises(UsageError, match="rejected"):
        TT.validate(bad, workdir=str(tmp_path))
    with pytest.raises(UsageError, match="ParallelDims rejected"):  # degrees that do not cover the ranks
        TT.validate(cmd, workdir=str(tmp_path), world_size=jobs["8b-fsdp-auto"].gpus + 8)
    # what cloudfit refuses, torchtitan's own checks refuse too: 8 KV heads cannot be split over tp=16
    j = jobs["70b-tp8"]
    j16 = dataclasses.replace(j, tp=16, dp_shard=j.dp_shard // 2)
    cmd16 = dataclasses.replace(TT.command(j), argv=tuple("16" if a == "8" and p == "--parallelism.tensor_parallel_degree"
                                                          else a for p, a in zip(("",) + TT.command(j).argv,
                                                                                 TT.command(j).argv)))
    assert TT.refuse(j16) and "KV heads" in TT.refuse(j16)
    with pytest.raises(UsageError, match="n_kv_heads"):
        TT.validate(cmd16, workdir=str(tmp_path))


def test_refusals_are_one_line(jobs):
    base = jobs["70b-pp4-1f1b"]
    cases = {
        "gpt": dataclasses.replace(base, shape={**base.shape, "hidden": 5120}, model="my-13b"),
        "lora": base.replace(finetune="lora", lora_rank=16),
        "gpipe-vp2": base.replace(pp_schedule="gpipe", virtual_stages=2),
        "zbv-vp3": base.replace(pp_schedule="zbv", virtual_stages=3),
        "cp-odd": jobs["8b-cp2"].replace(seq_len=8190),
        "tp16-kv8": jobs["70b-tp8"].replace(tp=16, dp_shard=jobs["70b-tp8"].dp_shard // 2),
    }
    for name, j in cases.items():
        why = TT.refuse(j)
        assert why and "\n" not in why and len(why) < 300, (name, why)
        with pytest.raises(UsageError) as e:
            TT.command(j)
        assert str(e.value) == why
    assert "flavour" in TT.refuse(cases["gpt"])


def test_layout_ok_is_what_the_planner_asks():
    from cloudfit.llm.layout import parse

    shape = zoo.get("llama3-70b").to_dict()
    assert TT.layout_ok(parse("fsdp=8,tp=8,pp=4,vp=2,mb=1,ga=8,schedule=interleaved", gpus=256), shape) is None
    assert TT.layout_ok(parse("fsdp=64,tp=4,mb=1,ga=1", gpus=256), shape) is None
    assert "ZeRO-1" in TT.layout_ok(parse("dp=8,zero=1,tp=8,pp=4,mb=1,ga=8", gpus=256), shape)
    tied = zoo.get("llama3-1b").to_dict()
    assert "tied" in TT.layout_ok(parse("fsdp=2,pp=2,mb=1,ga=4", gpus=4), tied)
    assert "KV heads" in TT.layout_ok(parse("fsdp=16,tp=16,mb=1,ga=1", gpus=256), shape)
    assert TT.pins(shape) == {}


def test_layers_per_stage_gives_exact_stage_counts():
    for layers in (16, 32, 80, 126):
        for stages in (2, 4, 8, 16):
            per = layers_per_stage(layers, stages)
            exact = [p for p in range(1, layers + 3) if -(-(layers + 2) // p) == stages]
            assert (per is None) == (not exact) and (per is None or per in exact)
    assert layers_per_stage(32, 4) == 9 and layers_per_stage(32, 8) is None and layers_per_stage(2, 8) is None


def test_log_lines_become_progress_and_checkpoints():
    lines = [
        "\x1b[31mstep:  4  \x1b[32mloss:  7.62585  grad_norm: 26.6250  memory: 66.91GiB(37.51%)  tps: 10,050  "
        "tflops: 314.71  mfu: 13.99%\x1b[39m",
        "[rank0]:[titan] 2026-01-01 - root - INFO - step: 10  loss:  9.9493  memory: 49.66GiB(52.28%)  tps: 2,397  "
        "tflops: 138.80  mfu: 14.03%",
        "[rank0]:[titan] 2026-01-01 - root - INFO - step: 10  loss:  9.9493  memory: 49.66GiB(52.28%)  tps: 2,397  "
        "tflops: 138.80  mfu: 14.03%",  # another rank
        "[rank0]:[titan] 2026-01-01 - root - INFO - Finished saving the checkpoint in 3.21 seconds.",
        "[rank0]:2024-04-01 - root - INFO - step:  2  loss:  9.1  memory: 20.00GiB(25.00%)  wps: 5,000  mfu: 30.00%",
        "[rank0]:[titan] validate step: 10  loss:  2.1000  memory:  9.46GiB(64.99%)  tps: 7,282",
        "[rank0]:[titan] 2026-01-01 - root - INFO - step:  3  loss:  8.0  memory:  2.0GiB(2.0%)  tps: 100  tflops: 1.0"
        "  mfu: N/A",
    ]
    evs = list(TT.parse_log(lines))
    p4, p10, ck, p2, p3 = evs
    assert p4 == Progress(step=4, tokens_per_second_per_gpu=10050.0, loss=7.62585, memory_gib=66.91,
                          memory_fraction=0.3751, mfu=0.1399, tflops=314.71)
    assert p10.step == 10 and p10.job_tokens_per_second(8) == 8 * 2397
    assert ck == CheckpointSaved(step=10)
    assert p2.tokens_per_second_per_gpu == 5000 and p2.tflops is None  # an older torchtitan's wps
    assert p3.mfu is None and p3.tflops == 1.0  # float8 runs print mfu: N/A
    saves = ["step: 490  loss: 2.0  memory: 1.0GiB(1.0%)  tps: 10", "Saving a checkpoint at step 500.",
             "Finished saving the checkpoint (or staging if async is enabled)in 2.31 seconds.",
             "step: 1000  loss: 1.9  memory: 1.0GiB(1.0%)  tps: 10", "Saving a full checkpoint at last step, step 1000.",
             "Last step checkpoint completed in 9.00s", "Finished staging the checkpoint in 1.0 seconds."]
    assert [e for e in TT.parse_log(saves) if isinstance(e, CheckpointSaved)] == [CheckpointSaved(500),
                                                                                 CheckpointSaved(1000)]
    assert TT.parse_line("Saving a checkpoint at step 500.") is None  # a save begun is not a save
    assert TT.parse_line("just a line") is None


def test_layout_from_log_reads_the_mesh_and_batch():
    new = ["... - Building device mesh with parallelism: pp=2, dp_replicate=1, dp_shard=4, cp=1, tp=2, ep=1",
           "... - Applied FullAC activation checkpointing to the model",
           "... - Using pipeline schedule Interleaved1F1B with 8 microbatches and 4 stages.",
           "... - Trainer is initialized with local batch size 8, global batch size 32, gradient accumulation steps 1, "
           "sequence length 8192, total steps 1000 (warmup 200)"]
    assert TT.layout_from_log(new) == {"pp": 2, "dp_replicate": 1, "dp_shard": 4, "cp": 1, "tp": 2, "ac": "full",
                                       "micro_batch": 1, "grad_accum": 8, "vp": 2, "schedule": "interleaved",
                                       "global_batch": 32, "seq_len": 8192}
    old = ["[rank0]:[titan] - root - INFO - Building 2-D device mesh with ['dp_shard', 'tp'], [4, 2]",
           "[rank0]:[titan] - root - INFO - Float8 training active"]
    assert TT.layout_from_log(old) == {"dp_shard": 4, "tp": 2, "precision": "fp8"}


def test_layout_from_config_files_of_every_torchtitan_generation(jobs):
    toml = ('[training]\nbatch_size = 2\nseq_len = 8192\n[parallelism]\ndata_parallel_shard_degree = -1\n'
            'tensor_parallel_degree = 8\n[activation_checkpoint]\nmode = "full"\n')
    assert TT.layout_from_config_text(toml) == {"tp": 8, "seq_len": 8192, "micro_batch": 2, "ac": "full"}
    js = '{"parallelism": {"data_parallel_shard_degree": 16, "pipeline_parallel_degree": 1}, "training": ' \
         '{"local_batch_size": 1, "global_batch_size": 64, "seq_len": 4096}, "activation_checkpoint": null}'
    assert TT.layout_from_config_text(js) == {"dp_shard": 16, "pp": 1, "micro_batch": 1, "global_batch": 64,
                                              "seq_len": 4096, "ac": "none"}
    j = jobs["70b-pp4-interleaved"]
    got = TT.layout_from_config_text(" ".join(TT.command(j).argv))  # cloudfit's own command reads back
    assert (got["dp_shard"], got["tp"], got["pp"], got["micro_batch"], got["grad_accum"], got["ac"]) == (
        j.dp_shard, j.tp, j.pp, j.micro_batch, j.grad_accum, j.ac)
    assert got["global_batch"] == j.global_batch and got["schedule"] == "interleaved"
    with pytest.raises(UsageError, match="integer"):
        TT.layout_from_config_text("--parallelism.tensor_parallel_degree eight")


def test_no_torchtitan_import_at_module_import():
    assert "torchtitan" not in sys.modules or HAVE_TITAN


def test_a_plan_that_does_not_say_compiles_and_the_note_says_how_to_turn_it_off(jobs):
    """The plan's speed is priced on public runs' fused kernels: torchtitan's command compiles unless the plan says
    otherwise (eager ran 20–30% below plans on an H200, bench/RESULTS_gpu.md)."""
    unsaid = jobs["8b-fsdp-ac-full"]
    assert unsaid.compile is None
    cmd = TT.command(unsaid)
    assert "--compile.enable" in cmd.argv and "--compile.no-enable" not in cmd.argv
    assert any("--compile.no-enable" in n for n in cmd.notes)
    off = TT.command(jobs["8b-fsdp-eager"])
    assert "--compile.no-enable" in off.argv and not any("torch.compile on" in n for n in off.notes)
