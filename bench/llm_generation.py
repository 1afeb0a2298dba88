"""Leave-one-generation-out for the LLM step model (``cloudfit.llm``), issue 33 items 1 and 3 (LLM side).

Every row of the target generation is predicted from ``llm.fit.fit`` on the rows of the *older* generations only
(Hopper from ≤ Ampere: vTrain + llm-foundry A100/A100-80GB; Blackwell — B200, GB200, GB300 — from ≤ Hopper).
Scores: MAPE, median APE, over-predicted rows, and the share of truths inside the 10–90% band, for

- **shipped band**: the band ``calibration.json`` gives a measured accelerator (grouped-CV residuals);
- **hop band, leave-one-hop-out**: the shipped band widened on both sides by the margin that holds 80% of the
  *other* hop's residuals (Blackwell's margin from the Hopper-from-Ampere residuals, Hopper's from
  Blackwell-from-Hopper; ``llm.fit.widen_to_cover``) — what ``calibration.json`` now ships for an accelerator or
  precision without a public row is the margin over both hops (``llm.evaluate.generation_hops``), so this is its
  out-of-sample coverage;

by accelerator, by stack (Megatron / FSDP) and by precision. Also: the realised fraction of the peak ratio in the
public rows (same source, model, sequence, GPU count and precision on two accelerators: log(per-GPU tokens/s
ratio) ÷ log(dense-peak ratio)) next to what the model predicts for the same pairs (shipped constants, and the
leave-one-generation-out fit for the newer one); and spot checks (llama3-8b on H100 / H200 / B200 / GB200,
a 70B FSDP-only layout on 512 B200s) with MFU and band.

    PYTHONPATH=$PWD python bench/llm_generation.py [--json out.json]    # ~1–2 min on 2 loaded cores
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cloudfit.llm import data as llm_data  # noqa: E402
from cloudfit.llm import fit as llm_fit  # noqa: E402
from cloudfit.llm import hardware as lhw  # noqa: E402
from cloudfit.llm.predict import constants, predict  # noqa: E402

GEN_NAME = {3: "Ampere", 4: "Hopper", 5: "Blackwell"}
STACK = {"megatron": "Megatron", "fsdp": "FSDP (llm-foundry)", "megatron-deepspeed": "Megatron-DeepSpeed"}


def summary(pred, meas, bands: dict[str, tuple[float, float]]) -> dict:
    ape = np.abs(pred / meas - 1)
    r = np.log(meas / pred)
    out = {"n": int(len(meas)), "mape": float(100 * ape.mean()), "median": float(100 * np.median(ape)),
           "over": int((pred > meas).sum()), "ratio_median": float(np.median(pred / meas))}
    for name, (lo, hi) in bands.items():
        out[f"coverage_{name}"] = float(100 * ((r >= lo) & (r <= hi)).mean()) if np.isfinite(lo) else float("nan")
    return out


def logo(progress=print) -> dict:
    """Fit on older generations, predict the target (``llm.evaluate.generation_hops``); residuals per hop."""
    from cloudfit.llm import evaluate

    t = llm_data.table()
    hops = {}
    for name, (_, held, pred) in evaluate.generation_hops(t, progress).items():
        hops[{v: k for k, v in GEN_NAME.items()}[name]] = {"table": t.subset(held), "pred": pred}
    return {"table": t, "hops": hops}


def _widened(band, resid) -> tuple[float, float]:
    w = llm_fit.widen_to_cover(band, resid)
    return band[0] - w, band[1] + w


def score(res: dict) -> dict:
    shipped = tuple(constants().band)
    resid = {k: np.log(h["table"].measured / h["pred"]) for k, h in res["hops"].items()}
    pooled = _widened(shipped, np.concatenate(list(resid.values())))
    out = {"shipped_band": list(shipped), "pooled_hop_band": list(pooled), "targets": {}}
    for target, h in res["hops"].items():
        other = [v for k, v in resid.items() if k != target]
        loho = _widened(shipped, np.concatenate(other))
        bands = {"shipped": shipped, "loho": loho, "pooled": pooled}
        te, pred = h["table"], h["pred"]
        accs = np.array([k.split("/")[0] for k in te.keys])
        precs = np.array([k.split("/")[1] for k in te.keys])
        fws = np.array(te.framework)
        rec = {"all": summary(pred, te.measured, bands), "loho_band": list(loho), "by": {}}
        for label, col in (("accelerator", accs), ("stack", fws), ("precision", precs)):
            rec["by"][label] = {str(v): summary(pred[col == v], te.measured[col == v], bands)
                                for v in sorted(set(col))}
        out["targets"][GEN_NAME[target]] = rec
    return out


def transitions(res: dict) -> list[dict]:
    """Same source, model, seq, GPUs and precision on two accelerators of different generations (older → newer):
    measured and predicted per-GPU ratio, and the realised fraction of the log peak ratio."""
    t = res["table"]
    c_all = constants()
    pred_all = llm_data.predict_table(t, c_all)["tokens_per_second"]
    pred_logo = np.full(len(t.rows), np.nan)
    idx = {id(r): i for i, r in enumerate(t.rows)}
    for h in res["hops"].values():
        for r, p in zip(h["table"].rows, h["pred"]):
            pred_logo[idx[id(r)]] = p
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(t.rows):
        if r["source"] in ("megatron-bridge", "llm-foundry"):
            groups.setdefault((r["source"], r["model"], r["seq_len"], r["gpus"], t.keys[i].split("/")[1]), []).append(i)
    out = []
    for (src, model, seq, gpus, prec), rows in sorted(groups.items()):
        by_acc: dict[str, list[int]] = {}
        for i in rows:
            by_acc.setdefault(t.keys[i].split("/")[0], []).append(i)
        names = sorted(by_acc, key=lambda a: (lhw.generation(a), a))
        for a in names:
            for b in names:
                if lhw.generation(b) <= lhw.generation(a):
                    continue
                ia = max(by_acc[a], key=lambda i: t.measured[i])  # each accelerator's best published layout
                ib = max(by_acc[b], key=lambda i: t.measured[i])
                peak = t.peak[ib] / t.peak[ia]
                meas = t.measured[ib] / t.measured[ia]
                out.append({"source": src, "model": model, "seq_len": int(seq), "gpus": int(gpus), "precision": prec,
                            "stack": t.framework[ia], "from": a, "to": b, "peak_ratio": float(peak),
                            "measured_ratio": float(meas), "realised": float(math.log(meas) / math.log(peak)),
                            "predicted_ratio": float(pred_all[ib] / pred_all[ia]),
                            "predicted_ratio_logo": float(pred_logo[ib] / pred_all[ia])})
    return out


def transition_table(tr: list[dict]) -> list[dict]:
    """Median per (from → to, precision, stack)."""
    keys = sorted({(d["from"], d["to"], d["precision"], d["stack"]) for d in tr}, key=lambda k: (lhw.generation(k[1]), k))
    rows = []
    for k in keys:
        sel = [d for d in tr if (d["from"], d["to"], d["precision"], d["stack"]) == k]
        med = lambda f: float(np.median([d[f] for d in sel]))  # noqa: E731
        rows.append({"from": k[0], "to": k[1], "precision": k[2], "stack": k[3], "pairs": len(sel),
                     "peak_ratio": med("peak_ratio"), "measured_ratio": med("measured_ratio"),
                     "realised": med("realised"), "predicted_ratio": med("predicted_ratio"),
                     "predicted_ratio_logo": med("predicted_ratio_logo")})
    return rows


SPOT = (("llama3-8b", 8, 1, 4096, "auto"), ("llama3-8b", 1, 1, 4096, "auto"), ("llama3-8b", 8, 1, 4096, "fsdp=8,ac=none"),
        ("llama3-70b", 8, 64, 8192, "fsdp=512,ac=selective"))


def spot_checks() -> list[dict]:
    out = []
    for model, gpn, nodes, seq, lay in SPOT:
        for acc in ("A100-80GB", "H100", "H200", "B200", "GB200", "L40S"):
            for prec in ("bf16", "fp8"):
                if prec == "fp8" and not lhw.has_fp8(acc):
                    continue
                try:
                    p = predict(model, acc, gpus_per_node=gpn, nodes=nodes, seq_len=seq, layout=lay, precision=prec)
                except Exception as e:  # noqa: BLE001 — a layout that does not fit is a row too
                    out.append({"model": model, "accelerator": acc, "gpus": gpn * nodes, "layout": lay,
                                "precision": prec, "error": str(e)[:80]})
                    continue
                out.append({"model": model, "accelerator": acc, "gpus": p.gpus, "layout": lay, "precision": prec,
                            "chosen": p.layout.describe(), "fits": p.fits,
                            "tokens_per_gpu": p.tokens_per_second / p.gpus, "mfu": p.mfu,
                            "band": [p.low / p.tokens_per_second, p.high / p.tokens_per_second]})
    return out


def _fmt(s: dict, bands=("shipped", "loho")) -> str:
    cov = " | ".join(f"{s[f'coverage_{b}']:.0f}%" for b in bands)
    return f"{s['n']} | {s['mape']:.1f}% | {s['median']:.1f}% | {s['over']}/{s['n']} | {cov}"


def markdown(rep: dict) -> str:
    L = ["| target (fit on older rows) | group | rows | MAPE | median | over-predicted | coverage, shipped band "
         "| coverage, hop band (other hop) |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in rep["logo"]["targets"].items():
        L.append(f"| {name} | all | {_fmt(r['all'])} |")
        for label, grp in r["by"].items():
            for v, s in grp.items():
                L.append(f"| {name} | {label}: {STACK.get(v, v) if label == 'stack' else v} | {_fmt(s)} |")
    lg = rep["logo"]
    L.append("")
    L.append("Bands (log 10/90%): shipped " + ", ".join(f"{x:+.3f}" for x in lg["shipped_band"]) + "; hop band pooled "
             + ", ".join(f"{x:+.3f}" for x in lg["pooled_hop_band"]) + "; leave-one-hop-out: "
             + "; ".join(f"{n} " + ", ".join(f"{x:+.3f}" for x in r["loho_band"]) for n, r in lg["targets"].items()))
    L += ["", "| transition | precision | stack | pairs | peak ratio | measured per-GPU ratio | realised (log) "
          "| predicted (shipped fit) | predicted (leave-one-generation-out) |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for d in rep["transitions"]:
        L.append(f"| {d['from']} → {d['to']} | {d['precision']} | {STACK.get(d['stack'], d['stack'])} | {d['pairs']} "
                 f"| {d['peak_ratio']:.2f} | {d['measured_ratio']:.2f} | {d['realised']:.2f} | {d['predicted_ratio']:.2f} "
                 f"| {d['predicted_ratio_logo']:.2f} |")
    L += ["", "| model | GPUs | layout | precision | accelerator | tokens/s per GPU | MFU | band (× prediction) |",
          "|---|---:|---|---|---|---:|---:|---|"]
    for d in rep["spot"]:
        if "error" in d:
            L.append(f"| {d['model']} | {d['gpus']} | {d['layout']} | {d['precision']} | {d['accelerator']} | — | — | "
                     f"{d['error']} |")
            continue
        L.append(f"| {d['model']} | {d['gpus']} | {d['chosen'] if d['layout'] == 'auto' else d['layout']}"
                 f"{'' if d['fits'] else ' (does not fit)'} | {d['precision']} | {d['accelerator']} "
                 f"| {d['tokens_per_gpu']:,.0f} | {100 * d['mfu']:.1f}% | ×{d['band'][0]:.2f}–×{d['band'][1]:.2f} |")
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    t0 = time.time()
    say = lambda s: print(f"[{time.time() - t0:5.0f}s] {s}", file=sys.stderr, flush=True)  # noqa: E731
    res = logo(say)
    tr = transitions(res)
    rep = {"logo": score(res), "transitions": transition_table(tr), "transition_pairs": tr, "spot": spot_checks(),
           "machine": f"{platform.machine()} {platform.system()}, 2 shared vCPUs, no GPU",
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "seconds": round(time.time() - t0, 1)}
    if args.json:
        args.json.write_text(json.dumps(rep, indent=1, default=str) + "\n", encoding="utf-8")
    print(markdown(rep))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
