"""Accelerator specifications: the features the performance model sees (never the GPU's name).

Keyed by the canonical accelerator names the catalog uses (``A100``, ``A100-80GB``, ``H100``,
``H100-MEGA``, ``H200``, ``B200``, ``L4``, ``T4``, ``V100``, ``P100``, ``P4``) plus accelerators that
only appear in training measurements (``K80``, ``GH200``, ``L40S``, ``A10``, ``H100-PCIe``, and the board variants
``P100-SXM2``, ``A100-80GB-PCIe`` and AWS's ``A10G`` and ``V100-32GB``, see ``BOARD_OF``).

Provenance: ``data/raw/gpus/gpu_specs.csv`` (copied from the shared data set; see
``data/raw/gpus/PROVENANCE.md``): NVIDIA datasheets cross-checked against stas00/ml-engineering.
Memory sizes of catalog GPUs are the catalog's own ``GpuInfo`` (MiB → GiB). Dense tensor-core
numbers (no sparsity). PCIe generation per NVIDIA datasheets. Network bandwidth per VM from the
GCP document "Networking and GPU machines" (``data/raw/network/gcp_gpu_vm_network_bandwidth.csv``).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from cloudfit.errors import UnknownAcceleratorError

#: PCIe x16 one-direction bandwidth in GB/s by generation.
_PCIE_GBPS = {3: 15.75, 4: 31.5, 5: 63.0}


@dataclass(frozen=True)
class Accelerator:
    name: str
    arch: str
    memory_gib: float
    memory_bandwidth_gbps: float  # GB/s
    fp32_tflops: float
    tf32_tflops: float | None  # dense tensor-core TF32; None = no TF32 tensor cores
    fp16_tflops: float | None  # dense; None = no fast FP16
    bf16_tflops: float | None
    fp8_tflops: float | None
    nvlink_gbps: float | None  # NVLink per GPU, GB/s (both directions, as NVIDIA quotes it)
    pcie_gen: int
    tdp_w: float
    year: int
    # Chip structure (the kernel-efficiency model's features; see _CHIP for provenance): streaming
    # multiprocessors, boost clock in MHz, L2 cache in MiB.
    sms: int = 0
    clock_mhz: float = 0.0
    l2_mib: float = 0.0

    def peak_tflops(self, precision: str) -> float:
        """Dense peak at ``precision``, falling back to the next precision the chip really runs.

        fp8 without FP8 units runs as fp16/bf16; bf16 without bf16 units falls back to fp32 (emulated
        bf16 is no faster); fp16 without tensor cores runs at the FP32 rate (or the chip's 2× FP16
        rate where it has one, e.g. P100); tf32 without tensor cores is fp32.
        """
        p = precision.lower()
        if p == "fp8":
            return self.fp8_tflops or self.peak_tflops("fp16")
        if p == "bf16":
            return self.bf16_tflops or self.fp32_tflops
        if p == "fp16":
            return self.fp16_tflops or self.fp32_tflops
        if p == "tf32":
            return self.tf32_tflops or self.fp32_tflops
        if p == "fp32":
            return self.fp32_tflops
        raise ValueError(f"unknown precision {precision!r} (expected fp32, tf32, fp16, bf16 or fp8)")

    @property
    def sustained_bandwidth_gbps(self) -> float:
        """Datasheet memory bandwidth less what ECC takes on parts that pay for it in bandwidth
        (:data:`ECC_BANDWIDTH_SHARE`): what the performance prior's memory-bound time divides by."""
        return self.memory_bandwidth_gbps * ECC_BANDWIDTH_SHARE.get(self.name, 1.0)

    @property
    def pcie_gbps(self) -> float:
        return _PCIE_GBPS[self.pcie_gen]

    @property
    def interconnect(self) -> str:
        return f"NVLink {self.nvlink_gbps:g} GB/s" if self.nvlink_gbps else f"PCIe gen{self.pcie_gen}"


#: Share of the datasheet memory bandwidth left with ECC on, for accelerators whose ECC check bits travel
#: inline with the data (GDDR5 without side-band ECC). Cloud K80s run with ECC on (the GCE/AWS default);
#: NVIDIA's Tesla V100 whitepaper (ECC section) contrasts the HBM2 of P100/V100, "ECC can be active without
#: a bandwidth or capacity penalty", with the Kepler K40's inline GDDR5 ECC (6.25% of the memory reserved for
#: check bits, and their traffic on the same bus). NVIDIA gives no figure for the bandwidth cost; 0.83 is an
#: estimate (check bits plus read-modify-write on partial writes), checked against the data in
#: bench/RESULTS_perf.md (K80's cross-accelerator bias). GDDR parts with NeuSight kernel measurements (P4, T4,
#: L4) stay at 1: their kernel tables were measured as the cloud runs them, ECC included.
ECC_BANDWIDTH_SHARE = {"K80": 0.83}

#: name → (SMs, boost clock MHz, L2 MiB). NeuSight's device configs (data/kernels/PROVENANCE.md) for the
#: GPUs it measured (P100, T4, A100, A100-80GB, L4, H100) — except P4 (20 SMs of 128 FP32 lanes, the
#: datasheet; NeuSight counts 40 half-SMs), L4 (58 SMs enabled, NVIDIA's L4 datasheet; NeuSight's file
#: says 60, the full AD104) and V100 (SXM2 boost 1530 MHz, matching fp32_tflops; NeuSight measured the
#: PCIe board at 1370); NVIDIA datasheets/whitepapers for the rest (K80 per GK210 die; B200: 148 SMs over two dies, 126 MiB L2, ~1.96 GHz boost — NVIDIA does not
#: publish a boost clock for B200, this is the figure third-party spec sheets quote: approximate).
_CHIP: dict[str, tuple[int, float, float]] = {
    "K80": (13, 875, 1.5),
    "P4": (20, 1113, 2),
    "P100": (56, 1380, 4),
    "P100-SXM2": (56, 1480, 4),
    "V100": (80, 1530, 6),
    "V100-32GB": (80, 1530, 6),
    "T4": (40, 1590, 4),
    "A100": (108, 1410, 40),
    "A100-80GB": (108, 1410, 40),
    "A100-80GB-PCIe": (108, 1410, 40),
    "A10": (72, 1695, 6),
    "A10G": (72, 1695, 6),
    "L4": (58, 2040, 48),
    "L40S": (142, 2520, 96),
    "H100": (132, 1980, 50),
    "H100-MEGA": (132, 1980, 50),
    "H100-PCIe": (114, 1755, 50),
    "H200": (132, 1980, 50),
    "GH200": (132, 1980, 50),
    "B200": (148, 1965, 126),
}


def _a(name, arch, mem, bw, fp32, tf32, fp16, bf16, fp8, nvlink, pcie, tdp, year) -> Accelerator:
    return Accelerator(name, arch, mem, bw, fp32, tf32, fp16, bf16, fp8, nvlink, pcie, tdp, year, *_CHIP[name])


# name, arch, memory GiB, mem BW GB/s, FP32, TF32, FP16, BF16, FP8 (dense TFLOPS), NVLink GB/s, PCIe gen, TDP W, year
ACCELERATORS: dict[str, Accelerator] = {
    a.name: a
    for a in (
        # K80 FP32 at its sustained base clock (board datasheet: 5.6 TFLOPS base, 8.73 with GPU Boost; per
        # die 2.8 / 4.37). Three public data sets (tf_cnn_benchmarks, CM-DARE, Gavel) measure P100/K80
        # at 1.8–8.4× (median 3.2) on the same workloads; the 4.37 boost figure gives 2.1×. data/PROVENANCE.md.
        _a("K80", "Kepler", 12, 240, 2.8, None, None, None, None, None, 3, 150, 2014),
        _a("P4", "Pascal", 8, 192, 5.5, None, None, None, None, None, 3, 75, 2016),
        _a("P100", "Pascal", 16, 732, 9.3, None, 18.7, None, None, None, 3, 250, 2016),
        # Board variants measured in the training data (see BOARD_OF): the DGX-1's P100 is the SXM2 module
        # (1480 MHz boost: 10.6 / 21.2 TFLOPS, 300 W; NVIDIA Tesla P100 datasheet), not the 9.3-TFLOPS PCIe card
        # GCP rents; Lambda's "A100 80GB PCIe" has HBM2e at 1,935 GB/s and 300 W against the SXM4 module's
        # 2,039 GB/s and 400 W (NVIDIA A100 datasheet; same peaks, 108 SMs at 1410 MHz).
        _a("P100-SXM2", "Pascal", 16, 732, 10.6, None, 21.2, None, None, 160, 3, 300, 2016),
        _a("V100", "Volta", 16, 900, 15.7, None, 125, None, None, 300, 3, 300, 2017),
        # AWS p3dn's V100 SXM2 32 GB: the same module with twice the HBM2 (NVIDIA V100 datasheet: same peaks,
        # 900 GB/s, 300 W); a board of the V100 (BOARD_OF).
        _a("V100-32GB", "Volta", 32, 900, 15.7, None, 125, None, None, 300, 3, 300, 2018),
        _a("T4", "Turing", 16, 320, 8.1, None, 65, None, None, None, 3, 70, 2018),
        _a("A100", "Ampere", 40, 1555, 19.5, 156, 312, 312, None, 600, 4, 400, 2020),
        _a("A100-80GB", "Ampere", 80, 2039, 19.5, 156, 312, 312, None, 600, 4, 400, 2020),
        _a("A100-80GB-PCIe", "Ampere", 80, 1935, 19.5, 156, 312, 312, None, None, 4, 300, 2021),
        _a("A10", "Ampere", 24, 600, 31.2, 62.5, 125, 125, None, None, 4, 150, 2021),
        # AWS g5's "A10G": NVIDIA publishes no datasheet for it. Modelled as a board of the A10 (same GA102
        # chip; 600 GB/s in public bandwidth tables) with the A10 datasheet's peaks — an assumption, see
        # data/raw/gpus/PROVENANCE.md — and the memory SkyPilot's AWS catalog reports (22,888 MiB per GPU).
        _a("A10G", "Ampere", 22.35, 600, 31.2, 62.5, 125, 125, None, None, 4, 150, 2021),
        _a("L4", "Ada Lovelace", 24, 300, 30.3, 60, 121, 121, 242.5, None, 4, 72, 2023),
        _a("L40S", "Ada Lovelace", 48, 864, 91.6, 183, 362, 362, 733, None, 4, 350, 2023),
        _a("H100", "Hopper", 80, 3350, 67, 494.5, 989, 989, 1979, 900, 5, 700, 2022),
        # Same H100 SXM GPU as H100; a3-megagpu-8g differs only by its network (see vm_network_gbps).
        _a("H100-MEGA", "Hopper", 80, 3350, 67, 494.5, 989, 989, 1979, 900, 5, 700, 2022),
        _a("H100-PCIe", "Hopper", 80, 2000, 51, 378, 756, 756, 1513, None, 5, 350, 2022),
        _a("H200", "Hopper", 141, 4800, 67, 494.5, 989, 989, 1979, 900, 5, 700, 2024),
        _a("GH200", "Hopper", 96, 4000, 67, 494.5, 989, 989, 1979, 900, 5, 900, 2023),
        _a("B200", "Blackwell", 180, 8000, 80, 1125, 2250, 2250, 4500, 1800, 5, 1000, 2025),
    )
}

#: Board variant → the accelerator it is a board of (the same GPU and memory on another module, with other
#: clocks, power or memory speed): measurements keep the board they ran on (its specs enter the prior), while
#: leave-one-accelerator-out evaluation holds out, and anchors across, whole accelerators
#: (:func:`accelerator_of`), so a held-out GPU is never predicted from its own twin board.
BOARD_OF = {"P100-SXM2": "P100", "A100-80GB-PCIe": "A100-80GB", "A10G": "A10", "V100-32GB": "V100"}


def accelerator_of(name: str) -> str:
    """The accelerator a (canonical) board name belongs to: itself unless it is a :data:`BOARD_OF` variant."""
    return BOARD_OF.get(name, name)


#: Spellings users, GCP and CUDA device names use → canonical name.
_ALIASES = {
    "A100-40GB": "A100",
    "A100-SXM4-40GB": "A100",
    "NVIDIA-TESLA-A100": "A100",
    "A100-SXM4-80GB": "A100-80GB",
    "A100-PCIE-80GB": "A100-80GB-PCIe",
    "P100-SXM2-16GB": "P100-SXM2",
    "NVIDIA-A100-80GB": "A100-80GB",
    "H100-80GB": "H100",
    "H100-SXM": "H100",
    "NVIDIA-H100-80GB": "H100",
    "NVIDIA-H100-MEGA-80GB": "H100-MEGA",
    "NVIDIA-H200-141GB": "H200",
    "NVIDIA-B200": "B200",
    "NVIDIA-L4": "L4",
    "NVIDIA-TESLA-T4": "T4",
    "NVIDIA-TESLA-V100": "V100",
    "NVIDIA-TESLA-P100": "P100",
    "NVIDIA-TESLA-P4": "P4",
    "NVIDIA-TESLA-K80": "K80",
}


#: Upper-case spelling → canonical name: the canonical names themselves, then the aliases.
_BY_KEY: dict[str, str] = {**_ALIASES, **{canon.upper(): canon for canon in ACCELERATORS}}


def canonical_name(name: str) -> str:
    """The canonical accelerator name for ``name`` (case-insensitive, GCP and alias spellings).

    Raises ``UnknownAcceleratorError`` naming the known accelerators.
    """
    key = name.strip().upper().replace(" ", "-").replace("_", "-")
    canon = _BY_KEY.get(key)
    if canon is not None:
        return canon
    known = ", ".join(ACCELERATORS)
    raise UnknownAcceleratorError(f"unknown accelerator {name!r} (known: {known})")


def get(name: str) -> Accelerator:
    """The spec of accelerator ``name`` (any spelling ``canonical_name`` accepts; canonical names, which the
    catalog and the performance model pass, are one dictionary lookup)."""
    acc = ACCELERATORS.get(name)
    return acc if acc is not None else ACCELERATORS[canonical_name(name)]


def precision_note(accelerator: str, precision: str) -> str:
    """A warning for a measurement recorded at ``precision`` on ``accelerator`` whose label is often wrong, or "".

    Precision semantics in cloudfit: ``fp32`` is strict FP32 (TF32 off for matmuls *and* convolutions),
    ``tf32`` is TF32 tensor cores for both (what NVIDIA's NGC containers set: NVIDIA_TF32_OVERRIDE unset,
    ``torch.backends.cuda.matmul.allow_tf32`` and ``cudnn.allow_tf32`` on), ``fp16``/``bf16`` autocast mixed
    precision, ``fp8`` Transformer Engine FP8 on Hopper/Blackwell. PyTorch's own defaults lie between: cuDNN
    convolutions TF32 on, matmuls TF32 off (since 1.12). On accelerators with TF32 units (Ampere and newer)
    many published "fp32" numbers ran TF32.
    """
    acc = get(accelerator)
    if precision.lower() == "fp32" and acc.tf32_tflops:
        return (f"many published fp32 numbers on {acc.name} ran TF32 (NVIDIA's containers turn it on for matmuls "
                "and convolutions; PyTorch turns it on for convolutions by default): if TF32 was on, record "
                "--precision tf32; fp32 here means TF32 off")
    return ""


def match(patterns: tuple[str, ...] | list[str], names: list[str]) -> list[str]:
    """Names among ``names`` matching any of ``patterns`` (canonical names or globs like ``A100*``)."""
    out = []
    for n in names:
        if any(fnmatch.fnmatchcase(n.upper(), p.upper()) for p in patterns):
            out.append(n)
    return out


# --------------------------------------------------------------------------------------------
# Links


def intra_node_gbps(accelerator: str, accelerators_per_node: int) -> float:
    """Effective one-direction GB/s a ring all-reduce gets between GPUs inside one VM.

    NVLink: NCCL's measured bus bandwidth is about 40% of NVIDIA's bidirectional per-GPU NVLink
    figure on 8-GPU HGX boards (e.g. ~230 of 600 GB/s on A100, ~360 of 900 on H100); PCIe: about
    75% of one direction of the slot. With one GPU there is nothing to reduce.
    """
    acc = get(accelerator)
    if accelerators_per_node <= 1:
        return float("inf")
    if acc.nvlink_gbps:
        return 0.4 * acc.nvlink_gbps
    return 0.75 * acc.pcie_gbps


#: Max total VM bandwidth (Gbps) by machine family at its largest shape, from GCP's
#: "Networking and GPU machines" table; A2/G2 "scale with machine type", N1 depends on vCPUs.
_FAMILY_MAX_GBPS = {
    "a4-highgpu": 3600.0,
    "a3-ultragpu": 3600.0,
    "a3-megagpu": 1800.0,
    "a3-highgpu": 1000.0,
    "a3-edgegpu": 600.0,
    "a2-highgpu": 100.0,
    "a2-megagpu": 100.0,
    "a2-ultragpu": 100.0,
    "g2-standard": 100.0,
}


#: Inter-node bandwidth (Gbit/s) of the other clouds' instance types, with the source of each figure
#: (catalogs/README.md, "Other clouds"). AWS: the EC2 accelerated-computing instance pages and "Maximize
#: network bandwidth on accelerated computing instances with EFA" (P5/P5e up to 3,200 Gbps over EFA;
#: G6e up to 400 at 48xlarge); Nebius: 8 × ConnectX-7 NDR 400 Gb/s InfiniBand per 8-GPU host (Nebius's
#: system description in MLCommons inference_results_v6.0, closed/Nebius/systems/nebius_b200_n1.json),
#: which Nebius sells as InfiniBand GPU clusters of its 8-GPU VMs.
#: Added for issue 33 (every AWS family that trains): Gbit/s from aws/karpenter-provider-aws
#: ``pkg/providers/instancetype/zz_generated.bandwidth.go`` @01a436f0bbbc75a1252aba1a3a48ca115b7e6cc0 (generated from
#: EC2's "instance network bandwidth" page; for the "up to" sizes it is the **baseline** a multi-hour job keeps, not
#: the burst), EFA from eksctl-io/eksctl ``pkg/utils/instance/instance_types.go``
#: @0027506e8f395e6e9216270328aee228ba8eae07 (``EFASupported``, generated from the EC2 API).
OTHER_CLOUD_GBPS: dict[str, tuple[float, str]] = {
    "p6-b200.48xlarge": (3200.0, "AWS P6: EFAv4, 8 x 400 Gbps"),
    "p5en.48xlarge": (3200.0, "AWS P5en: EFAv3, 3,200 Gbps"),
    "p5.48xlarge": (3200.0, "AWS EFA guide: P5 up to 3,200 Gbps"),
    "p5.4xlarge": (100.0, "AWS P5: p5.4xlarge 100 Gbps EFA"),
    "p4de.24xlarge": (400.0, "AWS P4de: 400 Gbps EFA"),
    "p4d.24xlarge": (400.0, "AWS P4d: 400 Gbps EFA"),
    "p3.8xlarge": (10.0, "AWS P3: 10 Gbps, no EFA"),
    "p3dn.24xlarge": (100.0, "AWS P3dn: 100 Gbps (EFA)"),
    "g4dn.metal": (100.0, "AWS G4dn: g4dn.metal 100 Gbps (EFA)"),
    "g4dn.12xlarge": (50.0, "AWS G4dn: g4dn.12xlarge 50 Gbps (EFA)"),
    "g5.48xlarge": (100.0, "AWS G5: g5.48xlarge 100 Gbps (EFA)"),
    "g5.12xlarge": (40.0, "AWS G5: g5.12xlarge 40 Gbps (EFA)"),
    "p3.2xlarge": (2.5, "AWS P3: up to 10 Gbps, 2.5 baseline, no EFA"),
    "p3.16xlarge": (25.0, "AWS P3: p3.16xlarge 25 Gbps, no EFA"),
    "g4dn.xlarge": (5.0, "AWS G4dn: up to 25 Gbps, 5 baseline, no EFA"),
    "g4dn.8xlarge": (50.0, "AWS G4dn: g4dn.8xlarge 50 Gbps (EFA)"),
    "g5.xlarge": (2.5, "AWS G5: up to 10 Gbps, 2.5 baseline, no EFA"),
    "g5.8xlarge": (25.0, "AWS G5: g5.8xlarge 25 Gbps (EFA)"),
    "g6.xlarge": (2.5, "AWS G6: up to 10 Gbps, 2.5 baseline, no EFA"),
    "g6.8xlarge": (25.0, "AWS G6: g6.8xlarge 25 Gbps (EFA)"),
    "g6.12xlarge": (40.0, "AWS G6: g6.12xlarge 40 Gbps (EFA)"),
    "g6.48xlarge": (100.0, "AWS G6: g6.48xlarge 100 Gbps (EFA)"),
    "g6e.xlarge": (2.5, "AWS G6e: up to 20 Gbps, 2.5 baseline, no EFA"),
    "g6e.8xlarge": (25.0, "AWS G6e: g6e.8xlarge 25 Gbps (EFA)"),
    "g6e.12xlarge": (100.0, "AWS G6e: 100 Gbps (EFA)"),
    "g6e.48xlarge": (400.0, "AWS G6e: g6e.48xlarge 400 Gbps (EFA)"),
    "gpu-h100-sxm_8gpu-128vcpu-1600gb": (3200.0, "Nebius: 8 x 400 Gb/s NDR InfiniBand per 8-GPU host"),
    "gpu-h200-sxm_8gpu-128vcpu-1600gb": (3200.0, "Nebius: 8 x 400 Gb/s NDR InfiniBand per 8-GPU host"),
    "gpu-b200-sxm_8gpu-160vcpu-1792gb": (3200.0, "Nebius: 8 x 400 Gb/s NDR InfiniBand per 8-GPU host"),
}
#: Documented default (no published figure): an instance of another cloud not in ``OTHER_CLOUD_GBPS`` —
#: Lambda on-demand instances (InfiniBand comes with Lambda's 1-Click Clusters, not in the catalog),
#: Nebius 1-GPU and L40S VMs, RunPod Pods (single-node anyway) — gets plain 10 Gbit/s Ethernet.
DEFAULT_OTHER_CLOUD_GBPS = 10.0


def cloud_of_machine_type(machine_type: str) -> str:
    """The cloud an instance type name belongs to, by the shipped catalogs' naming: AWS ``family.size``,
    Lambda ``gpu_…``, RunPod ``…_SECURE``, Nebius ``gpu-…_…``; anything else is a GCP machine type."""
    if machine_type.endswith("_SECURE"):
        return "runpod"
    if machine_type.startswith("gpu_"):
        return "lambda"
    if machine_type.startswith("gpu-") and "_" in machine_type:
        return "nebius"
    if "." in machine_type:
        return "aws"
    return "gcp"


def network_source(machine_type: str) -> str:
    """Where ``vm_network_gbps``'s figure for ``machine_type`` comes from (for explanations)."""
    if machine_type in OTHER_CLOUD_GBPS:
        return OTHER_CLOUD_GBPS[machine_type][1]
    if cloud_of_machine_type(machine_type) != "gcp":
        return f"no published figure: {DEFAULT_OTHER_CLOUD_GBPS:g} Gbit/s Ethernet assumed"
    return "GCP 'Networking and GPU machines'"


def vm_network_gbps(machine_type: str, accelerator: str, accelerators_per_node: int, vcpus: float) -> float:
    """Max network bandwidth of one VM in Gbit/s (the inter-node link for all-reduce).

    Other clouds' instance types: ``OTHER_CLOUD_GBPS`` (sources there), else
    ``DEFAULT_OTHER_CLOUD_GBPS``. GCP machine types:

    Rules (documented in catalogs/README.md), from GCP's "Networking and GPU machines" table:
    8-GPU A3/A4 shapes get their family's total; A2/G2 "scale with machine type": the family maximum
    times the shape's share of the largest shape's vCPUs, floored at min(2 Gbps × vCPUs, 24); A3
    shapes with 1–4 GPUs have a single NIC: 200 Gbps × their vCPU share of the 8-GPU shape; N1 gets
    2 Gbps per vCPU capped at 32 Gbps, or at 100 Gbps with T4/V100.
    """
    known = OTHER_CLOUD_GBPS.get(machine_type)
    if known is not None:
        return known[0]
    if cloud_of_machine_type(machine_type) != "gcp":
        return DEFAULT_OTHER_CLOUD_GBPS
    if machine_type.startswith("n1-"):
        cap = 100.0 if get(accelerator).name in ("T4", "V100") else 32.0
        return min(2.0 * vcpus, cap)
    for prefix, top in _FAMILY_MAX_GBPS.items():
        if not machine_type.startswith(prefix):
            continue
        if prefix.startswith(("a4", "a3")):
            if accelerators_per_node >= 8:
                return top
            return 200.0 * vcpus / 208.0
        return max(top * vcpus / 96.0, min(2.0 * vcpus, 24.0))
    return min(2.0 * vcpus, 32.0)
