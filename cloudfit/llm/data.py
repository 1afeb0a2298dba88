"""The public LLM measurements (``data/llm/measurements.csv``) as per-row arrays for the step model.

Rebuild the CSV with ``python scripts/build_llm_measurements.py`` (see data/llm/PROVENANCE.md).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cloudfit.llm import hardware as lhw
from cloudfit.llm.layout import AC_CODE, Layout
from cloudfit.llm.stats import token_stats
from cloudfit.llm.step import Constants, stack_args, step_time
from cloudfit.llm.zoo import LLMShape

ROOT = Path(__file__).resolve().parents[2]
MEASUREMENTS = ROOT / "data" / "llm" / "measurements.csv"


def load_rows(path: str | Path | None = None, *, latest_only: bool = True) -> list[dict]:
    """Rows of the measurement table (``latest_only``: one row per Megatron-Bridge configuration, the newest
    container's)."""
    p = Path(path or MEASUREMENTS)
    with p.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    if latest_only:
        rows = [r for r in rows if r["latest"] == "1"]
    return rows


def row_shape(r: dict) -> LLMShape:
    return LLMShape(name=r["model"], hidden=int(r["hidden"]), layers=int(r["layers"]), heads=int(r["heads"]),
                    kv_heads=int(r["kv_heads"]), ffn_hidden=int(r["ffn_hidden"]), vocab=int(r["vocab"]),
                    mlp=r["mlp"], tied_embeddings=r["tied"] == "1", bias=r["bias"] == "1", norm=r["norm"],
                    learned_positions=int(r["learned_positions"]),
                    max_seq_len=max(int(r["seq_len"]), int(r["learned_positions"]) or int(r["seq_len"])),
                    family=r["source"])


def row_layout(r: dict) -> Layout:
    """The row's layout. Megatron-Bridge's tables do not say which recompute a recipe used: its rows carry
    ``selective``, raised to ``full`` when the memory model says selective cannot fit (a stated assumption)."""
    dp, zero = int(r["dp"]), int(r["zero"])
    rep, shard = (dp, 1) if zero == 0 else (1, dp)
    vp = int(r["vp"])
    lay = Layout(dp_replicate=rep, dp_shard=shard, zero=zero, tp=int(r["tp"]), pp=int(r["pp"]), cp=int(r["cp"]),
                 vp=vp, micro_batch=int(r["micro_batch"]), grad_accum=int(r["grad_accum"]), ac=r["ac"],
                 schedule="interleaved" if vp > 1 else "1f1b")
    if r["source"] == "megatron-bridge" and lay.ac == "selective":
        from dataclasses import replace

        from cloudfit.llm import memory as mem

        st = token_stats(row_shape(r), int(r["seq_len"]))
        e = mem.estimate(st, lay, capacity_gib=float(lhw.get(r["accelerator"]).memory_gib),
                         precision=r["precision"], finetune=r["finetune"], framework=r["framework"])
        if not e.fits:
            lay = replace(lay, ac="full")
    return lay


@dataclass
class Table:
    """Per-row arrays: model stats, layout, hardware, measured tokens/s and group labels."""

    rows: list[dict]
    model_args: dict
    layout_args: dict
    hw_args: dict
    keys: list[str]  # "ACC/precision" per row
    bw_per_tflop: np.ndarray
    framework: list[str]
    lora: np.ndarray
    measured: np.ndarray  # tokens/s, whole cluster
    tokens_per_step: np.ndarray
    flops_per_token: np.ndarray
    gpus: np.ndarray
    peak: np.ndarray
    attn_peak: np.ndarray

    def subset(self, mask) -> "Table":
        idx = np.flatnonzero(mask)
        pick = lambda d: {k: (v[idx] if isinstance(v, np.ndarray) and v.ndim else v) for k, v in d.items()}  # noqa
        return Table([self.rows[i] for i in idx], pick(self.model_args), pick(self.layout_args), pick(self.hw_args),
                     [self.keys[i] for i in idx], self.bw_per_tflop[idx], [self.framework[i] for i in idx],
                     self.lora[idx], self.measured[idx], self.tokens_per_step[idx], self.flops_per_token[idx],
                     self.gpus[idx], self.peak[idx], self.attn_peak[idx])

    def column(self, name: str) -> np.ndarray:
        return np.array([r[name] for r in self.rows])


def table(rows: list[dict] | None = None) -> Table:
    rows = load_rows() if rows is None else rows
    m: dict[str, list] = {k: [] for k in ("layers", "hidden", "kv_dim", "seq_len", "vocab", "act_none", "heads",
                                           "layer_params",
                                           "stage_extra_params", "params", "layer_matmul_flops",
                                           "layer_attention_flops", "head_flops")}
    lay: dict[str, list] = {k: [] for k in ("tp", "pp", "cp", "vp", "dp_replicate", "dp_shard", "zero",
                                             "micro_batch", "grad_accum", "ac_code")}
    hw: dict[str, list] = {k: [] for k in ("memory_gbs", "intra_gbs", "node_gbps", "gpus_per_node",
                                            "nvlink_domain")}
    keys, bwpt, fws, lora, meas, tok, fpt, gpus, peak, apeak = [], [], [], [], [], [], [], [], [], []
    for r in rows:
        st = token_stats(row_shape(r), int(r["seq_len"]))
        for k, v in (("layers", st.layers), ("hidden", st.hidden), ("kv_dim", st.kv_dim), ("seq_len", st.seq_len),
                     ("vocab", st.vocab), ("act_none", st.act_bytes[0]), ("heads", st.heads), ("layer_params", st.layer_parameters),
                     ("stage_extra_params", max(st.embedding_parameters, st.head_parameters)),
                     ("params", st.parameters), ("layer_matmul_flops", st.layer_matmul_flops),
                     ("layer_attention_flops", st.layer_attention_flops), ("head_flops", st.head_flops)):
            m[k].append(v)
        L = row_layout(r)
        for k, v in (("tp", L.tp), ("pp", L.pp), ("cp", L.cp), ("vp", L.vp), ("dp_replicate", L.dp_replicate),
                     ("dp_shard", L.dp_shard), ("zero", L.zero), ("micro_batch", L.micro_batch),
                     ("grad_accum", L.grad_accum), ("ac_code", AC_CODE[L.ac])):
            lay[k].append(v)
        acc = lhw.get(r["accelerator"])
        prec = "bf16" if r["precision"] == "fp16" else r["precision"]
        pk = lhw.peak_tflops(acc.name, prec)
        gpn = int(r["gpus_per_node"])
        for k, v in (("memory_gbs", acc.memory_bandwidth_gbps), ("intra_gbs", lhw.intra_gbps(acc.name)),
                     ("node_gbps", float(r["node_gbps"])), ("gpus_per_node", gpn),
                     ("nvlink_domain", lhw.nvlink_domain(acc.name, gpn))):
            hw[k].append(v)
        keys.append(f"{acc.name}/{prec}")
        bwpt.append(acc.memory_bandwidth_gbps / pk)
        fws.append(r["framework"])
        lora.append(r["finetune"] == "lora")
        meas.append(float(r["tokens_per_second"]))
        tok.append(L.global_batch * st.seq_len)
        fpt.append(st.flops_per_token)
        gpus.append(L.gpus)
        peak.append(pk)
        apeak.append(lhw.peak_tflops(acc.name, "bf16"))
    arr = lambda d: {k: np.asarray(v, dtype=float) for k, v in d.items()}  # noqa: E731
    return Table(rows, arr(m), arr(lay), arr(hw), keys, np.asarray(bwpt), fws, np.asarray(lora),
                 np.asarray(meas), np.asarray(tok, dtype=float), np.asarray(fpt), np.asarray(gpus, dtype=float),
                 np.asarray(peak), np.asarray(apeak))


def predict_table(t: Table, c: Constants) -> dict:
    """Step-model prediction of every row of ``t`` with constants ``c`` (vectorised): each row priced with the
    constants of the stack that ran it (its ``framework`` column)."""
    fw = t.framework
    eff = np.array([c.efficiency(k.split("/")[0], k.split("/")[1], b, f)
                    for k, b, f in zip(t.keys, t.bw_per_tflop, fw)])
    bw16 = t.hw_args["memory_gbs"] / t.attn_peak
    eff16 = np.array([c.efficiency(k.split("/")[0], "bf16", b, f) for k, b, f in zip(t.keys, bw16, fw)])
    fp8 = np.array([k.endswith("/fp8") for k in t.keys], dtype=float)
    out = step_time(**t.model_args, **t.layout_args, **t.hw_args, peak_tflops=t.peak, attn_peak_tflops=t.attn_peak,
                    efficiency=eff, attn_efficiency=eff16, **stack_args(c, fw, fp8=fp8), c=c, lora=t.lora)
    out["tokens_per_second"] = t.tokens_per_step / out["step_s"]
    return out
