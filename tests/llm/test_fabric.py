"""The LLM step model's collectives across nodes run as the node's fabric lets them (cloudfit/catalog/network.py,
issue 33): sockets below RDMA, never past the link, more nodes never faster per GPU."""

from __future__ import annotations

import pytest

from cloudfit.llm import hardware as lhw
from cloudfit.llm import predict as P
from cloudfit.catalog import network


def _at(monkeypatch, fabric, gbps, nodes, layout):
    """llama3-8b on nodes × 8 H100 over a ``gbps`` link of ``fabric`` (None: the fitted RDMA-class fabric)."""
    hw = dict(P._hw("H100", "bf16", 8, None, gbps, P.constants()), node_transport=fabric)
    with monkeypatch.context() as m:
        m.setattr(P, "_hw", lambda *a, **k: hw)
        return P.predict("llama3-8b", "H100", nodes=nodes, layout=layout, seq_len=4096, batch_size=2,
                         framework="fsdp", network_gbps=gbps)


@pytest.mark.parametrize("fabric", sorted(network.FABRICS))
def test_more_nodes_never_raise_per_gpu_speed_on_any_fabric(fabric, monkeypatch):
    # at a fixed batch per data-parallel rank, another node never shortens a step's compute and communication;
    # only ZeRO's sharded optimizer update (a 1/N share of the AdamW pass) shrinks with more GPUs, so FSDP layouts
    # are held to the step without it, plain data parallelism to its whole per-GPU speed
    for layout in ("fsdp={g}", "tp=8,dp={n}", "pp=2,fsdp={h}"):
        for gbps in (100.0, 3200.0):
            runs = [_at(monkeypatch, fabric, gbps, n, layout.format(g=8 * n, n=n, h=4 * n)) for n in (1, 2, 4, 8, 16)]
            busy = [r.step_time_s - r.breakdown["optimizer_and_overhead_s"] for r in runs]
            assert all(b >= a * (1 - 1e-9) for a, b in zip(busy, busy[1:])), (fabric, layout, gbps, busy)
            if "fsdp" not in layout:
                per_gpu = [r.tokens_per_second / r.gpus for r in runs]
                assert all(b <= a * (1 + 1e-9) for a, b in zip(per_gpu, per_gpu[1:])), (fabric, layout, per_gpu)


def test_sockets_are_slower_than_rdma_and_the_public_fabrics_are_unchanged(monkeypatch):
    assert P._hw("H100", "bf16", 8, None, 100.0, P.constants())["node_transport"] is None  # bare --network-gbps
    none, ib, roce, gvnic, efa = (_at(monkeypatch, f, 100.0, 4, "fsdp=32")
                                  for f in (None, "infiniband", "roce", "gvnic", "efa"))
    assert ib.step_time_s == pytest.approx(none.step_time_s, rel=1e-12)  # the public runs' fabric: as fitted
    assert roce.step_time_s == pytest.approx(none.step_time_s, rel=1e-12)
    assert gvnic.breakdown["exposed_fsdp_s"] > ib.breakdown["exposed_fsdp_s"]
    assert gvnic.tokens_per_second < ib.tokens_per_second
    assert efa.tokens_per_second <= ib.tokens_per_second * 1.10


def test_the_fabric_of_each_llm_node():
    assert lhw.node_fabric("H100") == "tcpx" and lhw.node_fabric("A100") == "gvnic"
    assert lhw.node_fabric("H100", "DGX-H100") == "infiniband"
    assert lhw.node_fabric("A10G", "g5.48xlarge") == "efa" and lhw.node_fabric("A100", "a2-ultragpu-8g") == "gvnic"
    assert lhw.node_fabric("H100", "a3-megagpu-8g") == "tcpxo" and lhw.node_fabric("B200", "a4-highgpu-8g") == "roce"


def test_the_effective_inter_node_bandwidth_never_beats_the_link():
    from cloudfit.llm.step import _Links

    c = P.constants()
    for fabric in network.FABRICS:
        for gbps in (10.0, 100.0, 400.0, 3200.0):
            links = _Links(c, gpn=8.0, dom=8.0, intra=1e6, inter=gbps / 8 / 8 * c.net_eff, link_gbps=gbps,
                           transport=fabric)
            for nodes in (2, 4, 16, 64):
                n = 8.0 * nodes
                bw = links(n, 1.0)  # the ring formula's GB/s over all n GPUs; the node moves 2(m-1)/m of the buffer
                node_gbs = bw * ((nodes - 1) / nodes) / ((n - 1) / n)
                assert node_gbs <= gbps / 8 * (1 + 1e-9), (fabric, gbps, nodes)
