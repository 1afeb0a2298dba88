"""Issue 24, items 5 and 6: the stack is the job's (never switched by the layout), and the physics of FP8,
context parallelism, pipelined FSDP and peak memory."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from cloudfit.llm import data, evaluate, memory, stats, zoo
from cloudfit.llm import predict as P
from cloudfit.llm.layout import Layout
from cloudfit.llm.step import FRAMEWORKS, TRAINER

GIB = 1024.0 ** 3


def _run(model, layouts, *, seq, acc="H100", gpn=8, precision="bf16", framework=None):
    return P.predict_layouts(zoo.get(model), acc, layouts, seq_len=seq, gpus_per_node=gpn, precision=precision,
                             framework=framework)


def test_auto_layout_runs_on_the_jobs_stack_and_picks_no_gratuitous_cp():
    """llama3-8b on 64 H100 at 8K tokens: the old predictor priced any model parallelism with Megatron's
    constants and picked cp=2 / tp=2 for a plan that runs cloudfit's own FSDP2 trainer."""
    p = P.predict("llama3-8b", "H100", gpus_per_node=8, nodes=8, seq_len=8192, batch_size=1, layout="auto")
    assert p.framework == TRAINER
    assert p.layout.cp == 1 and p.layout.tp == 1, p.layout.describe()
    lays = P.candidate_layouts(zoo.get("llama3-8b"), 64, global_batch=64, seq_len=8192)
    assert len({lay.tp * 100 + lay.cp for lay in lays}) > 1
    assert set(_run("llama3-8b", lays, seq=8192)["framework"]) == {TRAINER}
    assert set(_run("llama3-8b", lays, seq=8192, framework="megatron")["framework"]) == {"megatron"}


def test_catalog_search_prices_every_layout_with_one_stack():
    from cloudfit.llm import space

    st = stats.token_stats(zoo.get("llama3-8b"), 8192)
    hw = space.HardwareShape("H100", 8, 3200.0, 8, 80.0)
    best = space.rank_layouts(st, zoo.get("llama3-8b"), hw, 8, global_batch=64, exact=True, top=1)[0]
    assert "cp=1" in best["layout"] and "tp=1" in best["layout"], best


@pytest.mark.parametrize("framework", (None,) + tuple(FRAMEWORKS))
@pytest.mark.parametrize("model,seq", [("llama3-8b", 2048), ("llama3-8b", 8192), ("llama3-70b", 32768),
                                       ("llama3-1b", 512)])
def test_cp_or_tp_never_speeds_a_step_at_equal_tokens_per_gpu(framework, model, seq):
    """Same tokens per GPU per micro-batch and global batch: adding CP (the ZeRO group stays dp × cp = 8, so no
    communication is saved) never makes a step faster; adding TP never makes the step without its data-parallel
    traffic faster (TP shrinks the weights each rank gathers: that saving is real and excluded here)."""
    for acc, prec in (("H100", "bf16"), ("H100", "fp8"), ("A100", "bf16")):
        for ac in ("none", "selective", "full"):
            base = Layout(dp_shard=8, micro_batch=1, ac=ac)
            lays = [base, replace(base, dp_shard=4, cp=2, micro_batch=2), replace(base, dp_shard=4, tp=2, micro_batch=2),
                    replace(base, dp_shard=2, cp=2, tp=2, micro_batch=4)]
            r = _run(model, lays, seq=seq, acc=acc, precision=prec, framework=framework)
            step = r["step_s"]
            no_dp = step - r["fsdp_s"] - r["dp_s"]
            assert step[1] >= step[0] * (1 - 1e-12), (acc, prec, ac, step)
            assert no_dp[2] >= no_dp[0] * (1 - 1e-12), (acc, prec, ac, no_dp)
            assert no_dp[3] >= no_dp[2] * (1 - 1e-12), (acc, prec, ac, no_dp)


def test_pipelined_fsdp_gathers_a_stage_once_per_step():
    """FSDP with a pipeline keeps the stage's weights gathered across its micro-batches: the gather traffic of a
    step does not grow with the micro-batch count, and the unsharded stage stays in memory."""
    lays = [Layout(dp_shard=8, tp=8, pp=8, micro_batch=1, grad_accum=ga, ac="full") for ga in (8, 32)]
    r = _run("llama3-405b", lays, seq=8192, gpn=8, framework="megatron")
    assert r["fsdp_s"][1] == pytest.approx(r["fsdp_s"][0], rel=1e-9)
    # the step grows by the extra micro-batches' compute, not by re-gathering 405B weights 32 times
    assert r["step_s"][1] / r["step_s"][0] < 32 / 8
    st = stats.token_stats(zoo.get("llama3-405b"), 8192)
    e = memory.estimate(st, lays[1], capacity_gib=80)
    stage = memory.stage_parameters(st, lays[1]) / 8
    assert e.buffers_gib * GIB >= stage * 6.0 * (1 - 1e-12)  # bf16 weights + fp32 accumulated gradients
    assert e.total_gib > 50.0  # the old rule (two layers unsharded) said 22 GiB: a plan that would OOM
    flat = memory.estimate(st, replace(lays[1], pp=1, dp_shard=64, grad_accum=32), capacity_gib=80)
    assert flat.buffers_gib < e.buffers_gib / 10


def test_zero_shards_over_data_and_context_parallel_ranks():
    st = stats.token_stats(zoo.get("llama3-70b"), 8192)
    a = memory.estimate(st, Layout(dp_shard=16, ac="full"), capacity_gib=80)
    b = memory.estimate(st, Layout(dp_shard=8, cp=2, ac="full"), capacity_gib=80)
    assert b.states_gib == pytest.approx(a.states_gib, rel=1e-12)
    c = memory.estimate(st, Layout(dp_shard=8, zero=1, pp=2, cp=2, grad_accum=4), capacity_gib=80, framework="megatron")
    d = memory.estimate(st, Layout(dp_shard=16, zero=1, pp=2, grad_accum=4), capacity_gib=80, framework="megatron")
    assert c.optimizer_gib == pytest.approx(d.optimizer_gib, rel=1e-12)


def test_memory_follows_the_stacks_implementation():
    st = stats.token_stats(zoo.get("llama3-8b"), 65536)
    lay = Layout(dp_shard=4, cp=2, ac="selective")
    own, meg = (memory.estimate(st, lay, capacity_gib=80, framework=f) for f in ("cloudfit", "megatron"))
    assert own.activations_gib > meg.activations_gib  # the gathered K/V of the other chunk, kept for backward
    assert own.logits_gib == pytest.approx(meg.logits_gib * 10 / 4)  # fp32 loss vs a fused vocab-parallel one
    flat = Layout(dp_shard=8, ac="selective")  # no CP: the K/V SDPA saves repeated to 32 heads from 8 (GQA)
    gqa = memory.estimate(st, flat, capacity_gib=80).activations_gib - memory.estimate(
        st, flat, capacity_gib=80, framework="fsdp").activations_gib
    assert gqa * GIB == pytest.approx(65536 * 32 * 4 * (4096 - 1024))
    e8 = memory.estimate(st, Layout(dp_shard=8, ac="full"), capacity_gib=80, precision="fp8", framework="megatron")
    e8_own = memory.estimate(st, Layout(dp_shard=8, ac="full"), capacity_gib=80, precision="fp8")
    assert e8.weights_gib == pytest.approx(e8_own.weights_gib / 2)  # fp8 primary weights only under Megatron


def test_fp8_gains_only_on_the_linear_gemms_and_less_on_a_linear_only_stack():
    lay = [Layout(dp_shard=8, micro_batch=1, ac="selective")]
    ratio = {}
    for fw in ("megatron", "fsdp", "cloudfit"):
        for seq in (2048, 32768):
            t8 = _run("llama3-8b", lay, seq=seq, precision="fp8", framework=fw)["tokens_per_second"][0]
            t16 = _run("llama3-8b", lay, seq=seq, precision="bf16", framework=fw)["tokens_per_second"][0]
            ratio[fw, seq] = t8 / t16
    for fw in ("megatron", "fsdp", "cloudfit"):
        assert ratio[fw, 32768] < ratio[fw, 2048] < 2.0  # attention stays bf16: long sequences gain less
    assert ratio["fsdp", 2048] < ratio["megatron", 2048]  # unfused casts and amax cost more than TE's fused ones


def test_no_published_run_is_predicted_not_to_fit():
    rep = evaluate.memory_check(data.table())
    assert rep["predicted_not_to_fit"] == 0, rep["examples"]


def test_shipped_fp8_ratio_follows_llm_foundry():
    """FP8/bf16 throughput of llm-foundry's FSDP runs (the only stack in the data with both precisions): the old
    model said 1.2-1.8x where they measure 1.0-1.35x (15-38% off). Now within 10% on mpt-1b and within 13% on
    mpt-3b (its bf16 rows are predicted 4-9% slow: bench/RESULTS_llm.md names the miss of the 10% goal)."""
    t = data.table()
    p = data.predict_table(t, P.constants())["tokens_per_second"]
    pairs = {}
    for i, r in enumerate(t.rows):
        if r["source"] == "llm-foundry" and r["accelerator"] == "H100" and r["gpus"] == "8":
            pairs.setdefault((r["model"], r["seq_len"]), {})[r["precision"]] = i
    errs = []
    for key, d in pairs.items():
        if {"fp8", "bf16"} <= set(d):
            meas = t.measured[d["fp8"]] / t.measured[d["bf16"]]
            pred = p[d["fp8"]] / p[d["bf16"]]
            errs.append(abs(pred / meas - 1))
            assert errs[-1] <= (0.10 if key[0] == "mpt-1b" else 0.13), (key, meas, pred)
    assert len(errs) >= 5 and float(np.mean(errs)) < 0.08


def test_pipeline_candidates_shard_as_the_stack_does():
    """cloudfit's trainer runs FSDP on every pipeline stage (no ZeRO-1 option): its pipelined candidates are
    zero 3 and their memory holds the gathered stage; Megatron's are its distributed optimizer (zero 1)."""
    from cloudfit.llm import space

    shape = zoo.get("llama3-70b")
    own = P.candidate_layouts(shape, 64, global_batch=128, seq_len=4096)
    meg = P.candidate_layouts(shape, 64, global_batch=128, seq_len=4096, pipeline_zero=1)
    assert {l.zero for l in own if l.pp > 1 and l.dp > 1} == {3}
    assert {l.zero for l in meg if l.pp > 1 and l.dp > 1} == {1}
    g = space.layout_grid(64, nvlink_domain=8, heads=shape.heads, kv_heads=shape.kv_heads, layers=shape.layers,
                          seq_len=4096, global_batch=128)
    assert set(g.zero[(g.pp > 1) & (g.dp > 1)].tolist()) == {3}
    p = P.predict(shape, "H100", nodes=8, seq_len=4096, batch_size=2, layout="auto", framework="megatron")
    assert p.layout.pp == 1 or p.layout.zero == 1 or p.layout.dp == 1
    own_text = P.predict(shape, "H100", nodes=8, seq_len=4096, batch_size=8, layout="tp=8,pp=2,ac=full")
    meg_text = P.predict(shape, "H100", nodes=8, seq_len=4096, batch_size=8, layout="tp=8,pp=2,ac=full",
                         framework="megatron")
    assert (own_text.layout.zero, meg_text.layout.zero) == (3, 1)
    assert own_text.memory.buffers_gib > meg_text.memory.buffers_gib  # the gathered stage
