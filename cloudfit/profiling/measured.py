"""Every launch is a profile (issue 32 item 5): a launched large-model run's measured speed, after warm-up, kept
as a measurement of the profile the plan was made from, and compared with the speed the plan promised.

Three steps, each a function the launcher and ``cloudfit status`` call (this module prints nothing):

``planned_speed(plan, config=None, stack=None, profile=None)``
    At launch: what the plan promised for the cluster that runs (the chosen one, or an alternative after a
    switch) — tokens/s and its calibrated band, hours, cost — and the run's setup (accelerator, nodes, layout,
    batch, precision, stack) and where its measurement goes. A JSON-able dict: keep it in the state record.
``compare(facts_or_plan, measured_tokens_per_second)``
    While it runs (``status``) and at its end: measured vs planned; ``outside`` when the measured speed leaves
    the plan's band, with what the plan would be now (hours and cost at the measured speed, and the command
    that re-plans anchored on it). ``Comparison.line`` is the sentence status prints.
``record_launch(profile, facts_or_plan, measured_tokens_per_second, cluster=…, memory_gib=…, steps=…)``
    At the end of a run (or when a stop ends it after warm-up): the measurement appended, atomically, to the
    LLM profile ``profile`` — else the plan's own ``--profile`` (``plan.layout["profile"]``) when it is an
    LLM profile of the model — else ``$CLOUDFIT_HOME/profiles/<model>.json`` (created: an LLM profile of the
    plan's model shape). A relaunch of the same cluster replaces its earlier measurement instead of adding one.
    ``recommend --profile PATH`` then anchors on the real cluster.

``measured_tokens_per_second(progress)`` reads a progress file's fields (cloudfit's trainer's ``progress.json`` or
a stack's log turned into one, ``cloudfit.runtime.logprogress``) and returns None until the run is past warm-up;
``from_events(events, gpus)`` takes a stack log's parsed events (median after warm-up,
``cloudfit.stacks.base.median_rate``).
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from cloudfit.errors import ProfileError, UsageError

#: steps a run needs behind it before its speed counts (compilation, allocator warm-up, the first log interval)
WARMUP_STEPS = 3
NOTE_PREFIX = "launch "


# ----------------------------------------------------------------------------------------------- at launch
def _estimate_for(plan, config):
    """The plan's estimate for ``config`` (the chosen one when None or not among the candidates)."""
    if config is None:
        return plan.chosen
    for e in plan.candidates():
        if e.config == config:
            return e
    return None


def planned_speed(plan, config=None, *, stack: str | None = None, profile: str | Path | None = None) -> dict[str, Any]:
    """What ``plan`` promised for the run on ``config`` (default: its chosen cluster) and the run's setup."""
    from cloudfit.stacks.base import StackJob

    lay = getattr(plan, "layout", None)
    if not isinstance(lay, Mapping) or not lay:
        raise UsageError("only a large-model plan (one with a layout) records its launches as profile measurements")
    cfg = config if config is not None else plan.chosen.config
    job = StackJob.from_plan(plan, None if config is None else config)
    seq = int(lay["seq_len"])
    est = _estimate_for(plan, config)
    stack = stack or lay.get("stack") or "cloudfit"
    if est is not None and est.config == plan.chosen.config:
        planned = float(lay["tokens_per_second"])
        scale = planned / (est.samples_per_second * seq) if est.samples_per_second > 0 else 1.0
    else:
        planned = None if est is None else est.samples_per_second * seq
        scale = 1.0
    return {
        "model": str(lay.get("model") or plan.workload.model), "shape": dict(lay.get("shape") or {}),
        "seq_len": seq, "stack": stack, "framework": _framework(stack),
        "accelerator": cfg.offering.accelerator, "nodes": int(cfg.nodes),
        "gpus_per_node": int(cfg.offering.accelerators_per_node), "cluster_label": cfg.label(),
        "precision": job.precision, "layout": job.layout_text(), "batch_size": job.micro_batch * job.grad_accum,
        "tokens_per_second": planned,
        "low": None if est is None else est.low * seq * scale, "high": None if est is None else est.high * seq * scale,
        "hours": None if est is None else est.hours, "cost_usd": None if est is None else est.cost_usd,
        "profile": str(default_profile_path(plan, profile)),
        "recommend_hint": _recommend_hint(plan, lay, stack),
    }


def _framework(stack: str) -> str:
    if stack in ("cloudfit", "custom", ""):
        return "cloudfit" if stack == "cloudfit" else "fsdp"
    from cloudfit.stacks import get

    try:
        return get(stack).framework
    except UsageError:
        return "fsdp"


def _recommend_hint(plan, lay, stack) -> str:
    w = plan.workload
    parts = [f"cloudfit recommend --tokens {float(lay.get('tokens', 0)):.3g}", f"--seq-len {int(lay['seq_len'])}"]
    if w.deadline_hours is not None and math.isfinite(w.deadline_hours):
        parts.append(f"--deadline {w.deadline_hours:g}h")
    if w.budget_usd is not None:
        parts.append(f"--budget {w.budget_usd:g}")
    if w.regions:
        parts.append("--regions " + ",".join(w.regions))
    if lay.get("precision") and lay["precision"] != "bf16":
        parts.append(f"--precision {lay['precision']}")
    if lay.get("finetune") == "lora":
        parts.append(f"--finetune lora --lora-rank {lay.get('lora_rank')}")
    if stack and stack != "cloudfit":
        parts.append(f"--stack {stack}")
    return " ".join(parts)


def default_profile_path(plan, profile: str | Path | None = None) -> Path:
    """Where a launch of ``plan`` records its measurement: ``profile``, else the plan's own LLM profile, else
    ``$CLOUDFIT_HOME/profiles/<model>.json``."""
    from cloudfit import resources

    if profile is not None:
        return Path(profile).expanduser()
    own = (getattr(plan, "layout", None) or {}).get("profile") or getattr(getattr(plan, "workload", None),
                                                                            "profile_path", None)
    model = str((plan.layout or {}).get("model") or plan.workload.model)
    if own and Path(own).is_file():
        try:
            from cloudfit.profiling import io as pio
            from cloudfit.types import LLMProfile

            p = pio.load_profile(own, llm_ok=True)
            if isinstance(p, LLMProfile) and p.model == model:
                return Path(own)
        except (ProfileError, UsageError):
            pass
    return resources.home() / "profiles" / f"{model}.json"


# ----------------------------------------------------------------------------------------------- while running
def measured_tokens_per_second(progress: Mapping[str, Any] | None, *, seq_len: int | None = None,
                               warmup_steps: int = WARMUP_STEPS) -> float | None:
    """The run's speed from its progress fields, or None before ``warmup_steps`` steps or without a rate."""
    if not progress:
        return None
    step = progress.get("step")
    if step is None or int(step) <= warmup_steps:
        return None
    tps = progress.get("tokens_per_second")
    if not tps and progress.get("samples_per_second") and seq_len:
        tps = float(progress["samples_per_second"]) * seq_len
    return float(tps) if tps and math.isfinite(float(tps)) and float(tps) > 0 else None


def from_events(events: Iterable[Any], gpus: int, *, warmup_steps: int = WARMUP_STEPS) -> dict[str, Any]:
    """A stack log's parsed events → the after-warm-up median tokens/s, peak memory and the steps used."""
    from cloudfit.stacks.base import median_rate

    return median_rate(list(events), gpus, warmup_steps=warmup_steps)


@dataclass(frozen=True)
class Comparison:
    measured: float
    planned: float | None
    low: float | None
    high: float | None
    ratio: float | None  # measured ÷ planned
    outside: bool  # the measured speed left the plan's band
    hours_now: float | None  # the plan's hours at the measured speed
    cost_now: float | None
    line: str

    def to_dict(self) -> dict[str, Any]:
        return {"measured_tokens_per_second": self.measured, "planned_tokens_per_second": self.planned,
                "band": [self.low, self.high], "ratio": self.ratio, "outside_band": self.outside,
                "hours_at_measured": self.hours_now, "cost_at_measured_usd": self.cost_now, "line": self.line}


def compare(facts_or_plan, measured_tokens_per_second: float, *, config=None) -> Comparison:
    """Measured vs planned speed; outside the band, what the plan would be now."""
    facts = _facts(facts_or_plan, config)
    m = float(measured_tokens_per_second)
    if not (math.isfinite(m) and m > 0):
        raise UsageError(f"measured speed must be a positive number of tokens/s, got {measured_tokens_per_second!r}")
    planned, lo, hi = facts.get("tokens_per_second"), facts.get("low"), facts.get("high")
    if not planned:
        return Comparison(m, None, None, None, None, False, None, None,
                          f"Speed {m:,.0f} tokens/s measured (the plan priced no speed for this cluster)")
    ratio = m / planned
    outside = lo is not None and hi is not None and not (lo <= m <= hi)
    hours = facts.get("hours")
    cost = facts.get("cost_usd")
    hours_now = hours / ratio if hours else None
    cost_now = cost / ratio if cost else None
    band = f" (band {lo:,.0f}–{hi:,.0f})" if lo is not None and hi is not None else ""
    head = f"Speed {m:,.0f} tokens/s measured vs {planned:,.0f} planned{band}: {ratio:.0%} of the plan"
    if not outside:
        return Comparison(m, planned, lo, hi, ratio, False, hours_now, cost_now, head + ", within its band")
    side = "below" if m < lo else "above"
    now = ""
    if hours_now is not None:
        now = f"; at this speed the run takes {hours_now:,.1f} h (plan {hours:,.1f} h)"
        if cost_now is not None:
            now += f" and ${cost_now:,.0f} (plan ${cost:,.0f})"
    hint = facts.get("recommend_hint")
    replan = (f"; the plan now: `{hint} --profile {facts['profile']}` anchors on this run" if hint and facts.get("profile")
              else "")
    return Comparison(m, planned, lo, hi, ratio, True, hours_now, cost_now,
                      f"{head}, {side} its band{now}{replan}")


def _facts(facts_or_plan, config=None) -> Mapping[str, Any]:
    if isinstance(facts_or_plan, Mapping):
        return facts_or_plan
    return planned_speed(facts_or_plan, config)


# ----------------------------------------------------------------------------------------------- at the end
def launch_measurement(facts_or_plan, measured_tokens_per_second: float, *, cluster: str,
                       memory_gib: float | None = None, steps: tuple[int, int] | None = None,
                       when: _dt.datetime | None = None, config=None):
    """The run as an ``LLMMeasurement`` (validated: a rate under the GPUs' peak, memory within them)."""
    from cloudfit.llm.zoo import LLMShape
    from cloudfit.profiling import io as pio
    from cloudfit.types import LLMMeasurement

    f = _facts(facts_or_plan, config)
    when = when or _dt.datetime.now(_dt.timezone.utc)
    used = f" steps {steps[0]}–{steps[1]}" if steps else ""
    planned = f"; planned {f['tokens_per_second']:,.0f} tokens/s" if f.get("tokens_per_second") else ""
    m = LLMMeasurement(
        accelerator=str(f["accelerator"]), gpus_per_node=int(f["gpus_per_node"]), nodes=int(f["nodes"]),
        precision=str(f["precision"]), seq_len=int(f["seq_len"]), batch_size=int(f["batch_size"]),
        layout=str(f["layout"]), framework=str(f["framework"]), tokens_per_second=float(measured_tokens_per_second),
        memory_gib=None if memory_gib is None else float(memory_gib), source="measured",
        note=f"{NOTE_PREFIX}{cluster} on {f['stack']} ({f.get('cluster_label', '')}): median after warm-up"
             f"{used}{planned}",
        host=str(cluster), measured_at=when.isoformat(timespec="seconds"))
    shape = LLMShape(**{k: v for k, v in dict(f["shape"]).items() if k in LLMShape.__dataclass_fields__})
    return pio.validate_llm_measurement(m, shape), shape


def record_launch(profile: str | Path | None, facts_or_plan, measured_tokens_per_second: float, *, cluster: str,
                  memory_gib: float | None = None, steps: tuple[int, int] | None = None,
                  when: _dt.datetime | None = None, config=None) -> tuple[Path, Any]:
    """Append the run's measurement to its profile (see the module docstring for which); returns (path, the
    measurement). ``ProfileError`` (one line) for a measurement that breaks physics or a profile of another
    model; nothing is half-written."""
    from cloudfit.profiling import io as pio
    from cloudfit.types import LLMProfile

    f = _facts(facts_or_plan, config)
    m, shape = launch_measurement(f, measured_tokens_per_second, cluster=cluster, memory_gib=memory_gib,
                                  steps=steps, when=when)
    path = Path(profile).expanduser() if profile is not None else Path(f["profile"])
    if path.is_file():
        p = pio.load_profile(path, llm_ok=True)
        if not isinstance(p, LLMProfile) or p.model != shape.name:
            raise ProfileError(f"{path} is a profile of {p.model!r}, not of {shape.name!r}: the launch is not "
                               "recorded there")
        mine = f"{NOTE_PREFIX}{cluster} "
        kept = tuple(x for x in p.measurements
                     if not (x.source == "measured" and x.note.startswith(mine) and x.layout == m.layout
                             and x.accelerator == m.accelerator and x.nodes == m.nodes))
        p = type(p)(model=p.model, shape=p.shape, origin=p.origin, stats=p.stats, measurements=kept + (m,))
    else:
        from cloudfit.llm import zoo

        origin = "zoo" if shape.name in zoo.ZOO and zoo.ZOO[shape.name] == shape else "config"
        p = pio.new_llm_profile(shape, origin).with_measurement(m)
        path.parent.mkdir(parents=True, exist_ok=True)
    pio.save_profile(p, path)
    return path, m
