#!/usr/bin/env python
"""Accuracy and speed of the performance model → bench/RESULTS_perf.md.

    python bench/perf_eval.py [--out bench/RESULTS_perf.md]

1. `cloudfit model eval` in-process: leave-one-accelerator-out and leave-one-model-out grouped CV with the
   nested calibration (prior constants, λ, conformal band refitted without each held-out group), for
   cloudfit and the baselines, per regime, per held-out group and per data source.
2. `predict_many` latency for the recommender's query set: every catalog VM shape × 1..64 nodes
   (best of 20 calls, after one warm-up), and the cost of importing the prediction path.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _fmt(b: dict, m: str) -> str:
    return f"{b[m]['mape'] * 100:.1f} / {b[m]['mdape'] * 100:.1f}"


def accuracy_tables(report: dict) -> list[str]:
    from cloudfit.perf.evaluate import METHODS, SCHEMES

    lines = []
    for scheme, regimes in report["schemes"].items():
        lines += [f"### {SCHEMES[scheme]}", "",
                  "MAPE / median APE in %, band = share of held-out measurements inside the 10–90% band.", "",
                  "| regime | n | " + " | ".join(METHODS) + " | band |",
                  "|---|---:|" + "---:|" * len(METHODS) + "---:|"]
        for regime, b in regimes.items():
            cov = f"{b['coverage'] * 100:.0f}%" if "coverage" in b else "—"
            lines.append(f"| **{regime}** | {b['n']} | " + " | ".join(_fmt(b, m) for m in METHODS) + f" | {cov} |")
        lines.append("")
        for regime, b in regimes.items():
            for title, key in (("held-out group", "groups"), ("data source", "sources")):
                lines += [f"<details><summary>{regime}: by {title}</summary>", "",
                          f"| {title} | n | " + " | ".join(METHODS) + " | band |",
                          "|---|---:|" + "---:|" * len(METHODS) + "---:|"]
                for g, gb in b[key].items():
                    cov = f"{gb['coverage'] * 100:.0f}%" if "coverage" in gb else "—"
                    lines.append(f"| {g} | {gb['n']} | " + " | ".join(_fmt(gb, m) for m in METHODS) + f" | {cov} |")
                lines += ["", "</details>", ""]
    return lines


def oracle() -> dict[str, float]:
    """Anchored single-device MAPE if the per-group mean efficiency over the calibrated prior were known
    (fitted on all rows, held-out ones included): a floor set by the data's scatter, not a method."""
    import numpy as np

    from cloudfit.perf import fit

    prep = fit.prepare()
    rows = np.arange(len(prep.y))
    prep = fit.prepare_for(prep, rows)
    t = prep.table
    single = rows[~prep.multi]
    out = {}
    for name, cols in (("accelerator", ["accelerator"]), ("source+accelerator", ["source", "accelerator"]),
                       ("source+accelerator+workload", ["source", "accelerator", "workload"])):
        key = np.array(["|".join(str(t[c][i]) for c in cols) for i in rows])
        mean = {k: float(np.mean(prep.y[single][key[single] == k])) for k in set(key[single])}
        base = prep.prior_sps * np.exp([mean.get(k, 0.0) for k in key])
        anch, _ = fit.predictions(prep, base, single)
        ok = ~np.isnan(anch)
        out[name] = float(np.mean(np.abs(anch[ok] / prep.measured[single][ok] - 1)))
    return out


def analysis(orc: dict[str, float]) -> list[str]:
    return [
    "### What dominates the remaining error", "",
    "- **The data's own cross-accelerator scatter.** An oracle that knows each accelerator's mean efficiency "
    f"relative to the calibrated prior (fitted on the held-out rows themselves) still leaves {orc['accelerator'] * 100:.1f}% "
    "MAPE on anchored single-device predictions; knowing it per (source, accelerator) leaves "
    f"{orc['source+accelerator'] * 100:.1f}%, and only a per-(source, accelerator, workload) oracle reaches "
    f"{orc['source+accelerator+workload'] * 100:.1f}%. Examples: Gavel's ResNet-18 "
    "at batch 16–64 runs as fast on a V100 as on a P100 (input pipeline bound); the P100/K80 ratio of one workload is "
    "1.8–8.4× across Gavel's jobs and batch sizes, 4.0–4.7× in tf_cnn_benchmarks and 1.8–3.0× in CM-DARE; and GPT on GH200 is only 2.1× A100 where every "
    "datasheet ratio says 2.6–3.2×. No spec feature can tell these apart, so the learned correction earns nothing "
    "on anchored single-device predictions (inner CV keeps λ = 0 there: cloudfit = its calibrated prior).",
    "- **Old and exotic accelerators held out.** K80 (not in the catalog), GH200 and V100 dominate the "
    "leave-one-accelerator-out error; on the catalog's modern GPUs (A100, A100-80GB, H100, H100-PCIe; Lambda's "
    "DeepLearningExamples runs) anchored single-device error is about 9–15%.",
    "- **Multi-device scaling of noisy sources.** Gavel's multi-GPU throughputs are non-monotone in the GPU "
    "count for several jobs (e.g. LM on V100: ×4 slower than ×2), and CM-DARE's parameter-server plateaus depend "
    "on PS CPU limits no stat captures; these carry most of the multi-device error. The learned correction "
    "helps most here (anchored multi-device error down from ~40% for the prior to ~27%).",
    "- **Model families unlike any in the training set (leave-one-model-out, stats-only).** Tensor2Tensor's tiny "
    "CIFAR ResNets under TensorFlow parameter servers run 40–200× below their roofline; with that family held "
    "out, nothing else in the data is that overhead-bound, so stats-only predictions for it are 10–20× too fast "
    "and dominate that column's mean (medians are 30%). An SVR's log-space regression to the mean bounds such "
    "misses better on this one column.",
    "- **Band.** Conformal quantiles are pooled over both CV schemes: about right for anchored predictions, "
    "too wide for stats-only leave-one-accelerator-out (the model has seen the workload) and too narrow for "
    "stats-only leave-one-model-out (it has not).",
    "",
    ]


def targets(report: dict) -> list[str]:
    """The issue's targets against this run, and every cell where a baseline beats cloudfit."""
    from cloudfit.perf.evaluate import METHODS, SCHEMES

    acc = report["schemes"]["accelerator"]
    sa, ma = acc["single-anchored"], acc["multi-anchored"]
    covs = [(f"{SCHEMES[s]} {r}", b["coverage"]) for s, rs in report["schemes"].items() for r, b in rs.items()]
    ok = lambda v: "met" if v else "missed"  # noqa: E731
    lines = ["### Targets", "",
             f"- Leave-one-accelerator-out, single device, anchored on another accelerator: MAPE "
             f"{sa['cloudfit']['mape'] * 100:.1f}% (target ≤ 10%: {ok(sa['cloudfit']['mape'] <= 0.10)}, by "
             f"{max(0.0, sa['cloudfit']['mape'] - 0.10) * 100:.1f} points).",
             f"- Leave-one-accelerator-out, multi-device/multi-node, anchored: MAPE {ma['cloudfit']['mape'] * 100:.1f}% "
             f"(target ≤ 12%: {ok(ma['cloudfit']['mape'] <= 0.12)}, by {max(0.0, ma['cloudfit']['mape'] - 0.12) * 100:.1f} points).",
             "- 10–90% band coverage (target 75–85%): " + "; ".join(f"{n} {c * 100:.0f}%" for n, c in covs) + ".",
             ]
    losses = []
    for s, rs in report["schemes"].items():
        for r, b in rs.items():
            for m in METHODS[1:]:
                if b[m]["mape"] < b["cloudfit"]["mape"] - 1e-9:
                    losses.append(f"{SCHEMES[s]} {r}: {m} {b[m]['mape'] * 100:.1f}% vs cloudfit {b['cloudfit']['mape'] * 100:.1f}%")
    lines.append("- cloudfit has the lowest MAPE of all methods in every cell" if not losses else
                 "- A method beats cloudfit's MAPE in: " + "; ".join(losses) + ".")
    lines.append("")
    return lines


def latency() -> dict:
    code = (
        "import time; t=time.perf_counter(); from cloudfit.perf import predict_many, HardwareQuery; "
        "from cloudfit.perf.model import load_model; load_model(); print(time.perf_counter()-t)"
    )
    imp = min(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                   cwd=REPO).stdout) for _ in range(5))
    from cloudfit import catalog, hardware
    from cloudfit.perf import HardwareQuery, predict_many
    from cloudfit.profiling import io as pio

    prof = pio.load_profile(pio.resolve_profile("resnet50"))
    shapes = sorted({(o.machine_type, o.accelerator, o.accelerators_per_node, o.vcpus) for o in catalog.load().offerings})
    qs = [HardwareQuery(acc, c, n, hardware.vm_network_gbps(mt, acc, c, v), "fp16")
          for mt, acc, c, v in shapes for n in range(1, 65)]
    predict_many(prof, qs)
    times = []
    for _ in range(20):
        t = time.perf_counter()
        predict_many(prof, qs)
        times.append(time.perf_counter() - t)
    times.sort()
    return {"queries": len(qs), "shapes": len(shapes), "best_ms": times[0] * 1e3, "median_ms": times[len(times) // 2] * 1e3,
            "import_and_load_s": imp}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "RESULTS_perf.md")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from cloudfit.perf import evaluate, fit
    from cloudfit.perf.model import load_model, model_version

    t0 = time.perf_counter()
    report = evaluate.run(progress=lambda s: print(s, file=sys.stderr))
    eval_s = time.perf_counter() - t0
    lat = latency()
    m = load_model()
    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    machine = f"{platform.machine()}, {os.cpu_count()} cores, no GPU, Python {platform.python_version()}"
    cons = {k: m.constants[k] for k in sorted(fit.CALIBRATED)}
    lines = [
        "## Performance model (issue 4)", "",
        f"Command: `python bench/perf_eval.py` (the accuracy part is `cloudfit model eval`). Date: {when}. "
        f"Machine: {machine}. Eval wall time: {eval_s:.0f} s (nested grouped CV, {report['rows']} public measurements).", "",
        f"Shipped model: `cloudfit/perf/model.json` {model_version()}; prior constants calibrated on all rows: "
        + ", ".join(f"{k} = {v:g}" for k, v in cons.items())
        + f"; anchored predictions keep λ = {m.anchor_lambda['single']:g} (single device) / "
        f"{m.anchor_lambda['multi']:g} (multi-device) of the learned correction.", "",
        "Methods: **cloudfit** = calibrated roofline/communication prior × xgboost correction (anchored on the "
        "workload's single-device measurement on *another* accelerator where one exists); **tflops-ratio** = "
        "anchor × peak-TFLOPS ratio × device ratio (stats-only: one median FLOP efficiency); **svr** = CM-DARE-style "
        "RBF SVR on GPU TFLOPS, model FLOPs, parameters, batch, devices, nodes; **prior** = the physics prior with "
        "datasheet constants; **calibrated-prior** = ablation, cloudfit without its learned correction. Every fitted "
        "piece (prior constants, correction, λ, conformal quantiles, SVR, FLOP efficiency) is refitted without the "
        "held-out group.", "",
    ]
    lines += targets(report)
    lines += accuracy_tables(report)
    lines += analysis(oracle()) + [
        "### Speed", "",
        f"`predict_many` on {lat['queries']} queries (every catalog VM shape, {lat['shapes']}, × 1..64 nodes) for the "
        f"shipped resnet50 profile: best {lat['best_ms']:.1f} ms, median {lat['median_ms']:.1f} ms of 20 calls. Importing the "
        f"prediction path and loading the model: {lat['import_and_load_s'] * 1e3:.0f} ms (numpy + standard library only; "
        "no xgboost/sklearn/scipy/pandas).", "",
    ]
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
