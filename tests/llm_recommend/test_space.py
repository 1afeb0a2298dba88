"""The vectorised layout search agrees with the predictor's own API, and behaves physically."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cloudfit.llm import memory as mem
from cloudfit.llm import predict as pr
from cloudfit.llm import space as lsp
from cloudfit.llm import zoo
from cloudfit.llm.stats import token_stats

L8, L70 = zoo.get("llama3-8b"), zoo.get("llama3-70b")
H100 = lsp.HardwareShape("H100", 8, 1000.0, 8, 80.0)
A100 = lsp.HardwareShape("A100", 8, 100.0, 8, 40.0)


def _grid(shape, gpus, batch, exact=True, seq=8192):
    return lsp.layout_grid(gpus, nvlink_domain=8, heads=shape.heads, kv_heads=shape.kv_heads, layers=shape.layers,
                           seq_len=seq, global_batch=batch, exact=exact)


@pytest.mark.parametrize("shape,gpus,batch", [(L8, 8, 64), (L70, 16, 512), (L70, 24, 512), (L8, 64, 256)])
def test_grid_is_candidate_layouts_in_order(shape, gpus, batch):
    g = _grid(shape, gpus, batch)
    ref = pr.candidate_layouts(shape, gpus, gpus_per_node=8, global_batch=batch, seq_len=8192, nvlink_domain=8)
    assert len(ref) > 0 and [g.layout(i) for i in range(len(g))] == ref


@pytest.mark.parametrize("finetune,precision", [("full", "bf16"), ("lora", "bf16"), ("full", "fp8")])
def test_vectorised_memory_is_the_memory_model(finetune, precision):
    st = token_stats(L70, 8192)
    g = _grid(L70, 32, 256)
    got = lsp.memory_gib(st, g, precision=precision, finetune=finetune, lora_rank=8)
    want = [mem.estimate(st, g.layout(i), capacity_gib=80, precision=precision, finetune=finetune, lora_rank=8).total_gib
            for i in range(len(g))]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_evaluate_is_predict_layouts():
    st = token_stats(L70, 8192)
    g = _grid(L70, 32, 256)
    lays = [g.layout(i) for i in range(len(g))]
    ref = pr.predict_layouts(L70, "H100", lays, seq_len=8192, gpus_per_node=8, network_gbps=1000.0)
    got = lsp.evaluate(st, H100, g)
    np.testing.assert_allclose(got["tokens_per_second"], ref["tokens_per_second"], rtol=1e-12)
    np.testing.assert_allclose(got["mfu"], ref["mfu"], rtol=1e-12)


@pytest.mark.parametrize("hw,nodes", [(H100, 2), (H100, 8), (A100, 8), (A100, 16)])
def test_catalog_search_picks_best_layout(hw, nodes):
    st = token_stats(L70, 8192)
    res = lsp.search_catalog(st, L70, [hw], 16, global_batch=512, exact=True)
    ref = pr.best_layout(L70, hw.accelerator, nodes * 8, seq_len=8192, global_batch=512, gpus_per_node=8,
                         network_gbps=hw.node_gbps)
    got = res.layout(0, nodes)
    r = pr.predict_layouts(L70, hw.accelerator, [ref, got], seq_len=8192, gpus_per_node=8, network_gbps=hw.node_gbps)
    assert r["fits"].all()
    assert r["tokens_per_second"][1] == pytest.approx(r["tokens_per_second"][0], rel=1e-12)
    assert res.tokens_per_second[0, nodes - 1] == pytest.approx(r["tokens_per_second"][0], rel=1e-12)


def test_70b_does_not_fit_one_a100_node_but_fits_more():
    st = token_stats(L70, 8192)
    res = lsp.search_catalog(st, L70, [A100], 8, global_batch=512)
    assert res.tokens_per_second[0, 0] == 0 and res.n_fit[0, 0] == 0
    assert res.min_memory_gib[0, 0] > A100.capacity_gib
    assert res.tokens_per_second[0, 7] > 0 and res.memory_gib[0, 7] <= A100.capacity_gib


def test_more_bandwidth_or_memory_never_slower():
    st = token_stats(L70, 8192)
    fast_net = dataclasses.replace(A100, node_gbps=1600.0)
    big = dataclasses.replace(A100, capacity_gib=80.0)
    res = lsp.search_catalog(st, L70, [A100, fast_net, big], 16, global_batch=512)
    t = res.tokens_per_second
    assert (t[1] >= t[0] * (1 - 1e-12)).all() and (t[2] >= t[0] * (1 - 1e-12)).all()
    assert (t[1] > t[0]).any()  # the network matters somewhere


def test_batch_target_kept_within_tolerance():
    g = _grid(L8, 24 * 8, 512, exact=False)
    gb = g.micro_batch * g.grad_accum * g.dp
    assert len(g) and (gb >= 0.8 * 512).all() and (gb <= 1.25 * 512).all()
    # with a target smaller than the GPUs, plain data parallelism over every GPU is left out
    g2 = _grid(L8, 512, 64, exact=False)
    assert len(g2) and (g2.dp <= 80).all()


def test_pinned_degrees_are_respected():
    st = token_stats(L70, 8192)
    res = lsp.search_catalog(st, L70, [H100], 8, global_batch=512, constraints={"tp": 8, "ac": "full"})
    ok = res.tokens_per_second[0] > 0
    assert ok.any()
    assert (res.best["tp"][0][ok] == 8).all() and (res.best["ac"][0][ok] == 2).all()


def test_default_global_batch_is_about_4m_tokens():
    assert lsp.default_global_batch(8192) * 8192 == 2 ** 22
    assert lsp.default_global_batch(4096, "lora") * 4096 == 2 ** 20
