"""The training table: public measurements joined with their workloads' stats (numpy + stdlib only).

``data/measurements.csv`` and ``data/workload_stats.json`` are rebuilt by
``scripts/build_measurements.py``; see ``data/PROVENANCE.md`` for sources and skipped rows.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from cloudfit.errors import ModelError
from cloudfit.resources import shipped
from cloudfit.types import OP_CLASSES, ModelStats, OpClassStats


def stats_to_dict(s: ModelStats) -> dict[str, Any]:
    return {
        "parameters": int(s.parameters),
        "flops_per_sample": float(s.flops_per_sample),
        "forward_flops_per_sample": float(s.forward_flops_per_sample),
        "gradient_bytes": int(s.gradient_bytes),
        "activation_bytes_per_sample": float(s.activation_bytes_per_sample),
        "op_classes": {c: {"flops": float(s.op_classes[c].flops), "bytes": float(s.op_classes[c].bytes)}
                       for c in OP_CLASSES if c in s.op_classes},
        "batch_size": int(s.batch_size),
        "input": s.input,
        "task": s.task,
        "kernels_per_step": s.kernels_per_step,
    }


def stats_from_dict(d: Mapping[str, Any]) -> ModelStats:
    return ModelStats(
        parameters=int(d["parameters"]),
        flops_per_sample=float(d["flops_per_sample"]),
        forward_flops_per_sample=float(d["forward_flops_per_sample"]),
        gradient_bytes=int(d["gradient_bytes"]),
        activation_bytes_per_sample=float(d["activation_bytes_per_sample"]),
        op_classes={c: OpClassStats(float(v["flops"]), float(v["bytes"])) for c, v in d["op_classes"].items()},
        batch_size=int(d["batch_size"]),
        input=str(d.get("input", "")),
        task=str(d.get("task", "")),
        kernels_per_step=None if d.get("kernels_per_step") is None else int(d["kernels_per_step"]),
    )


@dataclass(frozen=True)
class Table:
    """One row per measurement; string columns as object arrays, numbers as float arrays."""

    columns: dict[str, np.ndarray]
    stats: dict[str, ModelStats]  # "workload@batch" → stats

    def __len__(self) -> int:
        return len(self.columns["samples_per_second"])

    def __getitem__(self, key: str) -> np.ndarray:
        return self.columns[key]

    def take(self, idx: np.ndarray) -> "Table":
        return Table({k: v[idx] for k, v in self.columns.items()}, self.stats)


def stats_key(row: Mapping[str, str]) -> str:
    return f"{row['workload']}@{int(float(row['batch_per_device']))}"


_NUMERIC = {"count", "nodes", "batch_per_device", "ps_count", "network_gbps", "ps_network_gbps", "intra_gbps",
            "samples_per_second"}


def load_table(measurements: Path | None = None, stats: Path | None = None) -> Table:
    """Read the shipped (or given) measurement table and workload stats."""
    mpath = measurements or shipped("data/measurements.csv")
    spath = stats or shipped("data/workload_stats.json")
    if not mpath.exists() or not spath.exists():
        raise ModelError(f"training data not found ({mpath}, {spath}); rebuild with scripts/build_measurements.py")
    with open(mpath, newline="") as f:
        rows = list(csv.DictReader(f))
    sdoc = json.loads(spath.read_text())
    st = {k: stats_from_dict(v) for k, v in sdoc["workloads"].items()}
    if sdoc.get("schema_version") != 2:
        raise ModelError(f"{spath} has schema_version {sdoc.get('schema_version')!r} (expected 2); "
                         "rebuild with scripts/build_measurements.py")
    missing = sorted({stats_key(r) for r in rows} - set(st))
    if missing:
        raise ModelError(f"workload stats missing for {', '.join(missing)}; rebuild with scripts/build_measurements.py")
    cols: dict[str, np.ndarray] = {}
    for name in rows[0].keys():
        if name in _NUMERIC:
            cols[name] = np.array([float(r[name]) if r[name] != "" else np.nan for r in rows], dtype=float)
        else:
            cols[name] = np.array([r[name] for r in rows], dtype=object)
    return Table(cols, st)


def table_inputs(t: Table, tables=None):
    """(Work, Setup, framework_tf) arrays for every row of the training table (``tables``: the kernel-
    efficiency tables the prior composes, ``cloudfit.perf.kernels.Tables``)."""
    from cloudfit.perf import features

    work = features.work_from_stats([t.stats[f"{w}@{int(b)}"] for w, b in zip(t["workload"], t["batch_per_device"])])
    acc = list(t["accelerator"])
    count = t["count"]
    intra = np.where(np.isnan(t["intra_gbps"]), features.intra_gbps(acc, count), t["intra_gbps"])
    net = np.where(np.isnan(t["network_gbps"]), features.NO_LINK_GBPS, t["network_gbps"])
    ps = (t["parallelism"] == "ps").astype(float)
    ps_count = np.where(np.isnan(t["ps_count"]), 1.0, t["ps_count"])
    ps_net = np.where(np.isnan(t["ps_network_gbps"]), net, t["ps_network_gbps"])
    setup = features.setup(acc, list(t["precision"]), batch=t["batch_per_device"], count=count, nodes=t["nodes"],
                           intra_gbps=intra, network_gbps=net, ps=ps, ps_count=ps_count, ps_network_gbps=ps_net,
                           tables=tables)
    tf = (t["framework"] == "tensorflow").astype(float)
    return work, setup, tf
