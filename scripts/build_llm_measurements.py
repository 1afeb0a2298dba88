"""Rebuild data/llm/measurements.csv from the public LLM runs copied under data/llm/raw/ (standard library).

    python scripts/build_llm_measurements.py

Sources (see data/llm/PROVENANCE.md): vTrain's measured A100 sweep (multi-node and single-node CSVs),
Megatron-Bridge's performance summaries (dense Llama rows of every container version), llm-foundry's MPT
benchmark tables. Deterministic: rows sorted, fixed number format. Prints what it skipped and why.
"""

from __future__ import annotations

import csv
import io
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "data" / "llm" / "raw"
OUT = ROOT / "data" / "llm" / "measurements.csv"

COLUMNS = ["source", "version", "model", "finetune", "params", "hidden", "layers", "heads", "kv_heads", "ffn_hidden",
           "vocab", "mlp", "tied", "bias", "norm", "learned_positions", "seq_len", "accelerator", "system",
           "node_gbps", "gpus", "gpus_per_node", "precision", "global_batch", "micro_batch", "grad_accum", "tp", "pp",
           "cp", "vp", "dp", "zero", "ac", "framework", "tokens_per_second", "reported_tflops_per_gpu",
           "reported_mfu", "latest"]

SKIPS: dict[str, int] = {}


def skip(why: str) -> None:
    SKIPS[why] = SKIPS.get(why, 0) + 1


def gpt_shape(hidden, layers, heads, seq):
    return dict(hidden=hidden, layers=layers, heads=heads, kv_heads=heads, ffn_hidden=4 * hidden, vocab=51200,
                mlp="gelu", tied=1, bias=1, norm="layer", learned_positions=max(seq, 2048))


LLAMA = {
    "LLAMA3_8B": ("llama3-8b", dict(hidden=4096, layers=32, heads=32, kv_heads=8, ffn_hidden=14336)),
    "LLAMA3_70B": ("llama3-70b", dict(hidden=8192, layers=80, heads=64, kv_heads=8, ffn_hidden=28672)),
    "LLAMA3.1_405B": ("llama3-405b", dict(hidden=16384, layers=126, heads=128, kv_heads=8, ffn_hidden=53248)),
}
MPT = {"125m": (768, 12, 12), "350m": (1024, 24, 16), "760m": (1536, 24, 12), "1b": (2048, 24, 16),
       "3b": (2560, 32, 20), "7b": (4096, 32, 32), "13b": (5120, 40, 40), "30b": (7168, 48, 64),
       "70b": (8192, 80, 64)}
SYSTEM_ACC = {"DGX-H100": "H100", "DGX-B200": "B200", "DGX-GB200": "GB200", "DGX-GB300": "GB300", "DGX-B300": "B300"}
SYSTEM_GBPS = {"DGX-H100": 3200, "DGX-B200": 3200, "DGX-GB200": 3200, "DGX-GB300": 3200, "DGX-B300": 6400}


def vtrain_rows():
    rows = []
    for fname, kind in (("ground_truth_multi.csv", "multi"), ("ground_truth_single.csv", "single")):
        text = (RAW / "vtrain" / fname).read_text(encoding="utf-8-sig")
        for r in csv.DictReader(io.StringIO(text)):
            hidden, heads, layers = int(r["hidden size"]), int(r["attention heads"]), int(r["# layers"])
            seq = int(r["sequence length"])
            gpus, gbs, mb = int(r["# GPUs"]), int(r["global batch"]), int(r["micro batch"])
            tp, dp, pp = int(r["tensor parallelism"]), int(r["data parallelism"]), int(r["pipeline parallelism"])
            if tp * dp * pp != gpus:
                skip("vtrain: tp × dp × pp != GPUs")
                continue
            if gbs % (mb * dp):
                skip("vtrain: global batch not a multiple of micro-batch × dp")
                continue
            ms = float(r["iteration time (ms)"])
            name = {3072: "gpt-3.6b", 6144: "gpt-18.4b", 8192: "gpt-39.1b", 12288: "gpt-175b"}.get(hidden) \
                if kind == "multi" else f"gpt-h{hidden}-l{layers}"
            rows.append(dict(source=f"vtrain-{kind}", version="f8dda84", model=name, finetune="full",
                             params=round(float(r["Parameters (billion)"]) * 1e9) if kind == "multi" else "",
                             **gpt_shape(hidden, layers, heads, seq), seq_len=seq, accelerator="A100-80GB",
                             system="VTRAIN-A100", node_gbps=800, gpus=gpus, gpus_per_node=min(gpus, 8),
                             precision="fp16", global_batch=gbs, micro_batch=mb, grad_accum=gbs // (mb * dp), tp=tp,
                             pp=pp, cp=1, vp=1, dp=dp, zero=0, ac="full", framework="megatron-deepspeed",
                             tokens_per_second=gbs * seq / (ms / 1000.0), reported_tflops_per_gpu="",
                             reported_mfu="", latest=1))
    return rows


def _first(cell: str) -> str:
    """'37556 (36108)' → '37556' (the parenthesised figure is a variant configuration)."""
    return cell.split("(")[0].strip()


def _megatron_rows_with_headings():
    """megatron_rows() with the '#### Model: X' headings resolved (System-first tables)."""
    out = []
    for fname in ("performance-summary.md", "performance-summary-archive.md"):
        text = (RAW / "megatron_bridge" / fname).read_text(encoding="utf-8")
        lines = text.splitlines()
        models = []
        cur = ""
        for line in lines:
            m = re.match(r"^#### Model: (\S+)", line)
            if m:
                cur = m.group(1)
            if re.match(r"^## ", line) or re.match(r"^#### System", line):
                cur = ""
            models.append(cur)
        out.append((fname, lines, models))
    return out


def megatron_all():
    rows = []
    for fname, lines, models in _megatron_rows_with_headings():
        version, kind, system = "", "pretrain", ""
        header: list[str] = []
        for line, model_heading in zip(lines, models):
            m = re.match(r"^## (\S+) NeMo Container", line)
            if m:
                version, kind, system = m.group(1), "pretrain", ""
                continue
            if line.startswith("### "):
                kind = "sft" if "SFT" in line else "lora" if "LoRA" in line else "pretrain"
                continue
            m = re.match(r"^#### System: (\S+)", line)
            if m:
                system = m.group(1)
                continue
            if not line.startswith("|"):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[0] in ("System", "Model"):
                header = cells
                continue
            if set(cells[0]) <= set("-: "):
                continue
            r = dict(zip(header, cells))
            model_key = r.get("Model") or model_heading
            sysname = r.get("System", system)
            if model_key not in LLAMA:
                skip("megatron-bridge: not a dense Llama model (MoE / hybrid)")
                continue
            if sysname not in SYSTEM_ACC:
                skip(f"megatron-bridge: unknown system {sysname}")
                continue
            prec = _first(r.get("Precision", "FP8-CS"))
            precision = {"FP8": "fp8", "FP8-CS": "fp8", "MXFP8": "fp8", "BF16": "bf16"}.get(prec)
            if precision is None:
                skip(f"megatron-bridge: precision {prec} (no FP4 peak in the hardware table)")
                continue
            name, shape = LLAMA[model_key]
            gpus, gbs, mb = int(r["#-GPUs"]), int(r["GBS"]), int(r["MBS"])
            seq = int(r["Sequence Length"])
            tp, pp, cp = int(_first(r["TP"])), int(_first(r["PP"])), int(_first(r["CP"]))
            vp_cell = _first(r.get("VP", "n/a"))
            vp = 1 if vp_cell in ("n/a", "") else int(vp_cell)
            fsdp = int(_first(r.get("FSDP", "0")))
            dp = gpus // (tp * pp * cp)
            if dp * tp * pp * cp != gpus or gbs % (mb * dp):
                skip("megatron-bridge: degrees inconsistent with GPUs / batch")
                continue
            tps_gpu = float(_first(r["Tokens / sec / GPU"]))
            rows.append(dict(source="megatron-bridge", version=version, model=name,
                             finetune={"pretrain": "full", "sft": "full", "lora": "lora"}[kind], params="",
                             **shape, vocab=128256, mlp="swiglu", tied=0, bias=0, norm="rms", learned_positions=0,
                             seq_len=seq, accelerator=SYSTEM_ACC[sysname], system=sysname,
                             node_gbps=SYSTEM_GBPS[sysname], gpus=gpus, gpus_per_node=8, precision=precision,
                             global_batch=gbs, micro_batch=mb, grad_accum=gbs // (mb * dp), tp=tp, pp=pp, cp=cp,
                             vp=vp, dp=dp, zero=3 if fsdp else 1, ac="selective", framework="megatron",
                             tokens_per_second=tps_gpu * gpus,
                             reported_tflops_per_gpu=float(_first(r["Model TFLOP / sec / GPU"])), reported_mfu="",
                             latest=0))
    # the same configuration repeats across container versions: mark the newest as `latest`
    def vkey(v):
        return tuple(int(x) for x in re.findall(r"\d+", v))
    best: dict = {}
    for i, r in enumerate(rows):
        k = (r["model"], r["finetune"], r["system"], r["precision"], r["gpus"], r["global_batch"], r["micro_batch"],
             r["tp"], r["pp"], r["cp"], r["vp"], r["zero"], r["seq_len"])
        if k not in best or vkey(r["version"]) > vkey(rows[best[k]]["version"]):
            best[k] = i
    for i in best.values():
        rows[i]["latest"] = 1
    return rows


def foundry_rows():
    rows = []
    text = (RAW / "llm_foundry" / "benchmarking_README.md").read_text(encoding="utf-8")
    section = ""
    header: list[str] = []
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            continue
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "Model":
            header = cells
            continue
        if set(cells[0]) <= set("-: "):
            continue
        r = dict(zip(header, cells))
        size = r["Model"]
        if size not in MPT:
            skip(f"llm-foundry: model {size} has no shape")
            continue
        gpu = {"h100_80gb": "H100", "a100_80gb": "A100-80GB", "a100_40gb": "A100"}.get(r["GPU"])
        if gpu is None:
            skip(f"llm-foundry: GPU {r['GPU']}")
            continue
        if r.get("Activation CPUOffload") == "True":
            skip("llm-foundry: CPU offload")
            continue
        hidden, layers, heads = MPT[size]
        seq = int(r["SeqLen (T)"])
        gpus, mb, ga = int(r["# GPUs"]), int(r["MicroBatchSize"]), int(r["GradAccum"])
        gbs = int(r["GlobalBatchSize"])
        precision = "fp8" if "fp8" in r["Precision"] else "bf16"
        zero = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2}.get(r["Sharding Strategy"])
        if zero is None:
            skip(f"llm-foundry: sharding {r['Sharding Strategy']}")
            continue
        tps = float(r["Throughput (T/s)"])
        rows.append(dict(source="llm-foundry", version="8c8dd48", model=f"mpt-{size}", finetune="full",
                         params=int(r["NumParams"]), hidden=hidden, layers=layers, heads=heads, kv_heads=heads,
                         ffn_hidden=4 * hidden, vocab=50368, mlp="gelu", tied=1, bias=0, norm="layer",
                         learned_positions=seq, seq_len=seq, accelerator=gpu,
                         system="MOSAICML-H100" if gpu == "H100" else "MOSAICML-A100",
                         node_gbps=3200 if gpu == "H100" else 1600, gpus=gpus, gpus_per_node=min(gpus, 8),
                         precision=precision, global_batch=gbs, micro_batch=mb, grad_accum=ga, tp=1, pp=1, cp=1, vp=1,
                         dp=gpus, zero=zero, ac="full" if r["Activation Checkpointing"] == "True" else "none",
                         framework="fsdp", tokens_per_second=tps,
                         reported_tflops_per_gpu=float(r["Model TFLOP"]), reported_mfu=float(r["MFU"]) / 100.0,
                         latest=1))
    return rows


def fmt(v):
    if isinstance(v, float):
        return f"{v:.6g}" if abs(v) < 1e6 else f"{v:.1f}"
    return str(v)


def main() -> int:
    rows = vtrain_rows() + megatron_all() + foundry_rows()
    rows.sort(key=lambda r: (r["source"], r["model"], r["accelerator"], r["gpus"], r["precision"], r["seq_len"],
                             r["tp"], r["pp"], r["cp"], r["vp"], r["dp"], r["micro_batch"], r["global_batch"],
                             r["finetune"], r["version"], r["tokens_per_second"]))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow([fmt(r[c]) for c in COLUMNS])
    OUT.write_text(buf.getvalue(), encoding="utf-8")
    by = {}
    for r in rows:
        by[r["source"]] = by.get(r["source"], 0) + 1
    sys.stderr.write(f"wrote {OUT.relative_to(ROOT)}: {len(rows)} rows {by}\n")
    for why, n in sorted(SKIPS.items()):
        sys.stderr.write(f"  skipped {n}: {why}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
