"""Which device to profile on, and what to call it in a profile."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from cloudfit.errors import ProfileError

if TYPE_CHECKING:  # pragma: no cover
    import torch

# First match wins: more specific spellings before the ones they contain ("GH200" before "H200",
# "A100 80GB" before "A100", "L40S" before "L4", "A100" before "A10").
_GPU_PATTERNS: list[tuple[str, str]] = [
    (r"\bGH200\b", "GH200"),
    (r"\bB200\b", "B200"),
    (r"\bH200\b", "H200"),
    (r"\bH100\b.*\bPCIE\b", "H100-PCIe"),
    (r"\bH100\b", "H100"),
    (r"\bA100\b.*\bPCIE\b.*\b80\s?GB\b|\bA100\b.*\b80\s?GB\b.*\bPCIE\b", "A100-80GB-PCIe"),
    (r"\bA100\b.*\b80\s?GB\b", "A100-80GB"),
    (r"\bA100\b", "A100"),
    (r"\bA10\b", "A10"),
    (r"\bL40S\b", "L40S"),
    (r"\bL4\b", "L4"),
    (r"\bT4\b", "T4"),
    (r"\bV100\b", "V100"),
    (r"\bP100\b.*\bSXM2\b", "P100-SXM2"),
    (r"\bP100\b", "P100"),
    (r"\bP4\b", "P4"),
    (r"\bK80\b", "K80"),
]


def canonical_device_name(raw: str) -> str:
    """The catalog's accelerator name for a CUDA device name; ``"cpu"`` for a CPU.

    ``"NVIDIA A100-SXM4-40GB"`` → ``A100``, ``"NVIDIA A100-SXM4-80GB"`` → ``A100-80GB``, ``"NVIDIA A100 80GB PCIe"`` →
    ``A100-80GB-PCIe`` (a board variant, ``hardware.BOARD_OF``), ``"Tesla P100-SXM2-16GB"`` → ``P100-SXM2``,
    ``"Tesla T4"`` → ``T4``, ``"NVIDIA H100 80GB HBM3"`` → ``H100``, ``"NVIDIA H100 PCIe"`` → ``H100-PCIe``,
    ``"NVIDIA L4"`` → ``L4``, ``"Tesla V100-SXM2-16GB"`` → ``V100``. A GPU the hardware table does not
    know keeps its own name without the vendor prefix (``"NVIDIA GeForce RTX 4090"`` → ``GeForce-RTX-4090``).
    """
    name = " ".join(str(raw).split())
    if not name or name.lower() == "cpu" or name.lower().startswith("cpu"):
        return "cpu"
    upper = name.upper().replace("_", " ").replace("-", " ")
    for pattern, canon in _GPU_PATTERNS:
        if re.search(pattern, upper):
            return canon
    stripped = re.sub(r"^(NVIDIA|TESLA|AMD)\s+", "", name, flags=re.IGNORECASE)
    return stripped.replace(" ", "-")


def select_device(device: str = "auto") -> "torch.device":
    """``auto`` (CUDA if present, else CPU), ``cpu``, ``cuda`` or ``cuda:N``; ProfileError otherwise."""
    import torch

    d = (device or "auto").strip().lower()
    if d == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    if d == "cpu":
        return torch.device("cpu")
    m = re.fullmatch(r"cuda(?::(\d+))?", d)
    if not m:
        raise ProfileError(f"unknown device {device!r} (expected auto, cpu, cuda or cuda:N)")
    if not torch.cuda.is_available():
        why = "this torch was built without CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
        raise ProfileError(f"--device {device} requested but {why}; use --device cpu or auto")
    index = int(m.group(1)) if m.group(1) is not None else torch.cuda.current_device()
    count = torch.cuda.device_count()
    if index >= count:
        raise ProfileError(f"--device {device}: only {count} CUDA device(s) visible (cuda:0…cuda:{count - 1})")
    return torch.device("cuda", index)


def device_name(device: "torch.device") -> str:
    """The raw name of ``device``: the CUDA device name, or the CPU model from the OS."""
    import platform

    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return "CPU " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU " + (platform.processor() or platform.machine() or "unknown")
