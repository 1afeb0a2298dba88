"""The replay backend: answers probe runs from a table of measured throughput, for evaluation without a cloud.

The table (CSV) has the columns ``accelerator, accelerators_per_node, nodes, batch_size_per_device,
precision, samples_per_second`` (extra columns are ignored; ``data/measurements.csv`` style names
``count`` and ``batch_per_device`` are accepted too). A probe of a configuration in the table
"runs" for the configured length and is charged the configuration's catalog price for it; a
configuration missing from the table is a failed probe (as a stockout would be), charged nothing.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from cloudfit.errors import UsageError
from cloudfit.executors.base import LABEL, DownResult, Event, NodePlan, Preview, RunResult, RunSpec

_ALIASES = {"count": "accelerators_per_node", "batch_per_device": "batch_size_per_device"}
_COLUMNS = ("accelerator", "accelerators_per_node", "nodes", "batch_size_per_device", "precision", "samples_per_second")

Key = tuple[str, int, int, int, str]


def load_replay_table(path: str | Path) -> dict[Key, float]:
    """(accelerator, per node, nodes, batch per device, precision) → samples/s (median of duplicates)."""
    from cloudfit.catalog import hardware

    p = Path(path)
    try:
        with open(p, newline="") as f:
            reader = csv.DictReader(f)
            header = [_ALIASES.get(h, h) for h in (reader.fieldnames or [])]
            missing = [c for c in _COLUMNS if c not in header]
            if missing:
                raise UsageError(f"{p}: replay table lacks column(s) {', '.join(missing)}")
            seen: dict[Key, list[float]] = {}
            for line, raw in enumerate(reader, start=2):
                r = {_ALIASES.get(k, k): v for k, v in raw.items()}
                try:
                    key = (hardware.canonical_name(r["accelerator"]), int(float(r["accelerators_per_node"])),
                           int(float(r["nodes"])), int(float(r["batch_size_per_device"])), str(r["precision"]).lower())
                    sps = float(r["samples_per_second"])
                except (ValueError, TypeError, KeyError) as e:
                    raise UsageError(f"{p}:{line}: bad row ({e})") from None
                if not (sps > 0 and math.isfinite(sps)):
                    raise UsageError(f"{p}:{line}: samples_per_second must be positive, got {r['samples_per_second']!r}")
                seen.setdefault(key, []).append(sps)
    except FileNotFoundError:
        raise UsageError(f"replay table {p} not found") from None
    except OSError as e:
        raise UsageError(f"cannot read replay table {p}: {e}") from None
    if not seen:
        raise UsageError(f"{p}: the replay table has no rows")
    return {k: sorted(v)[len(v) // 2] for k, v in seen.items()}


class ReplayExecutor:
    """An Executor whose runs are looked up, not launched: each probe lasts its spec's ``timeout_s``
    (``probe_seconds`` when the spec has none) and is charged the configuration's price for that long."""

    backend = "replay"

    @classmethod
    def billing_bounds(cls) -> tuple[float, float]:
        return 0.0, 0.0

    def __init__(self, table: str | Path | dict[Key, float], *, probe_seconds: float = 600.0) -> None:
        self.table = table if isinstance(table, dict) else load_replay_table(table)
        if not probe_seconds > 0:
            raise UsageError(f"the probe length must be positive, got {probe_seconds}")
        self.probe_seconds = float(probe_seconds)
        self.runs: list[RunSpec] = []  # every probe asked for, in order (tests and benches count them)

    def _key(self, spec: RunSpec, precision: str) -> Key:
        c = spec.configs[0]
        o = c.offering
        return (o.accelerator, o.accelerators_per_node, c.nodes, int(spec.job.batch_size_per_device or 0), precision)

    def lookup(self, spec: RunSpec) -> float | None:
        return self.table.get(self._key(spec, spec.job.precision))

    def preview(self, spec: RunSpec) -> Preview:
        c = spec.configs[0]
        o = c.offering
        node = NodePlan(name=f"{spec.name}-0", zone=o.zone, machine_type=o.machine_type, accelerator=o.accelerator,
                        accelerators=o.accelerators_per_node, provisioning="replay", price_per_hour=c.price_per_hour,
                        max_run_duration_s=int(self._seconds(spec)), labels={LABEL: spec.name, **spec.labels})
        cost = c.price_per_hour * self._seconds(spec) / 3600
        return Preview(backend="replay", name=spec.name, config=c, nodes=(node,), budget_usd=spec.budget_usd,
                       cost_cap_usd=min(cost, spec.budget_usd), interval_s=0.0, teardown_s=0.0,
                       fallbacks=len(spec.configs) - 1)

    def run(self, spec: RunSpec, on_event=None) -> RunResult:
        emit = on_event or (lambda e: None)
        self.runs.append(spec)
        c = spec.configs[0]
        sps = self.lookup(spec)
        if sps is None:
            return RunResult(name=spec.name, backend="replay", reason="failed", spend_usd=0.0, elapsed_s=0.0, config=c,
                             detail="configuration not in the replay table (as a stockout would)")
        seconds = self._seconds(spec)
        cost = c.price_per_hour * seconds / 3600
        if cost > spec.budget_usd + 1e-9:
            return RunResult(name=spec.name, backend="replay", reason="budget", spend_usd=0.0, elapsed_s=0.0, config=c,
                             detail=f"a {seconds:.0f} s probe costs ${cost:.4f}, above its ${spec.budget_usd:.4f}")
        emit(Event("created", f"replaying {c.label()} from the table"))
        emit(Event("progress", f"step {spec.job.steps}/{spec.job.steps} · {sps:,.0f} samples/s",
                   {"step": spec.job.steps, "total_steps": spec.job.steps, "samples_per_second": sps, "spend_usd": cost}))
        return RunResult(name=spec.name, backend="replay", reason="completed", spend_usd=cost,
                         elapsed_s=seconds, config=c, steps=spec.job.steps, total_steps=spec.job.steps,
                         samples_per_second=sps)

    def _seconds(self, spec: RunSpec) -> float:
        return float(spec.timeout_s) if spec.timeout_s else self.probe_seconds

    def down(self, name: str, *, all_with_label: bool = False) -> DownResult:
        return DownResult(name=name, deleted=(), already_gone=())

    def live(self, name: str) -> list[str]:
        return []


def worlds_from_measurements(*, min_points: int = 4, catalog=None) -> list[dict]:
    """Replay worlds from the shipped measurements: one per (workload, batch, precision, source) with
    at least ``min_points`` measured hardware points that the catalog offers.

    Each world is a dict: ``name``, ``profile`` (the workload's stats, no measurements), ``batch``,
    ``precision``, ``table`` (replay table: point key → samples/s), ``points`` (the catalog-offered
    (accelerator, per node, nodes) points of the table).
    """
    from cloudfit import catalog as catalog_mod
    from cloudfit.perf.data import load_table
    from cloudfit.types import Profile

    cat = catalog if isinstance(catalog, catalog_mod.Catalog) else catalog_mod.load(catalog)
    offered = {(o.accelerator, o.accelerators_per_node) for o in cat.offerings}
    t = load_table()
    groups: dict[tuple, dict[Key, list[float]]] = {}
    for i in range(len(t)):
        if t["parallelism"][i] != "allreduce":
            continue
        acc, cnt = str(t["accelerator"][i]), int(t["count"][i])
        if (acc, cnt) not in offered:
            continue
        g = (str(t["workload"][i]), int(t["batch_per_device"][i]), str(t["precision"][i]), str(t["source"][i]))
        key = (acc, cnt, int(t["nodes"][i]), g[1], g[2])
        groups.setdefault(g, {}).setdefault(key, []).append(float(t["samples_per_second"][i]))
    worlds = []
    for (w, b, prec, src), rows in sorted(groups.items()):
        points = {(k[0], k[1], k[2]) for k in rows}
        if len(points) < min_points:
            continue
        table = {k: sorted(v)[len(v) // 2] for k, v in rows.items()}
        worlds.append({"name": f"{w}@{b} {prec} ({src})", "profile": Profile(model=w, stats=t.stats[f"{w}@{b}"]),
                       "batch": b, "precision": prec, "table": table, "points": points})
    return worlds
