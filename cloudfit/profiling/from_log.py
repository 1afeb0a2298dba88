"""A measured LLM run from a stack's own log (``cloudfit profile add FILE --from-log run.log --stack NAME``).

The stack's parser (``cloudfit.stacks.<name>``: ``parse_log``, ``layout_from_log``, ``layout_from_config_text``)
reads the log; this module turns what it read into the fields of a ``profile add`` measurement:

* tokens/s of the whole cluster — the median over the steps after warm-up (``cloudfit.stacks.base.median_rate``:
  the first logged interval and steps ≤ ``warmup_steps`` skipped); a stack that prints tokens/s per GPU
  (torchtitan's ``tps``) is multiplied by the cluster's GPUs, the unit ``--tokens-per-second`` takes;
* peak memory per GPU — the largest the stack reported after warm-up; MFU and TFLOP/s per GPU (the stack's own
  figures, kept in the measurement's note);
* the layout (cloudfit's ``--layout`` text), the sequence length, the batch per data-parallel rank and the
  precision: from the log, else the run's configuration (``--stack-config``), else the user's flags — flags win.
  Degrees the stack leaves implicit fill in as the stack would: the data-parallel shards take the GPUs left over.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cloudfit.errors import UsageError

DEFAULT_WARMUP_STEPS = 3
_MAX_LOG_BYTES = 512 * 1024 * 1024


def read_lines(path: str | Path) -> list[str]:
    p = Path(path).expanduser()
    try:
        if p.stat().st_size > _MAX_LOG_BYTES:
            raise UsageError(f"{p} is over {_MAX_LOG_BYTES >> 20} MiB: pass an excerpt that spans the steps to measure")
        return p.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as e:
        raise UsageError(f"cannot read the log {p}: {e.strerror or e}") from None


def measurement_from_log(stack_name: str, log: str | Path, *, gpus: int, stack_config: str | Path | None = None,
                         layout: str | None = None, seq_len: int | None = None, batch_size: int | None = None,
                         precision: str | None = None, warmup_steps: int = DEFAULT_WARMUP_STEPS) -> dict[str, Any]:
    """The measurement ``log`` states for a run on ``gpus`` GPUs: ``tokens_per_second`` (whole cluster),
    ``memory_gib``, ``mfu``, ``tflops``, ``layout`` (text), ``seq_len``, ``batch_size`` (per data-parallel rank
    and step), ``precision``, ``steps`` (those the median is over) and a one-line ``note``. ``UsageError`` (one
    line) for a log with no step lines or a layout that does not cover ``gpus``."""
    from cloudfit import stacks
    from cloudfit.stacks.base import median_rate

    stack = stacks.get(stack_name)
    if seq_len:
        stack = stack.bind(int(seq_len))  # (Megatron's lines give tokens/s only with the sequence length)
    if gpus < 1:
        raise UsageError(f"the run's GPUs must be at least 1, got {gpus}")
    lines = read_lines(log)
    rate = median_rate(stack.parse_log(lines), gpus, warmup_steps)
    if not rate or not rate.get("tokens_per_second"):
        raise UsageError(f"{Path(log).name} has no {stack.name} step lines with a speed: is it the log of a "
                         f"{stack.name} run (rank 0's output)?")
    stated = dict(stack.layout_from_log(lines))
    if stack_config is not None:
        try:
            text = Path(stack_config).expanduser().read_text(encoding="utf-8")
        except OSError as e:
            raise UsageError(f"cannot read the stack configuration {stack_config}: {e.strerror or e}") from None
        for k, v in stack.layout_from_config_text(text).items():
            stated.setdefault(k, v)  # the log says what ran; the configuration fills the gaps
    if stated.get("gpus") not in (None, gpus):
        raise UsageError(f"the log ran on {stated['gpus']} GPUs, not the {gpus} given (--count × --nodes)")
    seq = seq_len or stated.get("seq_len")
    if not seq:
        raise UsageError(f"{Path(log).name} states no sequence length: give --seq-len (or --stack-config)")
    text = layout or _layout_text(stated, gpus, log)
    from cloudfit.llm.layout import parse

    try:
        lay = parse(text, gpus=gpus)
    except UsageError as e:
        raise UsageError(f"the layout {text!r} of {Path(log).name}: {e}") from None
    per_replica = batch_size
    if per_replica is None and stated.get("global_batch"):
        per_replica = int(stated["global_batch"]) // max(1, lay.dp)
    if per_replica is None:
        per_replica = lay.micro_batch * lay.grad_accum
    prec = (precision or stated.get("precision") or "bf16").lower()
    used = rate["steps"]
    span = f"step {used[0]}" if len(used) == 1 else f"steps {used[0]}–{used[-1]} ({len(used)} lines)"
    parts = [f"{stack.name} log {Path(log).name}: median of {span} after warm-up"]
    if rate.get("tokens_per_second_per_gpu") is not None:
        parts.append(f"{rate['tokens_per_second_per_gpu']:,.0f} tokens/s per GPU × {gpus}")
    if rate.get("mfu") is not None:
        parts.append(f"MFU {rate['mfu']:.1%} ({stack.name}'s)")
    if rate.get("tflops") is not None:
        parts.append(f"{rate['tflops']:,.1f} TFLOP/s per GPU")
    if rate.get("memory_gib") is not None:
        parts.append(f"peak {rate['memory_gib']:.2f} GiB")
    return {"tokens_per_second": float(rate["tokens_per_second"]), "memory_gib": rate.get("memory_gib") or None,
            "mfu": rate.get("mfu"), "tflops": rate.get("tflops"), "layout": text, "seq_len": int(seq),
            "batch_size": int(per_replica), "precision": prec, "steps": used, "framework": stack.framework,
            "note": "; ".join(parts)}


def _layout_text(d: dict[str, Any], gpus: int, log: str | Path) -> str:
    """cloudfit's layout text of what the log and configuration state (the shard degree fills the GPUs left)."""
    if not any(k in d for k in ("dp_replicate", "dp_shard", "tp", "pp", "cp")):
        raise UsageError(f"{Path(log).name} states no parallel layout: give --layout (e.g. fsdp=8,ac=selective) "
                         "or the run's configuration with --stack-config")
    rep, tp, pp, cp = (int(d.get(k) or 1) for k in ("dp_replicate", "tp", "pp", "cp"))
    other = rep * tp * pp * cp
    shard = int(d.get("dp_shard") or 0) or max(1, gpus // other)
    parts = [f"dp={rep}", f"fsdp={shard}"]
    if d.get("zero") is not None:
        parts.append(f"zero={int(d['zero'])}")
    parts += [f"tp={tp}", f"pp={pp}", f"cp={cp}"]
    if int(d.get("vp") or 1) > 1:
        parts.append(f"vp={int(d['vp'])}")
    if d.get("micro_batch"):
        parts.append(f"mb={int(d['micro_batch'])}")
    ga = d.get("grad_accum")
    if ga is None and d.get("global_batch") and d.get("micro_batch"):
        ga = max(1, int(d["global_batch"]) // (int(d["micro_batch"]) * rep * shard))
    if ga:
        parts.append(f"ga={int(ga)}")
    if d.get("ac"):
        parts.append(f"ac={d['ac']}")
    if pp > 1 and d.get("schedule") in ("1f1b", "interleaved", "gpipe"):
        parts.append(f"schedule={d['schedule']}")
    return ",".join(parts)
