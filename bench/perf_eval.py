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
    "on anchored single-device predictions (inner CV keeps λ = 0 there: cloudfit = its calibrated prior), and "
    "neither did a learned transfer correction on (target, anchor) pairs (see *Tried, did not help*). Even with "
    "the held-out accelerator's *own* single-device throughput known, multi-device predictions of the same rows "
    "are off by about 21% (median 14%): scaling is noisy too (next bullets).",
    "- **Old and exotic accelerators held out.** K80 (not in the catalog), GH200 and V100 dominate the "
    "leave-one-accelerator-out error; on the catalog's modern GPUs (A100, A100-80GB, H100, H100-PCIe; Lambda's "
    "DeepLearningExamples runs) anchored single-device error is about 9–15%.",
    "- **Multi-device scaling of noisy sources.** Gavel's multi-GPU throughputs are non-monotone in the GPU "
    "count for several jobs (e.g. LM on V100: ×4 slower than ×2), and CM-DARE's parameter-server plateaus depend "
    "on PS CPU limits no stat captures; these carry most of the multi-device error. The learned correction "
    "helps most here (anchored multi-device error down from ~40% for the prior to ~27%).",
    "- **Model families unlike any in the training set (leave-one-model-out, stats-only).** Tensor2Tensor's tiny "
    "CIFAR ResNets under TensorFlow parameter servers run 40–200× below their roofline; with that family held "
    "out, nothing else in the data is that overhead-bound, so stats-only predictions for it are about 8–13× too "
    "fast and dominate that column's mean (medians are 27–29%). An SVR's log-space regression to the mean bounds such "
    "misses better on this one column.",
    "- **Band.** One conformal band per regime *and* per workload novelty (the workload's stats signature is in "
    "the training set, as in leave-one-accelerator-out, or new, as in leave-one-model-out; `predict_many` makes "
    "the same test against the signatures stored in model.json), from residuals of an inner grouped CV run "
    "through the capped predict path. Every cell lands in 75–85% except leave-one-accelerator-out single-device "
    "anchored: K80, P100 and V100 held out are biased, not just noisy (tf_cnn_benchmarks' K80 is e^0.27 slower "
    "relative to P100 than any other pair says), and conformal quantiles from the other accelerators cannot "
    "know that. Widening anchored bands with the hardware jump from the anchors (normalised conformal, slope "
    "fitted in the inner CV) moved that cell by one point only. Caveat: in the eval a *seen* workload's rows "
    "from the same source are also in training (on other accelerators); a user's own run of a seen model in a "
    "new setup lies between the two regimes, so its seen band may be somewhat narrow.",
    "",
    ]


#: The previous shipped state (bench/RESULTS_perf.md of 2026-11-22 08:52, model sha256:52e816f11d76085d):
#: MAPE / median APE (%) and band coverage (%) of cloudfit per scheme and regime, before this round's changes.
BEFORE = {
    "accelerator": {"single-anchored": (20.5, 15.6, 73), "single-stats-only": (20.7, 14.8, 95),
                    "multi-anchored": (26.8, 21.3, 83), "multi-stats-only": (27.2, 21.0, 94)},
    "model": {"single-anchored": (20.6, 15.9, 81), "single-stats-only": (108.6, 30.1, 67),
              "multi-anchored": (36.7, 23.1, 74), "multi-stats-only": (108.7, 30.6, 71)},
}


def changes(report: dict) -> list[str]:
    """Before/after of this round, what changed, and what was tried and dropped."""
    from cloudfit.perf.evaluate import SCHEMES

    lines = ["### This round: before → after", "",
             "cloudfit, MAPE / median APE in %, and band coverage; *before* = the previous shipped model and eval "
             "(uncapped eval path, one band per regime).", "",
             "| scheme | regime | before | after | band before | band after |", "|---|---|---:|---:|---:|---:|"]
    for scheme, regimes in report["schemes"].items():
        for regime, b in regimes.items():
            mb, db, cb = BEFORE[scheme][regime]
            lines.append(f"| {SCHEMES[scheme]} | {regime} | {mb:.1f} / {db:.1f} | {_fmt(b, 'cloudfit')} | {cb}% | "
                         f"{b['coverage'] * 100:.0f}% |")
    lines += [
        "",
        "Changes (each measured with this eval; every fitted piece refitted without the held-out group):",
        "",
        "- **The eval goes through the shipped path.** `fit.shipped_predictions` is what `predict_many` computes — "
        "anchors, λ per single/multi-device, then the linear-scaling cap against the same prediction on one node "
        "and on one device — and the inner calibration (λ, band) uses it too (a test checks eval = `predict_many` "
        "row by row). The cap binds on some multi-device rows and lowered leave-one-model-out error.",
        "- **Communication constants calibrated on scaling.** After κ and η_mem (pairs across accelerators), the "
        "prior's overlap share, tail and network efficiency are grid-searched on *scaling* pairs (a multi-device "
        "row vs the same workload's single-device row on the same accelerator). The data choose no overlap "
        "(backward_share 0): the all-reduce is exposed. Multi-device leave-one-model-out error fell most.",
        "- **Band per regime × workload novelty**, anchored bands scaled by 1 + s × the hardware jump from the "
        "anchors (s fitted in the inner CV), conformal quantiles from the inner grouped CV through the capped path.",
        "",
        "Tried, did not help (LOAO single-device anchored MAPE unless said; before: 20.5%), so not shipped:",
        "",
        "- *All* the workload's single-device measurements on other accelerators as anchors (every batch size), "
        "weighted by batch similarity and/or spec similarity (|log prior ratio|): 20.5–23.9%; spec-similarity "
        "weights hurt K80 (the nearest accelerator in specs is not the one with the most similar ratio).",
        "- A learned transfer correction on log(true ratio / prior ratio) over (target, anchor) pairs of the "
        "training folds: ridge on the prior ratio, spec log-ratios (peak, vector, bandwidth, memory), the anchor's "
        "efficiency against the prior, tensor-time share and their products: 24.0–29.4%; xgboost on those plus "
        "workload op-class shares: 24.2–25.1%. The held-out accelerator always lies outside the training pairs' "
        "ratios (K80 the slowest, GH200 the fastest), and pair-level scatter (sd 0.2–0.4 in log within one source "
        "and accelerator pair) swamps what specs explain.",
        "- Other prior-calibration objectives: group-balanced weights 21.3%, mean APE instead of mean |log| 21.7%, "
        "also calibrating η_vector 20.5% (no change) or η_conv 20.7%.",
        "- Multi-device: the workload's own multi-device measurements on other accelerators as extra anchors "
        "(weighted by batch and device-count similarity): 26.9–27.5% vs 27.1% (LOAO multi-anchored), better only "
        "at λ = 0; an explicit scaling model (xgboost on log(multi / same-accelerator single) − prior ratio) times "
        "the anchored single-device prediction: LOAO 24.8% but leave-one-model-out 42.7% (vs 36.4%); the anchored "
        "single-device prediction × the model's own scaling on the target accelerator: 27.1% (vs 26.6%); a "
        "fixed intra-node or inter-node latency in the comm calibration: ±0.5 point.",
        "- Shrinking predictions toward the APE-optimal point (× e^−δ) would take about 1 point off MAPE "
        "(δ = 0.06: 19.7%) at the cost of a systematic 6% under-prediction; not done.",
        "",
    ]
    return lines


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
        + ", and on data-parallel scaling: " + ", ".join(f"{k} = {m.constants[k]:.3g}" for k in sorted(fit.CALIBRATED_COMM))
        + f"; anchored predictions keep λ = {m.anchor_lambda['single']:g} (single device) / "
        f"{m.anchor_lambda['multi']:g} (multi-device) of the learned correction; anchored bands widen by "
        f"{m.jump_slope:g} × the hardware jump (|log prior ratio|) from the anchors.", "",
        "Methods: **cloudfit** = calibrated roofline/communication prior × xgboost correction (anchored on the "
        "workload's single-device measurement on *another* accelerator where one exists), evaluated through the "
        "capped path `predict_many` ships; **tflops-ratio** = "
        "anchor × peak-TFLOPS ratio × device ratio (stats-only: one median FLOP efficiency); **svr** = CM-DARE-style "
        "RBF SVR on GPU TFLOPS, model FLOPs, parameters, batch, devices, nodes; **prior** = the physics prior with "
        "datasheet constants; **calibrated-prior** = ablation, cloudfit without its learned correction. Every fitted "
        "piece (prior constants, correction, λ, conformal quantiles, band slope, SVR, FLOP efficiency) is refitted "
        "without the held-out group.", "",
    ]
    lines += targets(report)
    lines += changes(report)
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
