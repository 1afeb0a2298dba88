"""The kernel-efficiency tables stored in model.json (their format: one module, kept light).

``cloudfit model fit`` evaluates the kernel models of :mod:`cloudfit.perf.kernels` on these grids for every
accelerator; the prior reads them at prediction time, which is why this record lives apart from the kernel
models (their CSV reader and fitting code stay off ``recommend``'s start-up path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: log2 grids of per-kernel traffic (bytes) and work (FLOPs) the tables are evaluated on.
BYTES_LOG2 = tuple(range(10, 35))
FLOPS_LOG2 = tuple(range(16, 47))


@dataclass(frozen=True)
class Tables:
    """Per accelerator: achieved fraction of the datasheet memory bandwidth by a memory-bound kernel moving
    2^BYTES_LOG2 bytes, and of the fp32 peak by a square GEMM of 2^FLOPS_LOG2 FLOPs (kernel-model predictions,
    clipped to (0, 1]). Latency floors, wave quantisation and sustained clocks are in these fractions."""

    memory: dict[str, tuple[float, ...]]
    gemm: dict[str, tuple[float, ...]]

    def to_dict(self) -> dict[str, Any]:
        return {"bytes_log2": list(BYTES_LOG2), "flops_log2": list(FLOPS_LOG2),
                "memory": {k: list(v) for k, v in sorted(self.memory.items())},
                "gemm": {k: list(v) for k, v in sorted(self.gemm.items())}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Tables":
        if tuple(d["bytes_log2"]) != BYTES_LOG2 or tuple(d["flops_log2"]) != FLOPS_LOG2:
            raise ValueError("kernel tables on another grid")
        return cls({k: tuple(float(x) for x in v) for k, v in d["memory"].items()},
                   {k: tuple(float(x) for x in v) for k, v in d["gemm"].items()})
