"""``recommend`` for large-model token workloads: the cluster *and* its parallel layout.

For every catalog offering × nodes 1..max × spot/on-demand, the fastest layout that fits in memory
(``cloudfit.llm.space.search_catalog``: every layout of the predictor's candidate rules, vectorised) gives
the candidate's tokens/s; the preemption model then prices it with checkpoints of a large job:

Checkpoints and restarts of a sharded job (``checkpoint_model``)
----------------------------------------------------------------
* Size: full training saves bf16 weights + fp32 master weights + two fp32 Adam moments = 14 B per
  parameter (gradients are not saved); LoRA saves only the adapters' 14 B per adapter parameter, and a
  restart re-reads the frozen bf16 base (2 B per parameter) too.
* Bandwidth: ``torch.distributed.checkpoint`` writes one shard per rank in parallel, so a checkpoint of
  S GB from G distinct shards takes ``3.65 s + 19.9 s/GB × S / G`` — the per-writer line the spot model
  already ships (CM-DARE: 100 checkpoints from GCE GPU VMs to Cloud Storage, 6–204 MB, i.e. ~50 MB/s per
  writer), applied to each rank's shard. Assumption: the writers do not contend (8 × 50 MB/s = 400 MB/s per
  node is far under any A2/A3/A4 VM's NIC and a bucket's default bandwidth); restore = write.
* Interval: Young/Daly (``cloudfit.spot``'s exact optimum) from that write time and the cluster's hazard.
* Restart after a revocation: the replacement outage of the spot model (420 s, GCP Spot trace) + restore
  + a relaunch of every node (torchrun rendezvous, NCCL communicators, model build) assumed at
  ``RELAUNCH_BASE_S + RELAUNCH_PER_NODE_S × nodes`` — an assumption (no public GCP measurement found): it
  makes restarts grow with the cluster, as MegaScale (NSDI'24) reports job initialisation dominating
  restarts at scale.
* A synchronous multi-node job stops when any node goes: revocation rate nodes × λ, and everything since
  the last checkpoint is lost on all nodes (``cloudfit.spot``'s model, per candidate C and R).
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from cloudfit import __version__
from cloudfit.catalog import Catalog
from cloudfit.errors import InfeasibleError, UsageError
from cloudfit.llm import hardware as lhw
from cloudfit.llm import memory as lmem
from cloudfit.llm import space as lsp
from cloudfit.llm.zoo import LLMShape
from cloudfit.search.space import (GUARD_INTERVAL_S, TEARDOWN_S, Priced, Space, _price_groups, add_candidates,
                                   single_node_clouds)
from cloudfit.types import MAX_NODES_LIMIT, ModelStats, Plan, Profile, Workload

RELAUNCH_BASE_S = 30.0
RELAUNCH_PER_NODE_S = 2.0
CHECKPOINT_BYTES_PER_PARAM = 14.0  # bf16 weights 2 + fp32 master 4 + Adam moments 8
TOP_LAYOUTS = 5


@dataclass(frozen=True)
class LLMJob:
    """What to train, in tokens: the model shape, sequence length, fine-tuning mode, batch, pinned layout."""

    shape: LLMShape
    tokens: float
    seq_len: int = 8192
    finetune: str = "full"
    lora_rank: int = 16
    global_batch: int | None = None  # sequences per step; None = the default (~4M tokens; ~1M for LoRA)
    layout: str | None = None  # "--layout": pinned degrees (others searched); None / "auto" = search all
    precision: str = "bf16"
    #: step-model constants anchored on a profile of the user's stack (``cloudfit.llm.anchor``) and what anchored
    #: them; None = the shipped, stack-generic constants
    anchored: object | None = None
    anchor_basis: str = ""
    #: the profile's anchors that measured a peak (``cloudfit.llm.anchor.Anchor``): memory is anchored on them
    #: (their repr, peaks included, is part of the space's cache key)
    memory_anchors: tuple = ()
    #: the GPUs the profile's measurements ran on (``cloudfit.plan.unknown.llm_measured``: measured, not spec-based)
    anchored_on: tuple = ()
    #: the fraction of each GPU's memory a layout may fill: ``FULL_FRACTION`` (95%) at most, since the predicted
    #: peak is an estimate and the allocator fragments; ``recommend_llm``'s headroom pass sets
    #: ``cloudfit.llm.memory.ROOMY_FRACTION``
    memory_limit: float = lmem.FULL_FRACTION
    #: the training stack that will run the plan (``cloudfit.stacks``: ``recommend --stack``): its step-model
    #: constants price the layouts (``Stack.framework``) and only layouts it runs are searched
    #: (``Stack.layout_ok``); None = cloudfit's own trainer's constants, every layout (plans before stacks)
    stack: str | None = None
    #: the LLM profile file ``--profile`` named (the plan records it: every launch appends its measured speed there)
    profile_file: str | None = None

    def __post_init__(self) -> None:
        self.shape.check_lora_rank(self.lora_rank)
        if self.stack is not None:  # a plan is a promise: no layout search for a job the stack cannot run at all
            from cloudfit import stacks

            why = stacks.get(self.stack).refuse_workload(self.shape.to_dict(), finetune=self.finetune,
                                                         precision=self.precision, model=self.shape.name)
            if why:
                raise UsageError(f"--stack {self.stack}: {why}")

    @property
    def framework(self) -> str | None:
        """The step model's constants for the stack (None: the trainer's, ``cloudfit.llm.step.TRAINER``)."""
        if self.stack is None:
            return None
        from cloudfit import stacks

        return stacks.get(self.stack).framework

    def layout_ok(self):
        """The stack's layout check (None without a stack: every layout)."""
        if self.stack is None:
            return None
        from cloudfit import stacks

        st = stacks.get(self.stack)
        shape = self.shape.to_dict()
        return lambda lay: st.layout_ok(lay, shape)

    @property
    def stack_name(self) -> str:
        """The stack the numbers are for: the named one, else cloudfit's own trainer."""
        return self.stack or "cloudfit"

    def constants(self):
        from cloudfit.llm.predict import constants

        return self.anchored if self.anchored is not None else constants()

    def memory_fits(self, hws) -> list | None:
        """Per hardware shape, the ``MemoryFit`` the measured peaks give its GPU (``anchor.memory_fit_for``: the
        same stack on the same GPU preferred, else any peak; the fixed part is the GPU's own unless a peak was
        measured on it) — None without peaks. The query is the trainer's stack on one node of the shape."""
        if not self.memory_anchors:
            return None
        from cloudfit.llm import anchor
        from cloudfit.llm.step import TRAINER

        fw = self.framework or TRAINER
        return [anchor.memory_fit_for(self.memory_anchors, anchor.Setup(
            hw.accelerator, hw.gpus_per_node, 1, self.precision, self.seq_len, 1, "auto", fw)) for hw in hws]

    @property
    def batch(self) -> int:
        return self.global_batch or lsp.default_global_batch(self.seq_len, self.finetune)


@dataclass(frozen=True)
class TokenWorkload:
    """A large-model workload: the limits (a ``Workload`` whose samples are sequences, tokens ÷ sequence
    length) and what to train in tokens. ``cloudfit.plan.recommend`` plans it by its ``kind``."""

    limits: Workload
    job: LLMJob
    kind: ClassVar[str] = "tokens"

    def require_limit(self) -> "TokenWorkload":
        self.limits.require_limit()
        return self


def token_workload(*, tokens: float, model: str | None = None, config: str | Path | None = None, seq_len: int = 8192,
                   finetune: str = "full", lora_rank: int = 16, global_batch: int | None = None,
                   layout: str | None = None, precision: str = "bf16", shape: LLMShape | None = None,
                   stack: str | None = None, **limits: Any) -> TokenWorkload:
    """The ``TokenWorkload`` for a zoo model (``model``), a ``config.json`` (``config``) or a ``shape`` already
    resolved (an LLM profile's); ``limits`` are
    ``cloudfit.workload.make_workload``'s (deadline, budget, objective, regions, accelerators, spot, …).
    ``UsageError`` (one line) on anything that does not fit together. ``fp16`` means bf16 (LLMs train in
    bf16 or fp8)."""
    from cloudfit.errors import UsageError
    from cloudfit.llm.predict import tokens_to_samples
    from cloudfit.llm.zoo import resolve
    from cloudfit.workload import make_workload

    if finetune not in ("full", "lora"):
        raise UsageError(f"--finetune must be full or lora, got {finetune!r}")
    if global_batch is not None and global_batch < 1:
        raise UsageError(f"--global-batch must be at least 1, got {global_batch}")
    samples = tokens_to_samples(tokens, seq_len)
    shape = shape if shape is not None else resolve(model, config)
    prec = "bf16" if precision == "fp16" else precision
    if prec not in ("bf16", "fp8"):
        raise UsageError(f"--precision must be bf16 or fp8 for a large model, got {precision!r}")
    if shape.learned_positions and seq_len > shape.learned_positions:
        raise UsageError(f"{shape.name} has {shape.learned_positions} learned positions; --seq-len {seq_len} is longer")
    w = make_workload(model=shape.name, samples=samples, precision=prec, **limits)
    if stack is not None:
        from cloudfit import stacks

        stacks.get(stack)  # an unknown stack: one line
        stack = str(stack).strip().lower()
        if stack == "custom":
            raise UsageError("--stack custom has no constants to price with: plan for the stack your command runs "
                             "(torchtitan, megatron, accelerate or cloudfit) and launch it with `-- CMD`")
    return TokenWorkload(w, LLMJob(shape, float(tokens), seq_len, finetune, lora_rank, global_batch, layout, prec,
                                   stack=stack))


def parse_constraints(text: str | None, shape: LLMShape, seq_len: int) -> dict:
    """``--layout tp=8,ac=full`` → the degrees to pin (``LayoutError`` for ones the model cannot take)."""
    from cloudfit.llm.layout import LayoutError, _int, pairs

    if text is None or text.strip().lower() in ("", "auto"):
        return {}
    out: dict[str, Any] = {}
    for k, v in pairs(text):
        if k == "schedule":
            raise LayoutError("layout: recommend picks the schedule (1f1b, or interleaved with vp=2)")
        if k == "ac":
            if v not in lsp.AC_CODE:
                raise LayoutError(f"layout: ac must be none, selective or full, got {v!r}")
            out[k] = v
            continue
        out[k] = _int(k, v)
    tp, pp, cp, vp = (out.get(k, 1) for k in ("tp", "pp", "cp", "vp"))
    if shape.heads % tp:
        raise LayoutError(f"tp={tp} does not divide the model's {shape.heads} attention heads")
    if tp > shape.kv_heads and tp % shape.kv_heads:
        raise LayoutError(f"tp={tp} cannot split the model's {shape.kv_heads} KV heads")
    if pp * vp > shape.layers:
        raise LayoutError(f"pp={pp} is more pipeline stages than the model's {shape.layers} layers")
    if cp > 1 and seq_len % (2 * cp):
        raise LayoutError(f"cp={cp} does not divide the sequence length {seq_len} into 2·cp chunks")
    if "dp" in out and "fsdp" in out and out["dp"] != out["fsdp"]:
        raise LayoutError("layout: recommend searches FSDP and DDP layouts, not HSDP (dp ≠ fsdp); "
                          "price HSDP with `cloudfit predict --layout`")
    if out.get("zero") == 2:
        raise LayoutError("layout: recommend searches zero 0, 1 (with a pipeline) and 3 (FSDP), not zero 2")
    return out


def checkpoint_model(job: LLMJob, nodes: np.ndarray, writers: np.ndarray) -> dict[str, np.ndarray]:
    """Seconds to write and restore a checkpoint and to restart, per candidate (see the module docstring)."""
    from cloudfit.llm.memory import lora_parameters
    from cloudfit.llm.stats import token_stats
    from cloudfit.spot import DEFAULT_OVERHEADS as ov

    st = token_stats(job.shape, job.seq_len)
    if job.finetune == "lora":
        saved = CHECKPOINT_BYTES_PER_PARAM * lora_parameters(st, job.lora_rank)
        restored = saved + 2.0 * st.parameters
    else:
        saved = restored = CHECKPOINT_BYTES_PER_PARAM * st.parameters
    w = np.maximum(np.asarray(writers, dtype=float), 1.0)
    write = ov.checkpoint_base_s + ov.checkpoint_s_per_gb * saved / 1e9 / w
    restore = ov.restore_base_s + ov.restore_s_per_gb * restored / 1e9 / w
    restart = ov.restart_s + restore + RELAUNCH_BASE_S + RELAUNCH_PER_NODE_S * np.asarray(nodes, dtype=float)
    return {"checkpoint_bytes": saved, "restore_bytes": restored, "write_s": write, "restore_s": restore,
            "restart_s": restart}


@dataclass
class LLMSpace(Space):
    """A ``Space`` whose candidates run their best layout; checkpoint write and restart seconds per candidate."""

    write_s: np.ndarray = None  # type: ignore[assignment]
    restart_s: np.ndarray = None  # type: ignore[assignment]
    hw_index: np.ndarray = None  # type: ignore[assignment]  # per shape (``shapes``): index into search.hws
    search: Any = None  # cloudfit.llm.space.CatalogSearch
    job: Any = None
    stats: Any = None
    ckpt: dict = field(default_factory=dict)

    def _assess(self, deadline_hours, sel, groups=None) -> Priced:
        from cloudfit.search.space import _compute_hours, _log_sigma
        from cloudfit.spot import model as sm

        ov = sm.DEFAULT_OVERHEADS
        W = np.atleast_1d(_compute_hours(self.workload.samples, self.samples_per_second[sel]))
        sig = np.atleast_1d(_log_sigma(self.low[sel], self.high[sel]))
        n, sp = np.atleast_1d(self.nodes[sel]), np.atleast_1d(self.spot[sel])
        lam, price = np.atleast_1d(self.hazard_per_node_hour[sel]), np.atleast_1d(self.price_per_hour[sel])
        C, R = np.atleast_1d(self.write_s[sel]) / 3600.0, np.atleast_1d(self.restart_s[sel]) / 3600.0
        Lam = np.where(sp, n * lam, 0.0)
        if groups is not None:
            first, inverse = groups
            W, sig, Lam, sp, C, R = W[first], sig[first], Lam[first], sp[first], C[first], R[first]
        from cloudfit.spot import capacity

        S = capacity.startup_seconds(n[first] if groups is not None else n, sp,
                                     {True: ov.start_spot_s, False: ov.start_on_demand_s}) / 3600.0
        out = sm.assess_rows(W, sig, Lam, S, C, R, deadline_hours, None if groups is None else inverse)
        teardown = price * (TEARDOWN_S / 3600.0)
        cost, cost90 = sm.bill(price, out["hours"]) + teardown, sm.bill(price, out["hours_p90"]) + teardown
        # stockouts: waiting for capacity adds time (not billed) and deadline risk, as in Space._assess
        gpus = np.atleast_1d(self.gpus_per_node[sel]) * n
        wait, wait90, factor = capacity.wait_terms(gpus, np.atleast_1d(self.spot[sel]), out["hours"], deadline_hours,
                                                   np.atleast_1d(self.zones_offering[sel]))
        out["hours"], out["hours_p90"] = out["hours"] + wait, out["hours_p90"] + wait90
        out["overhead_hours"] = out["overhead_hours"] + wait
        out["p_on_time"] = out["p_on_time"] * factor
        return Priced(cost_usd=cost, cost_p90_usd=cost90, **out,
                      reserve_usd=price * (GUARD_INTERVAL_S / 3600.0), wait_hours=wait)

    def layout_of(self, i: int):
        """The best layout of candidate ``i`` (a ``cloudfit.llm.layout.Layout``)."""
        return self.search.layout(int(self.hw_index[int(self.shape[i])]), int(self.nodes[i]))


def _hardware(o, precision: str) -> lsp.HardwareShape | str:
    """The step model's view of an offering's VM, or why it cannot train at ``precision``."""
    try:
        acc = lhw.get(o.accelerator)
    except KeyError:
        return f"{o.accelerator}: no hardware spec"
    if precision == "bf16" and not acc.bf16_tflops:
        return f"{acc.name} has no bf16 tensor cores"
    if precision == "fp8" and not acc.fp8_tflops:
        return f"{acc.name} has no FP8 tensor cores"
    n = o.accelerators_per_node
    return lsp.HardwareShape(acc.name, n, lsp.node_network_gbps(o.machine_type, o.accelerator, n, o.vcpus),
                             lhw.nvlink_domain(acc.name, n), float(acc.memory_gib),
                             lhw.node_fabric(acc.name, o.machine_type))


def build_llm_space(workload: Workload, job: LLMJob, catalog: Catalog) -> LLMSpace:
    """Every allowed offering × nodes × spot whose hardware holds some layout of the model, at its best layout."""
    from cloudfit import spot
    from cloudfit.llm.stats import token_stats

    st = token_stats(job.shape, job.seq_len)
    cat = catalog.filter(accelerators=workload.accelerators, regions=workload.regions, spot=workload.spot == "only",
                         clouds=workload.clouds)
    offs = cat.offerings
    if not offs:
        raise InfeasibleError("no catalog offering matches the allowed regions, accelerators and spot policy")
    constraints = parse_constraints(job.layout, job.shape, job.seq_len)
    N = workload.max_nodes
    modes = 1 if workload.spot != "allow" else 2
    shapes, off_shape, hws, shape_hw_a, reasons = _shapes(offs, job.precision)
    mfits = job.memory_fits(hws)
    res = lsp.search_catalog(st, job.shape, hws, N, global_batch=job.batch, exact=job.global_batch is not None,
                             precision=job.precision, finetune=job.finetune, lora_rank=job.lora_rank,
                             constraints=constraints, c=job.constants(), memory_fits=mfits,
                             memory_limit=job.memory_limit, framework=job.framework, layout_ok=job.layout_ok())
    tps_shape = np.zeros((len(shapes), N))
    ok = shape_hw_a >= 0
    tps_shape[ok] = res.tokens_per_second[shape_hw_a[ok]]
    fits_off = tps_shape[off_shape] > 0  # offering × nodes
    excluded = _left_out(job, shapes, off_shape, shape_hw_a, reasons, tps_shape, res, hws, N, modes)
    od = np.array([o.price_per_hour for o in offs])
    spp, fits_off = _spot_prices(workload, offs, fits_off, excluded, N, modes)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("offering", "nodes", "spot", "price")}
    for is_spot in {"allow": (False, True), "never": (False,), "only": (True,)}[workload.spot]:
        per_node = spp if is_spot else od
        add_candidates(cols, single_node_clouds(fits_off & ~np.isnan(per_node)[:, None], offs, excluded), per_node, is_spot)
    offering = np.concatenate(cols["offering"])
    if offering.size == 0:
        raise _does_not_fit(job, res, hws, N, constraints)
    nodes = np.concatenate(cols["nodes"])
    shape = off_shape[offering]
    h = shape_hw_a[shape]
    tps = res.tokens_per_second[h, nodes - 1]
    cc = job.constants()  # the band by distance: wider on a GPU or precision without public runs
    band = np.array([cc.band_for(hw.accelerator, job.precision) for hw in hws]).reshape(-1, 2)
    lo, hi = band[h, 0], band[h, 1]
    sps = tps / job.seq_len
    writers = (res.best["tp"] * res.best["pp"] * res.best["cp"] * res.best["dp_shard"])[h, nodes - 1]
    ck = checkpoint_model(job, nodes, writers)
    hz_off = np.asarray(spot.hazards([o.accelerator for o in offs], [o.region for o in offs],
                                     clouds=[o.cloud for o in offs]), dtype=float)
    is_spot = np.concatenate(cols["spot"])
    return LLMSpace(
        workload=workload, profile=_profile(job, st), catalog=cat, shapes=shapes, offering=offering, shape=shape,
        nodes=nodes, spot=is_spot, price_per_hour=np.concatenate(cols["price"]), samples_per_second=sps,
        low=sps * np.exp(lo), high=sps * np.exp(hi), hazard_per_node_hour=hz_off[offering], excluded=excluded,
        basis=f"LLM step model {_calibration()}; " + (job.anchor_basis or "stack-generic (no profile of your stack: "
                                                                          "--profile FILE anchors it)")
        + _memory_basis(job, hws, mfits) + _extrapolation_basis(cc, hws, job.precision, h),
        checkpoint_bytes=float(ck["checkpoint_bytes"]),
        _cache={"groups": _price_groups(shape, nodes, is_spot, hz_off, offering, len(shapes), N)},
        write_s=ck["write_s"], restart_s=ck["restart_s"], hw_index=shape_hw_a, search=res, job=job, stats=st,
        ckpt={"checkpoint_bytes": ck["checkpoint_bytes"], "restore_bytes": ck["restore_bytes"]})


def _extrapolation_basis(c, hws, precision: str, used) -> str:
    """"; no public LLM run at bf16 of H200 (from H100), L4 (from A100): extrapolated by spec …" naming the
    candidate GPUs the step model has no public run of at this precision ('' when every one was measured)."""
    accs = sorted({hws[int(i)].accelerator for i in np.unique(used)})
    refs = {a: c.reference(a, precision) for a in accs}
    out = [f"{a} (from {r.replace('/', ' ')})" for a, r in refs.items() if r]
    if not out:
        return ""
    beta, _ = c.realised(precision)
    band = ", band from leave-one-generation-out" if c.band_extrapolated is not None else ""
    return (f"; no public LLM run at {precision} of {', '.join(out)}: extrapolated by spec (realised {1 + beta:.2f} "
            f"of the log peak ratio, learned on public generation transitions){band}")


def _memory_basis(job: LLMJob, hws, fits) -> str:
    """"; memory anchored on 1 measured peak (H100: activations ×1.20, fixed 2.5 GiB)" ('' unanchored)."""
    if not fits:
        return ""
    from cloudfit.llm.anchor import describe_memory_fits

    words = describe_memory_fits([(hw.accelerator, f) for hw, f in zip(hws, fits)], len(job.memory_anchors))
    return f"; {words}" if words else ""


def _shapes(offs, precision: str):
    """Distinct VM shapes of ``offs`` and their distinct hardware: (shapes, shape of each offering, hardware
    shapes, hardware of each shape (-1: cannot train), shape → why it cannot train)."""
    shape_of: dict[tuple, int] = {}
    shapes: list = []  # one representative Offering per distinct VM shape
    hw_of: dict[lsp.HardwareShape, int] = {}
    hws: list[lsp.HardwareShape] = []
    shape_hw: list[int] = []
    off_shape = np.empty(len(offs), dtype=np.int64)
    reasons: dict[int, str] = {}  # shape → why it cannot train at all
    for i, o in enumerate(offs):
        key = (o.machine_type, o.accelerator, o.accelerators_per_node, o.vcpus)
        if key not in shape_of:
            hw = _hardware(o, precision)
            shape_of[key] = len(shapes)
            shapes.append(o)
            if isinstance(hw, str):
                shape_hw.append(-1)
                reasons[len(shapes) - 1] = hw
            else:
                shape_hw.append(hw_of.setdefault(hw, len(hws)))
                if len(hws) < len(hw_of):
                    hws.append(hw)
        off_shape[i] = shape_of[key]
    return shapes, off_shape, hws, np.asarray(shape_hw, dtype=np.int64), reasons


def _left_out(job, shapes, off_shape, shape_hw_a, reasons, tps_shape, res, hws, N: int, modes: int) -> dict[str, int]:
    """Candidates left out, by reason: hardware that cannot train, memory, no layout for the batch."""
    excluded: dict[str, int] = {}
    gaps: dict[str, tuple[list[str], int]] = {}
    for si, s in enumerate(shapes):
        n_off = int((off_shape == si).sum())
        if shape_hw_a[si] < 0:
            r = reasons.get(si, "cannot train this precision")
            excluded[r] = excluded.get(r, 0) + n_off * N * modes
            continue
        bad = ~(tps_shape[si] > 0)
        if bad.any():
            h = shape_hw_a[si]
            no_layout = res.n_layouts[h] == 0  # the batch (or a pinned layout) leaves no layout for that many GPUs
            vm = f"{s.accelerators_per_node}×{s.accelerator}"
            for mask, words in ((bad & ~no_layout, f"{job.shape.name} does not fit in {s.accelerator} memory "
                                                   f"({hws[h].capacity_gib:g} GiB)"),
                                (bad & no_layout, f"no layout of {job.shape.name} keeps the global batch "
                                                  f"({job.batch} sequences)")):
                if mask.any():  # one reason per accelerator: "on 1–7 1×A100, 1–2 2×A100 VMs"
                    parts, n = gaps.get(words, ([], 0))
                    part = f"{_node_counts(np.flatnonzero(mask) + 1)} {vm}"  # VMs of one GPU shape say it once
                    gaps[words] = (parts + [part] * (part not in parts), n + n_off * int(mask.sum()) * modes)
    for words, (parts, n) in gaps.items():
        why = f"{words} on {', '.join(parts)} VMs"
        excluded[why] = excluded.get(why, 0) + n
    return excluded


def _spot_prices(workload: Workload, offs, fits_off: np.ndarray, excluded: dict[str, int], N: int, modes: int):
    """(spot price per offering, NaN where not used, candidates kept): outlier spot prices and the
    --max-gpus limit left out (counted in ``excluded``), as ``cloudfit.search.space.build_space`` does."""
    spp = np.array([np.nan if o.spot_price_per_hour is None else o.spot_price_per_hour for o in offs])
    if workload.spot != "never" and not workload.allow_outlier_prices:
        from cloudfit.catalog.outliers import OUTLIER_REASON, spot_outliers

        flagged = np.asarray(spot_outliers(offs), dtype=bool)
        n_flagged = int(fits_off[flagged].sum())
        if n_flagged:
            excluded[OUTLIER_REASON] = n_flagged
        spp = np.where(flagged, np.nan, spp)
        if workload.spot == "only" and np.isnan(spp).all():
            raise InfeasibleError("every spot price left is an outlier; --allow-outlier-prices uses them")
    if workload.max_gpus is not None:  # --max-gpus: the whole cluster's GPUs
        per_node = np.array([o.accelerators_per_node for o in offs])[:, None]
        over = fits_off & (per_node * np.arange(1, N + 1)[None, :] > workload.max_gpus)
        if over.any():
            key = f"more than {workload.max_gpus} GPUs (--max-gpus)"
            excluded[key] = excluded.get(key, 0) + int(over.sum()) * modes
            fits_off = fits_off & ~over
    return spp, fits_off


def _node_counts(ns: np.ndarray) -> str:
    """1–3, or 40–64, or "9 node counts" — the node counts a reason applies to."""
    if ns.size == 1:
        return f"{ns[0]}"
    if ns[-1] - ns[0] + 1 == ns.size:
        return f"{ns[0]}–{ns[-1]}"
    return f"{ns.size} node counts of"


def _calibration() -> str:
    from cloudfit.llm.predict import calibration_version

    return calibration_version()


def _profile(job: LLMJob, st) -> Profile:
    """The minimal ``Profile`` a ``Space`` carries (model name and stats per sample = per sequence)."""
    return Profile(model=job.shape.name, stats=ModelStats(
        parameters=int(st.parameters), flops_per_sample=float(st.flops_per_sample),
        forward_flops_per_sample=float(st.flops_per_sample / 3.0), gradient_bytes=int(2 * st.parameters),
        activation_bytes_per_sample=float(st.act_bytes[1] * st.layers * job.seq_len), op_classes={},
        batch_size=job.batch, input=f"{job.seq_len} tokens", task="causal language modelling"))


def _does_not_fit(job: LLMJob, res, hws, max_nodes: int, constraints: dict) -> InfeasibleError:
    """Nothing holds the model: what comes closest, and what would fit (more nodes, a bigger GPU, LoRA)."""
    from cloudfit.llm.stats import token_stats

    if not hws:
        return InfeasibleError(f"no allowed GPU can train {job.shape.name} in {job.precision}")
    st = token_stats(job.shape, job.seq_len)
    rows = []
    for h, hw in enumerate(hws):
        m = res.min_memory_gib[h]
        j = int(np.argmin(m))
        rows.append((m[j] / hw.capacity_gib, h, j + 1, m[j]))
    rows.sort()
    ratio, h, n, need = rows[0]
    hw = hws[h]
    pinned = f" with --layout {job.layout}" if constraints else ""
    room = job.memory_limit * hw.capacity_gib
    msg = (f"{job.shape.name} does not fit{pinned}: the smallest layout needs {need:,.1f} GiB per GPU on {n} × "
           f"{hw.gpus_per_node}×{hw.accelerator} ({hw.capacity_gib:g} GiB, of which plans fill at most "
           f"{job.memory_limit:.0%})")
    hints = []
    for nn in (2 * max_nodes, 4 * max_nodes, 8 * max_nodes):  # more nodes: memory only (cheap)
        if nn > MAX_NODES_LIMIT:
            break
        g, k = lsp.layout_grids([nn * hw.gpus_per_node], [hw.nvlink_domain], heads=job.shape.heads,
                                kv_heads=job.shape.kv_heads, layers=job.shape.layers, seq_len=job.seq_len,
                                global_batch=job.batch, exact=job.global_batch is not None)
        if constraints:
            g = g.take(lsp.constrain(g, constraints))
        fit = res.memory_fits[h] if res.memory_fits else None
        if len(g) and float(lsp.anchored_memory_gib(st, g, fit, precision=job.precision, finetune=job.finetune,
                                                    lora_rank=job.lora_rank).min()) <= room:
            hints.append(f"--max-nodes {nn}")
            break
    if job.finetune == "full":
        hints.append("--finetune lora")
    if constraints:
        hints.append("--layout auto")
    return InfeasibleError(msg + (". It would fit with " + " or ".join(hints) if hints else "") + ".")


# --------------------------------------------------------------------------------------------
# the plan


def recommend_llm(workload: Workload, job: LLMJob, *, catalog: Catalog | str | Path | None = None,
                  space: LLMSpace | None = None, adjust=None) -> Plan:
    """The cheapest cluster under a deadline / fastest under a budget, each candidate at its best layout;
    the plan carries the layout (``Plan.layout``) and everything a launcher needs to run it.

    Headroom: a plan whose layout fills more than ``memory.ROOMY_FRACTION`` of the GPU gives way to the best
    plan whose layouts all leave that much free, when that one is within ``memory.ROOMY_SPEED`` of it on the
    objective (cost, time, or cost × time) — the same 2% a layout gives way for inside one cluster.

    ``adjust`` (space → space), when given, is applied to every space searched (``cloudfit.bill``: the whole bill)."""
    from cloudfit import catalog as catalog_mod

    adjust = adjust or (lambda s: s)
    workload.require_limit()
    if space is None:
        cat = catalog if isinstance(catalog, Catalog) else catalog_mod.load(catalog, clouds=workload.clouds)
        space = _space(workload, job, cat)
    else:
        cat = space.catalog
    plan = _plan(workload, adjust(space))
    L = plan.layout
    if (job.memory_limit <= lmem.ROOMY_FRACTION
            or L["memory_gib_per_device"] <= lmem.ROOMY_FRACTION * L["memory_capacity_gib"]):
        return plan
    try:
        roomy = _plan(workload, adjust(_space(workload, replace(job, memory_limit=lmem.ROOMY_FRACTION), cat)))
    except InfeasibleError:
        return plan
    if _goal(workload, roomy) > _goal(workload, plan) / lmem.ROOMY_SPEED or (
            plan.layout["launch"]["runnable"] and not roomy.layout["launch"]["runnable"]):
        return plan  # (a roomy layout cloudfit's trainer would run as its crowded fallback is no gain)
    extra = _goal(workload, roomy) / _goal(workload, plan) - 1
    note = (f" Memory: every layout of this plan leaves ≥ {1 - lmem.ROOMY_FRACTION:.0%} of each GPU free; the best "
            f"plan that does not ({L['text']}, {L['memory_gib_per_device']:,.1f} of {L['memory_capacity_gib']:g} GiB) "
            f"is {extra:.1%} better on the objective.")
    from cloudfit.plan.explain import FASTEST_WITHIN

    # the crowded plan is within the limits too: "the fastest" holds only among the roomy plans
    sensitivity = (roomy.sensitivity or "").replace(FASTEST_WITHIN, "It is the fastest plan within the limits "
                                                    f"that leaves ≥ {1 - lmem.ROOMY_FRACTION:.0%} of each GPU free.")
    return replace(roomy, explanation=roomy.explanation + note, sensitivity=sensitivity,
                   provenance={**roomy.provenance, "memory_headroom": note.strip()})


def _goal(workload: Workload, plan: Plan) -> float:
    """The plan's objective value, lower is better: expected $ (cost), hours (fastest), the knee's score (time:
    ``cloudfit.plan.knee.knee_key``, $ × hours)."""
    e = plan.chosen
    if workload.objective in ("cost", "fastest"):
        return e.cost_usd if workload.objective == "cost" else e.hours
    from cloudfit.plan.knee import knee_key

    return float(np.exp(knee_key(e.cost_usd, e.hours)))


def _plan(workload: Workload, space: LLMSpace) -> Plan:
    from cloudfit import spot
    from cloudfit.plan.explain import check_length, infeasible
    from cloudfit.plan.rank import pareto_front, rank
    from cloudfit.search import Problem, get_searcher

    check_length(space, f"{space.job.tokens:,.3g} tokens")
    problem = Problem.of(workload)
    result = get_searcher("exhaustive").search(space, problem)
    if result.n_feasible == 0:
        raise infeasible(space, problem)
    r = rank(space, problem, workload, result)
    a, picked, chosen = r.assessment, r.picked, r.chosen
    i0 = int(picked[0])
    spec = layout_spec(space, i0, a, [int(i) for i in picked[1:]])
    provenance = {
        "cloudfit_version": __version__,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "catalog": space.catalog.path, "catalog_digest": space.catalog.digest,
        "model_version": _calibration(), "spot_model_version": getattr(spot, "MODEL_VERSION", ""),
        "profile_model": space.job.shape.name, "prediction_basis": space.basis, "searcher": result.searcher,
        "evaluations": int(result.evaluations), "space_size": len(space), "feasible": result.n_feasible,
        "layouts_evaluated": int(space.search.rows_evaluated),
        "layouts_fit": int(space.search.n_fit.sum()),
        "layouts_enumerated": int(space.search.n_layouts.sum()), "excluded": dict(space.excluded),
    }
    provenance.update(r.provenance)
    from cloudfit.plan import unknown

    measured = unknown.llm_measured((o.accelerator for o in space.shapes), space.job.anchored_on)
    provenance["unknown"] = unknown.facts(space, problem, i0, measured=measured, family_name="LLM",
                                          with_probe=False)
    explanation = f"{r.explanation} Layout: {spec['why']}"
    from cloudfit.plan.explain import preemption_notice

    step_s = spec["global_batch"] * spec["seq_len"] / spec["tokens_per_second"] if spec["tokens_per_second"] > 0 else 0.0
    notice = preemption_notice(space, a, i0, chosen, write_s=float(space.write_s[i0]), step_s=step_s)
    if notice is not None:
        provenance["preemption_notice"] = notice
        explanation = f"{explanation} {notice['note']}"
    plan = Plan(workload=workload, chosen=chosen, alternatives=r.alternatives, pareto=pareto_front(space, problem),
                provenance=provenance, explanation=explanation, layout=spec)
    return replace(plan, sensitivity=r.sensitivity(space, problem))


def _space(workload: Workload, job: LLMJob, cat: Catalog) -> LLMSpace:
    """``build_llm_space``, read back from ``cloudfit.cache`` when the catalog, the package (code, the
    step model's calibration) and everything that shapes the space are those of an earlier call."""
    from cloudfit import cache

    if not cat.digest:
        return build_llm_space(workload, job, cat)
    w = workload
    parts = (cat.path, cat.digest, repr(job), w.model, w.accelerators, w.regions, w.spot, w.precision, w.max_nodes,
             w.max_gpus, w.allow_outlier_prices, w.clouds)
    space = cache.memo("llm-space", parts, lambda: build_llm_space(workload, job, cat))
    space.workload = workload
    return space


def _hw_words(space: LLMSpace, i: int) -> tuple[lsp.HardwareShape, str]:
    s = space.shapes[int(space.shape[i])]
    return space.search.hws[int(space.hw_index[int(space.shape[i])])], s.machine_type


def why_layout(space: LLMSpace, i: int, ranking: list[dict]) -> str:
    """Why this layout, in words: where each degree runs and over which link, MFU and memory, the next best."""
    lay = space.layout_of(i)
    hw, mt = _hw_words(space, i)
    nodes = int(space.nodes[i])
    parts = []
    if lay.tp > 1:
        where = "inside the" if lay.tp <= hw.nvlink_domain else "across"
        parts.append(f"TP={lay.tp} {where} {mt} node" + (" (NVLink)" if lay.tp <= hw.nvlink_domain else ""))
    if lay.pp > 1:
        parts.append(f"PP={lay.pp}{f' (interleaved, vp={lay.vp})' if lay.vp > 1 else ''} with {lay.grad_accum} "
                     f"micro-batches of {lay.micro_batch}")
    if lay.cp > 1:
        parts.append(f"CP={lay.cp}")
    inner = lay.tp * lay.pp * lay.cp
    dp_where = (f"across {nodes} nodes, {hw.node_gbps:,.0f} Gbps" if nodes > 1 and lay.dp * inner > hw.gpus_per_node
                else "inside the node")
    if lay.dp > 1:
        kind = "FSDP" if lay.zero == 3 else ("DP with the distributed optimizer (ZeRO-1)" if lay.zero == 1 else "DP")
        parts.append(f"{kind} over {lay.dp} ranks {dp_where}")
    parts.append(f"activation checkpointing {lay.ac}")
    words = "; ".join(parts)
    best = ranking[0] if ranking else None
    tail = ""
    if best is not None:
        tail = (f" — {best['mfu']:.0%} MFU, {best['memory_gib_per_device']:,.1f} of {hw.capacity_gib:g} GiB per GPU")
    if len(ranking) > 1:
        r2 = ranking[1]
        gap = 1 - r2["tokens_per_second"] / ranking[0]["tokens_per_second"]
        tail += (f"; the next layout ({r2['layout']}) is " + (f"{gap:.0%} slower" if gap >= 0.005 else
                                                                "as fast (within 0.5%)"))
    return words + tail + "."


def layout_spec(space: LLMSpace, i: int, a, alternative_ids: list[int]) -> dict:
    """``Plan.layout``: the chosen layout, its ranking among the layouts of the chosen shape, the checkpoint
    model, the trainer command and a local rehearsal — what a launcher needs."""
    job: LLMJob = space.job
    st = space.stats
    hw, mt = _hw_words(space, i)
    nodes = int(space.nodes[i])
    h = int(space.hw_index[int(space.shape[i])])
    lay = space.layout_of(i)
    res = space.search
    kw = dict(global_batch=job.batch, exact=job.global_batch is not None, precision=job.precision,
              finetune=job.finetune, lora_rank=job.lora_rank, c=job.constants(),
              memory_fit=res.memory_fits[h] if res.memory_fits else None, framework=job.framework,
              layout_ok=job.layout_ok())
    pinned = parse_constraints(job.layout, job.shape, job.seq_len)
    ranking = lsp.rank_layouts(st, job.shape, hw, nodes, top=TOP_LAYOUTS, constraints=pinned, **kw)
    runnable_pins = {**pinned, "vp": 1, **({"pp": 1} if job.shape.tied_embeddings else {})}
    runnable_best = lsp.rank_layouts(st, job.shape, hw, nodes, top=1, constraints=runnable_pins, **kw)
    res = space.search
    steps = max(1, math.ceil(job.tokens / (lay.global_batch * job.seq_len)))
    interval_h = float(a.checkpoint_interval_h[i])
    args = trainer_args(job, lay, steps, interval_s=interval_h * 3600.0 if math.isfinite(interval_h) else None)
    # another stack runs every layout searched (``Stack.layout_ok`` filtered them); cloudfit.train_llm has gaps
    why_not = runnable_gaps(job, lay) if job.stack_name == "cloudfit" else ""
    runnable = not why_not
    torchrun = ("torchrun --nnodes=$NUM_NODES --nproc_per_node=" + str(hw.gpus_per_node) +
                " --node_rank=$NODE_RANK --master_addr=$MASTER_ADDR --master_port=29500 -m cloudfit.train_llm " +
                " ".join(args) + " --checkpoint-dir $CHECKPOINT_DIR")
    rt = runnable_best[0] if runnable_best else None
    runnable_args = None
    if not runnable and rt is not None:
        from cloudfit.llm.layout import parse

        rl = parse(rt["layout"], gpus=lay.gpus)
        runnable_args = trainer_args(job, rl, max(1, math.ceil(job.tokens / (rl.global_batch * job.seq_len))),
                                     interval_s=interval_h * 3600.0 if math.isfinite(interval_h) else None)
    return {
        "text": lay.describe(), "degrees": lay.to_dict(), "model": job.shape.name, "shape": job.shape.to_dict(),
        "tokens": job.tokens, "seq_len": job.seq_len, "global_batch": lay.global_batch, "steps": steps,
        "finetune": job.finetune, "lora_rank": job.lora_rank if job.finetune == "lora" else None,
        "precision": job.precision, "gpus": lay.gpus, "nodes": nodes, "gpus_per_node": hw.gpus_per_node,
        "node_network_gbps": hw.node_gbps, "nvlink_domain": hw.nvlink_domain,
        "tokens_per_second": float(res.tokens_per_second[h, nodes - 1]), "mfu": float(res.mfu[h, nodes - 1]),
        "memory_gib_per_device": float(res.memory_gib[h, nodes - 1]), "memory_capacity_gib": hw.capacity_gib,
        "breakdown_s": {k: float(v[h, nodes - 1]) for k, v in res.breakdown.items()},
        "why": why_layout(space, i, ranking),
        "ranking": ranking,
        "alternatives": [_alt(space, j) for j in alternative_ids],
        "checkpoint": {
            "bytes": float(space.ckpt["checkpoint_bytes"]), "restore_bytes": float(space.ckpt["restore_bytes"]),
            "write_s": float(space.write_s[i]), "restart_s": float(space.restart_s[i]),
            "interval_h": interval_h if math.isfinite(interval_h) else None,
            "expected_preemptions": float(a.expected_preemptions[i]),
            "assumptions": "DCP writes one shard per rank in parallel at 50 MB/s each (CM-DARE's GCS line); "
                           f"restart = 420 s outage + restore + {RELAUNCH_BASE_S:g} s + {RELAUNCH_PER_NODE_S:g} s/node",
        },
        "launch": {"trainer": "cloudfit.train_llm", "args": args, "torchrun": torchrun, "runnable": runnable,
                   "note": "" if runnable else (
                       f"cloudfit.train_llm does not run {why_not}; nearest it runs: "
                       + (f"{rt['layout']} ({1 - rt['tokens_per_second'] / float(res.tokens_per_second[h, nodes - 1]):.0%}"
                          " slower)" if rt else "none that fits")),
                   "nearest_runnable": rt, "runnable_args": runnable_args},
        "rehearsal": rehearsal(job, lay),
        **({"stack": job.stack} if job.stack else {}),
        **({"profile": job.profile_file} if job.profile_file else {}),
    }


def runnable_gaps(job: LLMJob, lay) -> str:
    """What of ``lay`` ``cloudfit.train_llm`` cannot run ('' when it runs it as is): it runs FSDP2/HSDP, TP,
    1F1B pipelines and all-gather context parallelism, but no interleaved stages (vp > 1) and no pipeline
    over tied embeddings."""
    gaps = []
    if lay.vp > 1:
        gaps.append(f"interleaved pipeline stages (vp={lay.vp})")
    if lay.pp > 1 and job.shape.tied_embeddings:
        gaps.append("a pipeline over tied embeddings")
    if lay.pp > 1 and lay.schedule != "1f1b":
        gaps.append(f"the {lay.schedule} schedule")
    return " or ".join(gaps)


def _alt(space: LLMSpace, j: int) -> dict:
    res, h, n = space.search, int(space.hw_index[int(space.shape[j])]), int(space.nodes[j])
    return {"text": space.layout_of(j).describe(), "tokens_per_second": float(res.tokens_per_second[h, n - 1]),
            "mfu": float(res.mfu[h, n - 1]), "memory_gib_per_device": float(res.memory_gib[h, n - 1])}


def _trainer_shapes() -> set[str]:
    from cloudfit.llm_model import SHAPES  # plain Python (torch only when a model is built)

    return set(SHAPES)


def trainer_args(job: LLMJob, lay, steps: int, *, interval_s: float | None = None) -> list[str]:
    """``python -m cloudfit.train_llm`` arguments for ``lay`` (without ``--checkpoint-dir``). A shape the trainer
    knows goes by name; another (``--config``) by its dimensions (the trainer builds Llama-style blocks)."""
    if job.shape.name in _trainer_shapes():
        model = ["--shape", job.shape.name]
    else:
        s = job.shape
        model = ["--layers", str(s.layers), "--dim", str(s.hidden), "--heads", str(s.heads), "--kv-heads",
                 str(s.kv_heads), "--ffn-dim", str(s.ffn_hidden), "--vocab", str(s.vocab)]
        if s.tied_embeddings:
            model.append("--tie-embeddings")
    out = model + ["--dp-replicate", str(lay.dp_replicate), "--dp-shard", str(lay.dp_shard), "--tp", str(lay.tp),
                   "--pp", str(lay.pp), "--cp", str(lay.cp), "--ac", lay.ac, "--micro-batch", str(lay.micro_batch),
                   "--grad-accum", str(lay.grad_accum), "--seq-len", str(job.seq_len), "--steps", str(steps),
                   "--precision", "bf16"]
    if interval_s:
        out += ["--checkpoint-interval-s", f"{interval_s:.0f}"]
    return out


def rehearsal(job: LLMJob, lay, max_ranks: int = 4) -> dict:
    """A local CPU rehearsal of the layout (``cloudfit.train_llm.rehearsal_layout``'s nearest runnable layout on
    ``max_ranks`` gloo ranks): the shape shrunk (same layer types), micro-batch and accumulation at most 2,
    64-token sequences."""
    from cloudfit.train_llm import Layout as TrainerLayout
    from cloudfit.train_llm import rehearsal_layout

    r, notes = rehearsal_layout(TrainerLayout(dp_replicate=lay.dp_replicate, dp_shard=lay.dp_shard, tp=lay.tp,
                                              pp=lay.pp, cp=lay.cp, ac=lay.ac, micro_batch=lay.micro_batch,
                                              grad_accum=lay.grad_accum), max_ranks,
                                tied_embeddings=bool(job.shape.tied_embeddings))
    shape = job.shape.name if job.shape.name in _trainer_shapes() else "llama3-8b"
    if shape != job.shape.name:
        notes.append(f"{job.shape.name} is rehearsed with the shrunk llama3-8b block types")
    args = ["--shape", shape, "--shrink", "--dp-replicate", str(r.dp_replicate), "--dp-shard", str(r.dp_shard),
            "--tp", str(r.tp), "--pp", str(r.pp), "--cp", str(r.cp), "--ac", r.ac,
            "--micro-batch", str(min(r.micro_batch, 2)), "--grad-accum", str(max(r.pp, min(r.grad_accum, 2))),
            "--seq-len", "64"]
    return {"nproc": r.world_size, "args": args, "note": "; ".join(notes)}
