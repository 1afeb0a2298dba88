"""Anchored LLM prediction: a measurement of the user's own stack calibrates every prediction made from it.

The step model (``cloudfit.llm.predict``) prices a layout from constants fitted on other people's stacks. A
measurement — a whole run (``cloudfit profile add``: tokens/s of a cluster) or a per-layer profile
(``cloudfit profile run``: forward+backward seconds of one layer) — says how fast *this* stack really is.
Anchoring turns it into one number, the **stack speed** ``s``. A per-layer profile measures compute alone: every
compute rate of the step model (the GEMM and attention efficiency and the memory-bound element-wise traffic) is
multiplied by ``s``, so modelled compute time divides by exactly ``s``, communication keeps its physics. A
whole-run measurement sees the whole step: to another scale or layout of the same GPU (the same cluster), compute,
the achieved collective bandwidth (capped at the nominal one) and the host overheads all speed up by ``s`` (the
optimizer's memory-bound update aside); to another GPU — another system, another network — only the compute
speed solved from the same run travels (``bench/RESULTS_llm_anchor.md`` measures both choices). ``s`` is
solved so that the model reproduces the measurement at the measurement's own setup (1-D, monotone), then carried
to the query: another node count, layout, sequence length or GPU goes through the step model's roofline and
network terms.

A measured peak (``profile add --memory-gib``) anchors memory part by part (``fit_memory``): the model states are
exact (bytes per parameter), so one peak scales the activations and logits alone — what the stack's kernels
decide — and two peaks at different activation loads also fit the fixed part (CUDA context, NCCL buffers,
allocator reserve); ``bench/llm_memory_anchor.py`` scores it leave-one-out on Sailor's published peaks. The
activation scale is the stack's and carries to any GPU; the fixed part is the GPU's own unless the peaks were
measured on it (``memory_fit_for``: one rule for ``predict --profile`` and the cluster search of
``recommend --profile``, which applies it to every layout as columns: ``anchored_total_gib``).

Trust decays with distance. The differences between the anchor's setup and the query are named hops
("other node count", "other GPU (H100 → B200)") and grouped into a trust class — ``same`` setup, ``scale``
(nodes, GPUs per node, layout, micro-batch, sequence length), ``gpu`` (another accelerator), ``stack`` (another
precision or framework) — whose 10–90% band is calibrated by ``bench/llm_anchor.py`` on the public runs
(``anchor_bands.json``). Without any anchor the prediction is *stack-generic*: its band spans what the
frameworks the step model knows (fsdp, megatron, megatron-deepspeed) predict for the same job, widened by the
fitted model's own cross-validated band.

Wraps ``cloudfit.llm.predict`` (never edits its model): pure Python + numpy, no heavy imports.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from cloudfit.errors import UsageError
from cloudfit.llm.step import Constants

BANDS_PATH = Path(__file__).with_name("anchor_bands.json")
#: Widest stack speed an anchor may set (a measurement outside it says the setup was misdescribed).
SCALE_LIMITS = (1.0 / 8.0, 8.0)
TRUST_ORDER = ("same", "scale", "layout", "gpu", "stack")
#: Fallback bands (log ratio 10% / 90%) before ``bench/llm_anchor.py --write`` has calibrated them.
DEFAULT_BANDS = {"same": (-0.03, 0.03), "scale": (-0.10, 0.10), "layout": (-0.15, 0.15), "gpu": (-0.15, 0.15),
                 "stack": (-0.30, 0.30)}


@dataclass(frozen=True)
class AnchoredConstants(Constants):
    """The step model's constants with every compute rate × ``stack_speed`` (efficiency up, element-wise
    traffic down): modelled compute time ÷ ``stack_speed``, communication untouched."""

    stack_speed: float = 1.0

    def efficiency(self, accelerator: str, precision: str, bw_per_tflop: float, framework: str = "fsdp") -> float:
        return super().efficiency(accelerator, precision, bw_per_tflop, framework) * self.stack_speed


def with_speed(c: Constants, speed: float, band: tuple[float, float] | None = None, *,
               whole_step: bool = False) -> AnchoredConstants:
    """``c`` running ``speed`` × faster compute (and carrying ``band`` as its prediction band). ``whole_step``:
    the collectives (achieved network and NVLink bandwidth, capped at the nominal figure) and the host's per-layer
    and per-step overheads speed up by the same factor — the whole step but the optimizer's memory-bound update
    divides by ``speed``."""
    base = {k: getattr(c, k) for k in Constants.__dataclass_fields__}
    base["mem_traffic"] = float(base["mem_traffic"]) / speed
    if whole_step:
        for k in ("net_eff", "nvlink_eff"):  # achieved bandwidth never above the nominal one
            base[k] = min(float(base[k]) * speed, 1.0)
        for k in ("tau_s", "step_overhead_s"):
            base[k] = float(base[k]) / speed
    if isinstance(c, AnchoredConstants):  # compose: ``c`` already runs at its own speed
        speed *= c.stack_speed
    if band is not None:  # the anchor's band already prices its hops (another GPU included)
        base["band"] = tuple(band)
        base["band_extrapolated"] = None
    return AnchoredConstants(**base, stack_speed=float(speed))


@dataclass(frozen=True)
class Setup:
    """Where a run ran (or a query asks): what the hops compare."""

    accelerator: str
    gpus_per_node: int
    nodes: int
    precision: str
    seq_len: int
    batch_size: int  # sequences per data-parallel rank and step
    layout: str  # the --layout text
    framework: str

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    def describe(self) -> str:
        where = f"{self.nodes}×{self.gpus_per_node}×{self.accelerator}" if self.nodes > 1 else \
            f"{self.gpus_per_node}×{self.accelerator}"
        return f"{where} {self.layout or 'auto'} ({self.framework}, {self.precision}, seq {self.seq_len})"


@lru_cache(maxsize=4096)
def _model_parallel(text: str, gpus: int, batch: int) -> tuple:
    """The layout's degrees that do not follow the GPU count (tp, pp, cp, vp, zero, ac, micro-batch)."""
    from cloudfit.llm.layout import parse

    if not text or text.strip().lower() == "auto":
        return ("auto",)
    lay = parse(text, gpus=gpus, sequences_per_replica=batch)
    return (lay.tp, lay.pp, lay.cp, lay.vp, lay.zero, lay.ac, lay.schedule, lay.dp_replicate > 1)


def _megatron_fsdp(s: Setup, mp: tuple) -> bool:
    return s.framework == "megatron" and len(mp) > 4 and mp[4] == 3


def hops(anchor: Setup, query: Setup) -> list[tuple[str, str]]:
    """(trust class, words) for every way ``query`` differs from ``anchor``."""
    out: list[tuple[str, str]] = []
    if anchor.accelerator != query.accelerator:
        out.append(("gpu", f"other GPU ({anchor.accelerator} → {query.accelerator})"))
    if anchor.precision != query.precision:
        out.append(("stack", f"other precision ({anchor.precision} → {query.precision})"))
    if anchor.framework != query.framework:
        out.append(("stack", f"other framework ({anchor.framework} → {query.framework})"))
    if anchor.nodes != query.nodes:
        out.append(("scale", "other node count"))
    if anchor.gpus_per_node != query.gpus_per_node:
        out.append(("scale", "other GPUs per node"))
    if anchor.seq_len != query.seq_len:
        out.append(("scale", "other sequence length"))
    a_mp = _model_parallel(anchor.layout, anchor.gpus, anchor.batch_size)
    q_mp = _model_parallel(query.layout, query.gpus, query.batch_size)
    if _megatron_fsdp(anchor, a_mp) != _megatron_fsdp(query, q_mp):
        # Megatron-FSDP (zero 3) and Megatron-Core's distributed optimizer are different code paths: another
        # stack, not another layout (bench/llm_anchor_misses.py: 54-295% off when carried as a layout hop)
        out.append(("stack", "other Megatron mode (Megatron-FSDP ↔ distributed optimizer)"))
    elif a_mp != q_mp:
        out.append(("layout", "other layout"))
    elif anchor.batch_size != query.batch_size:
        out.append(("scale", "other batch per rank"))
    return out


def trust(hop_list: Sequence[tuple[str, str]]) -> str:
    """The trust class of a set of hops: the least trusted one (``same`` when there are none)."""
    if not hop_list:
        return "same"
    return max((h[0] for h in hop_list), key=TRUST_ORDER.index)


def distance(anchor: Setup, query: Setup) -> float:
    """How far ``query`` is from ``anchor``: a stack hop outweighs a GPU hop, which outweighs any scale or layout
    hops; a layout hop counts 2 (it moves more of the step than a scale hop: ``bench/llm_anchor.py``), a scale hop
    1, plus half the log2 of how far the GPU count, sequence length and batch moved."""
    w = {"scale": 1.0, "layout": 2.0, "gpu": 100.0, "stack": 10000.0}
    h = hops(anchor, query)
    moved = sum(abs(math.log2(a / b)) for a, b in ((anchor.gpus, query.gpus), (anchor.seq_len, query.seq_len),
                                                   (anchor.batch_size, query.batch_size)))
    return sum(w[x[0]] for x in h) + 0.5 * moved


@lru_cache(maxsize=2)
def _bands(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        return {"bands": dict(DEFAULT_BANDS), "stack_generic_widen": 0.0, "version": "anchor-uncalibrated"}
    doc = json.loads(p.read_text(encoding="utf-8"))
    if doc.get("schema_version") != 1:
        raise UsageError(f"{p}: unknown anchor band schema {doc.get('schema_version')!r}")
    return doc


def band_for(trust_class: str, path: str | Path | None = None) -> tuple[float, float]:
    """Calibrated 10%/90% log-ratio band of an anchored prediction of this trust class."""
    b = _bands(str(path or BANDS_PATH))["bands"]
    lo, hi = b.get(trust_class, DEFAULT_BANDS[trust_class])
    return float(lo), float(hi)


def stack_generic_widen(path: str | Path | None = None) -> float:
    """Extra log half-width of the unanchored band (calibrated so that it covers the public stacks' runs)."""
    return float(_bands(str(path or BANDS_PATH)).get("stack_generic_widen", 0.0))


# --------------------------------------------------------------------------------------------
# Solving the stack speed


def solve_speed(predict_at, measured: float, *, lo: float = SCALE_LIMITS[0], hi: float = SCALE_LIMITS[1]) -> float:
    """The speed ``s`` with ``predict_at(s) == measured`` for an increasing ``predict_at`` (bisection in log s;
    clipped to [lo, hi] when the measurement lies outside what any speed there reproduces)."""
    if not (measured > 0 and math.isfinite(measured)):
        raise UsageError(f"a measurement must be a positive number, got {measured!r}")
    a, b = math.log(lo), math.log(hi)
    if predict_at(lo) >= measured:
        return lo
    if predict_at(hi) <= measured:
        return hi
    for _ in range(50):
        m = 0.5 * (a + b)
        if predict_at(math.exp(m)) < measured:
            a = m
        else:
            b = m
        if b - a < 1e-7:
            break
    return math.exp(0.5 * (a + b))


@dataclass(frozen=True)
class Anchor:
    """One measurement turned into a stack speed (and, with a peak, a memory point), with what it was measured on."""

    setup: Setup
    speed: float
    kind: str  # "run" (whole-run tokens/s) or "layer" (per-layer forward + backward)
    label: str  # "your 8×H100 fsdp=8 run"
    compute_speed: float | None = None  # a run's speed with compute alone sped up (carried to other GPUs)
    memory: "MemoryPoint | None" = None  # the measured peak against the modelled parts at ``setup``
    nvlink_eff: float | None = None  # a profile run's measured collective bus bandwidth ÷ the GPU's NVLink figure
    source: str = ""
    note: str = ""

    @property
    def clipped(self) -> bool:
        """The measurement lies outside what any stack speed within ``SCALE_LIMITS`` reproduces."""
        return not SCALE_LIMITS[0] * 1.0001 < self.speed < SCALE_LIMITS[1] * 0.9999


def describe_basis(a: Anchor, hop_list: Sequence[tuple[str, str]]) -> str:
    n = len(hop_list)
    if not n:
        return f"anchored on {a.label}, same setup"
    return f"anchored on {a.label}, {n} hop{'s' if n > 1 else ''}: {', '.join(h[1] for h in hop_list)}"


def nearest(anchors: Sequence[Anchor], query: Setup) -> tuple[list[Anchor], list[tuple[str, str]]]:
    """The anchors closest to ``query`` (all of them when equally close) and the hops of the first one."""
    scored = [(distance(a.setup, query), i) for i, a in enumerate(anchors)]
    best = min(s for s, _ in scored)
    chosen = [anchors[i] for s, i in scored if s == best]
    return chosen, hops(chosen[0].setup, query)


def carried(a: Anchor, trust_class: str) -> tuple[float, bool]:
    """(speed, whole_step) an anchor carries to a query of ``trust_class``: a run on the same GPU speeds up the
    whole step (its cluster's network and host included); to another GPU or stack only the compute speed travels
    (another GPU comes with another system: ``bench/llm_anchor.py`` measures both); a per-layer profile is
    compute alone."""
    if a.kind == "run" and trust_class in ("same", "scale", "layout"):
        return a.speed, True
    return (a.compute_speed or a.speed), False


def combined_speed(anchors: Sequence[Anchor], trust_class: str = "same") -> float:
    """Geometric mean of equally near anchors' carried speeds."""
    return math.exp(sum(math.log(carried(a, trust_class)[0]) for a in anchors) / len(anchors))


# --------------------------------------------------------------------------------------------
# Memory anchoring: what a measured peak says, part by part


#: Range of the activation scale measured peaks may set (outside it the peak says the setup was misdescribed:
#: a factor on every part takes over).
ACT_SCALE_LIMITS = (0.25, 4.0)
#: Two peaks fit the fixed part as well only when their activation loads differ by this factor at least.
ACT_SPREAD = 1.25


@dataclass(frozen=True)
class MemoryPoint:
    """A measured peak GiB per GPU and the modelled parts at the setup it was measured on: ``states_gib``
    (weights, gradients, optimizer states and unsharded FSDP buffers — bytes per parameter the stack's
    precision and sharding fix exactly) and ``varying_gib`` (activations and logits — what the micro-batch,
    sequence length, layout and the stack's kernels move)."""

    measured_gib: float
    states_gib: float
    varying_gib: float


def memory_point(memory, measured_gib: float) -> MemoryPoint:
    """``measured_gib`` against the modelled ``MemoryEstimate`` of the same setup."""
    if not (measured_gib > 0 and math.isfinite(measured_gib)):
        raise UsageError(f"a peak memory must be a positive number of GiB, got {measured_gib!r}")
    return MemoryPoint(float(measured_gib), memory.states_gib + memory.buffers_gib,
                       memory.activations_gib + memory.logits_gib)


@dataclass(frozen=True)
class MemoryFit:
    """What measured peaks say about a stack's memory: peak = ``fixed_gib`` + (1 + f) × (states +
    ``activation_scale`` × varying), f the model's allocator fraction (``cloudfit.llm.memory``); unanchored,
    ``fixed_gib`` is the model's CUDA context and NCCL allowance and ``activation_scale`` 1. ``factor`` (set only
    where the parts cannot reproduce a peak: below the states themselves) multiplies every part instead."""

    activation_scale: float = 1.0
    fixed_gib: float | None = None
    factor: float | None = None
    kind: str = "none"  # activations | activations+fixed | factor | none
    points: int = 0


def fit_memory(points: Sequence[MemoryPoint]) -> MemoryFit:
    """The memory a stack's measured peaks imply (nearest first). Model states are exact (bytes per parameter
    are known), so one peak scales the activations alone, the fixed part kept at the model's; two or more peaks
    whose activation loads differ (by ``ACT_SPREAD``) fit both the activation scale and the fixed part (least
    squares), unless that says something unphysical (a negative fixed part, a scale outside
    ``ACT_SCALE_LIMITS``), when the nearest peak alone is used. An activation scale outside the limits is
    clipped and the rest of the peak goes to the fixed part; a peak below what the clipped parts need
    (a negative fixed part) falls back to one factor on every part. A fit on one peak or two reproduces them
    exactly (more than two: least squares)."""
    from cloudfit.llm.memory import OVERHEAD_FRACTION, OVERHEAD_GIB

    pts = [p for p in points if p is not None]
    if not pts:
        return MemoryFit()
    g = 1.0 + OVERHEAD_FRACTION
    lo, hi = ACT_SCALE_LIMITS
    vs = [p.varying_gib for p in pts]
    if len(pts) >= 2 and min(vs) > 0 and max(vs) / min(vs) >= ACT_SPREAD:
        xs = [g * p.varying_gib for p in pts]
        ys = [p.measured_gib - g * p.states_gib for p in pts]
        n = len(pts)
        mx, my = sum(xs) / n, sum(ys) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        a = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
        c = my - a * mx
        if lo <= a <= hi and c >= 0:
            return MemoryFit(a, c, None, "activations+fixed", n)
    p = pts[0]
    total = OVERHEAD_GIB + g * (p.states_gib + p.varying_gib)
    if p.varying_gib <= 0:
        return MemoryFit(1.0, None, p.measured_gib / total, "factor", 1)
    a = ((p.measured_gib - OVERHEAD_GIB) / g - p.states_gib) / p.varying_gib
    c = OVERHEAD_GIB
    if not lo <= a <= hi:
        a = min(max(a, lo), hi)
        c = p.measured_gib - g * (p.states_gib + a * p.varying_gib)
    if c < 0:
        return MemoryFit(1.0, None, p.measured_gib / total, "factor", 1)
    return MemoryFit(a, c, None, "activations", 1)


def _fitted(states, buffers, activations, logits, fit: MemoryFit):
    """(activations, logits, overhead, total) GiB of the parts with ``fit`` applied: activations and logits × the
    activation scale, the fixed part replaced, the allocator fraction recomputed. Floats or numpy columns alike:
    the one rule ``apply_memory`` (one layout) and ``anchored_total_gib`` (the cluster search's columns) share."""
    from cloudfit.llm.memory import OVERHEAD_FRACTION

    a = fit.activation_scale
    act, logits = activations * a, logits * a
    raw = states + buffers + act + logits
    overhead = fit.fixed_gib + OVERHEAD_FRACTION * raw
    return act, logits, overhead, raw + overhead


def anchored_total_gib(parts: dict, fit: MemoryFit | None):
    """Peak GiB per GPU of many layouts at once, ``parts`` being ``cloudfit.llm.memory.parts_gib_many``'s columns,
    with ``fit`` applied — to the bit what ``apply_memory(memory.estimate(...), fit).total_gib`` gives each row."""
    if fit is None or fit.kind == "none":
        return parts["total"]
    if fit.factor:
        return parts["total"] * fit.factor
    states = parts["weights"] + parts["gradients"] + parts["optimizer"]
    return _fitted(states, parts["buffers"], parts["activations"], parts["logits"], fit)[3]


def apply_memory(memory, fit: MemoryFit | None, note: str = "anchored on measured peaks"):
    """``memory`` (a ``MemoryEstimate``) with ``fit`` applied: activations and logits × the activation scale,
    the fixed part replaced, the allocator fraction recomputed; whether it fits is decided again."""
    if fit is None or fit.kind == "none":
        return memory
    if fit.factor:
        return scale_memory(memory, fit.factor)
    act, logits, overhead, total = _fitted(memory.states_gib, memory.buffers_gib, memory.activations_gib,
                                           memory.logits_gib, fit)
    fits = total <= memory.capacity_gib
    reason = "" if fits else f"does not fit: needs {total:,.1f} GiB of {memory.capacity_gib:,.0f} GiB per GPU " \
                             f"({note})"
    return replace(memory, activations_gib=act, logits_gib=logits, overhead_gib=overhead, total_gib=total,
                   fits=fits, reason=reason)


def memory_anchors(anchors: Sequence[Anchor], query: Setup) -> list[Anchor]:
    """The anchors whose peaks speak for ``query``'s memory, nearest first: those of the query's accelerator,
    framework and precision (the same stack on the same GPU: one CUDA context, one set of kernels) when any
    measured a peak, else every anchor with a peak."""
    with_peak = [a for a in anchors if a.memory is not None]
    same = [a for a in with_peak if (a.setup.accelerator, a.setup.framework, a.setup.precision) ==
            (query.accelerator, query.framework, query.precision)]
    return sorted(same or with_peak, key=lambda a: distance(a.setup, query))


def memory_fit_for(anchors: Sequence[Anchor], query: Setup) -> MemoryFit | None:
    """What the measured peaks among ``anchors`` say about ``query``'s memory (None: none measured a peak) — the
    one rule ``predict_anchored`` and the cluster search (``recommend --profile``) share. The peaks
    ``memory_anchors`` picks (the one measured at the query's very setup alone, when there is one) are fitted by
    ``fit_memory``. The activation scale is the stack's (its kernels and what they save for the backward) and
    carries to every GPU; the fixed part (CUDA context, NCCL buffers, allocator reserve) belongs to the GPU and its
    driver: fitted on peaks all measured on the query's accelerator it is kept, otherwise the query's GPU keeps the
    model's own (``cloudfit.llm.memory.OVERHEAD_GIB``). A factor fit (a peak below the modelled states: the stack
    keeps fewer bytes per parameter than modelled) carries as it is."""
    from cloudfit.llm.memory import OVERHEAD_GIB

    peaks = memory_anchors(anchors, query)
    if not peaks:
        return None
    if not hops(peaks[0].setup, query):  # a peak measured at this very setup is the answer
        peaks = peaks[:1]
    fit = fit_memory([a.memory for a in peaks])
    if fit.fixed_gib is not None and any(a.setup.accelerator != query.accelerator for a in peaks):
        fit = replace(fit, fixed_gib=OVERHEAD_GIB)
    return fit


def describe_memory_fits(fits: Sequence[tuple[str, MemoryFit | None]], peaks: int) -> str:
    """"memory anchored on 2 measured peaks (H100: activations ×1.21, fixed 1.8 GiB; B200: …)" for the fit each
    accelerator of a search got (the accelerators named only where their fits differ; '' when none)."""
    groups: dict[MemoryFit, list[str]] = {}
    for acc, fit in fits:
        if fit is not None and fit.kind != "none" and acc not in groups.setdefault(fit, []):
            groups[fit].append(acc)
    if not groups:
        return ""

    def words(f: MemoryFit) -> str:
        if f.factor:
            return f"every part ×{f.factor:.2f}"
        return f"activations ×{f.activation_scale:.2f}, fixed {f.fixed_gib:.1f} GiB"

    each = words(next(iter(groups))) if len(groups) == 1 else \
        "; ".join(f"{', '.join(accs)}: {words(f)}" for f, accs in groups.items())
    return f"memory anchored on {peaks} measured peak{'s' if peaks > 1 else ''} ({each})"


def scale_memory(memory, factor: float | None):
    """A memory estimate with every part × ``factor`` (the measured peak ÷ the modelled one at the anchor)."""
    if not factor:
        return memory
    parts = ("weights_gib", "gradients_gib", "optimizer_gib", "activations_gib", "logits_gib", "buffers_gib",
             "overhead_gib", "total_gib")
    scaled = {k: getattr(memory, k) * factor for k in parts}
    fits = scaled["total_gib"] <= memory.capacity_gib
    reason = "" if fits else f"does not fit: needs {scaled['total_gib']:,.1f} GiB of {memory.capacity_gib:,.0f} " \
                             "GiB per GPU (scaled by the measured peak of the anchor run)"
    return replace(memory, **scaled, fits=fits, reason=reason)


# --------------------------------------------------------------------------------------------
# Measurements → anchors → anchored predictions


def _predict(shape, s: Setup, c: Constants):
    from cloudfit.llm.predict import predict

    return predict(shape, s.accelerator, gpus_per_node=s.gpus_per_node, nodes=s.nodes, precision=s.precision,
                   seq_len=s.seq_len, batch_size=s.batch_size, layout=s.layout or "auto", framework=s.framework, c=c)


def run_anchor(shape, s: Setup, tokens_per_second: float, *, memory_gib: float | None = None,
               label: str = "", c: Constants | None = None, **kw) -> Anchor:
    """A whole-run measurement (``tokens_per_second`` of the cluster, optional peak GiB per GPU) as an anchor."""
    from cloudfit.llm.predict import constants

    c = c or constants()
    speed = solve_speed(lambda v: _predict(shape, s, with_speed(c, v, whole_step=True)).tokens_per_second,
                        tokens_per_second)
    compute = solve_speed(lambda v: _predict(shape, s, with_speed(c, v)).tokens_per_second, tokens_per_second)
    point = None if memory_gib is None else memory_point(_predict(shape, s, c).memory, memory_gib)
    return Anchor(s, speed, "run", label or f"the {s.describe()} run", compute_speed=compute,
                  memory=point, **kw)


def layer_seconds(shape, s: Setup, c: Constants) -> float:
    """Modelled forward + backward seconds of one layer and one micro-batch on one GPU of ``s`` (compute only:
    the difference of two single-GPU predictions, one and two layers deep)."""
    from cloudfit.llm.predict import predict

    def compute(layers: int) -> float:
        p = predict(replace(shape, layers=layers), s.accelerator, gpus_per_node=1, nodes=1, precision=s.precision,
                    seq_len=s.seq_len, batch_size=s.batch_size, layout=f"mb={s.batch_size},ac=" +
                    _ac(s.layout), framework=s.framework, c=c)
        return p.breakdown["compute_s"]

    return compute(2) - compute(1)


def _ac(layout: str) -> str:
    for part in (layout or "").split(","):
        k, _, v = part.partition("=")
        if k.strip().lower() == "ac" and v.strip():
            return v.strip().lower()
    return "selective"


def layer_anchor(run_shape, s: Setup, seconds: float, *, memory_gib: float | None = None, label: str = "",
                 c: Constants | None = None, **kw) -> Anchor:
    """A per-layer profile (forward + backward seconds of one layer per micro-batch, measured on ``run_shape``:
    the model's width, fewer layers) as an anchor: the speed that makes the modelled layer take ``seconds``;
    ``memory_gib`` (the run's peak) sets the memory scale against the modelled peak of ``run_shape``."""
    from cloudfit.llm.predict import constants

    c = c or constants()
    modelled = layer_seconds(run_shape, s, c)
    if not (seconds > 0 and math.isfinite(seconds)):
        raise UsageError(f"a layer time must be a positive number of seconds, got {seconds!r}")
    speed = min(max(modelled / seconds, SCALE_LIMITS[0]), SCALE_LIMITS[1])
    point = memory_point(_predict(run_shape, s, c).memory, memory_gib) if memory_gib else None
    return Anchor(s, speed, "layer", label or f"the per-layer profile on {s.accelerator}", memory=point,
                  **kw)


@dataclass(frozen=True)
class Anchored:
    """An anchored (or stack-generic) prediction: the step model's answer plus what anchored it."""

    prediction: object  # LLMPrediction
    basis: str
    trust: str  # same | scale | gpu | stack | stack-generic
    hops: tuple
    speed: float
    anchors: tuple = ()
    notes: tuple = ()

    def to_dict(self) -> dict:
        d = self.prediction.to_dict()
        d["anchor"] = {"basis": self.basis, "trust": self.trust, "hops": [h[1] for h in self.hops],
                       "stack_speed": self.speed, "anchored_on": [a.label for a in self.anchors],
                       "band_version": _bands(str(BANDS_PATH)).get("version", "?"), "notes": list(self.notes)}
        d["prediction_basis"] = self.basis
        return d


def predict_anchored(shape, query: Setup, anchors: Sequence[Anchor], *, c: Constants | None = None,
                     **predict_kw) -> Anchored:
    """Predict ``query`` from the nearest anchors (stack-generic when there are none)."""
    from cloudfit.llm.predict import constants, predict

    c = c or constants()
    if not anchors:
        return stack_generic(shape, query, c=c, **predict_kw)
    chosen, hop_list = nearest(anchors, query)
    chosen = [a for a in chosen if a.kind == chosen[0].kind]
    t = trust(hop_list)
    speed = combined_speed(chosen, t)
    cc = with_speed(c, speed, band=band_for(t), whole_step=carried(chosen[0], t)[1])
    link = [a.nvlink_eff for a in chosen if a.nvlink_eff]
    if link and t in ("same", "scale", "layout"):  # the collectives measured on this GPU's board
        cc = replace(cc, nvlink_eff=min(link))
    p = predict(shape, query.accelerator, gpus_per_node=query.gpus_per_node, nodes=query.nodes,
                precision=query.precision, seq_len=query.seq_len, batch_size=query.batch_size,
                layout=query.layout or "auto", framework=query.framework, c=cc, **predict_kw)
    p = replace(p, memory=apply_memory(p.memory, memory_fit_for(anchors, query)))
    notes = tuple(f"{a.label} is {'slower' if a.speed < 1 else 'faster'} than any stack speed from "
                  f"{SCALE_LIMITS[0]:g}× to {SCALE_LIMITS[1]:g}× of the step model reproduces: check its setup"
                  for a in chosen if a.clipped)
    return Anchored(p, describe_basis(chosen[0], hop_list), t, tuple(hop_list), speed, tuple(chosen), notes)


def stack_generic(shape, query: Setup, *, c: Constants, **predict_kw) -> Anchored:
    """No measurement of the user's stack: the step model's prediction with a band spanning every framework
    it has constants for (the same job on another public stack), widened by the calibrated margin."""
    from cloudfit.llm.predict import FRAMEWORKS, predict

    def at(fw):
        return predict(shape, query.accelerator, gpus_per_node=query.gpus_per_node, nodes=query.nodes,
                       precision=query.precision, seq_len=query.seq_len, batch_size=query.batch_size,
                       layout=query.layout or "auto", framework=fw, c=c, **predict_kw)

    p = at(query.framework or None)
    rates = [at(fw).tokens_per_second for fw in FRAMEWORKS] if (query.layout or "auto") != "auto" else \
        [p.tokens_per_second]
    lo_cv, hi_cv = c.band_for(p.accelerator, p.precision)
    w = stack_generic_widen()
    low = min(min(rates), p.tokens_per_second) * math.exp(lo_cv - w)
    high = max(max(rates), p.tokens_per_second) * math.exp(hi_cv + w)
    p = replace(p, low=low, high=high)
    basis = "stack-generic: no measurement of your stack (constants fitted on public Megatron / FSDP runs); " \
            "band spans the public stacks" + (f"; {p.basis}" if p.basis else "")
    return Anchored(p, basis, "stack-generic", (), 1.0, ())


def measured_nvlink_eff(m) -> float | None:
    """A profile run's slower FSDP collective (bus GB/s over its local GPUs) ÷ the GPU's NVLink bus figure, ≤ 1."""
    from cloudfit.llm import hardware as lhw

    coll = (m.layers or {}).get("collectives_gbs") or {}
    rates = [coll[k] for k in ("all_gather", "reduce_scatter") if coll.get(k)]
    if not rates or m.accelerator == "cpu":
        return None
    return min(min(rates) / lhw.intra_gbps(m.accelerator), 1.0)


def short_layout(text: str) -> str:
    """``fsdp=8,zero=3,tp=1,…,ac=selective`` → ``fsdp=8`` (the degrees above 1; ac when not selective)."""
    keep = []
    for part in (text or "").split(","):
        k, _, v = part.partition("=")
        k, v = k.strip(), v.strip()
        if k in ("dp", "fsdp", "tp", "pp", "cp", "vp") and v not in ("", "1"):
            keep.append(f"{k}={v}")
        elif k == "ac" and v != "selective":
            keep.append(f"ac={v}")
    return ",".join(keep) or "1 GPU"


def setup_of(m) -> Setup:
    """The setup of an ``LLMMeasurement``."""
    return Setup(m.accelerator, m.gpus_per_node, m.nodes, "bf16" if m.precision == "fp16" else m.precision,
                 m.seq_len, m.batch_size, m.layout, m.framework)


def anchors_from_profile(profile, shape, *, c: Constants | None = None) -> tuple[list[Anchor], list[str]]:
    """Every GPU measurement of an ``LLMProfile`` as an anchor, and a note for each one that cannot anchor
    (a CPU profile run: its speed says nothing about a GPU's)."""
    from cloudfit.llm.zoo import LLMShape

    anchors, notes = [], []
    for m in profile.measurements:
        s = setup_of(m)
        where = f"{m.nodes}×{m.gpus_per_node}×{m.accelerator}" if m.nodes > 1 else f"{m.gpus}×{m.accelerator}"
        if m.accelerator == "cpu":
            notes.append(f"the {m.source} CPU profile run ({m.measured_at or 'undated'}) anchors no GPU prediction")
            continue
        mine = "your" if m.source in ("measured", "probe") else "your reported"
        if m.layers is not None:
            run = LLMShape(**{k: v for k, v in m.layers["shape"].items() if k in LLMShape.__dataclass_fields__})
            if m.layers["layers_run"] == 1 and not m.layers["embedding_head_s"]:
                # a one-layer run that did not time the embedding and head apart: its "layer" time holds them
                # too (for a 70B at 4K tokens the LM head is as much work as the layer), so anchor on the
                # whole step of the model that ran instead
                anchors.append(run_anchor(run, s, m.tokens_per_second, memory_gib=m.memory_gib, c=c,
                                          label=f"{mine} one-layer profile run on {m.accelerator} (whole step)",
                                          source=m.source, note=m.note))
                continue
            anchors.append(layer_anchor(run, s, float(m.layers["forward_backward_s"]), memory_gib=m.memory_gib, c=c,
                                        label=f"{mine} per-layer profile on {m.accelerator}", source=m.source,
                                        note=m.note, nvlink_eff=measured_nvlink_eff(m)))
        else:
            anchors.append(run_anchor(shape, s, m.tokens_per_second, memory_gib=m.memory_gib, c=c,
                                      label=f"{mine} {where} {short_layout(m.layout)} run", source=m.source,
                                      note=m.note))
    return anchors, notes


def for_search(profile, shape, accelerators: Sequence[str] = (), *, c: Constants | None = None):
    """Constants for a search over many clusters (``recommend --profile``), anchored on every GPU measurement of
    ``profile``: one stack speed (the geometric mean of its anchors'), and the band of a GPU hop unless every
    allowed accelerator is one the profile measured (then of a layout hop: the search moves layout and scale).
    Returns (constants, basis, peaks) — the shipped constants, "" and () when the profile has no GPU measurement;
    ``peaks``: the anchors that measured a peak, for ``memory_fit_for`` on each GPU the search tries."""
    from cloudfit.llm.predict import constants

    c = c or constants()
    anchors, _ = anchors_from_profile(profile, shape, c=c)
    if not anchors:
        return c, "", ()
    peaks = tuple(a for a in anchors if a.memory is not None)
    runs = [a for a in anchors if a.kind == "run"]
    anchors = runs or anchors  # a whole-run measurement says more about a cluster than a per-layer profile
    measured = {a.setup.accelerator for a in anchors}
    allowed = set(accelerators)
    cls = "layout" if allowed and allowed <= measured else "gpu"
    speed = combined_speed(anchors, cls)
    labels = ", ".join(a.label for a in anchors[:3]) + (f" and {len(anchors) - 3} more" if len(anchors) > 3 else "")
    return (with_speed(c, speed, band=band_for(cls), whole_step=carried(anchors[0], cls)[1]),
            f"anchored on {labels} (stack speed {speed:.2f}×, {cls} band)", peaks)
