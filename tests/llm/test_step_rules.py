"""Physical rules of the step model (cloudfit/llm/step.py), each checked against its closed form:
unfused attention, host dispatch hidden behind GPU work, cross-node collectives over m nodes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from cloudfit.llm import data, zoo
from cloudfit.llm.predict import _model_args, constants
from cloudfit.llm.stats import token_stats
from cloudfit.llm.step import Constants, host_ops, step_time

A100 = dict(peak_tflops=312.0, memory_gbs=2039.0, intra_gbs=240.0, node_gbps=1600.0, gpus_per_node=8,
            nvlink_domain=8)


def _run(c: Constants, model=None, *, tp=1, pp=1, dp=1, mb=1, ga=1, ac=2, flash=1.0, heads=None, hw=None, **over):
    st = token_stats(zoo.get("llama3-8b"), 4096)
    args = _model_args(st)
    if heads is not None:
        args["heads"] = heads
    args.update(model or {})
    h = dict(A100, **(hw or {}))
    kw = dict(tp=tp, pp=pp, cp=1, vp=1, dp_replicate=dp, dp_shard=1, zero=0, micro_batch=mb, grad_accum=ga,
              ac_code=ac, efficiency=0.7, tp_exposed=1.0, dp_overlap=0.0, fsdp_overlap=0.0, attn_eff=0.7,
              flash=flash, c=c)
    kw.update(over)
    return {k: float(np.asarray(v)) for k, v in step_time(**args, **h, **kw).items()}


def test_unfused_attention_computes_the_masked_half_too():
    # only the attention core left: the unfused kernel does twice the causal-half FLOPs, over 1 + 2 forwards
    # (+ the recompute) against a flash kernel's 1 + 2.5 (its backward recomputes the scores)
    only_att = dict(layer_matmul_flops=0.0, head_flops=0.0, act_none=0.0)
    c = replace(Constants(), mem_traffic=0.0)
    for ac, rec in ((0, 0.0), (2, c.recompute)):
        fused = _run(c, only_att, flash=1.0, heads=0.0, ac=ac)["compute_s"]
        unfused = _run(c, only_att, flash=0.0, heads=0.0, ac=ac)["compute_s"]
        assert fused > 0 and unfused == pytest.approx(2.0 * (3.0 + rec) / (3.5 + rec) * fused, rel=1e-12)


def test_flash_backward_costs_two_and_a_half_forwards():
    # a flash core: forward 1, backward 2.5 (5 matmuls against 2), a full recompute one forward more
    only_att = dict(layer_matmul_flops=0.0, head_flops=0.0, act_none=0.0)
    c = replace(Constants(), mem_traffic=0.0, recompute=1.0)
    none = _run(c, only_att, flash=1.0, heads=0.0, ac=0)["compute_s"]
    full = _run(c, only_att, flash=1.0, heads=0.0, ac=2)["compute_s"]
    assert full == pytest.approx(4.5 / 3.5 * none, rel=1e-12)


def test_unfused_attention_moves_its_score_matrix_through_hbm():
    # nothing but the score matrix: QK^T writes and AV reads 2 bytes a score; (12 + 4·recompute)·heads·seq
    # bytes per token and layer at memory bandwidth; a flash kernel never materialises it
    c = replace(Constants(), mem_traffic=0.0)
    none = dict(layer_matmul_flops=0.0, layer_attention_flops=0.0, head_flops=0.0, act_none=0.0)
    st = token_stats(zoo.get("llama3-8b"), 4096)
    a, s, layers, mb = 32.0, 4096.0, st.layers, 2
    got = _run(c, none, flash=0.0, heads=a, mb=mb)["compute_s"]
    want = mb * s * layers * (12.0 + 4.0 * c.recompute) * a * s / (A100["memory_gbs"] * 1e9)
    assert got == pytest.approx(want, rel=1e-12)
    assert _run(c, none, flash=1.0, heads=a, mb=mb)["compute_s"] == 0.0


def test_unfused_attention_is_never_faster_than_flash():
    c = constants()
    for mb in (1, 2, 8):
        assert _run(c, flash=0.0, mb=mb)["step_s"] > _run(c, flash=1.0, mb=mb)["step_s"]


def test_host_dispatch_hides_behind_long_kernels():
    # a large model's micro-batch takes far longer on the GPU than the host needs to launch it: no host term
    c = constants()
    r = _run(c, mb=4)
    assert r["compute_s"] > 10 * c.tau_s * 32
    base = r["other_s"]
    r0 = _run(replace(c, tau_s=0.0), mb=4)
    assert r0["other_s"] == pytest.approx(base, rel=1e-12) and r0["step_s"] == pytest.approx(r["step_s"], rel=1e-12)


def test_host_time_and_gpu_time_overlap_per_micro_batch():
    # per micro-batch the step takes max(GPU, host), not their sum: with host = 2 × GPU the step grows by one
    # GPU time per micro-batch (a sum would add two); with host = GPU / 2 it does not grow at all
    c0 = replace(constants(), tau_s=0.0)
    ga, layers = 4, token_stats(zoo.get("llama3-8b"), 4096).layers
    g = _run(c0, ga=ga)
    t_gpu = (g["step_s"] - g["dp_s"] - g["other_s"]) / ga
    ops = float(host_ops(2))  # _run's layer: full recompute, flash attention, no TP
    slow_host = _run(replace(c0, tau_s=2.0 * t_gpu / layers / ops), ga=ga)
    assert slow_host["step_s"] == pytest.approx(g["step_s"] + ga * t_gpu, rel=1e-9)
    fast_host = _run(replace(c0, tau_s=0.5 * t_gpu / layers / ops), ga=ga)
    assert fast_host["step_s"] == pytest.approx(g["step_s"], rel=1e-12)


def test_host_time_counts_the_layers_dispatched_ops():
    # tau_s is the reference layer's (flash, no recompute, no TP); full recompute dispatches the forward again
    # (4/3), an unfused attention core 3 more ops per forward, TP its collectives
    assert float(host_ops(0)) == pytest.approx(1.0) and float(host_ops(1)) == pytest.approx(1.0)
    assert float(host_ops(2)) == pytest.approx(4.0 / 3.0)
    assert float(host_ops(0, flash=0.0)) == pytest.approx(15.0 / 12.0)
    assert float(host_ops(2, flash=0.0, tp=2)) > float(host_ops(2, flash=0.0)) > float(host_ops(2))
    # a host-bound micro-batch (tiny GEMMs) takes tau_s × ops × layers
    c = replace(constants(), tau_s=1.0)
    tiny = dict(layer_matmul_flops=1.0, layer_attention_flops=1.0, head_flops=1.0, act_none=0.0)
    a, b = _run(c, tiny, ac=0, ga=2), _run(c, tiny, ac=2, ga=2)
    assert b["step_s"] - a["step_s"] == pytest.approx(2 * 32 * (4.0 / 3.0 - 1.0), rel=1e-3)


def test_more_compute_never_shortens_the_step_across_the_host_bound():
    c = constants()
    prev = 0.0
    for scale in (1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0):
        st = token_stats(zoo.get("llama3-8b"), 4096)
        r = _run(c, dict(layer_matmul_flops=st.layer_matmul_flops * scale))
        assert r["step_s"] >= prev
        prev = r["step_s"]


def _tp16(c, node_gbps):
    return _run(c, tp=16, mb=2, hw={"node_gbps": node_gbps, "intra_gbs": 1e9})["tp_s"]


def test_cross_node_collective_moves_2_m_minus_1_over_m_per_node():
    # TP 16 over 2 nodes (8 ranks each): the network carries 2(m−1)/m = 1× the buffer per node, not the
    # 2(n−1)/n = 1.875× of a flat 16-rank ring: the exposed TP time is the flat-ring time ÷ 1.875
    c = replace(constants(), nic_parallel=0.0, net_eff=1.0)
    st = token_stats(zoo.get("llama3-8b"), 4096)
    act = 2 * 4096 * st.hidden * 2.0  # bytes of one micro-batch's activations
    per_gpu = 1600.0 / 8.0 / 8.0  # GB/s: one GPU's share of the node's network
    n_coll = 6.0  # full recompute: 4 + 2 collectives per layer
    flat = st.layers * n_coll * 2.0 * 15.0 / 16.0 * act / (per_gpu * 1e9)
    assert _tp16(c, 1600.0) == pytest.approx(flat / 1.875, rel=1e-12)


def test_one_rank_per_node_collective_is_a_plain_ring():
    # DP with one rank per node (tp 8 fills the node): m = n, the ring formula is unchanged
    c = replace(constants(), nic_parallel=0.0, net_eff=1.0)
    st = token_stats(zoo.get("llama3-8b"), 4096)
    r = _run(c, tp=8, dp=4, mb=1)
    grads = st.parameters / 8.0 * 2.0
    want = 2.0 * 3.0 / 4.0 * grads / (1600.0 / 8.0 / 8.0 * 1e9)
    assert r["dp_s"] == pytest.approx(want, rel=1e-12)


def test_cross_node_time_falls_with_network_bandwidth():
    c = constants()
    times = [_tp16(c, g) for g in (100, 400, 800, 1600, 3200)]
    assert all(a >= b for a, b in zip(times, times[1:]))


def test_shipped_nvlink_efficiency_is_at_most_nccls_bus_bandwidth():
    assert 0.0 < constants().nvlink_eff <= 1.0


def test_vtrain_rows_use_the_network_of_vtrains_own_validation_configs():
    rows = [r for r in data.load_rows() if r["source"].startswith("vtrain")]
    assert rows and {r["node_gbps"] for r in rows} == {"800"}
