"""Cloud networks as they run: NCCL's effective all-reduce over each fabric (issue 33, item 2).

A VM's network figure (``cloudfit.catalog.hardware.vm_network_gbps``) is what the cloud sells; NCCL reaches a share
of it that depends on the transport, and each ring step pays a latency. Numbers (``data/raw/network/nccl_transport.csv``,
each row with its public source; assumptions named in ``data/raw/network/PROVENANCE.md``):

* **tcp** — NCCL's socket transport over Ethernet (GCP gVNIC, AWS ENA without EFA, anything else): the share falls
  with the link speed, as a per-host socket ceiling takes over. ``effective = 1 / (1/(η₀·link) + 1/C)`` with
  η₀ = 0.85 (the prior's TCP share) and C = 127 Gbit/s, the least-squares fit (in log share) to the six public
  socket points: Sailor's GCP A2 measurements (81%, 92%, 97% of 24, 32, 50 Gbit/s), NVIDIA/nccl-tests#83 on Azure
  (54% of 25 Gbit/s), NVIDIA/nccl#209 (≤ 60% of 32 Gbit/s, 2019) and NVIDIA/nccl#450 (40% of 100 Gbit/s, 4 × 8
  V100). It gives 80% at 10 Gbit/s, 64% at 50, 51% at 100 — Sailor's GCP points sit above it (its 50 Gbit/s point
  1.5×), the others below (Azure 1.34×): the sources disagree by up to 1.5×, the band's business. Per ring step 45.8 µs (nccl-tests#82, 8-byte broadcast over sockets).
* **efa** — AWS EFA (aws-ofi-nccl), and GCP GPUDirect-TCPX/TCPXO (A3 High/Mega; no public NCCL figure found: taken as
  EFA, an assumption): 80% of the link on 2 nodes, 60% on 3–7, 55% on 8 or more (NVIDIA/nccl#235 on p3dn,
  NVIDIA/nccl#527 on p4dn). 20 µs per step (assumption).
* **rdma** — InfiniBand / RoCE (A3 Ultra, A4, Nebius): 75% (NVIDIA/nccl#495, 8 × 100 Gbit/s RoCE; nccl-tests#156,
  76% between two VMs on 4 × 200 Gbit/s RoCE). 10 µs per step (assumption).

The all-reduce of ``g`` gradient bytes over ``n`` ranks is a ring: ``2(n−1)/n · g / link`` plus ``2(n−1)`` steps of
latency per bucket (PyTorch DDP's default ``bucket_cap_mb`` = 25 MB: ``ceil(g / 25 MB)`` buckets). Buckets overlap
with the backward pass except the last one, which can only start when backward has ended: the exposed share of the
all-reduce is at least the last bucket's share of the gradient (all of it when the gradient fits in one bucket), and
the rest hides behind backward only as far as backward lasts — at small batches per GPU backward is short and most
of the all-reduce is exposed.

:func:`wire_bound_sps` is the hard bound ``model.predict_many`` always applies (the sold link rate, no share): the
shipped model never predicts an all-reduce faster than the wire. The estimate above enters the prior only with
``CONSTANTS["network_model"]`` on (off in the shipped fit: bench/RESULTS_multinode.md).

The transport travels with the query: :func:`fabric_of` names a catalog machine type's fabric (sockets over ENA,
gVNIC or another cloud's Ethernet; EFA; InfiniBand; RoCE; GPUDirect-TCPX / -TCPXO), :data:`FABRICS` maps it to the
share class above, and ``HardwareQuery.transport`` / ``Setup.transport`` carry it into the prior and the wire
bound — a 100 Gbit/s EFA VM (p3dn, g4dn.metal) is priced as EFA, not sockets. Where only a link's Gbit/s is known
(the training table, a bare ``network_gbps``), :func:`transport_of_gbps` takes links of 400 Gbit/s and more as
RDMA-class (EFA/TCPX: every such VM in the catalogs has one) and anything slower as sockets.
"""

from __future__ import annotations

import numpy as np

#: DDP's default gradient bucket (torch.nn.parallel.DistributedDataParallel ``bucket_cap_mb=25``).
BUCKET_BYTES = 25 * 2**20

#: Socket transport: share of a slow link (η₀) and the per-host ceiling C (Gbit/s); see the module docstring.
TCP_ETA0 = 0.85
TCP_CEILING_GBPS = 127.0
#: Share of the link NCCL reaches over EFA by node count (≤ 2, 3–7, ≥ 8) and over RDMA (IB/RoCE).
EFA_SHARE = (0.80, 0.60, 0.55)
RDMA_SHARE = 0.75
#: Latency per ring step (s).
STEP_LATENCY_S = {"tcp": 45.8e-6, "efa": 20e-6, "rdma": 10e-6}
#: Links at least this fast (Gbit/s) are RDMA-class when only the bandwidth is known.
RDMA_CLASS_GBPS = 400.0

TRANSPORTS = ("tcp", "efa", "rdma")

#: Share of the compute time that hides the all-reduce over NCCL sockets. DDP overlaps buckets with backward
#: (⅔ of compute: the prior's ``backward_share``), but on Gavel's 165 multi-node runs over 10 Gbit/s sockets
#: (the training table's only all-reduce across VMs) the overlap that fits is far less: chosen on a grid of 0.05 in
#: ``bench/multinode.py``, 0.05 on all rows (MAPE flat from 0 to 0.1: 12.8, 12.4, 12.5%); leave-one-workload-out
#: each of its 4 workloads gets 0–0.1 from the other three. RDMA-class transports keep the prior's share (no
#: multi-node run of theirs to learn from).
TCP_OVERLAP_SHARE = 0.05


#: Fabric (what the cloud calls it) → the share class NCCL reaches over it (:data:`TRANSPORTS`). GPUDirect-TCPX
#: (GCP A3 High/Edge) and -TCPXO (A3 Mega) have no public NCCL figure: taken as EFA (an assumption).
FABRICS = {"sockets": "tcp", "ena": "tcp", "gvnic": "tcp", "efa": "efa", "tcpx": "efa", "tcpxo": "efa",
           "infiniband": "rdma", "roce": "rdma"}


def fabric_of(machine_type: str) -> str:
    """The fabric between VMs of a catalog ``machine_type`` (a key of :data:`FABRICS`): AWS ``efa`` where the
    instance type has EFA (``hardware.OTHER_CLOUD_GBPS``'s source says so), else ``ena``; GCP A3 High/Edge 8-GPU
    ``tcpx``, A3 Mega ``tcpxo``, A3 Ultra / A4 / A4X ``roce``, any other GCP VM ``gvnic``; Nebius ``infiniband``
    where its catalog names it; anything else ``sockets``."""
    from cloudfit.catalog import hardware

    src = hardware.network_source(machine_type)
    cloud = hardware.cloud_of_machine_type(machine_type)
    if "InfiniBand" in src:
        return "infiniband"
    if cloud == "aws":
        return "efa" if "EFA" in src and "no EFA" not in src else "ena"
    if cloud == "gcp":
        if machine_type.startswith(("a3-highgpu-8g", "a3-edgegpu-8g")):
            return "tcpx"
        if machine_type.startswith("a3-megagpu"):
            return "tcpxo"
        if machine_type.startswith(("a3-ultragpu", "a4-", "a4x-")):
            return "roce"
        return "gvnic"
    return "sockets"


def transport_of(machine_type: str) -> str:
    """The share class NCCL reaches between VMs of ``machine_type``: ``tcp``, ``efa`` (AWS EFA; GCP TCPX/TCPXO
    taken as it) or ``rdma`` (InfiniBand/RoCE)."""
    return FABRICS[fabric_of(machine_type)]


def transport_of_gbps(gbps) -> np.ndarray:
    """``"tcp"`` below :data:`RDMA_CLASS_GBPS`, ``"efa"`` from there (what the prior knows of a link)."""
    return np.where(np.asarray(gbps, dtype=float) >= RDMA_CLASS_GBPS, "efa", "tcp")


def resolve(transport, gbps) -> np.ndarray:
    """Per row, the share class: ``transport`` where given (a class or a fabric name), else by the link's Gbit/s
    (:func:`transport_of_gbps`); ``transport`` None or per-row None/""."""
    if transport is None:
        return transport_of_gbps(gbps)
    t = np.asarray(transport, dtype=object)
    by_gbps = np.broadcast_to(transport_of_gbps(gbps), np.broadcast_shapes(t.shape, np.shape(gbps)))
    t = np.broadcast_to(t, by_gbps.shape)
    values = t.ravel().tolist()
    lut = {v: FABRICS.get(v, v) if v else "" for v in set(values)}  # a handful of distinct names
    bad = sorted({c for c in lut.values() if c and c not in TRANSPORTS})
    if bad:
        raise ValueError(f"unknown transport {bad!r} (expected one of {sorted(FABRICS) + list(TRANSPORTS)})")
    known = np.array([lut[v] for v in values], dtype="<U4").reshape(by_gbps.shape)
    return np.where(known == "", by_gbps, known)


def effective_gbps(link_gbps, nodes, transport) -> np.ndarray:
    """Gbit/s NCCL's all-reduce reaches over a ``link_gbps`` VM link between ``nodes`` nodes."""
    link = np.asarray(link_gbps, dtype=float)
    nodes = np.asarray(nodes, dtype=float)
    transport = np.asarray(transport)
    with np.errstate(divide="ignore"):
        tcp = 1.0 / (1.0 / (TCP_ETA0 * link) + 1.0 / TCP_CEILING_GBPS)
    efa = link * np.where(nodes <= 2, EFA_SHARE[0], np.where(nodes < 8, EFA_SHARE[1], EFA_SHARE[2]))
    return np.where(transport == "tcp", tcp, np.where(transport == "efa", efa, link * RDMA_SHARE))


def step_latency_s(transport) -> np.ndarray:
    t = np.asarray(transport)
    return np.where(t == "tcp", STEP_LATENCY_S["tcp"], np.where(t == "efa", STEP_LATENCY_S["efa"],
                                                                 STEP_LATENCY_S["rdma"]))


def buckets(gradient_bytes) -> np.ndarray:
    """DDP's gradient buckets per step (at least one)."""
    return np.maximum(np.ceil(np.asarray(gradient_bytes, dtype=float) / BUCKET_BYTES), 1.0)


def allreduce_s(gradient_bytes, ranks, nodes, link_gbps, intra_bps, transport=None,
                intra_latency_s: float = 10e-6) -> np.ndarray:
    """Seconds of one step's ring all-reduce of ``gradient_bytes`` over ``ranks`` GPUs on ``nodes`` VMs.

    ``intra_bps``: the in-VM link (bytes/s); the ring runs at the slower of it and the network's effective rate.
    ``transport``: per row (a class or a fabric; None or "" for :func:`transport_of_gbps`)."""
    g = np.asarray(gradient_bytes, dtype=float)
    n = np.asarray(ranks, dtype=float)
    nodes = np.asarray(nodes, dtype=float)
    transport = resolve(transport, link_gbps)
    net_bps = effective_gbps(link_gbps, nodes, transport) * 1e9 / 8
    multi = nodes > 1
    link = np.where(multi, np.minimum(intra_bps, net_bps), intra_bps)
    lat = np.where(multi, step_latency_s(transport), intra_latency_s)
    with np.errstate(divide="ignore", invalid="ignore"):
        ring = np.where(n > 1, 2 * (n - 1) / n * g / link + buckets(g) * 2 * (n - 1) * lat, 0.0)
    return ring


def exposed_s(allreduce, compute_s, gradient_bytes, backward_share: float, tail: float) -> np.ndarray:
    """The part of the all-reduce the step waits for: what backward (``backward_share`` of compute) cannot hide,
    and never less than the last bucket's share (or ``tail``, whichever is larger)."""
    g = np.asarray(gradient_bytes, dtype=float)
    last = np.minimum(1.0, BUCKET_BYTES / np.maximum(g, 1.0))
    floor = np.maximum(tail, last)
    return np.maximum(allreduce - backward_share * np.asarray(compute_s, dtype=float), floor * allreduce)


def overlap_share(transport, backward_share: float) -> np.ndarray:
    """Share of compute that can hide the all-reduce: :data:`TCP_OVERLAP_SHARE` over sockets, else
    ``backward_share``."""
    return np.where(np.asarray(transport) == "tcp", TCP_OVERLAP_SHARE, backward_share)


def wire_bound_sps(gradient_bytes, count, nodes, batch, link_gbps, intra_gbs, ps=0.0, transport=None) -> np.ndarray:
    """Most samples/s data parallelism over ``nodes`` VMs can reach: a step cannot end before its ring
    all-reduce has moved 2(n−1)/n of the gradient over the VM link **at the full sold rate** (and through the
    in-VM link, GB/s), nor before each bucket has crossed the VMs' fabric ``2⌈log2 nodes⌉`` times (a tree over
    the VMs, up and down: the fewest inter-VM latencies any NCCL algorithm pays; a flat ring over all n GPUs pays
    2(n−1), which over-bounds VMs of 8 GPUs — bert-large on 10 × a4-highgpu-8g was capped at half its prior) —
    a bound of the wire, not an estimate (the estimate is :func:`allreduce_s`). Infinite for one VM and for
    parameter-server rows. ``transport``: per row (:func:`resolve`), for the step latency."""
    g = np.asarray(gradient_bytes, dtype=float)
    count = np.asarray(count, dtype=float)
    nodes = np.asarray(nodes, dtype=float)
    n = count * nodes
    net_bps = np.asarray(link_gbps, dtype=float) * 1e9 / 8
    link = np.minimum(net_bps, np.asarray(intra_gbs, dtype=float) * 1e9)
    lat = step_latency_s(resolve(transport, link_gbps))
    with np.errstate(divide="ignore", invalid="ignore"):
        hops = 2 * np.ceil(np.log2(np.maximum(nodes, 2.0)))
        t = 2 * (n - 1) / n * g / link + buckets(g) * hops * lat
        bound = n * np.asarray(batch, dtype=float) / t
    return np.where((nodes > 1) & (np.asarray(ps, dtype=float) < 0.5) & (t > 0), bound, np.inf)
