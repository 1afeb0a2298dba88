"""LLM step model realism (issue 24, items 5 and 6): FP8/bf16 and CP ratios, attention at long sequences,
published peak memory, and the layout the stack picks — in-sample and leave-one-group-out.

    python bench/llm_realism.py                 # prints the markdown section of bench/RESULTS_llm.md
    python bench/llm_realism.py --json out.json

Runs against whichever ``cloudfit`` is on the path (PYTHONPATH), so the same script measures before and after.
Data: ``data/llm/measurements.csv`` (llm-foundry's FP8/bf16 pairs and long sequences, Megatron-Bridge's one
CP-vs-TP pair) and ``data/raw/sailor/validation_summary.csv`` (the only published peak memory we have: Sailor's
Megatron-DeepSpeed runs on GH200). Ratios are per-GPU throughput ratios; "held out" refits the constants
without the rows whose ratio is scored (one model, or the pair, at a time).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # PYTHONPATH first: the same script measures another tree

from cloudfit.llm import data, fit  # noqa: E402
from cloudfit.llm import memory as mem  # noqa: E402
from cloudfit.llm import predict as P  # noqa: E402
from cloudfit.llm.stats import token_stats  # noqa: E402


def _pairs(t, want):
    """{group key: {variant: row index}} for llm-foundry H100 8-GPU rows (``want`` picks the variant)."""
    out: dict = {}
    for i, r in enumerate(t.rows):
        v = want(r)
        if v is not None:
            out.setdefault(v[0], {})[v[1]] = i
    return out


def _fp8_groups(t):
    def want(r):
        if r["source"] == "llm-foundry" and r["accelerator"] == "H100" and r["gpus"] == "8":
            return (r["model"], int(r["seq_len"])), r["precision"]
        return None
    return {k: d for k, d in _pairs(t, want).items() if {"fp8", "bf16"} <= set(d)}


def _seq_groups(t):
    """llm-foundry bf16 8-GPU rows of one model at 8K and at ≥ 32K tokens (quadratic attention)."""
    def want(r):
        if (r["source"] == "llm-foundry" and r["gpus"] == "8" and r["precision"] == "bf16"
                and int(r["seq_len"]) in (8192, 32768, 65536)):
            return (r["model"], r["accelerator"]), int(r["seq_len"])
        return None
    return {k: d for k, d in _pairs(t, want).items() if 8192 in d and len(d) > 1}


def _cp_pair(t):
    idx = [i for i, r in enumerate(t.rows) if r["model"] == "llama3-405b" and r["accelerator"] == "GB300"]
    cp = [i for i in idx if t.rows[i]["cp"] == "2"]
    ref = [i for i in idx if t.rows[i]["cp"] == "1"]
    return cp[0], ref[0]


def _per_gpu(t, p, i):
    return p[i] / t.gpus[i], t.measured[i] / t.gpus[i]


def _ratio(t, p, a, b):
    pa, ma = _per_gpu(t, p, a)
    pb, mb = _per_gpu(t, p, b)
    return pa / pb, ma / mb


def _held_out(t, drop):
    """Constants fitted without rows ``drop`` (bool mask), predictions for every row."""
    c = fit.fit(t.subset(~drop))
    return data.predict_table(t, c)["tokens_per_second"]


def ratios(t, say) -> dict:
    c = P.constants()
    p_in = data.predict_table(t, c)["tokens_per_second"]
    models = t.column("model")
    prec = np.array([k.split("/")[1] for k in t.keys])
    src = t.column("source")
    out = {"fp8": [], "seq": [], "cp": []}
    fp8 = _fp8_groups(t)
    for m in sorted({k[0] for k in fp8}):
        say(f"fp8 held out: {m}")
        p_ho = _held_out(t, (models == m) & (prec == "fp8") & (src == "llm-foundry"))
        for key in sorted(k for k in fp8 if k[0] == m):
            d = fp8[key]
            pr, meas = _ratio(t, p_in, d["fp8"], d["bf16"])
            ph, _ = _ratio(t, p_ho, d["fp8"], d["bf16"])
            out["fp8"].append({"group": f"{key[0]} @ {key[1]:,}", "measured": meas, "in_sample": pr, "held_out": ph})
    seq = _seq_groups(t)
    for key in sorted(seq):
        say(f"long-sequence held out: {key}")
        m = (models == key[0]) & (src == "llm-foundry") & (t.column("accelerator") == key[1])
        p_ho = _held_out(t, m & np.array([int(r["seq_len"]) >= 32768 for r in t.rows]))
        d = seq[key]
        for s in sorted(x for x in d if x != 8192):
            pr, meas = _ratio(t, p_in, d[s], d[8192])
            ph, _ = _ratio(t, p_ho, d[s], d[8192])
            out["seq"].append({"group": f"{key[0]} {key[1]} {s // 1024}K ÷ 8K", "measured": meas, "in_sample": pr,
                               "held_out": ph})
    a, b = _cp_pair(t)
    say("cp pair held out")
    drop = np.zeros(len(t.rows), bool)
    drop[[a, b]] = True
    p_ho = _held_out(t, drop)
    pr, meas = _ratio(t, p_in, a, b)
    ph, _ = _ratio(t, p_ho, a, b)
    out["cp"].append({"group": "llama3-405b 256×GB300 8K: tp2·cp2 ÷ tp4·cp1 (pp8 vp4)", "measured": meas,
                      "in_sample": pr, "held_out": ph})
    return out


SAILOR_GPN, SAILOR_SEQ = 4, 2048


def sailor_memory() -> list[dict]:
    """Predicted peak GiB of Sailor's GH200 runs (Megatron-DeepSpeed, bf16 assumed, no recompute) vs published."""
    sys.path.insert(0, str(ROOT / "bench"))
    import sailor_gh200 as sg

    shapes = sg.shapes()
    out = []
    for r in sg.runs():
        if not r["max_mem_gib"] or math.isnan(r["max_mem_gib"]):
            continue
        st = token_stats(shapes[r["model"]], SAILOR_SEQ)
        lay = P.parse(f"dp={r['dp']},pp={r['pp']},mb={r['mb']},ga={r['ga']},ac=none,schedule=1f1b", gpus=r["gpus"],
                      sequences_per_replica=r["mb"] * r["ga"])
        try:
            e = mem.estimate(st, lay, capacity_gib=96.0, framework="megatron-deepspeed")
        except TypeError:  # a predictor without stacks
            e = mem.estimate(st, lay, capacity_gib=96.0)
        out.append({"run": f"{r['model']} {r['file']}", "layout": lay.describe(), "published_gib": r["max_mem_gib"],
                    "predicted_gib": e.total_gib})
    return out


def choices() -> dict:
    p = P.predict("llama3-8b", "H100", gpus_per_node=8, nodes=8, seq_len=8192, batch_size=1, layout="auto")
    q = P.predict("llama3-405b", "H100", gpus_per_node=8, nodes=64, seq_len=8192, batch_size=32,
                  layout="fsdp=8,tp=8,pp=8,mb=1,ga=32,ac=full")
    return {"auto_8b_64xH100_8k": {"layout": p.layout.describe(), "framework": p.framework,
                                   "tokens_per_s_per_gpu": p.tokens_per_second / 64},
            "llama3_405b_512xH100_fsdp8_tp8_pp8": {"framework": q.framework, "step_s": q.step_time_s,
                                                   "exposed_fsdp_s": q.breakdown["exposed_fsdp_s"],
                                                   "memory_gib": q.memory.total_gib,
                                                   "tokens_per_s_per_gpu": q.tokens_per_second / 512}}


def _ape(x, y):
    return abs(x / y - 1)


def markdown(rep: dict) -> str:
    L = [f"Command: `PYTHONPATH=. python bench/llm_realism.py`. Date {rep['date']}. Machine: {rep['machine']}. "
         f"Calibration {rep['calibration']}; {rep['seconds']:.0f} s.", ""]
    for name, title in (("fp8", "FP8 ÷ bf16 throughput, llm-foundry FSDP on 8 H100 (held out: that model's FP8 rows)"),
                        ("seq", "long ÷ 8K-token throughput, llm-foundry bf16 (held out: that model's ≥ 32K rows)"),
                        ("cp", "context parallel vs tensor parallel, Megatron-Bridge (held out: both rows)")):
        rows = rep["ratios"][name]
        L += [f"**{title}**", "", "| group | measured | in-sample (error) | held out (error) |", "|---|---:|---:|---:|"]
        for r in rows:
            L.append(f"| {r['group']} | {r['measured']:.3f} | {r['in_sample']:.3f} ({_ape(r['in_sample'], r['measured']):.1%}) "
                     f"| {r['held_out']:.3f} ({_ape(r['held_out'], r['measured']):.1%}) |")
        worst_in = max(_ape(r["in_sample"], r["measured"]) for r in rows)
        worst_ho = max(_ape(r["held_out"], r["measured"]) for r in rows)
        within = sum(_ape(r["held_out"], r["measured"]) <= 0.10 for r in rows)
        L += ["", f"Worst error in-sample {worst_in:.1%}, held out {worst_ho:.1%}; held out within 10%: {within} of "
                  f"{len(rows)}.", ""]
    m = rep["memory"]
    L += ["**Published peak memory (Sailor, Megatron-DeepSpeed on GH200; bf16 and no recompute assumed)**", "",
          "| run | layout | published GiB | predicted GiB | error |", "|---|---|---:|---:|---:|"]
    for r in m:
        L.append(f"| {r['run']} | {r['layout']} | {r['published_gib']:.1f} | {r['predicted_gib']:.1f} | "
                 f"{r['predicted_gib'] / r['published_gib'] - 1:+.1%} |")
    ok = sum(abs(r["predicted_gib"] / r["published_gib"] - 1) <= 0.10 for r in m)
    L += ["", f"Within 10%: {ok} of {len(m)}; under-predicted: {sum(r['predicted_gib'] < r['published_gib'] for r in m)}.",
          ""]
    ch = rep["choices"]
    a, b = ch["auto_8b_64xH100_8k"], ch["llama3_405b_512xH100_fsdp8_tp8_pp8"]
    L += [f"`predict --layout auto` llama3-8b, 64 H100, 8K: `{a['layout']}` on `{a['framework']}`, "
          f"{a['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU.",
          f"llama3-405b, 512 H100, fsdp 8 × tp 8 × pp 8, 32 micro-batches, ac=full (`{b['framework']}`): step "
          f"{b['step_s']:.1f} s (exposed FSDP {b['exposed_fsdp_s']:.1f} s), {b['memory_gib']:.1f} GiB per GPU, "
          f"{b['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU.", ""]
    return "\n".join(L)


def main() -> int:
    import datetime

    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    t0 = time.perf_counter()
    t = data.table()
    say = lambda s: sys.stderr.write(f"  {s}\n")  # noqa: E731
    rep = {"ratios": ratios(t, say), "memory": sailor_memory(), "choices": choices(),
           "calibration": P.calibration_version(),
           "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
           "machine": f"{platform.machine()} {platform.system()}, 2-core VM, no GPU"}
    rep["seconds"] = time.perf_counter() - t0
    if args.json:
        args.json.write_text(json.dumps(rep, indent=1, default=float) + "\n", encoding="utf-8")
    sys.stdout.write(markdown(rep) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
