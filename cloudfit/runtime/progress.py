"""Progress and metrics lines: what rank 0 tells the launcher.

``--progress-file`` (JSON, written atomically at most every ``--progress-every-s`` seconds, and at the
start, at every checkpoint and at the end): state (``running``/``completed``/``stopped``), step,
samples/s (tokens/s for token models), loss, restarts, checkpoint step and interval, the family's
fields. ``--metrics-file`` (JSON lines, appended): one line per step.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from cloudfit.atomic import atomic_open

PROGRESS_SCHEMA = 1


def write_json_atomic(path: Path, obj: Any) -> None:
    with atomic_open(path) as fh:
        json.dump(obj, fh)


class Progress:
    """Rank 0's progress file and metrics lines (other ranks keep the fields but write nothing)."""

    def __init__(self, path: Path, every_s: float, metrics: Path | None, writer: bool, fields: dict[str, Any]) -> None:
        self.path, self.every_s, self.writer = path, every_s, writer
        self.fields: dict[str, Any] = {"schema_version": PROGRESS_SCHEMA, "state": "running", **fields}
        self.last = -float("inf")
        self.metrics = open(metrics, "a") if (metrics is not None and writer) else None

    def report(self, force: bool = False, **kw: Any) -> None:
        self.fields.update(kw)
        now = time.monotonic()
        if self.writer and (force or now - self.last >= self.every_s):  # a FUSE write costs: at most every N s
            self.last = now
            self.fields["updated_at"] = time.time()
            write_json_atomic(self.path, self.fields)

    def line(self, **kw: Any) -> None:
        if self.metrics is not None:
            self.metrics.write(json.dumps({**kw, "time": time.time()}) + "\n")
            self.metrics.flush()

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None


class Rate:
    """Throughput after a few warm-up steps (the first steps compile, allocate and fill caches)."""

    def __init__(self, start: int, warm_steps: int = 2) -> None:
        self.start, self.warm, self.t0 = start, warm_steps, None

    def per_second(self, step: int, per_step: int | None, sync=None) -> float | None:
        if step - self.start == self.warm:
            if sync is not None:
                sync()
            self.t0 = time.perf_counter()
        now = time.perf_counter()
        if per_step is None or self.t0 is None or step - self.start <= self.warm or now <= self.t0:
            return None
        return (step - self.start - self.warm) * per_step / (now - self.t0)
