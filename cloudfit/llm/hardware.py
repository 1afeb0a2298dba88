"""Extra hardware facts the large-model predictor needs beyond ``cloudfit.catalog.hardware``.

- Accelerators that only appear in the public LLM runs (``GB200``, ``GB300``, ``B300``), built with
  the catalog's ``Accelerator`` record. Dense tensor-core TFLOPS = NVIDIA's sparse datasheet figure
  ÷ 2: GB200 NVL72 datasheet 720 PFLOPS FP8 and 360 PFLOPS BF16 (sparse) for 72 GPUs, 13.4 TB HBM3e
  (186 GB, 8 TB/s per GPU), NVLink 1.8 TB/s; GB300 NVL72 the same FP8/BF16, 20.7 TB (288 GB per GPU);
  HGX B300: FP8 72 PFLOPS sparse per 8 GPUs, 2.3 TB (288 GB per GPU). Recorded with the rows they fit.
- NVLink domain: the GPUs that reach each other over NVLink (8 on HGX/DGX boards and on every GCP A2/A3/A4
  VM; 72 on a GB200/GB300 NVL72 rack).
- Inter-node network per VM/system in Gbit/s: GCP machine families from the GCP document "Networking and
  GPU machines" (data/llm/PROVENANCE.md): A3 High 1,000 (GPUDirect-TCPX), A3 Mega 1,800 (TCPXO), A3 Ultra
  and A4 3,200 RDMA (8 × CX-7; the 400 Gbps gVNIC is not on the GPU path), A2 / G2 100. Systems of the
  public runs: DGX H100 / B200 8 × 400 Gbps InfiniBand = 3,200; DGX B300 8 × 800 = 6,400; GB200/GB300
  NVL72 racks 4 × 400 Gbps per 4-GPU tray → 400 per GPU; llm-foundry's A100 rows say "1600 Gbps
  node-node interconnect (RoCE)"; vTrain's A100 cluster: 800 Gbps per 8-GPU node, the
  ``inter_node_bandwidth`` of every multi-node validation config vTrain ships (``config/validation/multi``),
  listed in data/llm/PROVENANCE.md.
"""

from __future__ import annotations

from cloudfit.catalog import hardware as hw
from cloudfit.catalog.hardware import Accelerator
from cloudfit.errors import UsageError

EXTRA: dict[str, Accelerator] = {
    a.name: a
    for a in (
        Accelerator("GB200", "Blackwell", 186, 8000, 80, 1250, 2500, 2500, 5000, 1800, 6, 1200, 2025),
        Accelerator("GB300", "Blackwell Ultra", 288, 8000, 80, 1250, 2500, 2500, 5000, 1800, 6, 1400, 2025),
        Accelerator("B300", "Blackwell Ultra", 288, 8000, 75, 1125, 2250, 2250, 4500, 1800, 6, 1100, 2025),
    )
}

#: GPUs per NVLink domain where it is larger than one 8-GPU board.
_NVLINK_DOMAIN = {"GB200": 72, "GB300": 72}

#: Default inter-node Gbit/s per node when no machine type is given: the GCP VM that carries the GPU
#: (8-GPU shape), or the DGX-style system of the public runs for GPUs GCP does not rent.
_DEFAULT_NODE_GBPS = {
    "A100": 100.0, "A100-80GB": 100.0, "L4": 100.0, "T4": 100.0, "V100": 100.0,
    "H100": 1000.0, "H100-MEGA": 1800.0, "H200": 3200.0, "B200": 3200.0,
    "GB200": 3200.0, "GB300": 3200.0, "B300": 6400.0,
}

#: Inter-node Gbit/s per GCP machine-family prefix (8-GPU shapes).
FAMILY_GBPS = {"a4x-": 3200.0, "a4-": 3200.0, "a3-ultragpu": 3200.0, "a3-megagpu": 1800.0, "a3-highgpu": 1000.0,
               "a3-edgegpu": 600.0, "a2-": 100.0, "g2-": 100.0}

#: Systems of the public runs → node Gbit/s (DGX: 8 NICs per node).
SYSTEM_GBPS = {"DGX-H100": 3200.0, "DGX-B200": 3200.0, "DGX-B300": 6400.0, "DGX-GB200": 3200.0,
               "DGX-GB300": 3200.0, "MOSAICML-A100": 1600.0, "MOSAICML-H100": 3200.0, "VTRAIN-A100": 800.0}


def canonical(name: str) -> str:
    key = name.strip().upper().replace(" ", "-").replace("_", "-")
    for prefix in ("DGX-", "NVIDIA-"):
        if key.startswith(prefix):
            key = key[len(prefix):]
    if key in EXTRA:
        return key
    return hw.canonical_name(key)


def get(name: str) -> Accelerator:
    """Spec of ``name``: the catalog's hardware table, or one of the extra accelerators above."""
    c = canonical(name)
    return EXTRA[c] if c in EXTRA else hw.ACCELERATORS[c]


#: NVIDIA architectures in release order (Turing and Ada between the datacenter generations they followed;
#: Blackwell Ultra is a Blackwell): the generations ``cloudfit.llm.evaluate.generation_hops`` holds out.
GENERATIONS = {"Kepler": 0, "Pascal": 1, "Volta": 2, "Turing": 2.5, "Ampere": 3, "Ada Lovelace": 3.5, "Hopper": 4,
               "Blackwell": 5, "Blackwell Ultra": 5}


def generation(name: str) -> float:
    """The architecture generation of ``name`` (``GENERATIONS``)."""
    return GENERATIONS[get(name).arch]


def has_fp8(name: str) -> bool:
    return bool(get(name).fp8_tflops)


def peak_tflops(name: str, precision: str) -> float:
    """Dense peak TFLOPS at ``precision`` (bf16/fp16/fp8/fp32/tf32). fp8 on a GPU without FP8 is an error."""
    acc = get(name)
    p = precision.lower()
    if p == "fp8" and not acc.fp8_tflops:
        raise UsageError(f"{acc.name} has no FP8 tensor cores; use --precision bf16")
    try:
        return acc.peak_tflops(p)
    except ValueError as e:
        raise UsageError(str(e)) from None


def nvlink_domain(name: str, gpus_per_node: int) -> int:
    """GPUs reachable over NVLink from one GPU (1 without NVLink)."""
    acc = get(name)
    if not acc.nvlink_gbps:
        return 1
    return max(_NVLINK_DOMAIN.get(acc.name, gpus_per_node), 1)


def intra_gbps(name: str) -> float:
    """NCCL bus bandwidth (GB/s, one direction) inside an NVLink domain: ~40% of the per-GPU NVLink figure
    (NVIDIA quotes both directions), or 75% of one PCIe direction (same rule as cloudfit.catalog.hardware)."""
    acc = get(name)
    return 0.4 * acc.nvlink_gbps if acc.nvlink_gbps else 0.75 * acc.pcie_gbps


def node_gbps(name: str, machine_type: str | None = None) -> float:
    """Inter-node Gbit/s of one node: by GCP machine family when given, else the accelerator's default VM."""
    if machine_type:
        mt = machine_type.lower()
        for prefix, g in FAMILY_GBPS.items():
            if mt.startswith(prefix):
                return g
        up = machine_type.upper()
        if up in SYSTEM_GBPS:
            return SYSTEM_GBPS[up]
        from cloudfit.catalog import hardware as cat_hw  # other clouds' instance types (AWS p5, g5, Nebius …)

        if machine_type in cat_hw.OTHER_CLOUD_GBPS:
            return cat_hw.OTHER_CLOUD_GBPS[machine_type][0]
        raise UsageError(f"unknown machine type {machine_type!r} for the network (known families: "
                         f"{', '.join(p.rstrip('-') for p in FAMILY_GBPS)}; or give --network-gbps)")
    return _DEFAULT_NODE_GBPS.get(canonical(name), 100.0)


#: The fabric (``cloudfit.catalog.network.FABRICS``) of the systems of the public runs, and of each accelerator's
#: default VM (``_DEFAULT_NODE_GBPS``'s: A2 / G2 / N1 gVNIC, A3 High TCPX, A3 Mega TCPXO, A3 Ultra / A4 / A4X RoCE).
SYSTEM_FABRIC = {"DGX-H100": "infiniband", "DGX-B200": "infiniband", "DGX-B300": "infiniband",
                 "DGX-GB200": "infiniband", "DGX-GB300": "infiniband", "MOSAICML-A100": "roce",
                 "MOSAICML-H100": "infiniband", "VTRAIN-A100": "infiniband"}
_DEFAULT_FABRIC = {"H100": "tcpx", "H100-MEGA": "tcpxo", "H200": "roce", "B200": "roce", "GB200": "roce",
                   "GB300": "roce", "B300": "infiniband"}


def node_fabric(name: str, machine_type: str | None = None) -> str:
    """NCCL's fabric between nodes (a ``cloudfit.catalog.network.FABRICS`` name) of ``machine_type``, else of the
    accelerator's default VM (:func:`node_gbps`'s)."""
    from cloudfit.catalog import network

    if machine_type:
        return SYSTEM_FABRIC.get(machine_type.upper()) or network.fabric_of(machine_type)
    return _DEFAULT_FABRIC.get(canonical(name), "gvnic")
