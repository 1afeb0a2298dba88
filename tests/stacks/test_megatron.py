"""The megatron stack: planner layouts → pretrain_gpt.py flags that Megatron-LM's own argument definitions accept
(golden file built from megatron/training/arguments.py, see golden/PROVENANCE.md) and that obey the rules its
validate_args asserts; one-line refusals; its log lines (real excerpts, logs/PROVENANCE.md) → progress."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from cloudfit.errors import UsageError
from cloudfit.llm import zoo
from cloudfit.plan.llm import LLMJob, recommend_llm
from cloudfit.stacks import get
from cloudfit.stacks.base import CheckpointSaved, Progress, StackJob, StackNotInstalled, median_rate
from cloudfit.workload import make_workload

HERE = Path(__file__).parent
GOLDEN = json.loads((HERE / "golden" / "megatron_args.json").read_text())
LOGS = HERE / "logs"
STACK = get("megatron")


# --------------------------------------------------------------------------------------------- the golden parser
def golden_parser() -> argparse.ArgumentParser:
    """Megatron-LM's parser rebuilt from the golden file's add_argument declarations."""
    types = {"int": int, "float": float, "str": str, None: None}
    p = argparse.ArgumentParser(allow_abbrev=False, add_help=False)
    for f in GOLDEN["flags"]:
        kw = {"dest": f["dest"], "action": f["action"]}
        if f["action"] == "store":
            if types[f["type"]] is not None:
                kw["type"] = types[f["type"]]
            if f["choices"] is not None:
                kw["choices"] = f["choices"]
            if f["nargs"] is not None:
                kw["nargs"] = f["nargs"]
        p.add_argument(*f["options"], **kw)
    return p


def parse_golden(argv) -> dict:
    """The flags as Megatron's declarations read them; AssertionError for an unknown flag, a wrong type or a bad
    choice."""
    p = golden_parser()

    def fail(message):
        raise AssertionError(f"megatron's parser rejects: {message}")

    p.error = fail  # argparse's errors (bad type / choice / missing value) land here instead of sys.exit
    ns, rest = p.parse_known_args(list(argv))
    assert not rest, f"flags Megatron-LM does not define: {rest}"
    return vars(ns)


def megatron_rules(a: dict, env: dict, world: int) -> list[str]:
    """What megatron/training/arguments.py:validate_args asserts (at the golden commit) of these arguments, plus
    Megatron-FSDP's required flags (its user guide) and the attention split (megatron.core divides heads and
    query groups by tp). Empty = the run passes them."""
    g = lambda k, d=None: a.get(k) if a.get(k) is not None else d  # noqa: E731
    bad = []
    tp, pp, cp = g("tensor_model_parallel_size", 1), g("pipeline_model_parallel_size", 1), g("context_parallel_size", 1)
    if world % (tp * pp * cp):
        bad.append("world size not divisible by tp·pp·cp")
    dp = world // (tp * pp * cp)
    mbs, gbs = g("micro_batch_size"), g("global_batch_size")
    if mbs is None or mbs < 1 or (gbs is not None and gbs % (mbs * dp)):
        bad.append("global batch is not a multiple of micro batch × data-parallel size")
    vflags = [g("num_layers_per_virtual_pipeline_stage"), g("num_virtual_stages_per_pipeline_rank"),
              g("pipeline_model_parallel_layout")]
    if sum(v is not None for v in vflags) > 1:
        bad.append("more than one virtual-pipeline argument")
    layers = g("num_layers", 0) + bool(g("account_for_embedding_in_pipeline_split")) + bool(
        g("account_for_loss_in_pipeline_split"))
    if layers % pp:
        bad.append("layers not divisible by the pipeline size")
    lpv = g("num_layers_per_virtual_pipeline_stage")
    if lpv is not None:
        per_stage = layers // pp
        if per_stage % lpv:
            bad.append("layers per stage not divisible by layers per virtual stage")
        elif per_stage // lpv > 1 and pp < 2:
            bad.append("interleaved schedule with pp < 2")
    if lpv is not None and (layers // pp) // lpv > 1 and gbs and mbs:
        m = gbs // (mbs * dp)  # micro-batches per step; groups of pp (schedules.py, see golden/PROVENANCE.md)
        group = g("microbatch_group_size_per_vp_stage", pp)
        if not (pp <= group <= m) or 0 < m % group < pp:
            bad.append("interleaved schedule: micro-batch groups do not fit (schedules.py raises)")
    if g("overlap_param_gather") and not ((g("use_distributed_optimizer") or g("use_megatron_fsdp"))
                                          and g("overlap_grad_reduce")):
        bad.append("--overlap-param-gather without the distributed optimizer / FSDP and --overlap-grad-reduce")
    if g("use_torch_fsdp2") and (pp != 1 or g("use_distributed_optimizer")):
        bad.append("torch FSDP2 with pipeline parallelism or the distributed optimizer")
    fsdp = bool(g("use_megatron_fsdp"))
    if fsdp:
        if g("ckpt_format") != "fsdp_dtensor":
            bad.append("Megatron FSDP without --ckpt-format fsdp_dtensor")
        if env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1":
            bad.append("FSDP with CUDA_DEVICE_MAX_CONNECTIONS=1")
        if not g("use_distributed_optimizer") or g("gradient_accumulation_fusion", True) \
                or g("data_parallel_sharding_strategy") not in ("optim_grads", "optim_grads_params"):
            bad.append("Megatron-FSDP without its required flags (user guide)")
    if g("ckpt_format") == "fsdp_dtensor" and not fsdp:
        bad.append("fsdp_dtensor checkpoints without Megatron FSDP")
    if g("num_distributed_optimizer_instances", 1) > 1 and (
            not g("use_distributed_optimizer") or dp % g("num_distributed_optimizer_instances")):
        bad.append("distributed-optimizer instances without the distributed optimizer or not dividing dp")
    if g("fp16") and g("bf16"):
        bad.append("fp16 and bf16")
    if not g("train_iters") or g("train_samples") is not None:
        bad.append("not iteration-based")
    elif g("lr_warmup_iters", 0) >= (g("lr_decay_iters") or g("train_iters")):
        bad.append("warm-up not shorter than the decay (OptimizerParamScheduler asserts it)")
    for req in ("num_layers", "hidden_size", "num_attention_heads", "max_position_embeddings"):
        if g(req) is None:
            bad.append(f"{req} missing")
    heads, groups = g("num_attention_heads", 1), g("num_query_groups", 1) if g("group_query_attention") else None
    if g("hidden_size", 0) % heads:
        bad.append("hidden not divisible by heads")
    if heads % tp or (groups is not None and groups % tp):
        bad.append("tp does not divide the heads / query groups")
    seq = g("seq_length")
    if cp > 1 and seq % (2 * cp):
        bad.append("seq_length not a multiple of 2·cp")
    if g("max_position_embeddings", 0) < seq:
        bad.append("max_position_embeddings < seq_length")
    if g("save") is not None and not (g("save_interval") or 0) > 0:
        bad.append("--save without a positive --save-interval")
    if g("recompute_granularity") == "selective" and g("recompute_method") is not None:
        bad.append("recompute method with selective granularity")
    if (tp > 1 or cp > 1) and not fsdp and env.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1":
        bad.append("tp/cp without CUDA_DEVICE_MAX_CONNECTIONS=1")
    if g("mock_data") + bool(g("data_path")) + any([g("train_data_path"), g("valid_data_path"),
                                                     g("test_data_path")]) > 1:
        bad.append("more than one data source")
    if tp > 1 and not g("sequence_parallel"):
        bad.append("tp > 1 without sequence parallelism (cloudfit's rule: the plan prices it)")
    return bad


def check(job: StackJob) -> dict:
    cmd = STACK.command(job)
    assert cmd.argv[0] == "pretrain_gpt.py" and cmd.launcher == "torchrun"
    a = parse_golden(cmd.argv[1:])
    assert megatron_rules(a, dict(cmd.env), job.gpus) == []
    return a


# --------------------------------------------------------------------------------------------- planner layouts
def _plan(model, layout=None, tokens=1e11, deadline="7d", precision="bf16", seq_len=8192):
    job = LLMJob(zoo.get(model), tokens, seq_len, layout=layout, precision=precision)
    w = make_workload(model=model, samples=tokens / seq_len, deadline=deadline, budget=None,
                      regions=["us-central1"], precision=precision)
    return recommend_llm(w, job)


PLANS = {  # id: (model, pinned layout, tokens, deadline, precision)
    "8b-fsdp": ("llama3-8b", None, 1e11, "7d", "bf16"),
    "8b-fsdp-tp2": ("llama3-8b", "tp=2", 1e11, "7d", "bf16"),
    "8b-cp2": ("llama3-8b", "cp=2", 1e11, "7d", "bf16"),
    "8b-fp8-full-ac": ("llama3-8b", "ac=full", 1e11, "7d", "fp8"),
    "8b-tp4-no-ac": ("llama3-8b", "ac=none,tp=4", 1e11, "7d", "bf16"),
    "1b-ddp-cp8": ("llama3-1b", "zero=0", 1e10, "7d", "bf16"),
    "70b-fsdp64-tp2-cp4": ("llama3-70b", "fsdp=64,tp=2", 1e12, "30d", "bf16"),
    "70b-tp8-pp2-interleaved": ("llama3-70b", "tp=8,pp=2,ga=8", 1e12, "30d", "bf16"),  # ga: a multiple of pp
}
#: planner layouts Megatron refuses (tests below)
REFUSED = {"70b-tp4-pp4-vp2-ga27": ("llama3-70b", "pp=4,vp=2,tp=4,ga=27", 1e12, "90d", "bf16")}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    ck = tmp_path_factory.mktemp("ckpt")
    out = {}
    for k, (m, lay, tok, dl, prec) in {**PLANS, **REFUSED}.items():
        j = StackJob.from_plan(_plan(m, lay, tok, dl, prec))
        out[k] = j.replace(checkpoint_dir=str(ck / k))
    return out


def _run(job: StackJob) -> StackJob:
    """A planner layout with FSDP over a pipeline is run by Megatron as the distributed optimizer (zero=1)."""
    return job.replace(zero=1) if job.pp > 1 and job.dp_shard > 1 else job


@pytest.mark.parametrize("key", list(PLANS))
def test_planner_layouts_become_flags_megatron_accepts(jobs, key):
    job = _run(jobs[key])
    a = check(job)
    assert (a["tensor_model_parallel_size"], a["pipeline_model_parallel_size"], a["context_parallel_size"]) == (
        job.tp, job.pp, job.cp)
    assert a["micro_batch_size"] == job.micro_batch and a["global_batch_size"] == job.global_batch
    assert a["seq_length"] == job.seq_len == a["max_position_embeddings"]
    assert a["num_layers"] == job.shape["layers"] and a["num_query_groups"] == job.shape["kv_heads"]
    assert a["train_iters"] == job.steps and a["save"] == a["load"] == job.checkpoint_dir
    assert a["save_interval"] == job.checkpoint_every_steps and a["exit_signal_handler"]
    assert a["sequence_parallel"] == (job.tp > 1)
    assert a["recompute_granularity"] == {"none": None, "selective": "selective", "full": "full"}[job.ac]
    assert a["bf16"] == (job.precision in ("bf16", "fp8")) and a["fp8"] == ("hybrid" if job.precision == "fp8" else None)
    sharded = job.dp_shard > 1 and job.zero > 0
    assert bool(a["use_megatron_fsdp"]) == (sharded and job.zero >= 2)
    assert bool(a["use_distributed_optimizer"]) == sharded
    if job.virtual_stages > 1:
        assert a["num_layers_per_virtual_pipeline_stage"] * job.pp * job.virtual_stages == job.shape["layers"]


def test_the_planner_layouts_cover_fsdp_ddp_tp_cp_pp_interleaving_fp8_and_every_ac_mode(jobs):
    js = [_run(jobs[k]) for k in PLANS]
    assert any(j.dp_shard > 1 and j.zero == 3 for j in js) and any(j.zero == 0 for j in js)
    assert any(j.tp > 1 for j in js) and any(j.cp > 1 for j in js) and any(j.zero == 1 and j.pp > 1 for j in js)
    assert any(j.virtual_stages > 1 for j in js) and any(j.precision == "fp8" for j in js)
    assert {j.ac for j in js} == {"none", "selective", "full"}


def test_hsdp_and_the_distributed_optimizer(jobs):
    base = jobs["8b-fsdp"]
    hsdp = base.replace(dp_replicate=2, dp_shard=base.dp_shard // 2)
    a = check(hsdp)
    assert a["use_megatron_fsdp"] and a["num_distributed_optimizer_instances"] == 2
    a = check(hsdp.replace(zero=1))
    assert a["use_distributed_optimizer"] and not a["use_megatron_fsdp"] and a["ckpt_format"] is None
    # 405B's 126 layers over 8 stages: the embedding and the loss count as layers (128 = 8 × 16)
    j405 = StackJob(model="llama3-405b", shape=zoo.get("llama3-405b").to_dict(), seq_len=8192, nodes=16,
                    gpus_per_node=8, dp_replicate=2, dp_shard=1, tp=8, pp=8, micro_batch=1, grad_accum=16,
                    pp_schedule="1f1b", steps=100, zero=1)
    a = check(j405)
    assert a["account_for_embedding_in_pipeline_split"] and a["account_for_loss_in_pipeline_split"]
    # a one-step smoke run: no warm-up longer than the run
    a = check(j405.replace(steps=1))
    assert a["train_iters"] == 1 and a["lr_warmup_iters"] is None


def test_the_golden_parser_fails_a_typo_a_wrong_type_and_a_bad_choice(jobs):
    argv = STACK.command(jobs["8b-fsdp"]).argv[1:]
    parse_golden(argv)
    with pytest.raises(AssertionError, match="does not define"):
        parse_golden([*argv, "--tensor-parallel-size", "2"])
    with pytest.raises(AssertionError, match="rejects"):
        parse_golden([*argv, "--micro-batch-size", "two"])
    with pytest.raises(AssertionError, match="rejects"):
        parse_golden([*argv, "--recompute-granularity", "partial"])
    # and the rules catch a run Megatron would stop in validate_args
    a = parse_golden([*argv, "--recompute-method", "uniform"])
    assert any("selective" in r for r in megatron_rules(a, {}, jobs["8b-fsdp"].gpus))
    a = parse_golden([*argv, "--ckpt-format", "torch_dist"])
    assert any("fsdp_dtensor" in r for r in megatron_rules(a, {}, jobs["8b-fsdp"].gpus))
    j = _run(jobs["70b-tp8-pp2-interleaved"])
    cmd = STACK.command(j)
    odd = j.micro_batch * j.dp * (j.grad_accum + 1)  # one micro-batch more per step: 13 over pp=2
    a = parse_golden([*cmd.argv[1:], "--global-batch-size", str(odd)])
    assert any("interleaved" in r for r in megatron_rules(a, dict(cmd.env), j.gpus))


def test_user_flags_replace_the_mock_data_and_come_last(jobs):
    j = jobs["8b-fsdp"]
    cmd = STACK.command(j, extra_args=("--data-path", "/data/web_text_document", "--tokenizer-type",
                                  "HuggingFaceTokenizer", "--tokenizer-model", "meta-llama/Meta-Llama-3-8B",
                                  "--lr", "1e-4"))
    a = parse_golden(cmd.argv[1:])
    assert not a["mock_data"] and a["data_path"] == ["/data/web_text_document"]
    assert a["tokenizer_type"] == "HuggingFaceTokenizer" and a["lr"] == 1e-4
    assert megatron_rules(a, dict(cmd.env), j.gpus) == []
    assert not any("mock" in n for n in cmd.notes)


def test_refusals_are_one_line(jobs):
    base = jobs["70b-tp8-pp2-interleaved"]
    cases = {
        "fsdp_pipeline": base,  # the planner's FSDP over a pipeline, as is
        "schedule": _run(base).replace(pp_schedule="zbv", virtual_stages=1),
        "lora": jobs["8b-fsdp"].replace(finetune="lora", lora_rank=16),
        "cp_seq": jobs["8b-cp2"].replace(seq_len=8190),
        "tp_kv": StackJob(model="llama3-8b", shape=zoo.get("llama3-8b").to_dict(), seq_len=8192, nodes=2,
                          gpus_per_node=8, tp=16, grad_accum=4, steps=10),
        "interleaved_ga": _run(jobs["70b-tp4-pp4-vp2-ga27"]),
        "layers": StackJob(model="llama3-8b", shape=zoo.get("llama3-8b").to_dict(), seq_len=8192, nodes=1,
                           gpus_per_node=6, tp=2, pp=3, grad_accum=8, pp_schedule="1f1b", steps=10, zero=0),
    }
    for name, job in cases.items():
        why = STACK.refuse(job)
        assert why and "\n" not in why and why.startswith("megatron"), (name, why)
        with pytest.raises(UsageError, match="megatron"):
            STACK.command(job)
    # the same rule the planner asks, per layout
    from cloudfit.llm.layout import parse

    lay = parse(jobs["70b-tp8-pp2-interleaved"].layout_text(), gpus=jobs["70b-tp8-pp2-interleaved"].gpus)
    assert "pipeline" in STACK.layout_ok(lay, jobs["70b-tp8-pp2-interleaved"].shape)


def test_env_and_checkpoint_guarantee(jobs):
    tp = STACK.command(_run(jobs["70b-tp8-pp2-interleaved"]))
    assert tp.env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1" and tp.checkpoint_on_sigterm
    fsdp = STACK.command(jobs["8b-fsdp-tp2"])
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in fsdp.env
    none = STACK.command(jobs["8b-fsdp"].replace(checkpoint_dir=None))
    assert not none.checkpoint_on_sigterm and "--save" not in none.argv and "loses" in none.guarantee


def test_validate_uses_megatrons_own_parser_only_where_it_is_importable(jobs):
    try:
        import megatron.training.arguments  # noqa: F401
    except Exception:
        with pytest.raises(StackNotInstalled, match="megatron"):
            STACK.validate(STACK.command(jobs["8b-fsdp"]))
    else:  # pragma: no cover - a Megatron-LM checkout on the path
        assert STACK.validate(STACK.command(jobs["8b-fsdp"]))["tensor_model_parallel_size"] == 1


# --------------------------------------------------------------------------------------------- logs
def _lines(name):
    return (LOGS / name).read_text().splitlines()


def test_issue_756_iteration_lines():
    """Mixtral 8x7B on 16 H100s: 128 sequences per 5,361.6 ms at 243.6 TFLOP/s/GPU (the excerpt's numbers)."""
    ev = list(STACK.bind(4096).parse_log(_lines("megatron_issue756_mixtral_h100.log")))
    assert [e.step for e in ev] == [71, 72, 73]
    assert ev[0].tokens_per_second == pytest.approx(128 * 4096 / 5.3616)
    assert ev[0].tflops == 243.6 and ev[0].loss == pytest.approx(1.818812)
    assert ev[2].tokens_per_second == pytest.approx(128 * 4096 / 5.8299)
    # unbound and with no argument dump, the sequence length is unknown: no made-up tokens/s
    assert all(e.tokens_per_second is None for e in STACK.parse_log(_lines("megatron_issue756_mixtral_h100.log")))
    # a line-by-line reader (the launcher's log follower) learns it from the dump at the top of the log
    from cloudfit.runtime.logprogress import LogProgress

    lp = LogProgress(type(STACK)(), total_steps=100, gpus=16)
    fed = [lp.feed(x) for x in ["  seq_length ...................................... 4096",
                                *_lines("megatron_issue756_mixtral_h100.log")]]
    assert fed[0] is None and [e.tokens_per_second for e in fed[1:]] == [e.tokens_per_second for e in ev]
    got = lp.progress()
    assert got["step"] == 73 and 128 * 4096 / 5.8299 <= got["tokens_per_second"] <= 128 * 4096 / 5.3616
    med = median_rate(ev, gpus=16, warmup_steps=0)  # the first logged line counts as warm-up
    assert med["steps"] == [72, 73] and med["tflops"] == pytest.approx((238.7 + 224.0) / 2)
    assert med["tokens_per_second"] == pytest.approx((128 * 4096 / 5.4707 + 128 * 4096 / 5.8299) / 2)


def test_pr_5662_iteration_and_memory_lines():
    """16 sequences per 744.0 ms; peak memory 6406.00 MiB reserved (5670.39 MiB max allocated)."""
    ev = list(STACK.bind(2048).parse_log(_lines("megatron_pr5662_iteration_memory.log")))
    it, mem = ev
    assert it.step == 20 and it.tokens_per_second == pytest.approx(16 * 2048 / 0.744)
    assert mem.step == 20 and mem.memory_gib == pytest.approx(6406.00 / 1024)
    assert median_rate(ev, gpus=8, warmup_steps=0)["memory_gib"] == pytest.approx(6.2559, abs=1e-4)


def test_issue_314_checkpoint_lines():
    ev = list(STACK.bind(1024).parse_log(_lines("megatron_issue314_checkpoint.log")))
    saved = [e for e in ev if isinstance(e, CheckpointSaved)]
    assert saved == [CheckpointSaved(400, "customer_scripts/checkpoints/3b")]  # 600 began but never finished
    prog = [e for e in ev if isinstance(e, Progress)]
    assert [p.step for p in prog] == [500, 600] and prog[0].tokens_per_second == pytest.approx(8 * 1024 / 5.3798)


def test_the_argument_dump_gives_the_sequence_length_and_the_layout():
    lines = ["using world size: 16, data-parallel size: 4, context-parallel size: 1, hierarchical context-parallel "
             "sizes: None, tensor-model-parallel size: 2, pipeline-model-parallel size: 2",
             *STACK.sample_log(),
             "  micro_batch_size ................................ 1",
             "  global_batch_size ............................... 64",
             "  use_distributed_optimizer ....................... True",
             "  recompute_granularity ........................... selective"]
    ev = [e for e in STACK.parse_log(lines) if isinstance(e, Progress) and e.tokens_per_second]
    assert ev[0].tokens_per_second == pytest.approx(64 * 4096 / 4.0)
    lay = STACK.layout_from_log(lines)
    assert lay == {"gpus": 16, "cp": 1, "tp": 2, "pp": 2, "dp_replicate": 1, "dp_shard": 4, "zero": 1,
                   "micro_batch": 1, "global_batch": 64, "seq_len": 4096, "ac": "selective"}
