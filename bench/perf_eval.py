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


def analysis(orc: dict[str, float], report: dict) -> list[str]:
    lomo = report["schemes"]["model"]
    t2t = [lomo[r]["groups"]["t2t-resnet-cifar"]["cloudfit"]["mape"] * 100 for r in ("single-stats-only", "multi-stats-only")
           if "t2t-resnet-cifar" in lomo.get(r, {}).get("groups", {})]
    return [
    "### What dominates the remaining error", "",
    "- **The data's own cross-accelerator scatter.** An oracle that knows each accelerator's mean efficiency "
    f"relative to the calibrated prior (fitted on the held-out rows themselves) still leaves {orc['accelerator'] * 100:.1f}% "
    "MAPE on anchored single-device predictions; knowing it per (source, accelerator) leaves "
    f"{orc['source+accelerator'] * 100:.1f}%, and only a per-(source, accelerator, workload) oracle reaches "
    f"{orc['source+accelerator+workload'] * 100:.1f}%. Examples: Gavel's ResNet-18 "
    "at batch 16–64 runs as fast on a V100 as on a P100 (input pipeline bound); the P100/K80 ratio of one workload is "
    "1.8–8.4× across Gavel's jobs and batch sizes, 4.0–4.7× in tf_cnn_benchmarks (above both the FP32 ratio, 3.3×, "
    "and the bandwidth ratio, 3.05×: no roofline reaches it) and 1.8–3.0× in CM-DARE; Lambda's V100 \"tf32\" rows "
    "(FP32 on a V100) run e^0.3–0.6 slower relative to the A100 than the prior says, their fp16 rows as it says; "
    "and GPT on GH200 is only 2.1× A100 where every datasheet ratio says 2.6–3.2×. No spec feature can tell these "
    "apart, so the learned correction earns nothing on anchored single-device predictions (inner CV keeps λ = 0 "
    "there: cloudfit = its calibrated prior), and neither did a learned transfer correction on (target, anchor) "
    "pairs (see *Tried, did not help*). Multi-device anchored errors inherit the same workload's single-device "
    "error on that accelerator (correlation 0.6); with that part removed they would still be about 20% MAPE.",
    "- **Old and exotic accelerators held out.** K80 (not in the catalog), GH200 and V100 dominate the "
    "leave-one-accelerator-out error; on the catalog's modern GPUs (A100, A100-80GB, H100, H100-PCIe; Lambda's "
    "DeepLearningExamples runs) anchored single-device error is about 9–15%. Lambda's H100-PCIe multi-GPU rows "
    "scale linearly (even 10.9× on 8) and are predicted e^0.3 too slow.",
    "- **Multi-device scaling of noisy sources.** Gavel's multi-GPU throughputs are non-monotone in the GPU "
    "count for several jobs (e.g. LM on V100: ×4 slower than ×2). CM-DARE's P100 parameter-server runs plateau "
    "at 4–5 workers per server (≈ 10 ms of server CPU per worker step, which the prior now models); its K80 runs "
    "never reach that plateau, so with the P100 held out nothing in the training rows shows it and the fold "
    "calibrates no server time (its multi-node P100 rows are then predicted up to 2–2.5× too fast). The learned "
    "correction helps most here (anchored multi-device error down from ~36% for the calibrated prior to ~28%).",
    "- **Model families unlike any in the training set (leave-one-model-out, stats-only).** Tensor2Tensor's tiny "
    "CIFAR ResNets under TensorFlow parameter servers run 14–21× below their roofline; with the per-step "
    "parameter-server overhead in the prior (calibrated on the other CM-DARE and tf_cnn_benchmarks models) that "
    "family's stats-only error is " + " / ".join(f"{v:.0f}%" for v in t2t) + " (single / multi-device; it was 1156% / "
    "774%). What remains: workloads whose efficiency is their own (NCF's embedding-bound steps, Gavel's ResNet-18 "
    "and Transformer at small batches). Tiny all-reduce models have no measurement here at all: their stats-only "
    "predictions are held down only by the kernel-launch floor (see *Change*), which puts the shipped MLP profile "
    "at 0.32 M samples/s on any one GPU where ~0.1–0.2 M is plausible.",
    "- **Band.** One conformal band per regime *and* per workload novelty (the workload's stats signature is in "
    "the training set, as in leave-one-accelerator-out, or new, as in leave-one-model-out; `predict_many` makes "
    "the same test against the signatures stored in model.json), from residuals of an inner grouped CV run "
    "through the capped predict path; anchored bands widen with the hardware jump from the anchors. Held-out "
    "K80, P100 and V100 are biased, not just noisy (tf_cnn_benchmarks' K80 is e^0.27 slower relative to P100 than "
    "any other pair says), which keeps leave-one-accelerator-out single-device anchored coverage at the low end; "
    "leave-one-model-out stats-only bands are a little wide because the inner folds still hold heavy-tailed "
    "residuals. Caveat: in the eval a *seen* workload's rows from the same source are also in training (on other "
    "accelerators); a user's own run of a seen model in a new setup lies between the two regimes, so its seen band "
    "may be somewhat narrow.",
    "",
    ]


#: The previous shipped state (bench/RESULTS_perf.md of 2026-11-22 22:00, model sha256:ee8eb215fe09e43d):
#: MAPE / median APE (%) and band coverage (%) of cloudfit per scheme and regime, before this round's changes.
BEFORE = {
    "accelerator": {"single-anchored": (20.5, 15.6, 73), "single-stats-only": (21.1, 14.7, 85),
                    "multi-anchored": (26.7, 20.2, 79), "multi-stats-only": (26.6, 20.2, 81)},
    "model": {"single-anchored": (20.6, 15.9, 79), "single-stats-only": (92.6, 26.8, 85),
              "multi-anchored": (30.3, 20.4, 77), "multi-stats-only": (86.2, 29.3, 80)},
}
#: The best baseline in the previous state where it beat cloudfit: leave-one-model-out multi-stats-only (SVR).
BEFORE_LOSS = "the SVR beat cloudfit in leave-one-model-out multi-stats-only (73.0% vs 86.2%)"


def changes(report: dict) -> list[str]:
    """Before/after of this round, what changed, and what was tried and dropped."""
    from cloudfit.perf.evaluate import SCHEMES

    lines = ["### This round: before → after", "",
             "cloudfit, MAPE / median APE in %, and band coverage; *before* = the previous shipped model and eval "
             f"(where {BEFORE_LOSS}).", "",
             "| scheme | regime | before | after | band before | band after |", "|---|---|---:|---:|---:|---:|"]
    for scheme, regimes in report["schemes"].items():
        for regime, b in regimes.items():
            mb, db, cb = BEFORE[scheme][regime]
            lines.append(f"| {SCHEMES[scheme]} | {regime} | {mb:.1f} / {db:.1f} | {_fmt(b, 'cloudfit')} | {cb}% | "
                         f"{b['coverage'] * 100:.0f}% |")
    lines += [
        "",
        "Changes (measured with this eval; every fitted piece refitted without the held-out group):",
        "",
        "- **A per-step overhead for parameter-server training, and the servers' CPU time, in the prior.** Under "
        "TensorFlow's parameter servers (CM-DARE, tf_cnn_benchmarks) every step pulls and pushes each variable: a "
        "fixed cost per step, whatever the batch, that makes small models run far below their roofline (CM-DARE's "
        "CIFAR ResNet-15: 40 ms a step on a P100 where the roofline says 3 ms; ResNet-32, twice the layers: 82 ms). "
        "The prior now adds `ps_overhead_s` × (1000 GB/s ÷ the accelerator's bandwidth) to a parameter-server "
        "worker's step, and `ps_server_overhead_s` of server CPU per worker step (÷ servers) to the servers' side, "
        "which is what makes CM-DARE's P100 runs plateau at 4–5 workers per server. Both are calibrated inside "
        "every fold like the other constants (grid holding 0, so the data may choose none): the worker overhead "
        "on *overhead pairs* — the same setup at two batch sizes, and two workloads of one source on one "
        "accelerator (`fit.overhead_pairs`) — after κ and η_mem; the server time with the communication constants "
        "on scaling pairs. On all rows: 80 ms at 1000 GB/s (110 ms on a P100) and 20 ms per worker step. Before, "
        "the xgboost correction had to learn this from model stats, and flat tree extrapolation made stats-only "
        "predictions of the held-out CIFAR ResNets 8–13× too fast; now leave-one-model-out stats-only error is "
        "about a third of what it was and cloudfit beats every baseline in every cell. Cost: leave-one-accelerator-"
        "out multi-device anchored error rose ~1.5 points, mostly CM-DARE with the P100 held out (the K80 runs "
        "never plateau, so that fold cannot see the server time) and tf_cnn_benchmarks' multi-GPU runs.",
        "- **A kernel-launch floor on every prediction.** The profiler now counts the kernels of one forward + "
        "backward (`stats.kernels_per_step`: ATen ops that do work — not views, metadata or allocations; mlp 20, "
        "resnet50 408, bert-large 1,140), and `predict_many` caps samples/s (and the band's top) at devices × batch "
        "÷ (kernels × 10 µs) (`prior.launch_bound_sps`): the host launches an eager step's kernels one by one while "
        "the device computes, so no GPU runs a step faster than that. 10 µs is a third of what this VM takes per "
        "counted kernel for a whole SGD step of the mlp at batch 1 (29 µs), leaving room for faster cloud hosts: a "
        "floor, not a fitted term. No measured row comes near it (the closest reaches 13% of its bound), so no "
        "number in these tables moves; it stops tiny models running away (the shipped MLP profile: 3.2 M samples/s "
        "on an A100 and 0.63 M on a T4 after the parameter-server change, 0.32 M on either now).",
        "- Choices made by looking at this eval (so the after column is not untouched by them): the overhead is "
        "scaled by memory bandwidth (not scaled was worse everywhere, e.g. quick LOAO single anchored 25.5%; "
        "scaled by FP32 rate was within a point of it on the general-overhead variant), it applies to parameter-server training only (see the first *tried* "
        "item), and the pair set (batch pairs + workload pairs, including workloads of the same family). "
        "Everything numeric — the overheads, server time, κ, η_mem, communication constants, λ, band — is chosen "
        "inside the folds on training rows only.",
        "",
        "Earlier rounds (still shipped): the eval runs the shipped predict path (`fit.shipped_predictions` = "
        "`predict_many`: anchors, λ per single/multi-device, linear-scaling cap); the communication constants are "
        "calibrated on scaling pairs; one conformal band per regime × workload novelty, anchored bands scaled by "
        "1 + s × the hardware jump from the anchors.",
        "",
        "Tried this round, did not help, so not shipped (*quick* = outer folds only, λ fixed at 0 single / 1 "
        "multi-device, no band; *nested* = this full eval; the previous state, quick: LOAO 20.5 / 21.1 / 26.6 / "
        "26.6, LOMO 20.6 / 92.6 / 30.1 / 86.2 for single-anchored / single-stats-only / multi-anchored / "
        "multi-stats-only):",
        "",
        "- A general per-step overhead for *all* training (kernel launches, framework bookkeeping) beside the "
        "parameter-server one, same scaling and calibration (it came out at 10 ms at 1000 GB/s), nested: LOAO "
        "19.8 / 21.8 / 27.9 / 29.2, LOMO 19.7 / 32.4 / 28.6 / 38.0 — 0.2–0.4 points better than parameter-"
        "server-only in the two LOAO anchored cells, 0.1–3.5 points worse in the other six, and it predicted the shipped MLP profile slower on a T4 than on this machine's CPU (a real launch "
        "cost grows with the kernel count, which the stats lack). Scaling it with parameters^β (β chosen in-fold, "
        "0.5) did not help either (quick LOMO multi anchored 31.1%). Calibrating κ/η_mem jointly with the "
        "overhead or again after it: quick LOAO single anchored 20.0–22.7%, LOMO stats-only up to 94%.",
        "- A parameter-server overhead not scaled by the accelerator (CPU-bound RPCs): quick LOAO 25.5 / 25.6 / "
        "29.7 / 30.2 — the K80/P100 step times of CM-DARE's CIFAR ResNets (103 vs 40 ms) say it does scale.",
        "- A separate tensor-core share κ for TF32 (vs 16-bit), on the general-overhead variant: quick LOAO 20.0 / "
        "22.0 / 28.2 / 29.8, LOMO 19.2 / 32.1 / 29.0 / 37.4 — within a point of the same model without it.",
        "- Multi-device as the anchored single-device prediction (λ = 0) × the model's own scaling "
        "(prior·e^f on the query ÷ on its one-device version), on the general-overhead variant: quick LOAO multi "
        "anchored 27.5%, LOMO 28.0% (vs 27.7 / 28.7 without); an explicit scaling model (xgboost on log(multi / same-accelerator "
        "single) − prior ratio): LOAO 26.6% but LOMO 34.0% — the same trade-off as in the previous round.",
        "- Group-weighted conformal quantiles (each inner held-out group weighs the same, since a test is one "
        "whole group), nested: LOAO coverage fell to 70–73%, LOMO 74–87%.",
        "",
        "Tried in earlier rounds, did not help (LOAO single-device anchored MAPE unless said; then 20.5%):",
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
        "at λ = 0; the anchored single-device prediction × the model's own scaling on the target accelerator: "
        "27.1% (vs 26.6%); a fixed intra-node or inter-node latency in the comm calibration: ±0.5 point.",
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
    lines.append("- cloudfit has the lowest MAPE (ties included) of all methods in every cell." if not losses else
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
        + ", on batch and workload pairs (parameter-server step overhead, s at 1000 GB/s): "
        + ", ".join(f"{k} = {m.constants[k]:g}" for k in sorted(fit.CALIBRATED_OVERHEAD))
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
    lines += analysis(oracle(), report) + [
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
