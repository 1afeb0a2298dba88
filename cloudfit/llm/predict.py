"""Predict tokens/s, MFU and memory of a large-model training layout on a cluster (pure Python + numpy).

Public API (issue 17 builds its layout search on it):
- ``predict(model, accelerator, ...) -> LLMPrediction`` for one layout (or ``layout="auto"``);
- ``candidate_layouts(shape, gpus, ...)`` every layout that can run on the model and cluster;
- ``predict_layouts(shape, accelerator, layouts, ...) -> dict of numpy arrays`` — one vectorised call
  for many layouts (tokens/s, step time, memory, fits, breakdown), ~µs per layout;
- ``best_layout(...)`` the fastest candidate that fits.
The calibrated constants live in ``cloudfit/llm/calibration.json`` (``scripts/fit_llm.py`` rebuilds it).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from cloudfit.errors import UsageError
from cloudfit.llm import hardware as lhw
from cloudfit.llm import memory as mem
from cloudfit.llm.layout import AC_CODE, Layout, LayoutError, parse
from cloudfit.llm.stats import TokenStats, token_stats
from cloudfit.llm.step import PIPELINE_ZERO, TRAINER, Constants, stack_args, step_time
from cloudfit.llm.zoo import LLMShape, resolve

CALIBRATION_PATH = Path(__file__).with_name("calibration.json")
PRECISIONS = ("bf16", "fp16", "fp8")


@lru_cache(maxsize=4)
def _load_constants(path: str) -> Constants:
    p = Path(path)
    if not p.is_file():
        return Constants()
    doc = json.loads(p.read_text(encoding="utf-8"))
    if doc.get("schema_version") != 1:
        raise UsageError(f"{p}: unknown LLM calibration schema {doc.get('schema_version')!r}")
    return Constants.from_dict(doc["constants"]).borrowed()


def constants(path: str | Path | None = None) -> Constants:
    """The shipped calibrated constants (defaults when the file is absent)."""
    return _load_constants(str(path or CALIBRATION_PATH))


def calibration_version(path: str | Path | None = None) -> str:
    p = Path(path or CALIBRATION_PATH)
    if not p.is_file():
        return "llm-uncalibrated"
    doc = json.loads(p.read_text(encoding="utf-8"))
    return str(doc.get("version", "llm-?"))


@dataclass(frozen=True)
class LLMPrediction:
    model: str
    accelerator: str
    gpus: int
    gpus_per_node: int
    nodes: int
    precision: str
    seq_len: int
    finetune: str
    layout: Layout
    tokens_per_second: float
    samples_per_second: float
    step_time_s: float
    mfu: float
    flops_per_token: float
    memory: mem.MemoryEstimate
    breakdown: dict
    low: float
    high: float
    node_gbps: float
    framework: str
    #: what the prediction rests on where no public run of the accelerator at this precision exists ('' else)
    basis: str = ""

    @property
    def fits(self) -> bool:
        return self.memory.fits

    def to_dict(self) -> dict:
        return {
            "model": self.model, "accelerator": self.accelerator, "gpus": self.gpus,
            "gpus_per_node": self.gpus_per_node, "nodes": self.nodes, "precision": self.precision,
            "seq_len": self.seq_len, "finetune": self.finetune,
            "tokens_per_second": self.tokens_per_second, "samples_per_second": self.samples_per_second,
            "step_time_s": self.step_time_s, "mfu": self.mfu,
            "memory_gib_per_device": self.memory.total_gib, "memory_capacity_gib": self.memory.capacity_gib,
            "fits": self.fits, "reason": self.memory.reason,
            "layout": self.layout.to_dict(),
            "breakdown": self.breakdown, "memory_breakdown_gib": self.memory.to_dict(),
            "low": self.low, "high": self.high,
            "flops_per_token": self.flops_per_token,
            "flops_convention": "6 x matmul params (LM head in, input embedding out) + causal-half attention; "
                                "MFU against the dense peak at the run's precision",
            "node_network_gbps": self.node_gbps, "framework": self.framework,
            "extrapolation": self.basis,
            "model_version": calibration_version(),
        }


def tokens_to_samples(tokens: float, seq_len: int) -> float:
    """Samples (sequences) in ``tokens`` at ``seq_len`` tokens each: tokens ÷ sequence length."""
    if not (isinstance(tokens, (int, float)) and math.isfinite(tokens) and tokens > 0):
        raise UsageError(f"--tokens must be positive, got {tokens!r}")
    if not isinstance(seq_len, int) or seq_len < 1:
        raise UsageError(f"--seq-len must be a positive integer, got {seq_len!r}")
    return tokens / seq_len


#: Training stacks the step model has constants for (``--framework``); the default is cloudfit's own trainer
#: (``cloudfit.llm.step.TRAINER``), whatever the layout.
FRAMEWORKS = ("cloudfit", "fsdp", "megatron", "megatron-deepspeed")


#: The stack a job runs on when none is named: cloudfit's own FSDP2 trainer (what ``launch`` runs).
DEFAULT_FRAMEWORK = TRAINER


def _framework(lay: Layout, framework: str | None) -> str:
    """The stack that runs the job: the named one, else cloudfit's own trainer — never chosen by the layout
    (a layout is priced with the constants of the stack that will run it)."""
    if framework:
        if framework not in FRAMEWORKS:
            raise UsageError(f"--framework must be one of {', '.join(FRAMEWORKS)}, got {framework!r}")
        return framework
    return DEFAULT_FRAMEWORK


def _check_precision(accelerator: str, precision: str) -> None:
    if precision not in PRECISIONS:
        raise UsageError(f"--precision must be one of {', '.join(PRECISIONS)} for LLM training, got {precision!r}")
    lhw.peak_tflops(accelerator, precision)  # fp8 on a GPU without FP8 → UsageError


def _hw(accelerator: str, precision: str, gpus_per_node: int, machine_type: str | None,
        network_gbps: float | None, c: Constants) -> dict:
    acc = lhw.get(accelerator)
    peak = lhw.peak_tflops(acc.name, precision)
    eff = {fw: c.efficiency(acc.name, precision, acc.memory_bandwidth_gbps / peak, fw) for fw in c.fw_eff}
    peak16 = lhw.peak_tflops(acc.name, "bf16")
    eff16 = {fw: c.efficiency(acc.name, "bf16", acc.memory_bandwidth_gbps / peak16, fw) for fw in c.fw_eff}
    if network_gbps is not None and not (network_gbps > 0 and math.isfinite(network_gbps)):
        raise UsageError(f"--network-gbps must be positive, got {network_gbps!r}")
    gbps = float(network_gbps) if network_gbps is not None else lhw.node_gbps(acc.name, machine_type)
    # NCCL's fabric between the nodes (issue 33); a bare --network-gbps keeps the fitted (RDMA-class) fabric
    fabric = lhw.node_fabric(acc.name, machine_type) if machine_type or network_gbps is None else None
    return {"peak_tflops": peak, "node_transport": fabric, "attn_peak_tflops": peak16, "efficiency": eff, "efficiency16": eff16,
            "memory_gbs": acc.memory_bandwidth_gbps,
            "intra_gbs": lhw.intra_gbps(acc.name), "node_gbps": gbps, "gpus_per_node": gpus_per_node,
            "nvlink_domain": lhw.nvlink_domain(acc.name, gpus_per_node), "capacity_gib": float(acc.memory_gib),
            "name": acc.name}


def _model_args(st: TokenStats) -> dict:
    return {"layers": st.layers, "hidden": st.hidden, "kv_dim": st.kv_dim, "seq_len": st.seq_len,
            "vocab": st.vocab, "act_none": st.act_bytes[0], "heads": st.heads, "layer_params": st.layer_parameters,
            "stage_extra_params": max(st.embedding_parameters, st.head_parameters), "params": st.parameters,
            "layer_matmul_flops": st.layer_matmul_flops, "layer_attention_flops": st.layer_attention_flops,
            "head_flops": st.head_flops}


def _layout_arrays(layouts: Sequence[Layout], fw: Sequence[str], c: Constants, precision: str = "bf16") -> dict:
    g = lambda f: np.array([getattr(l, f) for l in layouts], dtype=float)  # noqa: E731
    return {"tp": g("tp"), "pp": g("pp"), "cp": g("cp"), "vp": g("vp"), "dp_replicate": g("dp_replicate"),
            "dp_shard": g("dp_shard"), "zero": g("zero"), "micro_batch": g("micro_batch"),
            "grad_accum": g("grad_accum"), "ac_code": np.array([AC_CODE[l.ac] for l in layouts], dtype=float),
            **stack_args(c, fw, fp8=float(precision == "fp8"))}


def predict_layouts(shape: LLMShape, accelerator: str, layouts: Sequence[Layout], *, seq_len: int,
                    gpus_per_node: int = 8, precision: str = "bf16", finetune: str = "full", lora_rank: int = 16,
                    machine_type: str | None = None, network_gbps: float | None = None,
                    framework: str | None = None, c: Constants | None = None) -> dict:
    """Vectorised prediction of many layouts of one model on one accelerator type. Returns numpy arrays:
    ``tokens_per_second``, ``step_s``, ``mfu``, ``memory_gib``, ``fits`` and the breakdown keys (``compute_s``,
    ``tp_s``, ``cp_s``, ``fsdp_s``, ``dp_s``, ``pp_p2p_s``, ``bubble_s``, ``other_s``), plus ``capacity_gib`` and
    ``framework`` (list)."""
    c = c or constants()
    _check_precision(accelerator, precision)
    st = token_stats(shape, seq_len)
    hwd = _hw(accelerator, precision, gpus_per_node, machine_type, network_gbps, c)
    fw = [_framework(l, framework) for l in layouts]
    arr = _layout_arrays(layouts, fw, c, precision)
    hw_keys = ("peak_tflops", "attn_peak_tflops", "memory_gbs", "intra_gbs", "node_gbps", "gpus_per_node", "nvlink_domain")
    out = step_time(**_model_args(st), **arr, efficiency=np.array([hwd["efficiency"][f] for f in fw]),
                    attn_efficiency=np.array([hwd["efficiency16"][f] for f in fw]),
                    **{k: hwd[k] for k in hw_keys}, node_transport=hwd["node_transport"], c=c,
                    lora=finetune == "lora")
    tokens = arr["micro_batch"] * arr["grad_accum"] * np.array([l.dp for l in layouts], dtype=float) * seq_len
    gpus = np.array([l.gpus for l in layouts], dtype=float)
    out["tokens_per_second"] = tokens / out["step_s"]
    out["mfu"] = out["tokens_per_second"] * st.flops_per_token / (gpus * hwd["peak_tflops"] * 1e12)
    out["memory_gib"] = mem.total_gib_many(
        st, tp=arr["tp"], pp=arr["pp"], cp=arr["cp"], vp=arr["vp"], zero=arr["zero"], dp_shard=arr["dp_shard"],
        micro_batch=arr["micro_batch"], grad_accum=arr["grad_accum"], ac_code=arr["ac_code"],
        gpipe=np.array([l.schedule == "gpipe" for l in layouts], dtype=float), precision=precision,
        finetune=finetune, lora_rank=lora_rank, framework=fw[0] if fw else DEFAULT_FRAMEWORK)
    out["capacity_gib"] = hwd["capacity_gib"]
    out["fits"] = out["memory_gib"] <= hwd["capacity_gib"]
    out["framework"] = fw
    return out


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidate_layouts(shape: LLMShape, gpus: int, *, gpus_per_node: int = 8, global_batch: int,
                      seq_len: int, nvlink_domain: int | None = None,
                      ac_modes: Iterable[str] = ("none", "selective", "full"),
                      max_micro_batch: int = 8, pipeline_zero: int | None = None) -> list[Layout]:
    """Layouts that can run ``shape`` on ``gpus`` GPUs with a global batch of ``global_batch`` sequences:
    tp inside the NVLink domain dividing the heads, pp ≤ layers, cp dividing the sequence, FSDP (zero 3)
    without a pipeline and ``pipeline_zero`` with one (default: the trainer's, ``step.PIPELINE_ZERO``),
    micro-batches dividing the batch."""
    pz = PIPELINE_ZERO[DEFAULT_FRAMEWORK] if pipeline_zero is None else pipeline_zero
    dom = nvlink_domain or gpus_per_node
    out: list[Layout] = []
    for tp in (d for d in _divisors(gpus) if d <= dom and shape.heads % d == 0):
        for pp in (d for d in _divisors(gpus // tp) if d <= shape.layers and d <= 64):
            for cp in (d for d in _divisors(gpus // (tp * pp)) if d <= 16 and seq_len % (2 * d) == 0 or d == 1):
                dp = gpus // (tp * pp * cp)
                if global_batch % dp:
                    continue
                per_rank = global_batch // dp
                for mb in (d for d in _divisors(per_rank) if d <= max_micro_batch):
                    ga = per_rank // mb
                    if pp > 1 and ga < pp:
                        continue
                    for ac in ac_modes:
                        zero, rep, shard = (3, 1, dp) if pp == 1 else (pz, 1, dp)
                        if dp == 1:
                            zero, shard = (0, 1)
                        vp_opts = [1] + ([2] if pp > 1 and shape.layers % (pp * 2) == 0 else [])
                        for vp in vp_opts:
                            out.append(Layout(rep, shard, zero, tp, pp, cp, vp, mb, ga, ac,
                                              "interleaved" if vp > 1 else "1f1b"))
    return out


def best_layout(shape: LLMShape, accelerator: str, gpus: int, *, seq_len: int, global_batch: int,
                gpus_per_node: int = 8, precision: str = "bf16", finetune: str = "full", lora_rank: int = 16,
                machine_type: str | None = None, network_gbps: float | None = None, framework: str | None = None,
                c: Constants | None = None) -> Layout:
    """The fastest layout that fits (``InfeasibleError``-style ``UsageError`` when none fits), each layout run
    by ``framework`` (default: cloudfit's own FSDP2 trainer, whatever the layout)."""
    dom = lhw.nvlink_domain(accelerator, gpus_per_node)
    cands = candidate_layouts(shape, gpus, gpus_per_node=gpus_per_node, global_batch=global_batch,
                              seq_len=seq_len, nvlink_domain=dom,
                              pipeline_zero=PIPELINE_ZERO[_framework(None, framework)])
    if not cands:
        raise LayoutError(f"no layout of {shape.name} fits the shape of {gpus} GPUs with a global batch of "
                          f"{global_batch} sequences")
    r = predict_layouts(shape, accelerator, cands, seq_len=seq_len, gpus_per_node=gpus_per_node,
                        precision=precision, finetune=finetune, lora_rank=lora_rank, machine_type=machine_type,
                        network_gbps=network_gbps, framework=framework, c=c)
    tps = np.where(r["fits"], r["tokens_per_second"], -1.0)
    fit = np.flatnonzero(r["fits"])  # headroom: see memory.ROOMY_FRACTION
    tps[fit[mem.crowded(tps[fit], np.asarray(r["memory_gib"])[fit], r["capacity_gib"])]] = 0.0
    i = int(np.argmax(tps))
    if tps[i] < 0:
        j = int(np.argmin(r["memory_gib"]))
        raise LayoutError(f"no layout of {shape.name} fits {gpus} × {lhw.get(accelerator).name}: the smallest "
                          f"needs {r['memory_gib'][j]:,.1f} GiB of {r['capacity_gib']:,.0f} GiB per GPU "
                          f"({cands[j].describe()})")
    return cands[i]


def predict(model: str | LLMShape | None, accelerator: str, *, config: str | Path | None = None,
            gpus_per_node: int = 8, nodes: int = 1, precision: str = "bf16", seq_len: int = 8192,
            batch_size: int = 1, layout: str | Layout = "auto", finetune: str = "full", lora_rank: int = 16,
            machine_type: str | None = None, network_gbps: float | None = None, framework: str | None = None,
            c: Constants | None = None) -> LLMPrediction:
    """Predict one layout (``layout="auto"``: the fastest that fits) of a model on nodes × gpus_per_node GPUs.

    ``batch_size`` is the batch of sequences per data-parallel rank and step (mb × ga); with ``auto`` the
    global batch is held at ``batch_size`` × GPUs (what pure data parallelism would train).
    """
    c = c or constants()
    shape = model if isinstance(model, LLMShape) else resolve(model, config)
    if gpus_per_node < 1 or nodes < 1:
        raise UsageError(f"--count and --nodes must be at least 1 (got {gpus_per_node} and {nodes})")
    if finetune not in ("full", "lora"):
        raise UsageError(f"--finetune must be full or lora, got {finetune!r}")
    shape.check_lora_rank(lora_rank)
    if batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1, got {batch_size}")
    _check_precision(accelerator, precision)
    st = token_stats(shape, seq_len)
    gpus = gpus_per_node * nodes
    acc = lhw.get(accelerator)
    if isinstance(layout, Layout):
        lay = layout
    elif layout.strip().lower() == "auto":
        lay = best_layout(shape, acc.name, gpus, seq_len=seq_len, global_batch=batch_size * gpus,
                          gpus_per_node=gpus_per_node, precision=precision, finetune=finetune, lora_rank=lora_rank,
                          machine_type=machine_type, network_gbps=network_gbps, framework=framework, c=c)
    else:
        lay = parse(layout, gpus=gpus, sequences_per_replica=batch_size,
                    pipeline_zero=PIPELINE_ZERO[_framework(None, framework)])
    lay.check(gpus=gpus, heads=shape.heads, kv_heads=shape.kv_heads, layers=shape.layers)
    if lay.cp > 1 and seq_len % lay.cp:
        raise LayoutError(f"cp={lay.cp} does not divide the sequence length {seq_len}")
    r = predict_layouts(shape, acc.name, [lay], seq_len=seq_len, gpus_per_node=gpus_per_node, precision=precision,
                        finetune=finetune, lora_rank=lora_rank, machine_type=machine_type,
                        network_gbps=network_gbps, framework=framework, c=c)
    tps = float(r["tokens_per_second"][0])
    step = float(r["step_s"][0])
    parts = {"compute_s": "compute", "tp_s": "tp", "fsdp_s": "fsdp", "dp_s": "dp", "pp_p2p_s": "pp",
             "cp_s": "cp", "bubble_s": "bubble", "other_s": "other"}
    breakdown = {f"{v}_s": float(r[k][0]) for k, v in parts.items()}
    breakdown = {"compute_s": breakdown["compute_s"], "exposed_tp_s": breakdown["tp_s"],
                 "exposed_fsdp_s": breakdown["fsdp_s"], "exposed_dp_s": breakdown["dp_s"],
                 "exposed_pp_s": breakdown["pp_s"], "exposed_cp_s": breakdown["cp_s"],
                 "bubble_s": breakdown["bubble_s"], "optimizer_and_overhead_s": breakdown["other_s"],
                 "step_s": step}
    lo, hi = c.band_for(acc.name, precision)
    gbps = float(network_gbps) if network_gbps is not None else lhw.node_gbps(acc.name, machine_type)
    return LLMPrediction(
        model=shape.name, accelerator=acc.name, gpus=gpus, gpus_per_node=gpus_per_node, nodes=nodes,
        precision=precision, seq_len=seq_len, finetune=finetune, layout=lay, tokens_per_second=tps,
        samples_per_second=tps / seq_len, step_time_s=step, mfu=float(r["mfu"][0]),
        flops_per_token=st.flops_per_token,
        memory=mem.estimate(st, lay, capacity_gib=float(acc.memory_gib), precision=precision, finetune=finetune,
                            lora_rank=lora_rank, accelerator=acc.name, framework=r["framework"][0]),
        breakdown=breakdown,
        low=tps * math.exp(lo), high=tps * math.exp(hi), node_gbps=gbps, framework=r["framework"][0],
        basis=c.extrapolation(acc.name, precision))
