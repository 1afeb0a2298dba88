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
* **efa**, **tcpx**, **rdma** — the share of the wire NCCL's all-reduce keeps busy at the plateau, by node count
  (2, 3–7, ≥ 8 VMs), NCCL's ramp to that plateau with the message size, and the latency per hop, derived
  from the csv's public nccl-tests rows by :func:`fit` (a stated rule, not by hand; ``bench/fabric_nccl.py``
  checks it leave-one-source-out, results in ``bench/RESULTS.md``). A collective of S bytes reaches the plateau
  × 1 / (1 + (S_h/S)^p) (:func:`ramp_factor`, :func:`collective_s`): half the plateau at S_h = 40 MiB for EFA
  (p4d, A3 Mega TCPXO), 45 MiB for TCPX, 32 MiB for RDMA (InfiniBand, A3 Ultra) — DDP's 25 MB buckets and
  FSDP's per-layer collectives live on this ramp, at 30–50% of the plateau. Plateau shares: EFA 0.80 / 0.49 /
  0.49 (p3dn, p4d ×2 sources, A3 Mega's TCPXO — whose rows fall inside EFA's, so it stays in the class), 4.3 µs a
  hop at small messages (p5, p6-b200, A3 Mega; :func:`latency_steps`); GPUDirect-TCPX (A3 High) 0.57 of its 1,000 Gbit/s (a ring-forced
  run below every EFA source: its own class; 3+ VMs by the median within-source node-count ratio); RDMA
  (InfiniBand: Nebius, CoreWeave, two H100 clusters at 2, 4, 8 nodes; RoCE: A3 Ultra, two threads) 0.70 on 2
  VMs, 0.67 on more, 1.8 µs a hop. A collective is latency-bound or bandwidth-bound, whichever binds. On **VMs
  of several GPUs** NCCL reduces inside the VM
  first and each VM moves 2(m−1)/m of the buffer across its link, where a ring over all n GPUs would move 2(n−1)/n:
  for the classes whose runs show it (:data:`TREE_CLASSES`: EFA, RDMA) the all-reduce's bus bandwidth reaches
  share × link × (n−1)/n ÷ (m−1)/m (:func:`tree_gain`: 1.875 on 2 VMs of 8 GPUs — A3 Mega measured 338.8 GB/s
  busbw over a 225 GB/s link — 1.29 on 4, 1.125 on 8). The socket curve above stays as it was (its share rows
  unchanged; :func:`fit` re-derives C = 127).

The all-reduce of ``g`` gradient bytes over ``n`` ranks is a ring: per bucket ``2(n−1)/n · bucket / link`` at the
ramp's bandwidth for the bucket's size, or its hops' latency where those bind (:func:`latency_steps`; over sockets
the sum of a ring's ``2(n−1)`` steps and the bytes)
(PyTorch DDP's default ``bucket_cap_mb`` = 25 MB: ``ceil(g / 25 MB)`` buckets). Buckets overlap
with the backward pass except the last one, which can only start when backward has ended: the exposed share of the
all-reduce is at least the last bucket's share of the gradient (all of it when the gradient fits in one bucket), and
the rest hides behind backward only as far as backward lasts — at small batches per GPU backward is short and most
of the all-reduce is exposed.

:func:`wire_bound_sps` is the hard bound ``model.predict_many`` always applies (the sold link rate, no share, the
2(m−1)/m of the gradient each of m VMs must send at least, the small-message latency): the shipped model never
predicts an all-reduce faster than the wire. The estimate above enters the prior only with
``CONSTANTS["network_model"]`` on (off in the shipped fit: bench/RESULTS_multinode.md).

The transport travels with the query: :func:`fabric_of` names a catalog machine type's fabric (sockets over ENA,
gVNIC or another cloud's Ethernet; EFA; InfiniBand; RoCE; GPUDirect-TCPX / -TCPXO), :data:`FABRICS` maps it to the
share class above (:func:`fit`'s classes), and ``HardwareQuery.transport`` / ``Setup.transport`` carry it into the prior and the wire
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
#: Share of the wire NCCL's all-reduce keeps busy at large messages, by node count (2, 3–7, ≥ 8 VMs): the
#: :func:`fit` rule applied to ``data/raw/network/nccl_transport.csv`` (``tests/perf/test_fabric_nccl.py`` re-derives
#: them). EFA (and GPUDirect-TCPXO, whose rows fall inside EFA's) from p3dn/p4d/p5/p6 and A3 Mega rows; TCPX from
#: A3 High's (below every EFA source: its own class); RDMA (InfiniBand and RoCE) from Nebius, CoreWeave, A3 Ultra,
#: two RoCE threads and two InfiniBand H100 clusters at 2, 4 and 8 nodes (NVIDIA/nccl-tests#309). Beyond two VMs:
#: EFA from p4dn 3–4 and p3dn 8–32, RDMA from nccl-tests#309; TCPX's 3+ shares are its 2-VM share × the median
#: within-source ratio (a transfer, not a measurement). A share is of what the VM must send at least
#: (× :func:`tree_gain`), at the plateau: each large-message row divided by its class's :func:`ramp_factor` at its size.
EFA_SHARE = (0.8, 0.49, 0.49)
TCPX_SHARE = (0.568, 0.516, 0.516)
RDMA_SHARE = (0.696, 0.672, 0.672)
#: Latency per hop (s): small-message (≤ 4 KiB) all-reduce / all-gather times over the collective's hops
#: (:func:`latency_steps`: NCCL's tree for a default all-reduce across VMs — InfiniBand's 25 µs on 2 × 8 GPUs and
#: 35 µs on 4 × 8 are 1.6 and 1.9 µs a hop, a ring's 30 and 62 steps would be 0.8 and 0.6 —, a ring otherwise)
#: (:func:`fit`); TCPX has no small-message row: EFA's. The floor a hop pays — what the wire bound charges.
STEP_LATENCY_S = {"tcp": 45.8e-6, "efa": 4.29e-6, "tcpx": 4.29e-6, "rdma": 1.83e-6}
#: NCCL's ramp to the plateau (bucket-sized messages): a collective of S bytes reaches the share's bus bandwidth ×
#: :func:`ramp_factor` = 1 / (1 + (S_h / S)^p) — the message must fill NCCL's channels × pipelined buffers before the
#: wire is busy (nccl-tests doc/PERFORMANCE.md @03a204a1: "time ... roughly equal to overhead + size / bw"; p = 1 is
#: that Hockney form, p < 1 a ramp that NCCL's per-size protocol and channel choice makes gentler). S_h (bytes: half
#: the plateau) and p per class, the :func:`fit` rule on the csv's rows above 4 KiB and below 0.9 of their setting's
#: plateau (each setting's log(B/b − 1) on log S, median per source, then over sources; a class without such rows
#: takes the median over every source): p4d 38–42 MiB, A3 High TCPX 47 (its p of 1.1 capped at 1), A3 Mega TCPXO 26
#: (all_gather) and 128 (all_reduce), A3 Ultra 25–26, InfiniBand 36–43 MiB — nearly one size across fabrics and a
#: 7× range of plateaus, as NCCL's buffers are. Sockets: no ramp row (0: latency + size/bw, as fitted on Gavel).
RAMP_BYTES = {"tcp": 0.0, "efa": 41.6e6, "tcpx": 46.7e6, "rdma": 33.2e6}
RAMP_EXP = {"tcp": 1.0, "efa": 0.82, "tcpx": 1.0, "rdma": 0.821}
#: Links at least this fast (Gbit/s) are RDMA-class when only the bandwidth is known.
RDMA_CLASS_GBPS = 400.0

TRANSPORTS = ("tcp", "efa", "tcpx", "rdma")
#: Classes whose public two-VM all-reduces pass the link (NCCL's tree: :func:`tree_gain`), the :func:`fit`
#: rule: EFA (p4d 77.9 GB/s busbw over 50; A3 Mega 338.8 over 225), RDMA (InfiniBand 467–481 over 400). TCPX's one
#: run was ring-forced (GCP's TCPX settings) and the socket rows are stated shares: no gain taken for them.
TREE_CLASSES = ("efa", "rdma")
SHARES = {"efa": EFA_SHARE, "tcpx": TCPX_SHARE, "rdma": RDMA_SHARE}

#: Share of the compute time that hides the all-reduce over NCCL sockets. DDP overlaps buckets with backward
#: (⅔ of compute: the prior's ``backward_share``), but on Gavel's 165 multi-node runs over 10 Gbit/s sockets
#: (the training table's only all-reduce across VMs) the overlap that fits is far less: chosen on a grid of 0.05 in
#: ``bench/multinode.py``, 0.05 on all rows (MAPE flat from 0 to 0.1: 12.8, 12.4, 12.5%); leave-one-workload-out
#: each of its 4 workloads gets 0–0.1 from the other three. RDMA-class transports keep the prior's share (no
#: multi-node run of theirs to learn from).
TCP_OVERLAP_SHARE = 0.05


#: Fabric (what the cloud calls it) → the share class NCCL reaches over it (:data:`TRANSPORTS`): the fit's
#: ``classes`` (GPUDirect-TCPX split from EFA by its rows; TCPXO's rows fall inside EFA's; InfiniBand and RoCE pooled).
FABRICS = {"sockets": "tcp", "ena": "tcp", "gvnic": "tcp", "efa": "efa", "tcpx": "tcpx", "tcpxo": "efa",
           "infiniband": "rdma", "roce": "rdma"}
#: Before the fit splits them: the class each fabric starts in (what it was taken as without its own rows).
BASE_CLASS = {"sockets": "tcp", "ena": "tcp", "gvnic": "tcp", "efa": "efa", "tcpx": "efa", "tcpxo": "efa",
              "infiniband": "rdma", "roce": "rdma"}
#: All-reduce sizes from which a row counts as "large" (the share), and up to which as "small" (the latency).
LARGE_BYTES = 256 * 2**20
SMALL_BYTES = 4096
BUCKET_MAX_BYTES = 64 * 2**20
#: Node-count classes of the shares: 2, 3–7, ≥ 8 VMs.
NODE_CLASS_EDGES = (2.5, 7.5)


def node_class(nodes) -> np.ndarray:
    """0 for ≤ 2 VMs, 1 for 3–7, 2 for ≥ 8."""
    return np.digitize(np.asarray(nodes, dtype=float), NODE_CLASS_EDGES)


def tree_gain(nodes, gpus_per_node) -> np.ndarray:
    """How far NCCL's default all-reduce busbw can pass the VM link over m VMs of g GPUs: reducing inside each VM
    first (NVLink SHARP / tree), each VM must move 2(m−1)/m of the buffer across its link where a ring over all
    n = m·g GPUs would move 2(n−1)/n of it — busbw (defined by the ring's factor) reaches the link × (n−1)/n ÷
    (m−1)/m: 1.875 on 2 VMs of 8 GPUs, 1.29 on 4, 1.125 on 8, → 1 (NVIDIA/nccl#209, sjeaugey: "up to 2x the network
    bandwidth with trees" on two nodes; NVIDIA/nccl-tests#309: InfiniBand H100 clusters at 1.17 / 0.81–0.91 / 0.80
    of the link on 2 / 4 / 8 nodes, 0.62–0.71 of this bound on each). 1 with one GPU a VM."""
    nodes = np.asarray(nodes, dtype=float)
    n = nodes * np.asarray(gpus_per_node, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.where((nodes >= 2) & (n > nodes), ((n - 1) / np.maximum(n, 1.0)) / ((nodes - 1) / np.maximum(nodes, 1.0)),
                     1.0)
    return g


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
    """The share class NCCL reaches between VMs of ``machine_type``: ``tcp``, ``efa`` (AWS EFA; GCP TCPXO),
    ``tcpx`` (GCP A3 High/Edge) or ``rdma`` (InfiniBand/RoCE)."""
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


def share(transport, nodes, link_gbps=None) -> np.ndarray:
    """Share of the wire NCCL's all-reduce keeps busy at large messages, per row: the socket curve of the link for
    ``tcp`` (``link_gbps`` needed), else the class's share for the node count's class (:data:`SHARES`)."""
    transport = np.asarray(transport)
    k = node_class(nodes)
    out = np.full(np.broadcast_shapes(transport.shape, k.shape), np.nan)
    for cls, shares in SHARES.items():
        out = np.where(transport == cls, np.asarray(shares)[k], out)
    if link_gbps is not None:
        link = np.asarray(link_gbps, dtype=float)
        with np.errstate(divide="ignore"):
            tcp = 1.0 / (1.0 / TCP_ETA0 + link / TCP_CEILING_GBPS)
        out = np.where(transport == "tcp", tcp, out)
    return out


def effective_gbps(link_gbps, nodes, transport, gpus_per_node=1.0) -> np.ndarray:
    """Gbit/s of NCCL's all-reduce bus bandwidth over a ``link_gbps`` VM link between ``nodes`` VMs of
    ``gpus_per_node`` GPUs: the wire's share × the link, × :func:`tree_gain` on VMs of several GPUs for
    :data:`TREE_CLASSES` (1 GPU a VM, the default, gets none)."""
    link = np.asarray(link_gbps, dtype=float)
    gain = np.where(np.isin(np.asarray(transport), TREE_CLASSES), tree_gain(nodes, gpus_per_node), 1.0)
    return link * share(transport, nodes, link) * gain


def step_latency_s(transport) -> np.ndarray:
    """Per row, the class's small-message latency per hop (:data:`STEP_LATENCY_S`)."""
    t = np.asarray(transport)
    out = np.full(t.shape, STEP_LATENCY_S["rdma"])
    for cls, lat in STEP_LATENCY_S.items():
        out = np.where(t == cls, lat, out)
    return out


def latency_steps(ranks, nodes, collective="all_reduce", tree=True) -> np.ndarray:
    """Latency-bound hops of a small collective over ``ranks`` GPUs on ``nodes`` VMs: an all-gather's ring n − 1; an
    all-reduce's ring 2(n − 1), or with ``tree`` (NCCL's tree, which it picks for small all-reduces across VMs) a
    chain inside each VM and a binary tree across them, up and down: 2(g − 1) + 2⌈log2 m⌉ (g GPUs a VM)."""
    n = np.asarray(ranks, dtype=float)
    m = np.maximum(np.asarray(nodes, dtype=float), 1.0)
    g = n / m
    ring = np.where(np.asarray(collective) == "all_gather", n - 1, 2 * (n - 1))
    hops = 2 * (g - 1) + 2 * np.ceil(np.log2(m))
    return np.where(np.asarray(tree) & (np.asarray(collective) != "all_gather"), np.minimum(hops, ring), ring)


def ramp_factor(message_bytes, transport) -> np.ndarray:
    """Share of the plateau bus bandwidth a ``message_bytes`` collective reaches over ``transport``:
    1 / (1 + (S_h / S)^p) (:data:`RAMP_BYTES`, :data:`RAMP_EXP`); 1 where the class has no ramp (sockets).
    Rises with S (p > 0), → 1 for large messages."""
    s = np.maximum(np.asarray(message_bytes, dtype=float), 1.0)
    t = np.asarray(transport)
    sh = np.zeros(np.broadcast_shapes(s.shape, t.shape))
    p = np.ones_like(sh)
    for cls in RAMP_BYTES:
        sh = np.where(t == cls, RAMP_BYTES[cls], sh)
        p = np.where(t == cls, RAMP_EXP[cls], p)
    return _ramp(s, sh, p)


def _ramp(s, half_bytes, p):
    """1 / (1 + (S_h / S)^p): the share of the plateau at message size S (1 at S_h = 0: no ramp)."""
    return 1.0 / (1.0 + (half_bytes / s) ** p)


def collective_s(message_bytes, ranks, nodes, link_gbps, transport, collective="all_reduce", tree=True) -> np.ndarray:
    """Seconds of one ``message_bytes`` collective over ``ranks`` GPUs on ``nodes`` VMs (nccl-tests' definitions,
    doc/PERFORMANCE.md @03a204a1: an all-reduce's bus factor 2(n−1)/n, an all-gather's (n−1)/n): the larger of the
    small-message latency of its hops (:func:`latency_steps`) and the bus factor × S at the plateau bus bandwidth
    (the share × the link × :func:`tree_gain` for a default all-reduce in a :data:`TREE_CLASSES` class;
    ``tree=False`` for a ring-forced one) ÷ :func:`ramp_factor` — latency-bound or bandwidth-bound, whichever binds
    (their sum over sockets, whose one latency row and Gavel's runs were read that way). The time never falls as S
    grows, nor does the bus bandwidth."""
    s = np.asarray(message_bytes, dtype=float)
    n = np.asarray(ranks, dtype=float)
    nodes = np.asarray(nodes, dtype=float)
    gather = np.asarray(collective) == "all_gather"
    factor = np.where(gather, (n - 1) / n, 2 * (n - 1) / n)
    use_gain = ~gather & np.isin(np.asarray(transport), TREE_CLASSES) & np.asarray(tree)
    steps = latency_steps(n, nodes, collective, use_gain)
    gain = np.where(use_gain, tree_gain(nodes, n / nodes), 1.0)
    bw = np.asarray(link_gbps, dtype=float) * share(transport, nodes, link_gbps) * gain / 8 * 1e9  # B/s
    lat, wire = steps * step_latency_s(transport), factor * s / bw / ramp_factor(s, transport)
    return np.where(np.asarray(transport) == "tcp", lat + wire, np.maximum(lat, wire))


def busbw_gbs(message_bytes, ranks, nodes, link_gbps, transport, collective="all_reduce", tree=True) -> np.ndarray:
    """GB/s of nccl-tests' bus bandwidth the model gives a ``message_bytes`` collective (:func:`collective_s`):
    bus factor × S ÷ time. Never falls as the message grows."""
    s = np.asarray(message_bytes, dtype=float)
    n = np.asarray(ranks, dtype=float)
    factor = np.where(np.asarray(collective) == "all_gather", (n - 1) / n, 2 * (n - 1) / n)
    return factor * s / collective_s(s, ranks, nodes, link_gbps, transport, collective, tree) / 1e9


def row_fabric(row: dict) -> str:
    """The fabric a csv row ran on (its ``fabric``, else its transport; ``tcp`` rows are ``sockets``)."""
    return row.get("fabric") or ("sockets" if row["transport"] == "tcp" else row["transport"])


def _source_key(row: dict) -> tuple[str, str]:
    """One public source: the thread or file (before its commit / date note) and the fabric it measured."""
    src = row["source"]
    if src.startswith("same file") or "sailor" in src:
        src = "github.com/eth-easl/sailor"
    return src.split(" (")[0].split(" @")[0].strip(), row.get("fabric") or row["transport"]


def _row_share(row: dict, ramp: dict | None = None, cls: str | None = None) -> tuple[float, bool] | None:
    """A large-message row's share of the wire and whether it needed the tree assumption (None: not a
    large-message row). ``nccl_gbps_over_link`` rows are shares as their threads state them (at "large" messages,
    no size: taken as the plateau); ``busbw`` rows of
    ≥ :data:`LARGE_BYTES` give busbw ÷ (link × :func:`tree_gain`) — the gain only for default-algorithm
    all-reduces on VMs of several GPUs — ÷ the ramp factor of class ``cls`` at the row's size where ``ramp``
    ((S_h, p) per class) is given: the plateau share."""
    if row["quantity"] == "nccl_gbps_over_link":
        return float(row["value"]), False
    if row["quantity"] != "busbw" or float(row["bytes"]) < LARGE_BYTES:
        return None
    r = 1.0
    if ramp is not None and cls in ramp:
        r = _ramp(float(row["bytes"]), *ramp[cls])
    nodes, gpn = float(row["nodes"]), float(row["gpus_per_node"])
    tree = row["collective"] == "all_reduce" and row["algo"] == "default"
    gain = float(tree_gain(nodes, gpn)) if tree else 1.0
    return float(row["busbw_GBps"]) * 8 / (float(row["link_gbps"]) * gain) / r, gain > 1.0


def _setting_key(row: dict) -> tuple:
    return (_source_key(row), row["setting"], row["nodes"], row["gpus_per_node"], row["link_gbps"],
            row["collective"], row["algo"])


def _row_latency(row: dict) -> float | None:
    """Seconds per hop of a small-message row: its time ÷ the collective's :func:`latency_steps` (NCCL's tree for a
    default-algorithm all-reduce across VMs, a ring otherwise; n−1 for an all-gather or broadcast); the
    ``step_latency_s`` row as stated."""
    if row["quantity"] == "step_latency_s":
        return float(row["value"])
    if row["quantity"] != "busbw" or not row.get("time_us") or float(row["bytes"]) > SMALL_BYTES:
        return None
    n = float(row["nodes"]) * float(row["gpus_per_node"])
    coll = "all_reduce" if row["collective"] == "all_reduce" else "all_gather"
    steps = float(latency_steps(n, float(row["nodes"]), coll, row["algo"] == "default" and float(row["nodes"]) > 1))
    return float(row["time_us"]) * 1e-6 / steps


#: Rows that shape the ramp: a setting's busbw rows above :data:`SMALL_BYTES`, printed ≥ 0.1 GB/s and ≤ 0.9 of
#: the setting's plateau (its largest busbw; the setting must reach :data:`LARGE_BYTES`), at least 3 of them over
#: at least a 16× span of sizes.
RAMP_MAX_OF_PLATEAU = 0.9
RAMP_MIN_GBS = 0.1


def ramp_points(rows: list[dict]) -> dict:
    """Per (fabric, source): the (S_h bytes, p) of each of its settings, from the least-squares line of
    log(B/b − 1) = p·log S_h − p·log S over the setting's ramp rows (b the row's busbw, B the setting's plateau);
    p at most 1 (the time S/b grows with S only so), S_h then from the line's value at the rows' mean log S."""
    plateau, biggest, pts = {}, {}, {}
    for r in rows:
        if r["quantity"] == "busbw":
            k = _setting_key(r)
            plateau[k] = max(plateau.get(k, 0.0), float(r["busbw_GBps"]))
            biggest[k] = max(biggest.get(k, 0.0), float(r["bytes"]))
    for r in rows:
        if r["quantity"] != "busbw" or float(r["bytes"]) <= SMALL_BYTES:
            continue
        k = _setting_key(r)
        b, big = float(r["busbw_GBps"]), plateau[k]
        if biggest[k] < LARGE_BYTES or b < RAMP_MIN_GBS or b > RAMP_MAX_OF_PLATEAU * big:
            continue
        pts.setdefault(k, []).append((np.log(float(r["bytes"])), np.log(big / b - 1.0)))
    out: dict = {}
    for k, v in pts.items():
        x = np.array([a for a, _ in v])
        y = np.array([c for _, c in v])
        if len(v) < 3 or x.max() - x.min() < np.log(16.0):
            continue
        slope, icpt = np.polyfit(x, y, 1)
        if slope >= 0:
            continue
        p = min(-float(slope), 1.0)  # p > 1 would make a bigger message take less time: capped at Hockney's 1
        fabric = k[0][1]
        sh = float(np.exp(x.mean() + (icpt + slope * x.mean()) / p))  # = exp(icpt / p) when p is not capped
        out.setdefault((fabric, k[0]), []).append((sh, p))
    return out


def fit(rows: list[dict], ramp_by: str = "class") -> dict:
    """The network constants from ``nccl_transport.csv`` rows (dicts as ``csv.DictReader`` gives them), by a fixed rule:

    1. **Share** of each source (one thread or file × fabric) per node class: the median of its large-message rows'
       shares (:func:`_row_share`).
    2. **Classes**: a fabric leaves its base class (:data:`BASE_CLASS`) when each of its 2-VM source shares lies
       outside the range of the other fabrics' 2-VM source shares of the same kind in that class (like with like:
       shares that needed the tree assumption against such shares, the others against the others), and at
       least one has such a comparison.
    3. **Ramp** (:func:`ramp_points`): per source the median of its settings' log S_h and p; per class the median
       over its sources; a class without a ramp source (or every class, ``ramp_by="all"``) the median over every
       source. Sockets: none (S_h = 0).
    4. **Class share** per node class: step 1 again with each ``busbw`` row divided by its class's ramp factor at
       its size (the plateau share), the median over the class's sources. A node class without rows: the class's
       2-VM share × the median within-source ratio (that node class ÷ 2 VMs) over every source that has both; then
       never above the class's share for fewer VMs.
    5. **Socket curve**: C of ``1/(1/η₀ + link/C)`` minimising the squared log error over the ``tcp`` share rows
       (grid 50–1000 Gbit/s, η₀ = :data:`TCP_ETA0`).
    6. **Step latency** per class: the median over its sources of each source's median :func:`_row_latency`; a class
       without small-message rows takes its base class's, a base class without any the median of the other
       non-socket classes'. (A node class without a within-source ratio takes the other node class's, else 1.)
    7. **Tree classes**: those with a two-VM default all-reduce row whose busbw passes the link.

    Returns ``classes`` (fabric → class), ``share`` (class → (2, 3–7, ≥ 8 VMs)), ``tcp_ceiling_gbps``,
    ``latency_s`` (class → s), ``ramp_bytes`` and ``ramp_exp`` (class → S_h, p) and ``sources`` ((class, node
    class) → source keys behind it; ``latency`` and ``ramp`` too)."""
    def source_shares(ramp=None, classes=None):
        shares: dict = {}  # (fabric, source, node class) -> list of (share, needs tree)
        for r in rows:
            fabric = row_fabric(r)
            if BASE_CLASS.get(fabric) == "tcp":
                continue
            s = _row_share(r, ramp, classes[fabric] if classes else None)
            if s is not None:
                shares.setdefault((fabric, _source_key(r), int(node_class(float(r["nodes"])))), []).append(s)
        return {k: (float(np.median([v for v, _ in pts])), all(t for _, t in pts)) for k, pts in shares.items()}

    lats: dict = {}  # (fabric, source) -> list of seconds
    tcp_pts = []
    for r in rows:
        fabric = row_fabric(r)
        s = _row_share(r)
        if s is not None and BASE_CLASS.get(fabric) == "tcp" and r["quantity"] == "nccl_gbps_over_link":
            tcp_pts.append((float(r["link_gbps"]), s[0]))
        lat = _row_latency(r)
        if lat is not None:
            lats.setdefault((fabric, _source_key(r)), []).append(lat)
    per_source = source_shares()
    classes = dict(BASE_CLASS)
    for fabric, base in BASE_CLASS.items():
        verdicts = []  # per own 2-VM source with comparable others: outside their range?
        for (f, _, k), (v, amb) in per_source.items():
            if f != fabric or k != 0:
                continue
            rest = [w for (g, _, kk), (w, a) in per_source.items()
                    if g != fabric and BASE_CLASS[g] == base and kk == 0 and a == amb]
            if rest:
                verdicts.append(v < min(rest) or v > max(rest))
        if verdicts and all(verdicts):
            classes[fabric] = fabric
    sources = {}
    # 3. the ramp
    per_ramp = {k: (float(np.median([np.log(a) for a, _ in v])), float(np.median([p for _, p in v])))
                for k, v in ramp_points(rows).items()}
    pooled = (float(np.exp(np.median([a for a, _ in per_ramp.values()]))),
              float(np.median([p for _, p in per_ramp.values()]))) if per_ramp else (0.0, 1.0)
    ramp, ramp_src = {"tcp": (0.0, 1.0)}, {"tcp": []}
    for cls in sorted({c for c in classes.values() if c != "tcp"}):
        own = {key: v for (f, key), v in per_ramp.items() if classes[f] == cls}
        if own and ramp_by == "class":
            ramp[cls] = (float(np.exp(np.median([a for a, _ in own.values()]))),
                         float(np.median([p for _, p in own.values()])))
            ramp_src[cls] = sorted(own)
        else:
            ramp[cls] = pooled
            ramp_src[cls] = sorted(key for _, key in per_ramp)
    ramp = {c: (float(f"{a:.3g}"), round(p, 3)) for c, (a, p) in ramp.items()}
    # 4. plateau shares
    per_source = source_shares(ramp, classes)
    share_out = {}
    ratios = {1: [], 2: []}
    for (f, key, k), (v, _) in per_source.items():
        if k > 0 and (f, key, 0) in per_source:
            ratios[k].append(v / per_source[(f, key, 0)][0])
    for cls in sorted({c for c in classes.values() if c != "tcp"}):
        vals = []
        for k in range(3):
            src = [(key, v) for (f, key, kk), (v, _) in per_source.items() if classes[f] == cls and kk == k]
            sources[(cls, k)] = sorted(key for key, _ in src)
            if src:
                vals.append(float(np.median([v for _, v in src])))
            else:  # no source of the class at this node count: its 2-VM share × the within-source ratio
                r = ratios[k] or ratios[3 - k] or [1.0]
                vals.append(vals[0] * float(np.median(r)))
                sources[(cls, k)] = sources[(cls, 0)] + ["ratio:" + s for s in sorted(
                    str(key) for (f, key, kk) in per_source if kk == k and (f, key, 0) in per_source)]
        vals = list(np.minimum.accumulate(vals))
        share_out[cls] = tuple(round(min(v, 1.0), 3) for v in vals)
    grid = np.arange(50.0, 1000.0, 1.0)
    lk = np.array([p[0] for p in tcp_pts])
    sh = np.array([p[1] for p in tcp_pts])
    err = ((np.log(sh)[None, :] - np.log(1 / (1 / TCP_ETA0 + lk[None, :] / grid[:, None]))) ** 2).sum(1)
    latency, lat_src = {}, {}
    for cls in sorted(set(classes.values())):
        per = {key: float(np.median(v)) for (f, key), v in lats.items() if classes[f] == cls}
        if per:
            latency[cls] = float(np.median(list(per.values())))
            lat_src[cls] = sorted(per)
    for cls in sorted(set(classes.values())):
        if cls not in latency:
            base = BASE_CLASS.get(cls, cls)
            if base in latency:
                latency[cls], lat_src[cls] = latency[base], lat_src[base]
            else:  # no small-message row in the whole base class: the median of the other RDMA-class fabrics'
                other = sorted(c for c in latency if c != "tcp")
                latency[cls] = float(np.median([latency[c] for c in other]))
                lat_src[cls] = sorted({k for c in other for k in lat_src[c]})
    for cls, v in latency.items():
        latency[cls] = float(f"{v:.3g}")
        sources[(cls, "latency")] = lat_src[cls]
        sources[(cls, "ramp")] = ramp_src.get(cls, [])
    tree = sorted({classes[row_fabric(r)] for r in rows
                   if r["quantity"] == "busbw" and r["collective"] == "all_reduce" and r["algo"] == "default"
                   and float(r["nodes"]) == 2 and float(r["busbw_GBps"]) * 8 > float(r["link_gbps"])})
    return {"classes": classes, "share": share_out, "tcp_ceiling_gbps": float(grid[int(np.argmin(err))]), "tree": tree,
            "latency_s": latency, "ramp_bytes": {c: a for c, (a, _) in ramp.items()},
            "ramp_exp": {c: p for c, (_, p) in ramp.items()}, "sources": sources, "tcp_points": tcp_pts}


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
    net_bps = effective_gbps(link_gbps, nodes, transport, n / np.maximum(nodes, 1.0)) * 1e9 / 8
    multi = nodes > 1
    link = np.where(multi, np.minimum(intra_bps, net_bps), intra_bps)
    # each bucket between VMs as :func:`collective_s` times it — its steps' latency (never below a step inside the
    # VM) or its bytes at the bandwidth NCCL's ramp reaches at the bucket's size (:func:`ramp_factor`), whichever
    # binds; over sockets and inside one VM the ring's latency and bytes add up, as before
    per_bucket = g / buckets(g)
    lat = np.where(multi, np.maximum(step_latency_s(transport), intra_latency_s), intra_latency_s)
    ramp = np.where(multi, ramp_factor(per_bucket, transport), 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        wire = 2 * (n - 1) / n * per_bucket / link / ramp
        steps = latency_steps(n, nodes, "all_reduce", multi & np.isin(transport, TREE_CLASSES)) * lat
        binds = multi & (transport != "tcp")  # sockets: latency + size / bw, as Gavel's runs were fitted
        ring = np.where(n > 1, buckets(g) * np.where(binds, np.maximum(wire, steps), wire + steps), 0.0)
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
    """Most samples/s data parallelism over ``nodes`` VMs can reach: a step cannot end before each VM has sent
    2(m−1)/m of the gradient over its link **at the full sold rate** (m VMs: the least any all-reduce moves
    between VMs — reduce inside the VM, exchange between VMs, broadcast inside; a ring over all n = count × m GPUs
    moves 2(n−1)/n, which public two-VM runs beat: 2 × a3-megagpu-8g all-reduced 8 GiB at 338.8 GB/s busbw over a
    225 GB/s link, 47.5 ms where the ring's 2(n−1)/n bound said ≥ 71.6 ms) and its ring has moved 2(n−1)/n of it
    through the in-VM link (GB/s), nor before each bucket has crossed the VMs' fabric ``2⌈log2 nodes⌉`` times at
    the small-message step latency (a tree over the VMs, up and down: the fewest inter-VM latencies any NCCL
    algorithm pays; a flat ring over all n GPUs pays 2(n−1), which over-bounds VMs of 8 GPUs — bert-large on
    10 × a4-highgpu-8g was capped at half its prior) — a bound of the wire, not an estimate (the estimate is
    :func:`allreduce_s`). With one GPU a VM (m = n) the two counts agree. Infinite for one VM and for
    parameter-server rows. ``transport``: per row (:func:`resolve`), for the step latency."""
    g = np.asarray(gradient_bytes, dtype=float)
    count = np.asarray(count, dtype=float)
    nodes = np.asarray(nodes, dtype=float)
    n = count * nodes
    net_bps = np.asarray(link_gbps, dtype=float) * 1e9 / 8
    intra_bps = np.asarray(intra_gbs, dtype=float) * 1e9
    lat = step_latency_s(resolve(transport, link_gbps))
    with np.errstate(divide="ignore", invalid="ignore"):
        hops = 2 * np.ceil(np.log2(np.maximum(nodes, 2.0)))
        wire = np.maximum(2 * (nodes - 1) / nodes * g / net_bps, 2 * (n - 1) / n * g / intra_bps)
        t = wire + buckets(g) * hops * lat
        bound = n * np.asarray(batch, dtype=float) / t
    return np.where((nodes > 1) & (np.asarray(ps, dtype=float) < 0.5) & (t > 0), bound, np.inf)
