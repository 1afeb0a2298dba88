"""The step model on GB200 / GB300 NVL72 racks (issue 33, bench/llm_multinode.py): the NVLink domain (72 GPUs) is
the unit of the hierarchical schedule, not the 8-GPU tray the public tables list as a node."""

from __future__ import annotations

import numpy as np
import pytest

from cloudfit.llm.layout import Layout
from cloudfit.llm.predict import predict
from cloudfit.llm.zoo import resolve


def _lay(*, tp=1, pp=1, dp=1, zero=1, mb=1, ga=8, vp=1):
    rep, shard = (1, dp) if zero else (dp, 1)
    return Layout(rep, shard, zero, tp, pp, 1, vp, mb, ga, "selective", "interleaved" if vp > 1 else "1f1b")


def _tps(acc, nodes, lay, gbps, model="llama3-70b"):
    return predict(resolve(model), acc, gpus_per_node=8, nodes=nodes, precision="bf16", seq_len=8192,
                   layout=lay, framework="megatron", network_gbps=gbps)


@pytest.mark.parametrize("acc", ["GB200", "GB300"])
def test_a_pipelined_job_inside_one_rack_never_touches_the_nic(acc):
    # 64 GPUs, tp 2 × pp 4 × dp 8: every stage (16 GPUs) and every collective stays in the 72-GPU NVLink domain
    lay = _lay(tp=2, pp=4, dp=8, ga=32, vp=5)
    slow, fast = _tps(acc, 8, lay, 100.0), _tps(acc, 8, lay, 3200.0)
    assert slow.tokens_per_second == pytest.approx(fast.tokens_per_second, rel=1e-12)
    # the same layout on 8-GPU H100 nodes does send between stages over the network
    assert _tps("H100", 8, lay, 100.0).tokens_per_second < _tps("H100", 8, lay, 3200.0).tokens_per_second


def test_fsdp_across_two_racks_reduces_inside_each_rack_first():
    # 128 GB200, tp 2 × FSDP 64: the shard group crosses 2 racks. Priced per rack (32 ranks of the group behind
    # 32 NICs each) its exposed network time is below the same GPUs counted as sixteen 8-GPU nodes
    lay = _lay(tp=2, dp=64, zero=3, mb=1, ga=1)
    gb = _tps("GB200", 16, lay, 3200.0, model="llama3-405b").breakdown["exposed_fsdp_s"]
    b200 = _tps("B200", 16, lay, 3200.0, model="llama3-405b").breakdown["exposed_fsdp_s"]
    assert gb < b200
    # the network still matters across racks
    assert _tps("GB200", 16, lay, 100.0, model="llama3-405b").tokens_per_second < \
        _tps("GB200", 16, lay, 3200.0, model="llama3-405b").tokens_per_second


@pytest.mark.parametrize("acc", ["GB200", "GB300"])
def test_more_racks_never_raise_per_gpu_speed(acc):
    # plain data parallelism (no optimizer sharding: FSDP's 1/N share of the AdamW update is the one per-GPU gain
    # the model allows), 1 to 16 racks' worth of trays, at a slow and a fast NIC
    for gbps in (100.0, 3200.0):
        ps = [_tps(acc, n, _lay(tp=2, dp=4 * n, zero=0, mb=1, ga=4), gbps, model="llama3-8b") for n in (1, 4, 8, 9, 16, 32, 64, 128)]
        rates = np.array([p.tokens_per_second / p.gpus for p in ps])
        assert (np.diff(rates) <= 1e-9 * rates[:-1]).all(), rates
