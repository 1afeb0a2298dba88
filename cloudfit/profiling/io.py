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
from cloudfit.types import (OP_CLASSES, PRECISIONS, LLMMeasurement, LLMProfile, Measurement, ModelStats,
                            OpClassStats, Profile, StepTime)

#: 2 adds ``kind`` (``cnn`` | ``llm``) and LLM profiles; version 1 files (all CNN-era) still load.
SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
CPU = "cpu"
SOURCES = ("measured", "reported", "probe")


# --------------------------------------------------------------------------------------------
# dict <-> Profile


def _sig(x: float, digits: int = 6) -> float:
    """Round to ``digits`` significant figures: keeps files readable without losing meaning."""
    return float(f"{x:.{digits}g}")


def profile_to_dict(p: Profile | LLMProfile) -> dict[str, Any]:
    if isinstance(p, LLMProfile):
        return llm_profile_to_dict(p)
    s = p.stats
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "cnn",
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


def profile_kind(d: Any, source: str = "profile") -> str:
    """``cnn`` or ``llm``: the kind a profile document declares (version 1 documents are all ``cnn``)."""
    c = _Check(source)
    d = c.obj(d, "")
    version = c.field(d, "schema_version", "")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        readable = " and ".join(map(str, READABLE_VERSIONS))
        raise c.fail("", f"unsupported schema_version {version!r} (this cloudfit reads {readable})")
    kind = d.get("kind", "cnn") if version >= 2 else "cnn"
    if kind not in ("cnn", "llm"):
        raise c.fail("", f"kind must be cnn or llm, got {kind!r}")
    return kind


def profile_from_dict(d: Any, source: str = "profile", *, llm_ok: bool = False) -> Profile | LLMProfile:
    """Validate and convert; every problem is one ProfileError line naming ``source`` and the field.
    An LLM profile is returned only with ``llm_ok`` (the CNN paths refuse it in one line)."""
    c = _Check(source)
    if profile_kind(d, source) == "llm":
        if not llm_ok:
            raise c.fail("", f"is a large-model (LLM) profile of {d.get('model')!r}: use it with `cloudfit predict "
                             "--profile` / `recommend --profile --tokens`")
        return llm_profile_from_dict(d, c)
    model = c.text(d, "model", "", required=True)
    stats = _stats_from_dict(c, c.obj(c.field(d, "stats", ""), "stats"))
    ms = c.field(d, "measurements", "")
    if not isinstance(ms, list):
        raise c.fail("measurements", "expected a list")
    measurements = tuple(_measurement_from_dict(c, c.obj(m, f"measurements[{i}]"), f"measurements[{i}]")
                         for i, m in enumerate(ms))
    return Profile(model=model, stats=stats, measurements=measurements, schema_version=SCHEMA_VERSION)  # type: ignore


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


def load_profile(path: str | os.PathLike, *, llm_ok: bool = False) -> Profile | LLMProfile:
    """Read and validate a profile file; ProfileError (one line naming the file) if anything is wrong.
    ``llm_ok``: an LLM profile is returned too (else refused)."""
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
    return profile_from_dict(data, source=str(p), llm_ok=llm_ok)


def save_profile(profile: Profile | LLMProfile, path: str | os.PathLike) -> None:
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
    if not str(name_or_path).strip():
        raise ProfileError("the profile name is empty: give a shipped profile name (see `cloudfit models`) or a "
                           "profile file")
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


def check_within_peak(profile: Profile, m: Measurement) -> None:
    """``ProfileError`` when ``m``'s rate would need more FLOP/s than its GPUs' dense peak at its precision:
    the profile's FLOPs per sample (forward + backward) × samples/s > GPUs × peak. No measured run beats the
    spec sheet, so such a row is a typo (a rate of another unit, a missing decimal point), and anchored on it
    every prediction would be off by the same factor. CPU rows have no peak to check against."""
    from cloudfit.catalog import hardware

    if m.accelerator == CPU or not profile.stats.flops_per_sample > 0:
        return
    gpus = m.count * m.nodes
    peak = gpus * hardware.get(m.accelerator).peak_tflops(m.precision) * 1e12
    need = profile.stats.flops_per_sample * m.samples_per_second
    if need > peak:
        raise ProfileError(f"{m.samples_per_second:,.6g} samples/s of {profile.model} would need "
                           f"{need / 1e12:,.4g} TFLOP/s ({profile.stats.flops_per_sample / 1e9:,.3g} GFLOPs per "
                           f"sample), beyond the {peak / 1e12:,.4g} TFLOP/s {m.precision} peak of {gpus}× "
                           f"{m.accelerator}: check the rate")


def add_measurement(path: str | os.PathLike, m: Measurement) -> Profile:
    """Append a validated measurement to the profile at ``path`` (written atomically); returns the new profile."""
    m = validate_measurement(m)
    profile = load_profile(path)
    check_within_peak(profile, m)
    profile = profile.with_measurement(m)
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


# --------------------------------------------------------------------------------------------
# Large-model (LLM) profiles: ``kind: llm`` (schema_version 2)

LLM_PRECISIONS = ("bf16", "fp16", "fp8", "fp32")
LLM_FRAMEWORKS = ("cloudfit", "fsdp", "megatron", "megatron-deepspeed")  # = cloudfit.llm.predict.FRAMEWORKS (test)
_LAYER_FIELDS = ("forward_backward_s", "embedding_head_s", "optimizer_s", "step_s")


def llm_profile_to_dict(p: LLMProfile) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "kind": "llm", "model": p.model, "origin": p.origin,
            "shape": dict(p.shape), "stats": dict(p.stats),
            "measurements": [_llm_measurement_to_dict(m) for m in p.measurements]}


def _llm_measurement_to_dict(m: LLMMeasurement) -> dict[str, Any]:
    d = dataclasses.asdict(m)
    d["tokens_per_second"] = _sig(m.tokens_per_second)
    if m.memory_gib is not None:
        d["memory_gib"] = _sig(m.memory_gib)
    d["layers"] = None if m.layers is None else json.loads(json.dumps(m.layers))
    return d


def llm_stats(shape, seq_len: int | None = None) -> dict[str, Any]:
    """The device-independent stats an LLM profile stores (per token, at ``seq_len``: default 8,192 tokens, or
    the model's longest sequence when shorter)."""
    from cloudfit.llm.stats import token_stats

    st = token_stats(shape, seq_len or min(8192, shape.max_seq_len))
    d = st.to_dict()
    d.update(layer_parameters=st.layer_parameters, embedding_parameters=st.embedding_parameters,
             head_parameters=st.head_parameters, layer_matmul_flops_per_token=st.layer_matmul_flops,
             layer_attention_flops_per_token=st.layer_attention_flops, head_flops_per_token=st.head_flops)
    return d


def new_llm_profile(shape, origin: str) -> LLMProfile:
    """An LLM profile of ``shape`` (an ``LLMShape``) with its stats and no measurements."""
    return LLMProfile(model=shape.name, shape=shape.to_dict(), origin=origin, stats=llm_stats(shape))


def llm_shape(p: LLMProfile):
    """The profile's model as an ``LLMShape``."""
    from cloudfit.llm.zoo import LLMShape

    return LLMShape(**p.shape)


def llm_profile_from_dict(d: Mapping[str, Any], c: _Check) -> LLMProfile:
    from cloudfit.errors import UsageError
    from cloudfit.llm.zoo import LLMShape

    model = c.text(d, "model", "", required=True)
    origin = c.text(d, "origin", "", required=True)
    if origin not in ("zoo", "config"):
        raise c.fail("origin", f"must be zoo or config, got {origin!r}")
    raw = c.obj(c.field(d, "shape", ""), "shape")
    try:
        shape = LLMShape(**{k: raw[k] for k in LLMShape.__dataclass_fields__ if k in raw})
    except (TypeError, UsageError) as e:
        raise c.fail("shape", str(e)) from None
    stats = c.obj(c.field(d, "stats", ""), "stats")
    seq = c.integer(stats, "seq_len", "stats")
    want = llm_stats(shape, seq)
    for k in ("parameters", "flops_per_token"):
        got = c.number(stats, k, "stats")
        if abs(got - want[k]) > 1e-6 * want[k]:
            raise c.fail("stats", f"{k} {got:g} does not match the shape's {want[k]:g}")
    ms = c.field(d, "measurements", "")
    if not isinstance(ms, list):
        raise c.fail("measurements", "expected a list")
    out = []
    for i, m in enumerate(ms):
        w = f"measurements[{i}]"
        raw_m = _llm_measurement_from_dict(c, c.obj(m, w), w)
        try:
            out.append(validate_llm_measurement(raw_m, shape))
        except ProfileError as e:
            raise c.fail(w, str(e)) from None
    return LLMProfile(model=model, shape=shape.to_dict(), origin=origin, stats=dict(stats), measurements=tuple(out))


def _llm_measurement_from_dict(c: _Check, m: Mapping[str, Any], w: str) -> LLMMeasurement:
    layers = m.get("layers")
    if layers is not None:
        layers = dict(c.obj(layers, f"{w}.layers"))
        c.integer(layers, "layers_run", f"{w}.layers")
        c.integer(layers, "steps", f"{w}.layers")
        for k in _LAYER_FIELDS:
            c.number(layers, k, f"{w}.layers", positive=k in ("forward_backward_s", "step_s"))
        for k in ("memory_per_layer_gib", "fixed_memory_gib"):
            c.number(layers, k, f"{w}.layers", positive=False, optional=True)
        c.obj(c.field(layers, "shape", f"{w}.layers"), f"{w}.layers.shape")
        coll = layers.get("collectives_gbs")
        if coll is not None:
            for k in c.obj(coll, f"{w}.layers.collectives_gbs"):
                c.number(coll, k, f"{w}.layers.collectives_gbs")
    return LLMMeasurement(
        accelerator=c.text(m, "accelerator", w, required=True), gpus_per_node=c.integer(m, "gpus_per_node", w),
        nodes=c.integer(m, "nodes", w), precision=c.text(m, "precision", w, required=True),
        seq_len=c.integer(m, "seq_len", w), batch_size=c.integer(m, "batch_size", w),
        layout=c.text(m, "layout", w), framework=c.text(m, "framework", w, required=True),
        tokens_per_second=c.number(m, "tokens_per_second", w),
        memory_gib=c.number(m, "memory_gib", w, optional=True), source=c.text(m, "source", w) or "reported",
        note=c.text(m, "note", w), layers=layers, device_name=c.text(m, "device_name", w),
        torch_version=c.text(m, "torch_version", w), host=c.text(m, "host", w),
        measured_at=c.text(m, "measured_at", w))


def validate_llm_measurement(m: LLMMeasurement, shape) -> LLMMeasurement:
    """Canonicalise and check an LLM measurement against its model: a layout whose degrees multiply to the
    GPUs, a rate below the GPUs' peak FLOPs, memory within their capacity; ProfileError (one line) otherwise."""
    from cloudfit.errors import UsageError
    from cloudfit.llm import hardware as lhw
    from cloudfit.llm.layout import parse
    from cloudfit.llm.stats import token_stats
    from cloudfit.llm.zoo import LLMShape

    for name in ("gpus_per_node", "nodes", "seq_len", "batch_size"):
        v = getattr(m, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ProfileError(f"{name.replace('_', ' ')} must be a positive integer, got {v!r}")
    if m.precision not in LLM_PRECISIONS:
        raise ProfileError(f"precision must be one of {', '.join(LLM_PRECISIONS)}, got {m.precision!r}")
    if m.framework not in LLM_FRAMEWORKS:
        raise ProfileError(f"framework must be one of {', '.join(LLM_FRAMEWORKS)}, got {m.framework!r}")
    if m.source not in SOURCES:
        raise ProfileError(f"source must be one of {', '.join(SOURCES)}, got {m.source!r}")
    if not (isinstance(m.tokens_per_second, (int, float)) and math.isfinite(m.tokens_per_second)
            and m.tokens_per_second > 0):
        raise ProfileError(f"tokens per second must be a positive number, got {m.tokens_per_second!r}")
    run_shape = shape
    if m.layers is not None:
        try:
            run_shape = LLMShape(**{k: v for k, v in m.layers["shape"].items() if k in LLMShape.__dataclass_fields__})
        except (TypeError, UsageError) as e:
            raise ProfileError(f"layers.shape: {e}") from None
    try:
        lay = parse(m.layout or "", gpus=m.gpus, sequences_per_replica=m.batch_size)
        lay.check(gpus=m.gpus, heads=run_shape.heads, kv_heads=run_shape.kv_heads, layers=run_shape.layers)
        st = token_stats(run_shape, m.seq_len)
    except UsageError as e:
        raise ProfileError(f"layout {m.layout!r}: {e}") from None
    if m.accelerator.strip().lower() == CPU:
        return dataclasses.replace(m, accelerator=CPU, layout=lay.describe(), tokens_per_second=float(m.tokens_per_second))
    try:
        acc = lhw.get(m.accelerator)
        peak = lhw.peak_tflops(acc.name, "bf16" if m.precision in ("fp16", "fp32") else m.precision)
    except UsageError as e:
        raise ProfileError(str(e)) from None
    achieved = m.tokens_per_second * st.flops_per_token / (m.gpus * 1e12)
    if achieved > peak:
        raise ProfileError(f"{m.tokens_per_second:,.0f} tokens/s is {achieved:,.0f} TFLOP/s per GPU, above the "
                           f"{acc.name}'s {peak:,.0f} TFLOP/s {m.precision} peak: check the rate, GPU count and model")
    if m.memory_gib is not None and not (0 < m.memory_gib <= acc.memory_gib):
        raise ProfileError(f"peak memory {m.memory_gib:g} GiB per GPU is not within the {acc.name}'s "
                           f"{acc.memory_gib:g} GiB")
    return dataclasses.replace(m, accelerator=acc.name, layout=lay.describe(), tokens_per_second=float(m.tokens_per_second))
