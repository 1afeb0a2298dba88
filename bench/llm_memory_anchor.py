#!/usr/bin/env python
"""Anchored peak memory, leave-one-out, on the only published peaks there are (Sailor's GH200 runs).

    PYTHONPATH=. python bench/llm_memory_anchor.py [--json out.json]

Sailor trained OPT-350M and GPT-Neo-2.7B with its Megatron-DeepSpeed fork on CSCS Clariden (GH200, 96 GiB) and
published each run's peak memory (``data/raw/sailor/validation_summary.csv``; precision and recompute unstated:
bf16 and none assumed, as ``bench/sailor_gh200.py``). A user who measured one run of a stack (``cloudfit profile
add --memory-gib``) gets every other prediction of that stack anchored on it. Here each published peak is held
out in turn and predicted from the *other* runs of the same model, as that user would:

- ``unanchored``: the stack-generic memory model (``cloudfit.llm.memory``);
- ``factor``: the old anchoring, one factor (measured ÷ modelled at the anchor) on every part;
- ``one peak``: ``cloudfit.llm.anchor.fit_memory`` on one peak: states exact, activations and logits scaled;
- ``two peaks``: the same with a second peak whose activation load differs (× ``ACT_SPREAD`` at least): the
  activation scale and the fixed part fitted together.

The anchor is the nearest other run by ``cloudfit.llm.anchor.distance`` (scheme ``nearest``: often the same
layout at another data-parallel degree) or the nearest run with another pipeline depth or micro-batch (scheme
``other layout``: what the anchor must carry). For ``two peaks`` the second is the nearest run, after the
first, whose activation load differs enough. Scored: error of the held-out peak, within 10%.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cloudfit.llm import anchor as A  # noqa: E402
from cloudfit.llm import layout as L  # noqa: E402
from cloudfit.llm import memory as mem  # noqa: E402
from cloudfit.llm.stats import token_stats  # noqa: E402

SEQ, GPN, CAPACITY = 2048, 4, 96.0
METHODS = ("unanchored", "factor", "one peak", "two peaks")


def cases() -> list[dict]:
    import sailor_gh200 as sg

    shapes = sg.shapes()
    out = []
    for r in sg.runs():
        st = token_stats(shapes[r["model"]], SEQ)
        text = f"dp={r['dp']},pp={r['pp']},mb={r['mb']},ga={r['ga']},ac=none,schedule=1f1b"
        lay = L.parse(text, gpus=r["gpus"], sequences_per_replica=r["mb"] * r["ga"])
        e = mem.estimate(st, lay, capacity_gib=CAPACITY, framework="megatron-deepspeed")
        gpn = min(GPN, r["gpus"])
        setup = A.Setup("GH200", gpn, r["gpus"] // gpn, "bf16", SEQ, r["mb"] * r["ga"], text, "megatron-deepspeed")
        out.append({"model": r["model"], "run": r["file"].removeprefix("plan_config_").removesuffix(".json"),
                    "pp": r["pp"], "dp": r["dp"], "mb": r["mb"], "ga": r["ga"], "setup": setup, "estimate": e,
                    "published_gib": r["max_mem_gib"], "point": A.memory_point(e, r["max_mem_gib"])})
    return out


def _anchors(q: dict, others: list[dict], scheme: str) -> list[dict]:
    pool = [o for o in others if scheme == "nearest" or (o["pp"], o["mb"]) != (q["pp"], q["mb"])]
    return sorted(pool, key=lambda o: (A.distance(o["setup"], q["setup"]), o["run"]))


def predict_held_out(q: dict, others: list[dict], scheme: str) -> dict:
    """The held-out run's peak by every method, anchored on ``others`` (same model, same stack)."""
    pool = _anchors(q, others, scheme)
    first = pool[0]
    second = next((o for o in pool[1:] if max(o["point"].varying_gib, first["point"].varying_gib) /
                   min(o["point"].varying_gib, first["point"].varying_gib) >= A.ACT_SPREAD), None)
    e = q["estimate"]
    one = A.fit_memory([first["point"]])
    two = A.fit_memory([first["point"], second["point"]]) if second else one
    return {"anchor": first["run"], "second": second["run"] if second else "",
            "unanchored": e.total_gib,
            "factor": A.scale_memory(e, first["published_gib"] / first["estimate"].total_gib).total_gib,
            "one peak": A.apply_memory(e, one).total_gib, "two peaks": A.apply_memory(e, two).total_gib,
            "fit_one": one.kind, "fit_two": two.kind, "scale_two": two.activation_scale, "fixed_two": two.fixed_gib}


def run() -> dict:
    cs = cases()
    rep = {}
    for model in sorted({c["model"] for c in cs}, reverse=True):
        rows = [c for c in cs if c["model"] == model]
        for scheme in ("nearest", "other layout"):
            out = []
            for q in rows:
                p = predict_held_out(q, [o for o in rows if o is not q], scheme)
                out.append({"run": q["run"], "layout": f"pp{q['pp']} dp{q['dp']} mb{q['mb']} ga{q['ga']}",
                            "published_gib": q["published_gib"],
                            "states_gib": q["point"].states_gib, **p})
            rep[f"{model} / {scheme}"] = out
    return rep


def summary(rows: list[dict]) -> dict:
    s = {}
    for m in METHODS:
        err = [r[m] / r["published_gib"] - 1 for r in rows]
        s[m] = {"within_10": sum(abs(x) <= 0.10 for x in err), "n": len(err), "mape": sum(map(abs, err)) / len(err),
                "lo": min(err), "hi": max(err)}
    return s


def markdown(rep: dict, meta: dict) -> str:
    L_ = [f"Command: `PYTHONPATH=. python bench/llm_memory_anchor.py`. Date {meta['date']}. Machine: "
          f"{meta['machine']}; {meta['seconds']:.1f} s.", "",
          "| model / anchor scheme | " + " | ".join(f"{m}: within 10% (MAPE; range)" for m in METHODS) + " |",
          "|---|" + "---:|" * len(METHODS)]
    for k, rows in rep.items():
        s = summary(rows)
        L_.append(f"| {k} | " + " | ".join(f"{s[m]['within_10']} of {s[m]['n']} ({s[m]['mape']:.1%}; "
                                           f"{s[m]['lo']:+.0%} … {s[m]['hi']:+.0%})" for m in METHODS) + " |")
    for k, rows in rep.items():
        L_ += ["", f"**{k}**", "", "| held out | layout | published GiB | states GiB | anchor (+ second) | "
               "unanchored | factor | one peak | two peaks (scale, fixed GiB) |",
               "|---|---|---:|---:|---|---:|---:|---:|---:|"]
        for r in rows:
            e = {m: f"{r[m]:.1f} ({r[m] / r['published_gib'] - 1:+.0%})" for m in METHODS}
            fx = f"{r['fixed_two']:.1f}" if r["fixed_two"] is not None else "—"
            pair = r["anchor"] + (" + " + r["second"] if r["second"] else "")
            L_.append(f"| {r['run']} | {r['layout']} | {r['published_gib']:.1f} | {r['states_gib']:.1f} | "
                      f"{pair} | {e['unanchored']} | {e['factor']} | "
                      f"{e['one peak']} | {e['two peaks']} ({r['fit_two']}: ×{r['scale_two']:.2f}, {fx}) |")
    return "\n".join(L_)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    t0 = time.perf_counter()
    rep = run()
    meta = {"date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
            "machine": f"{platform.machine()} {platform.system()}, 2-core VM, no GPU",
            "seconds": time.perf_counter() - t0}
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "runs": rep, "summary": {k: summary(v) for k, v in rep.items()}},
                                        indent=1, default=float) + "\n", encoding="utf-8")
    sys.stdout.write(markdown(rep, meta) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
