"""NCCL's all-reduce by fabric from public nccl-tests rows (cloudfit/catalog/network.py, issue 33 item 2): every
constant is the fit rule applied to data/raw/network/nccl_transport.csv, and the model keeps to physics."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from cloudfit.catalog import network

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import fabric_nccl
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return fabric_nccl


@pytest.fixture(scope="module")
def rows():
    return _bench().load_rows()


def test_every_fabric_constant_is_the_fit_rule_on_the_csv(rows):
    f = network.fit(rows)
    assert f["classes"] == network.FABRICS
    assert set(f["share"]) == set(network.SHARES) == set(network.TRANSPORTS) - {"tcp"}
    for cls, shares in network.SHARES.items():
        assert np.allclose(f["share"][cls], shares, atol=5e-4), (cls, f["share"][cls], shares)
    assert f["tcp_ceiling_gbps"] == network.TCP_CEILING_GBPS
    assert tuple(f["tree"]) == network.TREE_CLASSES
    for table, fitted in ((network.STEP_LATENCY_S, f["latency_s"]), (network.BUCKET_STEP_S, f["bucket_step_s"])):
        assert set(table) == set(network.TRANSPORTS)
        for cls, v in table.items():
            assert fitted[cls] == pytest.approx(v, rel=5e-3), (cls, fitted[cls], v)
    # each constant names the csv sources behind it, and each of those is a row with a public source
    keys = {network._source_key(r) for r in rows}
    for cls in network.TRANSPORTS:
        for what in ([0, 1, 2] if cls != "tcp" else []) + ["latency", "bucket"]:
            src = [s for s in f["sources"][(cls, what)] if not str(s).startswith("ratio:")]
            assert src and all(s in keys for s in src), (cls, what, src)
    assert all(r["source"].strip() for r in rows)


def test_a_change_in_the_csv_moves_the_constant_it_traces_to(rows):
    # the fit is not decorative: halving the TCPX rows' busbw halves TCPX's share, and dropping them folds TCPX
    # back into EFA
    half = [dict(r, busbw_GBps=str(float(r["busbw_GBps"]) / 2)) if r.get("fabric") == "tcpx" else r for r in rows]
    assert network.fit(half)["share"]["tcpx"][0] == pytest.approx(network.TCPX_SHARE[0] / 2, abs=1e-3)
    without = network.fit([r for r in rows if r.get("fabric") != "tcpx"])
    assert without["classes"]["tcpx"] == "efa" and "tcpx" not in without["share"]


def test_a_share_never_passes_the_link(rows):
    for cls, shares in network.SHARES.items():
        assert all(0 < s <= 1 for s in shares), cls
    links = np.array([1, 10, 25, 100, 400, 1000, 3200, 3600], dtype=float)
    for cls in network.TRANSPORTS:
        for nodes in (2, 3, 8, 64):
            for gpn in (1, 4, 8):
                eff = network.effective_gbps(links, nodes, cls, gpn)
                assert np.all(eff <= links * network.tree_gain(nodes, gpn) + 1e-9), (cls, nodes, gpn)
                assert np.all(network.share(cls, nodes, links) <= 1.0)
    # and the public rows themselves: busbw passes the link only on two VMs of several GPUs under NCCL's tree,
    # never by more than the tree allows
    for r in rows:
        if r["quantity"] != "busbw":
            continue
        over = float(r["busbw_GBps"]) * 8 / float(r["link_gbps"])
        tree = r["collective"] == "all_reduce" and r["algo"] == "default"
        limit = float(network.tree_gain(float(r["nodes"]), float(r["gpus_per_node"]))) if tree else 1.0
        assert over <= limit, (r["source"], r["bytes"], over, limit)


def test_more_nodes_never_raise_per_gpu_effective_bandwidth():
    links = np.array([25, 100, 400, 1000, 3200], dtype=float)
    nodes = np.array([2, 3, 4, 7, 8, 16, 64], dtype=float)
    for cls in network.TRANSPORTS:
        for gpn in (1, 2, 8):
            for link in links:
                eff = network.effective_gbps(link, nodes, cls, gpn)
                assert np.all(np.diff(eff) <= 1e-9), (cls, gpn, link, eff)
                # the same per-GPU gradient over more VMs never all-reduces sooner
                t = network.allreduce_s(np.full(len(nodes), 1e8), nodes * gpn, nodes, link, np.inf, cls)
                assert np.all(np.diff(t) >= -1e-12), (cls, gpn, link, t)


def test_bigger_messages_never_lower_the_bus_bandwidth():
    sizes = 2.0 ** np.arange(3, 35)
    for cls in network.TRANSPORTS:
        for nodes, gpn in ((2, 1), (2, 8), (3, 8), (8, 8), (32, 4)):
            for coll in ("all_reduce", "all_gather"):
                bw = network.busbw_gbs(sizes, nodes * gpn, nodes, 400.0, cls, coll)
                assert np.all(np.diff(bw) >= -1e-12), (cls, nodes, gpn, coll)
                assert np.all(bw > 0)


def test_tcpx_is_its_own_class_and_tcpxo_stays_with_efa():
    assert network.transport_of("a3-highgpu-8g") == "tcpx" and network.transport_of("a3-megagpu-8g") == "efa"
    # TCPX's one public run (ring, 2 × a3-highgpu-8g) reached 0.53 of its VM's 1,000 Gbit/s: below every EFA source
    assert network.effective_gbps(1000.0, 2, "tcpx", 8) < network.effective_gbps(1000.0, 2, "efa", 8)
    assert network.effective_gbps(1000.0, 2, "tcpx") < network.effective_gbps(1000.0, 2, "efa")


def test_leave_one_source_out_large_messages(rows):
    # bench/fabric_nccl.py: each source's large-message busbw (or stated share) predicted from a fit without it
    rep = _bench().run(rows)
    large = rep["table"]["all · large"]
    assert large["after"]["mape"] <= 0.25 and large["after"]["mape"] < large["before"]["mape"]
    assert rep["table"]["all"]["after"]["mape"] < rep["table"]["all"]["before"]["mape"]


def test_no_public_run_beats_the_wire_bound(rows):
    # the shipped wire bound (network.wire_bound_sps: each of m VMs sends 2(m-1)/m of the buffer at the sold rate,
    # plus 2⌈log2 m⌉ small-message latencies) holds for every public all-reduce of the csv; the old bound (a ring's
    # 2(n-1)/n over all n GPUs) did not: 2 × a3-megagpu-8g all-reduced 8 GiB in 47.5 ms, the ring bound said 71.6 ms
    beaten_old = 0
    for r in rows:
        if r["quantity"] != "busbw" or r["collective"] != "all_reduce" or float(r["busbw_GBps"]) <= 0:
            continue
        nodes, gpn, s = float(r["nodes"]), float(r["gpus_per_node"]), float(r["bytes"])
        n = nodes * gpn
        t = 2 * (n - 1) / n * s / (float(r["busbw_GBps"]) * 1e9)  # the row's time, from its busbw
        bound_sps = network.wire_bound_sps(s, gpn, nodes, 1.0, float(r["link_gbps"]), np.inf,
                                           transport=r["fabric"])
        assert t >= n / bound_sps * (1 - 1e-6), (r["source"], r["bytes"], t, n / bound_sps)
        beaten_old += t < 2 * (n - 1) / n * s / (float(r["link_gbps"]) * 1e9 / 8)
    assert beaten_old >= 30  # the rows the ring bound got wrong (31: p4d, A3 Mega, Nebius, CoreWeave)
