"""The profile file format (``profiles/*.json``), in one module: ``SCHEMA_VERSION``, the reader
(``load_profile``/``profile_from_dict``, validating), the writer (``save_profile``/``profile_to_dict``,
atomic) and where shipped profiles live (``shipped_profiles``, ``resolve_profile``).

No heavy imports: the planner reads profiles on its fast path. Schema: ``profiles/README.md``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any, Mapping

from cloudfit import resources
from cloudfit.errors import ProfileError, UnknownAcceleratorError
from cloudfit.types import OP_CLASSES, PRECISIONS, Measurement, ModelStats, OpClassStats, Profile, StepTime

SCHEMA_VERSION = 1
CPU = "cpu"
SOURCES = ("measured", "reported", "probe")


# --------------------------------------------------------------------------------------------
# dict <-> Profile


def _sig(x: float, digits: int = 6) -> float:
    """Round to ``digits`` significant figures: keeps files readable without losing meaning."""
    return float(f"{x:.{digits}g}")


def profile_to_dict(p: Profile) -> dict[str, Any]:
    s = p.stats
    return {
        "schema_version": p.schema_version,
        "model": p.model,
        "stats": {
            "parameters": int(s.parameters),
            "flops_per_sample": round(s.flops_per_sample),
            "forward_flops_per_sample": round(s.forward_flops_per_sample),
            "gradient_bytes": int(s.gradient_bytes),
            "activation_bytes_per_sample": round(s.activation_bytes_per_sample),
            "batch_size": int(s.batch_size),
            "input": s.input,
            "task": s.task,
            "kernels_per_step": s.kernels_per_step,
            "op_classes": {c: {"flops": round(v.flops), "bytes": round(v.bytes)} for c, v in s.op_classes.items()},
        },
        "measurements": [_measurement_to_dict(m) for m in p.measurements],
    }


def _measurement_to_dict(m: Measurement) -> dict[str, Any]:
    return {
        "accelerator": m.accelerator,
        "count": m.count,
        "nodes": m.nodes,
        "batch_size_per_device": m.batch_size_per_device,
        "precision": m.precision,
        "samples_per_second": _sig(m.samples_per_second),
        "step_time_s": None if m.step_time_s is None else {"median": _sig(m.step_time_s.median), "p90": _sig(m.step_time_s.p90)},
        "source": m.source,
        "note": m.note,
        "peak_memory_bytes": m.peak_memory_bytes,
        "op_time_share": None if m.op_time_share is None else {k: round(v, 4) for k, v in m.op_time_share.items()},
        "device_name": m.device_name,
        "torch_version": m.torch_version,
        "host": m.host,
        "measured_at": m.measured_at,
    }


class _Check:
    """Field readers that raise one ProfileError line naming the file and the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, problem: str) -> ProfileError:
        return ProfileError(f"{self.source}: {where}: {problem}" if where else f"{self.source}: {problem}")

    def obj(self, d: Any, where: str) -> Mapping[str, Any]:
        if not isinstance(d, Mapping):
            raise self.fail(where, f"expected an object, got {type(d).__name__}")
        return d

    def field(self, d: Mapping[str, Any], key: str, where: str) -> Any:
        if key not in d:
            raise self.fail(where, f"missing field {key!r}")
        return d[key]

    def number(self, d: Mapping[str, Any], key: str, where: str, *, positive: bool = True, optional: bool = False) -> float | None:
        if optional and d.get(key) is None:
            return None
        v = self.field(d, key, where)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self.fail(where, f"{key} must be a number, got {v!r}")
        if positive and v <= 0:
            raise self.fail(where, f"{key} must be positive, got {v!r}")
        if not positive and v < 0:
            raise self.fail(where, f"{key} must not be negative, got {v!r}")
        return float(v)

    def integer(self, d: Mapping[str, Any], key: str, where: str, *, positive: bool = True, optional: bool = False) -> int | None:
        v = self.number(d, key, where, positive=positive, optional=optional)
        if v is None:
            return None
        if v != int(v):
            raise self.fail(where, f"{key} must be a whole number, got {d[key]!r}")
        return int(v)

    def text(self, d: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> str:
        v = self.field(d, key, where) if required else d.get(key, "")
        if v is None:
            v = ""
        if not isinstance(v, str) or (required and not v.strip()):
            raise self.fail(where, f"{key} must be a non-empty string, got {v!r}" if required else f"{key} must be a string")
        return v


def profile_from_dict(d: Any, source: str = "profile") -> Profile:
    """Validate and convert; every problem is one ProfileError line naming ``source`` and the field."""
    c = _Check(source)
    d = c.obj(d, "")
    version = c.field(d, "schema_version", "")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise c.fail("", f"unsupported schema_version {version!r} (this cloudfit reads {SCHEMA_VERSION})")
    model = c.text(d, "model", "", required=True)
    stats = _stats_from_dict(c, c.obj(c.field(d, "stats", ""), "stats"))
    ms = c.field(d, "measurements", "")
    if not isinstance(ms, list):
        raise c.fail("measurements", "expected a list")
    measurements = tuple(_measurement_from_dict(c, c.obj(m, f"measurements[{i}]"), f"measurements[{i}]")
                         for i, m in enumerate(ms))
    return Profile(model=model, stats=stats, measurements=measurements, schema_version=SCHEMA_VERSION)


def _stats_from_dict(c: _Check, s: Mapping[str, Any]) -> ModelStats:
    w = "stats"
    raw_classes = c.obj(c.field(s, "op_classes", w), "stats.op_classes")
    unknown = sorted(set(raw_classes) - set(OP_CLASSES))
    if unknown:
        raise c.fail("stats.op_classes", f"unknown op class {unknown[0]!r} (known: {', '.join(OP_CLASSES)})")
    op_classes = {}
    for name in OP_CLASSES:
        if name in raw_classes:
            oc = c.obj(raw_classes[name], f"stats.op_classes.{name}")
            op_classes[name] = OpClassStats(
                flops=c.number(oc, "flops", f"stats.op_classes.{name}", positive=False),
                bytes=c.number(oc, "bytes", f"stats.op_classes.{name}", positive=False),
            )
    flops = c.number(s, "flops_per_sample", w)
    fwd = c.number(s, "forward_flops_per_sample", w)
    if fwd > flops:
        raise c.fail(w, f"forward_flops_per_sample ({fwd:g}) exceeds flops_per_sample ({flops:g})")
    return ModelStats(
        parameters=c.integer(s, "parameters", w),
        flops_per_sample=flops,
        forward_flops_per_sample=fwd,
        gradient_bytes=c.integer(s, "gradient_bytes", w, positive=False),
        activation_bytes_per_sample=c.number(s, "activation_bytes_per_sample", w, positive=False),
        op_classes=op_classes,
        batch_size=c.integer(s, "batch_size", w),
        input=c.text(s, "input", w),
        task=c.text(s, "task", w),
        kernels_per_step=c.integer(s, "kernels_per_step", w, optional=True),
    )


def _measurement_from_dict(c: _Check, m: Mapping[str, Any], w: str) -> Measurement:
    precision = c.text(m, "precision", w, required=True)
    if precision not in PRECISIONS:
        raise c.fail(w, f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    st = m.get("step_time_s")
    step = None
    if st is not None:
        st = c.obj(st, f"{w}.step_time_s")
        step = StepTime(median=c.number(st, "median", f"{w}.step_time_s"), p90=c.number(st, "p90", f"{w}.step_time_s"))
    share = m.get("op_time_share")
    if share is not None:
        share = c.obj(share, f"{w}.op_time_share")
        for k, v in share.items():
            if k not in OP_CLASSES:
                raise c.fail(f"{w}.op_time_share", f"unknown op class {k!r}")
            c.number(share, k, f"{w}.op_time_share", positive=False)
            if v > 1:
                raise c.fail(f"{w}.op_time_share", f"{k} is a share and must be at most 1, got {v!r}")
        share = {k: float(v) for k, v in share.items()}
    return Measurement(
        accelerator=c.text(m, "accelerator", w, required=True),
        count=c.integer(m, "count", w),
        nodes=c.integer(m, "nodes", w),
        batch_size_per_device=c.integer(m, "batch_size_per_device", w),
        precision=precision,
        samples_per_second=c.number(m, "samples_per_second", w),
        step_time_s=step,
        source=c.text(m, "source", w) or "measured",
        note=c.text(m, "note", w),
        peak_memory_bytes=c.integer(m, "peak_memory_bytes", w, optional=True),
        op_time_share=share,
        device_name=c.text(m, "device_name", w),
        torch_version=c.text(m, "torch_version", w),
        host=c.text(m, "host", w),
        measured_at=c.text(m, "measured_at", w),
    )


# --------------------------------------------------------------------------------------------
# Files


def load_profile(path: str | os.PathLike) -> Profile:
    """Read and validate a profile file; ProfileError (one line naming the file) if anything is wrong."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProfileError(f"profile {p} not found") from None
    except IsADirectoryError:
        raise ProfileError(f"profile {p} is a directory, not a file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ProfileError(f"cannot read profile {p}: {e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProfileError(f"{p}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    return profile_from_dict(data, source=str(p))


def save_profile(profile: Profile, path: str | os.PathLike) -> None:
    """Write atomically (temporary file in the same folder, fsync'd, renamed over ``path``):
    an interrupted write leaves the old file (or none), never half a profile."""
    from cloudfit.atomic import write_json_atomic

    try:
        write_json_atomic(profile_to_dict(profile), path)
    except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError) as e:
        raise ProfileError(f"cannot write profile {path}: {e.strerror or e}") from None


def shipped_profiles() -> dict[str, Path]:
    """Shipped profile name → file (``profiles/<name>.json``)."""
    folder = resources.profiles_dir()
    if not folder.is_dir():
        return {}
    return {f.stem: f for f in sorted(folder.glob("*.json"))}


def resolve_profile(name_or_path: str | os.PathLike) -> Path:
    """An existing file, else ``./NAME.json`` (what ``cloudfit profile run NAME`` writes), else a
    shipped profile name (``resnet50`` → ``profiles/resnet50.json``)."""
    p = Path(name_or_path).expanduser()
    if p.is_file():
        return p
    text = str(name_or_path)
    local = Path(f"{text}.json")
    if os.sep not in text and "/" not in text and not text.endswith(".json") and local.is_file():
        return local
    shipped = shipped_profiles()
    if text in shipped:
        return shipped[text]
    if p.exists():
        raise ProfileError(f"profile {p} is not a file")
    if os.sep in text or "/" in text or text.endswith(".json"):
        raise ProfileError(f"profile {p} not found")
    names = ", ".join(shipped) or "none"
    raise ProfileError(f"no profile file {text!r} and no shipped profile of that name (shipped: {names})")


def validate_measurement(m: Measurement) -> Measurement:
    """Canonicalise the accelerator (or ``cpu``) and check the numbers; ProfileError otherwise."""
    from cloudfit.catalog import hardware

    acc = m.accelerator.strip()
    if acc.lower() == CPU:
        acc = CPU
    else:
        try:
            acc = hardware.canonical_name(acc)
        except UnknownAcceleratorError as e:
            raise ProfileError(f"{e} (or cpu)") from None
    for name in ("count", "nodes", "batch_size_per_device"):
        v = getattr(m, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ProfileError(f"{name.replace('_', ' ')} must be a positive integer, got {v!r}")
    if not isinstance(m.samples_per_second, (int, float)) or not math.isfinite(m.samples_per_second) or m.samples_per_second <= 0:
        raise ProfileError(f"samples per second must be a positive number, got {m.samples_per_second!r}")
    if m.precision not in PRECISIONS:
        raise ProfileError(f"precision must be one of {', '.join(PRECISIONS)}, got {m.precision!r}")
    if m.step_time_s is not None and (m.step_time_s.median <= 0 or m.step_time_s.p90 <= 0):
        raise ProfileError("step times must be positive")
    if m.source not in SOURCES:
        raise ProfileError(f"source must be one of {', '.join(SOURCES)}, got {m.source!r}")
    return dataclasses.replace(m, accelerator=acc, samples_per_second=float(m.samples_per_second))


def add_measurement(path: str | os.PathLike, m: Measurement) -> Profile:
    """Append a validated measurement to the profile at ``path`` (written atomically); returns the new profile."""
    m = validate_measurement(m)
    profile = load_profile(path).with_measurement(m)
    save_profile(profile, path)
    return profile


def merge_measurements(old: Profile, new: Profile) -> Profile:
    """``new``'s stats with ``old``'s measurements plus ``new``'s; a new measurement supersedes an old
    one taken on the same host and setup (accelerator, count, nodes, batch, precision, source)."""

    def key(m: Measurement):
        return (m.accelerator, m.count, m.nodes, m.batch_size_per_device, m.precision, m.source, m.host)

    fresh = {key(m) for m in new.measurements}
    kept = tuple(m for m in old.measurements if key(m) not in fresh)
    return dataclasses.replace(new, measurements=kept + tuple(new.measurements))
