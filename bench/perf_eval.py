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
    acc = report["schemes"]["accelerator"]
    sa = acc["single-anchored"]
    ma = acc["multi-anchored"]
    src = lambda b, k: b["sources"][k]["cloudfit"]["mape"] * 100 if k in b["sources"] else float("nan")  # noqa: E731
    return [
    "### What dominates the remaining error", "",
    "- **Old accelerators and their sources.** Held-out K80 (not in the catalog; "
    f"{sa['groups']['K80']['cloudfit']['mape'] * 100:.0f}% single-device, {ma['groups']['K80']['cloudfit']['mape'] * 100:.0f}% "
    f"multi-device) and V100 ({sa['groups']['V100']['cloudfit']['mape'] * 100:.0f}% / {ma['groups']['V100']['cloudfit']['mape'] * 100:.0f}%) "
    f"dominate: by source, Gavel {src(sa, 'gavel'):.0f}% / {src(ma, 'gavel'):.0f}% and tf_cnn_benchmarks "
    f"{src(sa, 'tf_cnn_benchmarks'):.0f}% / {src(ma, 'tf_cnn_benchmarks'):.0f}% against Lambda's "
    f"{src(sa, 'lambda'):.0f}% / {src(ma, 'lambda'):.0f}% and CM-DARE's {src(sa, 'cmdare'):.0f}% / {src(ma, 'cmdare'):.0f}%. "
    "The same cross-accelerator scatter as before: an oracle knowing each accelerator's mean efficiency against "
    f"the calibrated prior (fitted on the held-out rows) leaves {orc['accelerator'] * 100:.1f}%; per (source, accelerator) "
    f"{orc['source+accelerator'] * 100:.1f}%; per (source, accelerator, workload) {orc['source+accelerator+workload'] * 100:.1f}%. "
    "Gavel's ResNet-18 at small batches runs as fast on a V100 as on a P100 (input-bound: predicted up to 3× too "
    "fast on a held-out K80, 1.7× on V100); Gavel's multi-GPU rows are non-monotone in the GPU count.",
    "- **Multi-device: Gavel's one-server scaling and the old accelerators' cross-accelerator scatter.** The "
    "learned correction may not raise per-device efficiency with more devices or nodes (the physics tests), which "
    f"the noisy multi-GPU rows sometimes show; cloudfit and the calibrated prior are level on multi-device anchored "
    f"rows ({ma['cloudfit']['mape'] * 100:.1f}% vs {ma['calibrated-prior']['mape'] * 100:.1f}%). About half of each "
    "old-source row's log error is scaling (the prior's multi/single ratio against the measured one on the same "
    "accelerator) and half the single-device cross-accelerator transfer it is anchored on (\"Where the "
    "multi-device error is\" above). The scaling part that no tried physics explains: Gavel's one-server runs at "
    "0.64–0.90 of linear even where the step is seconds of compute and the all-reduce tens of ms (a compute-"
    "proportional loss Lambda's NVLink runs do not show, non-monotone in the GPU count: V100 LSTM 1.00 / 0.94 / "
    "0.37 of linear at 2 / 4 / 8), and CM-DARE's P100 parameter-server plateau that a second server does not lift. "
    "Lambda's rows are the only modern multi-GPU data (H100-PCIe held out: 8 GPUs measured 10.9× one).",
    "- **GH200 and the K80.** Held-out GH200 (6 Sailor rows, Megatron OPT-350M, anchored on the A100-40GB) "
    f"stays at {sa['groups']['GH200']['cloudfit']['mape'] * 100:.0f}% for every method: Sailor measured it at 2.1–2.2× "
    "the A100-40GB and flat from micro-batch 8 to 32, where its specs say 2.6× the bandwidth and 3.2× the TF32 peak "
    "(it runs like an H100 SXM, whose Lambda rows sit at 1.7–2.0× an A100-80GB). The likely cause is power: "
    "Sailor's GH200s are CSCS Alps' Clariden nodes (Sailor's README; GH-96 × 4 per node), and four-superchip "
    "GH200 blades run each superchip at 680 W, Grace CPU and its memory included (JSC's JUPITER configuration "
    "page for the same 4 × GH200 96 GB design; 900 W in one-superchip nodes), against 700 W for an H100 SXM's GPU "
    "alone — but the prior has no power term and 6 rows of one workload cannot calibrate one. Hopper SXM against "
    "PCIe is the other Hopper residual: Lambda measured the H100 SXM at 1.40–1.52× the H100 PCIe on every workload "
    "(BERT, NCF, ResNet-50) where the prior says 1.45–1.68× (bandwidth 1.68×, SMs × clock 1.31×), so each is "
    "predicted from the other ~15% off; NeuSight measured no memory-bound kernel on an H100, so the tables "
    "extrapolate exactly where the two differ. The K80 over-predictions left are "
    "Gavel's rows that are non-monotone in the batch (ResNet-18/CIFAR-10 at 78, 252, 463, 244, 241 samples/s for "
    "batch 16–256, where the P100 climbs 596 → 2,013) and tf_cnn_benchmarks/Gavel CNNs slower against the P100 "
    "than even the ECC-derated bandwidth gives, while CM-DARE's K80/P100 pairs sat on the prior without the "
    "derating (CM-DARE multi-anchored went from 24.0% to "
    f"{src(ma, 'cmdare'):.1f}%): the sources disagree by ~25% on the same pair of GPUs.",
    "- **Kernel tables from other boards.** The composed efficiency tables come from NeuSight's PCIe cards; the "
    "board-to-board differences in sustained clocks (power limits) reach the SXM predictions. With every "
    "accelerator weighing the same in the calibration the held-out A100-80GB went from 25.6% to "
    f"{sa['groups']['A100-80GB']['cloudfit']['mape'] * 100:.1f}% (the datasheet prior: 11.7%).",
    "- **Kernel level GEMM on H100 and L4 bmm** (16.4% held out, target 10%). With the power ceiling the L4's "
    "level follows its 72 W (30.8 → 20.7% held out); what is left is per-shape, not level: one oracle constant "
    "per held-out GPU and op still leaves H100 bmm 24%, L4 bmm 21%, L4 linear 17%. H100's cuBLAS picks 64-wide "
    "tiles for skinny shapes that the A100 runs as half-empty 128×128 tiles (the training GPUs teach that those "
    "shapes are slow); the L4 runs the A100's own kernel on every bmm and still scatters ±25% in log (a 72 W "
    "board's clock under varying load); H100/L4 linear run 13–16% slower than predicted (128 FP32 lanes per SM, "
    "whose only training example is the power-held P4). Neither the kernels' own launches (NeuSight's input) "
    "nor wave-quantised targets transferred (Kernel-level notes). Memory-bound ops transfer well (latency floors "
    "and bandwidth fractions are similar across GPUs).",
    "- **Band.** Conformal per regime and workload novelty as before; accelerators without measured rows get at "
    "least the leave-one-accelerator-out quantiles.",
    "",
    ]


#: The previous shipped state (bench/RESULTS_perf.md of 2026-11-23 23:20, model sha256:7c718b7684834661, the
#: third session of issue 15): MAPE / median APE (%) and band coverage (%) of cloudfit.
BEFORE = {
    "accelerator": {"single-anchored": (19.0, 13.0, 72), "single-stats-only": (22.2, 13.9, 78),
                    "multi-anchored": (34.9, 24.3, 76), "multi-stats-only": (34.8, 24.0, 81),
                    "multi-anchored-same-scale": (28.6, 21.8, 84)},
    "model": {"single-anchored": (19.1, 14.0, 81), "single-stats-only": (35.2, 25.1, 79),
              "multi-anchored": (28.5, 19.4, 79), "multi-stats-only": (39.5, 20.9, 80),
              "multi-anchored-same-scale": (25.0, 18.8, 87)},
}
BEFORE_LOSS = ("the calibrated prior beat cloudfit in leave-one-accelerator-out multi-anchored, 34.6% vs 34.9%, "
               "and in leave-one-model-out single-stats-only, 33.3% vs 35.2%; the datasheet and calibrated priors in "
               "leave-one-accelerator-out multi-anchored-same-scale, 27.0% / 27.8% vs 28.6%")

#: This round (issue 15, fourth session), written before the previous rounds' notes.
THIS_ROUND = [
    "What changed in this round (issue 15, fourth session):",
    "",
    "- **A bigger kernel never takes less time** (`kernels._time_monotone`, `prior._interp_rows`; tests in "
    "tests/perf/test_physics.py). The kernel trees' efficiency tables said, on every accelerator, that some "
    "memory-bound kernel twice the size of another runs faster (all 18 memory tables and 10 of 18 GEMM tables "
    "had such a step; the T4's achieved fraction rose 4.3× from 4 to 8 KiB), and the prior, whose average kernel "
    "grows with the batch, then grew faster than the batch: over the shipped profiles × accelerators × batches "
    "1–256 (fp32 and fp16), 199 batch doublings more than doubled samples/s (up to 1.39×) — a step that got "
    "shorter with more work. Each table now lets the achieved fraction at most double per doubling of the "
    "size (a running minimum of time from the large, measured sizes down: where the trees broke the rule the "
    "smaller kernel gets the larger one's time; latency-bound small kernels, whose time is flat, are left as "
    "they are), and the prior interpolates log fractions linearly in log2 size, so time is monotone between grid "
    "points too (it interpolated the fractions themselves, which bends time down between two points where the "
    "fraction doubles). The prior: 0 superlinear doublings. Shipped predictions (prior × learned correction): "
    "428 → 361 superlinear doublings, worst 1.63× → 1.32×: the correction, which sees the batch through several "
    "features, still breaks the rule — named, not fixed (a guarantee needs the correction monotone in every "
    "batch-dependent feature, or an envelope over smaller batches for every query, several times "
    "`predict_many`'s work; the first was measured: log batch monotone decreasing and the per-step FLOPs "
    "feature dropped removes all 361, but the stats-only cells pay — leave-one-model-out single-stats-only "
    "35.1 → 42.6%, multi-stats-only 39.4 → 41.6%, leave-one-accelerator-out 21.9 → 22.5% / 34.2 → 35.2% — "
    "so it is not shipped). Tried first: fractions growing at most 1 + ln 2 per doubling with linear "
    "interpolation (the bound that keeps linearly interpolated fractions monotone in time) — it forbids the flat "
    "time of latency-bound kernels, so raising small kernels to it made them faster than their latency floor (the "
    "tiny `mlp` 2.6× faster on an H100 than on a T4, against the ≤ 2× of tests/perf/test_model.py): dropped. "
    "End to end: the table above (better in 9 of 10 cells; leave-one-model-out single-anchored 19.10 → 19.14); "
    "held-out single-anchored MAPE % A100 6.95 → 6.98, A100-80GB 11.98 → 11.93, GH200 18.5 → 18.1, H100 "
    "6.2 → 6.1, H100-PCIe 8.9 → 8.9, K80 27.6 → 27.9, P100 15.9 → 15.1, V100 22.1 → 22.0. The calibrated "
    "constants and λ are unchanged.",
    "- **FP8 is Transformer Engine on the Linear layers** (`prior.FP8_CLASSES`, `prior.fp8_byte_scale`, "
    "`prior.Setup.at_16bit`; test in tests/perf/test_physics.py). Before, `--precision fp8` ran every "
    "tensor class (convolutions and attention too) at the FP8 peak with 16-bit bytes, and the learned "
    "correction was evaluated at an FP8 peak no training row has; with the tables' superlinear steps FP8 "
    "came out up to 1.9% *slower* than bf16 on transformers (with the tables of this round's first part) and 1.31× faster on VGG-16 (convolutions, which "
    "Transformer Engine does not run in FP8). Now only the matmul class runs at the FP8 peak, moving 3/8 of its "
    "fp32 bytes (1-byte inputs, 16-bit output), convolutions and attention keep the 16-bit peak, and FP8 rows "
    "take the 16-bit correction: FP8 / bf16 on H100 at the profiles' batches 1.00 for the CNNs, 1.00–1.07 for "
    "the transformers (eager profiles: their memory-bound ops dominate), never below 1 on any shipped profile × "
    "FP8 GPU × batch (1,113 pairs; up to 1.28×). model.json is unchanged by this part (no FP8 training row). "
    "Evidence for the gain's size: llm-foundry measured MPT-1B/3B at 1.31–1.35× bf16 on H100 at sequence 512 "
    "with fused kernels, 1.00–1.15× at 8k–32k (data/llm).",
    "",
]


def changes(report: dict) -> list[str]:
    """Before/after of this round, what changed, and what was tried and dropped."""
    from cloudfit.perf.evaluate import SCHEMES

    lines = ["### This round: before → after", "",
             "cloudfit, MAPE / median APE in %, and band coverage; *before* = the previous shipped model and eval "
             f"(where {BEFORE_LOSS}).", "",
             "| scheme | regime | before | after | band before | band after |", "|---|---|---:|---:|---:|---:|"]
    for scheme, regimes in report["schemes"].items():
        for regime, b in regimes.items():
            if regime not in BEFORE[scheme]:  # a regime new this round
                lines.append(f"| {SCHEMES[scheme]} | {regime} | — | {_fmt(b, 'cloudfit')} | — | "
                             f"{b['coverage'] * 100:.0f}% |")
                continue
            mb, db, cb = BEFORE[scheme][regime]
            lines.append(f"| {SCHEMES[scheme]} | {regime} | {mb:.1f} / {db:.1f} | {_fmt(b, 'cloudfit')} | {cb}% | "
                         f"{b['coverage'] * 100:.0f}% |")
    lines += [""] + THIS_ROUND + [
        "What changed in the previous round (issue 15, third session; four parts, each measured on its own branch against "
        "the previous shipped model, then merged and measured together in the table above):",
        "",
        "- **The kernel model: a power-sustained fp32 ceiling and the shape as features** (Kernel-level section "
        "above; GEMM leave-GPU-out 20.1 → 16.4%, convolution 29.9 → 20.8%, memory-bound 6.9 → 6.1%). On its own, "
        "end to end (model.json refitted; MAPE %, single-anchored / single-stats-only / multi-anchored / "
        "multi-stats-only): LOAO 21.1 / 24.6 / 36.8 / 36.4 → 20.7 / 24.0 / 36.6 / 35.8, LOMO 21.8 / 35.7 / 28.3 / "
        "37.4 → 21.6 / 36.4 / 28.0 / 37.4 (one cell worse); held-out single-anchored A100 7.4 → 7.1, A100-80GB "
        "13.1 → 12.9, H100 8.5 → 8.3, H100-PCIe 14.0 → 10.1, GH200 21.5 → 18.5. The recalibration moved κ 0.5 → 0.4 "
        "and the parameter-server overhead 0.06 → 0.04 s.",
        "- **Training rows keep the board they ran on** (`hardware.BOARD_OF`, `hardware.accelerator_of`; "
        "`scripts/build_measurements.py`; tests in tests/catalog/test_hardware.py, tests/perf/test_data.py, "
        "tests/perf/test_evaluate.py). tf_cnn_benchmarks' P100 rows ran on a DGX-1, whose P100s are the SXM2 module "
        "(NVIDIA Tesla P100 datasheet: 10.6 / 21.2 TFLOPS at 1480 MHz, 300 W), not the 9.3-TFLOPS PCIe card of the "
        "catalog's `P100` (GCE's, which CM-DARE measured); half of Lambda's A100-80GB rows are its \"A100 80GB PCIe\" "
        "systems (A100 datasheet: 1,935 GB/s and 300 W against the SXM4 module's 2,039 GB/s and 400 W, same peaks; "
        "Lambda measured the PCIe board 4–7% slower on every workload, close to the 5% bandwidth ratio). Both are "
        "now their own specs (`P100-SXM2`, `A100-80GB-PCIe`), while leave-one-accelerator-out holds out and anchors "
        "across whole accelerators, so the held-out groups are unchanged and a board is never anchored on its twin. "
        "`cloudfit profile` maps the CUDA names (\"A100 80GB PCIe\", \"P100-SXM2\") to the boards. Side effect through "
        "the monotone kernel tables: H100-PCIe has at least the A100-80GB-PCIe's peaks and bandwidth, so its "
        "memory table is lifted to that board's achieved bandwidth (plateau 0.82 → 0.84). Held-out single-anchored "
        "(MAPE %, before → after): A100 7.4 → 7.2, A100-80GB 13.1 → 11.7, GH200 21.5 → 21.5, H100 8.5 → 8.6, "
        "H100-PCIe 14.0 → 13.1, K80 31.2 → 27.1, P100 17.3 → 15.9, V100 22.8 → 22.8 (tf_cnn_benchmarks 32.8 → 21.8); "
        "multi-anchored A100-80GB 12.7 → 11.6, H100 11.2 → 11.1, H100-PCIe 29.0 → 28.3, K80 49.2 → 44.9, P100 "
        "31.4 → 30.5, V100 38.3 → 38.4. Above 1.5× (single, anchored): resnet50 on K80 1.91 → 1.70×, resnet152 on "
        "K80 1.73 → 1.51×, inception_v3 on K80 1.53× → below 1.5×. Worse: leave-one-model-out single-stats-only, "
        "multi-anchored and multi-stats-only by 0.4–0.5 points (table above; the learned correction refitted on "
        "the new specs).",
        "- Tried, not shipped (quick eval: calibrated prior per fold, single-anchored LOAO, 19.3% with the boards): "
        "the parameter-server step overhead only where the server is across a VM network (tf_cnn_benchmarks' "
        "one-GPU \"parameter_server\" rows keep their variables on the host CPU): 18.7%, tf_cnn_benchmarks 21.8 → "
        "17.4%, every tf_cnn_benchmarks row under 1.5× — but it is contradicted by the same source's distributed "
        "one-worker rows (parameter server across a 10 Gbit/s network: K80 ResNet-50 48.4 images/s against 49.0 "
        "replicated and 49.5 with the local server; predicted 0.77× with the rule): the calibrated overhead (0.3 s a "
        "step on a K80) is CM-DARE's Tensor2Tensor cost, which tf_cnn_benchmarks does not pay in any mode, and no spec "
        "tells the two apart. The overhead scaled by 1 / fp32 rate instead of 1 / memory bandwidth (small "
        "latency-bound kernels follow the clock, not DRAM): 18.9% (CM-DARE 12.6 → 10.6%), nothing on Ampere or "
        "Hopper (no parameter-server rows); in the full nested eval, against the boards alone, LOAO 19.3 / 23.0 / "
        "35.1 / 35.2 → 18.9 / 22.4 / 34.5 / 34.7 (single-anchored / single-stats-only / multi-anchored / "
        "multi-stats-only) and LOMO 19.8 / 36.2 / 28.7 / 37.8 → 18.9 / 37.0 / 26.9 / 39.9: better in six cells, "
        "worse in both LOMO stats-only ones; left to the multi-device work, which owns the parameter-server terms. "
        "A constant overhead (before the boards): 28.8% (CM-DARE 47%); scaled by √(1 / bandwidth): 21.5%.",
        "- **Measured, not shipped: the H100 PCIe's memory at 2,039 GB/s** (five HBM2e stacks, 5120-bit, at 1593 MHz — "
        "the A100 80GB SXM4's memory configuration; NVIDIA's datasheet rounds it to 2 TB/s, its product brief says "
        "\"greater than 2,000 GB/s\", and hardware.py takes 2,000). At 2,039 the H100 PCIe dominates the A100-80GB, "
        "so the monotone kernel tables lift its memory table to the A100's (Lambda measured it 1.12–1.45× the "
        "A100 80GB on every workload, NCF included), and the all-rows calibration moves (κ 0.5 → 0.7). Full eval "
        "against the boards alone: held-out single-anchored A100 7.2 → 9.1, A100-80GB 11.7 → 12.1, GH200 21.5 → "
        "15.5, H100 8.6 → 7.7, H100-PCIe 13.1 → 7.9, V100 22.8 → 20.6 (K80, P100 level); multi-anchored H100-PCIe "
        "28.3 → 23.4, H100 11.1 → 9.8, V100 38.4 → 35.1; cells LOAO 19.3 / 23.0 / 35.1 / 35.2 → 18.6 / 21.1 / 34.0 / "
        "33.4, LOMO 19.8 / 36.2 / 28.7 / 37.8 → 19.7 / 36.9 / 27.6 / 39.3 (single-anchored / single-stats-only / "
        "multi-anchored / multi-stats-only). Not shipped: NVIDIA's own documents say 2 TB/s (the 1593 MHz memory "
        "clock is from third-party spec sheets), and the gain is a threshold effect — a 2% spec difference "
        "switches the dominance rule on and lifts a whole table — not the physics of 2% more bandwidth. (It was "
        "first held back because the Bayesian searcher's seed-0 contract run then stopped 14% above the optimum; "
        "the searcher changes below settle that.)",
        "- **The Bayesian searcher beyond TPE** (`search.bayesian`; tests/search/test_bayesian.py): a trial whose "
        "proposal repeats a priced point prices a random unpriced one instead, and after the study the incumbent's "
        "neighbourhood (±1 node, the other pricing mode, the same accelerator in other VM sizes at ½, 1 and 2× the "
        "GPU count) is polished while it improves; TPE is told only its own proposals, so its sampling is "
        "unchanged. With that round's models seeded 300-trial TPE studies stopped at a 2×H100 VM 12% above one "
        "1×H100 VM (the contract test's case 2) and at a V100 VM 14% above three L4 VMs (case 0); queuing the "
        "neighbours as optuna trials (`enqueue_trial`) fixed the first but cost up to 62% regret on the search "
        "bench's transformer-base case and was dropped (bench/RESULTS_recommend.md: the search bench rerun).",
        "",
        "What changed two rounds back (issue 15, second session: the kernel model under the prior's efficiency tables):",
        "",
        "- **The kernel model of the Kernel-level section above** (no raw SM-count/clock features; the same shapes "
        "on every GPU; GEMM leave-GPU-out 24.7 → 20.1%), with model.json refitted on it. End to end it is worse "
        "in every aggregate cell, by 0.4–1.5 points (table above), and better on the generations today's users "
        "rent: single-anchored Ampere 12.3 → 10.7%, Hopper 15.8 → 14.1% (held-out A100 11.9 → 7.4%, GH200 "
        "28.7 → 21.5%; A100-80GB 12.5 → 13.1%, H100-PCIe 13.5 → 14.0%), Kepler 28.3 → 31.2%. Shipped because the "
        "previous kernel model recognised GPUs by their clock and SM count (117.9% leave-H100-out over the "
        "other seven GPUs), which is what it must not do for the unmeasured B200/H200 it is used for. The "
        "K80 ECC share (0.83) was chosen on the previous kernel model's tables and not re-swept.",
        "- **Dominance only from measured tables** (an accelerator's table lifted only by GPUs NeuSight measured, "
        "so the K80's extrapolated GEMM fraction stops lifting every table): measured, worse — LOAO single / "
        "multi-anchored 24.0 / 40.1, LOMO 25.1 / 28.6 (against 21.1 / 36.8 and 21.8 / 28.3 shipped): not shipped. "
        "The end-to-end rows (mostly tensor-core work on SXM boards) prefer one high GEMM fraction to NeuSight's "
        "per-board fp32 SIMT fractions; the shipped GEMM tables are therefore, at small and mid sizes, the K80's "
        "extrapolated fraction (see the kernel notes) — a known weakness, named here.",
        "",
        "What changed three rounds back (issue 15, second session: the multi-device target):",
        "",
        "- **Where the multi-device error is** (prior-only leave-one-accelerator-out, multi-anchored, 36.7% on 610 "
        "rows before this round; each row's log error split into a *scaling* part, log of the prior's multi/single "
        "ratio over the measured one on the same accelerator, and a *cross-accelerator* part, the single-device "
        "anchoring error): Gavel 45.6% (n = 333; mean |scaling| 0.31, |cross| 0.29), tf_cnn_benchmarks 40.0% (89; "
        "0.21 / 0.28), CM-DARE 24.1% (84; 0.18 / 0.12), Lambda 15.5% (104; 0.10 / 0.15). Signed: Gavel's one-server "
        "runs are over-predicted more as GPUs are added (median scaling error +0.14 / +0.38 / +0.32 in log at 2 / 4 / 8 "
        "GPUs: measured 0.64–0.90 of linear even at batches where the step is seconds of compute and the all-reduce "
        "tens of ms), its one-GPU-per-server runs under-predicted (−0.11 to −0.17); CM-DARE's P100 parameter-server "
        "runs over-predicted from 5 workers on (+0.19 → +0.48 at 8: the P100 outruns one server; a second server "
        "measured no better than one for Shake-Shake, 0.38 of linear at 8 workers either way), its K80 runs right "
        "(±0.02); tf_cnn_benchmarks' multi-node K80 runs under-predicted (−0.55). The cross-accelerator part is the "
        "same sign in every old source: the K80 over-predicted against P100/V100 anchors (+0.23 Gavel, +0.27 "
        "tf_cnn_benchmarks, +0.11 CM-DARE) and the P100 under-predicted against K80 anchors (−0.31, −0.40, −0.05).",
        "- **The K80's memory runs at its sustained bandwidth with ECC** (`hardware.ECC_BANDWIDTH_SHARE`, "
        "`Accelerator.sustained_bandwidth_gbps`, used by `features.hardware_arrays`; tested in "
        "tests/catalog/test_hardware.py): Kepler's GDDR5 carries ECC check bits inline, on by default on cloud "
        "K80s, where the HBM2 of P100 and later keeps them side-band at no bandwidth cost (NVIDIA's V100 whitepaper); "
        "0.83 × the datasheet. GDDR parts with NeuSight kernel measurements (P4, T4, L4) are not derated again. "
        "The K80 share was checked on the prior-only quick eval (LOAO single / multi-anchored): 1.0 → 22.7 / 36.7, "
        "0.83 → 20.7 / 35.1 (shipped form); with the datasheet figure itself lowered, which also moves the K80's kernel "
        "tables: 0.83 → 21.1 / 35.4, 0.75 → 20.8 / 35.3, 0.67 → 21.2 / 35.6 (CM-DARE's K80 rows, right before, "
        "prefer 1: multi 24.1 → 27.5 → 33.6 → 43.0%; tf_cnn_benchmarks 40.0 → 33.9 → 30.3 → 26.0% and Gavel "
        "45.6 → 43.9 → 43.1 → 42.5% keep improving down to 0.67). One cost: held-out H100-PCIe single-anchored "
        "11.0 → 13.5% (its fold's calibration moves with the K80 pairs). Quick full model (λ fixed at 1): LOAO 22.7 / 34.4 → 20.7 / 32.6; "
        "leave-one-model-out 22.1 / 27.5 → 20.3 / 27.5.",
        "- Tried and dropped (prior-only LOAO multi-anchored, 36.7% before, constants calibrated per fold on the "
        "scaling pairs): a straggler term for synchronous steps (the slowest of N devices, compute × σ·√(2 ln N), σ "
        "calibrated in 0–0.3): chose σ = 0.1, 36.2%, Gavel 45.6 → 44.1% but Lambda 15.5 → 18.3% (held-out H100-PCIe "
        "14.0 → 25.6%: Lambda's NVLink/DALI runs scale near-linearly); with every accelerator weighing the same in "
        "the communication calibration it chooses σ = 0 (a σ for parameter servers alone: 36.5%). Server RPC cost "
        "per worker not divided among servers (for CM-DARE's second server that did not help): calibration keeps "
        "the divided form. Only the parameter servers' egress capped (one direction of 2 × gradients): 37.2% "
        "(CM-DARE 24.1 → 28.0%). Gradients summed per node before the push (8 K80s per p2.8xlarge): calibration "
        "picks it on the scaling pairs, but 35.1 → 35.4%. *Ratio of ratios* for anchored multi-device predictions "
        "(the anchor's single-device transfer at λ = 0, times the stats-only model's multi/single ratio on the "
        "target): quick full model 34.4% (current form) vs 34.3% (whole correction in the ratio) / 35.1% (half): "
        "no gain, so the anchored path is unchanged.",
        "",
        "What changed earlier in issue 15 (every fitted piece refitted without the held-out group):",
        "",
        "- **Every accelerator weighs the same in the prior's cross-accelerator calibration** "
        "(`fit.per_accelerator_weights`; tests/perf/test_calibration.py): the ~1,000 K80 anchor pairs no longer "
        "choose η_mem for Ampere/Hopper (all rows now choose κ = 0.5, η_mem = 0.4); LOAO single-anchored 23.9 → 22.7%, "
        "held-out A100-80GB 25.6 → 12.5%, H100 13.6 → 8.3%. Dropped then (prior-only LOAO single / multi-anchored): "
        "pairs weighted per source 24.0 / 37.0; single-device pairs only 22.4 / 36.0; a tensor-throughput cap per "
        "byte of bandwidth 24.7 / 38.6; a sublinear power of the usable peak 32.6 / 44.0; no kernel tables 20.4 / 35.9 "
        "(but the L4 level with the T4).",
        "- **Kernel-level efficiency from NeuSight's one-method measurements** (`cloudfit/perf/kernels.py`, data in "
        "`data/kernels/`): per op class (GEMM, convolution, memory-bound) a gradient-boosted model of log(latency / "
        "roofline) on shape-meets-GPU features (waves of 128² and 64² tiles over the SMs and the last wave's fill, "
        "reduction depth, intensity against the ridge point, working set against L2, roofline time) and spec ratios "
        "(FP32 lanes per SM, bandwidth per SM, SMs, clock) — never a name. `hardware.py` gains SMs, clock and L2 "
        "for every accelerator (NeuSight's device configs; datasheets for the rest).",
        "- **Composed into the prior.** `cloudfit model fit` evaluates the kernel models for every accelerator on a "
        "grid of per-kernel traffic and GEMM sizes (the *efficiency tables* stored in model.json, made monotone so "
        "a GPU with at least another's peaks and bandwidth never runs a kernel slower); the prior splits a step's "
        "counted kernels (`stats.kernels_per_step`, ⅓ tensor, ⅔ memory-bound) and runs each class at the achieved "
        "fraction of its average kernel: small kernels that fill few waves and per-kernel latency floors now limit "
        "fast GPUs. κ and η_mem are recalibrated on top (on all rows η_mem = 0.8 × the table fraction and κ = 1: with "
        "the achieved fractions in the tables, tensor cores keep their full datasheet advantage). This is what "
        "makes an L4 1.3× a T4 and 1.4–2× a P100 on fp16 transformers (it was level with the T4 and behind the P100).",
        "- **Multi-node scaling without a learned free hand.** The correction's features now carry the all-reduce "
        "ring's slowest link (intra-node, or the VM network once nodes > 1) and are monotone decreasing in devices "
        "and nodes, so per-GPU throughput never rises with nodes and N one-GPU VMs never beat one N-GPU VM "
        "(tests/perf/test_physics.py, every shipped profile × catalog shape × 1–16 nodes, fp16 and fp32). The "
        "all-reduce is the prior's ring over the VM's real network (one NIC per VM carries the node's share), "
        "with overlap and tail calibrated on the multi-device rows.",
        "- **Input pipeline**: `HardwareQuery.vcpus` bounds image workloads at 120 decoded 224² images/s per vCPU "
        "(scaled by pixels; a documented default, `prior.DECODE_IMAGES_PER_VCPU_224`); `predict --machine-type` "
        "passes the VM's vCPUs (the recommender's space does not pass them yet: merge note).",
        "- **Honest basis**: accelerators with no measured row of the same chip in the training data (T4, L4, P4, "
        "H200, B200, A10, L40S) say \"<GPU>: no measured rows, spec-based\" in the basis, and their band is at "
        "least the leave-one-accelerator-out residual quantiles stored in model.json.",
        "- **Precision semantics**: `fp32` = TF32 off, `tf32` = TF32 on for matmuls and convolutions (NGC "
        "containers), PyTorch's defaults in between; `profile add --precision fp32` on TF32 hardware warns "
        "(`hardware.precision_note`).",
        "",
        "The cost, measured (*quick* = outer folds only, λ fixed at 1, no band; LOAO single-anchored / multi-"
        "anchored cloudfit, with the calibrated prior's single-anchored in brackets):",
        "",
        "- Previous features, no kernel tables: 21.0 / 28.5 (20.0). Monotone in nodes only: 21.1 / 32.9. "
        "Correction of the one-node variant across nodes (physics for the inter-node part): 21.0 / 31.2, but then "
        "N one-GPU VMs beat one N-GPU VM by up to 4.5% for small CNNs (the correction of one device on one node "
        "is higher than that of N devices): not shipped.",
        "- Kernel tables in the prior: 25.4 / 32.3 (23.9) with free device/node features; normalised to each GPU's "
        "own asymptote: 24.5 / 29.2 (24.6); memory table only: 24.2 / 33.3 (22.9). The tables *help* leave-one-"
        "model-out (quick multi-anchored 26.3–31.3 vs 30.7) but cost leave-one-accelerator-out 3–4 points. The "
        "reason found: NeuSight measured PCIe boards (V100 PCIe, A100 PCIe at 250 and 300 W) whose sustained "
        "efficiency differs board to board (the 300 W A100-80GB runs large GEMMs 10–15% faster than the 250 W "
        "A100-40GB, the same chip), while the training rows are SXM parts: held-out A100-80GB went from 9.9% to "
        "25.6%.",
        "- An L2-reuse term (memory-bound traffic that fits L2 stays on chip, calibrated share in {0, .25, .5, "
        ".75}): the calibration chose 0 on these rows.",
        "- Shipped: tables + monotone devices/nodes, because it is the only variant tried that passes every "
        "physical-sense test (relative speeds, node monotonicity, N one-GPU VMs); the accuracy cost is in the "
        "tables above and the targets section.",
        "",
    ]
    prev = next(k for k, line in enumerate(lines) if line.startswith("What changed two rounds back"))
    lines[prev:prev] = anchors_round(report)
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


def kernel_tables(k: dict) -> list[str]:
    """Kernel level, leave-GPU-out (cloudfit.perf.kernels.leave_gpu_out), per op class and op, per test GPU."""
    lines = ["### Kernel level: leave-GPU-out on NeuSight's kernels", "",
             f"Command: `cloudfit model eval --kernels-only` (part of `cloudfit model eval`). Trained on "
             f"{', '.join(k['train'])} ({k['rows_train']} kernels), tested on {', '.join(k['test'])} "
             f"({k['rows_test']} kernels; NeuSight measured no convolution on H100/L4 and no memory-bound op on "
             "H100). Latency MAPE / median APE in %; *roofline × median* = the datasheet roofline times the training "
             "GPUs' median latency/roofline ratio of the op class; *bias* = median log(predicted / measured).", "",
             "| op | n | model | " + " | ".join(k["test"]) + " | roofline × median | bias |",
             "|---|---:|---:|" + "---:|" * len(k["test"]) + "---:|---:|"]
    rows = [(f"**{c}** (class)", b) for c, b in k["classes"].items()] + list(k["ops"].items())
    for name, b in rows:
        per = " | ".join(f"{b['gpus'][g]['mape'] * 100:.1f}" if g in b["gpus"] else "—" for g in k["test"])
        lines.append(f"| {name} | {b['n']} | {b['mape'] * 100:.1f} / {b['mdape'] * 100:.1f} | {per} | "
                     f"{b['roofline_mape'] * 100:.1f} | {b['log_bias']:+.2f} |")
    gemm = k["classes"]["gemm"]["mape"]
    mem = k["classes"]["memory"]["mape"]
    lines += ["", f"Targets (issue 15): GEMM/linear/bmm ≤ 10%: {'met' if gemm <= 0.10 else 'missed'} "
              f"({gemm * 100:.1f}%); memory-bound ops ≤ 15%: {'met' if mem <= 0.15 else 'missed'} ({mem * 100:.1f}%).", ""]
    lines += ["Before → after (MAPE %, *before* = the previous kernel model and sample):", "",
              "| op | before | after | " + " | ".join(f"{g} before → after" for g in k["test"]) + " |",
              "|---|---:|---:|" + "---:|" * len(k["test"]) + ""]
    for name, b in [(c, b) for c, b in k["classes"].items()] + [(o, b) for o, b in k["ops"].items()
                                                               if o not in k["classes"]]:
        if name not in KERNEL_BEFORE:
            continue
        was, was_g = KERNEL_BEFORE[name]
        per = " | ".join(f"{was_g[g]:.1f} → {b['gpus'][g]['mape'] * 100:.1f}" if g in b["gpus"] else "—"
                         for g in k["test"])
        lines.append(f"| {name} | {was:.1f} | {b['mape'] * 100:.1f} | {per} |")
    lines += ["", *KERNEL_NOTES, ""]
    return lines


#: The kernel section before this round (bench/RESULTS_perf.md of 2026-11-23 20:15, model sha256:70d5231db7f975c0:
#: no power ceiling, no shape features): MAPE % per op class/op and per held-out GPU.
KERNEL_BEFORE = {
    "gemm": (20.1, {"A100-80GB": 11.9, "H100": 17.6, "L4": 30.8}),
    "conv": (29.9, {"A100-80GB": 29.9}),
    "memory": (6.9, {"A100-80GB": 8.1, "L4": 5.6}),
    "linear": (19.0, {"A100-80GB": 10.1, "H100": 13.1, "L4": 33.6}),
    "bmm": (21.2, {"A100-80GB": 13.6, "H100": 22.1, "L4": 28.1}),
}

KERNEL_NOTES = [
    "Tried in a second pass of the previous round (issue 15, third session; this round left the kernel model as it was), not shipped: **a MAPE shift on the GEMM class** (−0.05 in log: "
    "predictions × 0.951). The trees fit log(latency / roofline) by least squares, its conditional mean, while "
    "the target metric is MAPE, which a log-symmetric scatter rewards for predicting a little fast. The value "
    "was chosen by leave-one-training-GPU-out cross-validation on the five training GPUs only "
    "(on branch i15k3, `kernels.cv_log_shift`; GEMM MAPE over the five folds, shifts 0 to −0.10 by 0.01: 20.1% at 0, a flat "
    "minimum 19.6% from −0.04 to −0.07, 19.9% at −0.10; −0.05 is its middle; tested there "
    "too). Its inner gain is mostly the P4 fold (29.9 → 26.3%; A100 fold 13.2 → 15.1%, "
    "worse). Held-out: GEMM 16.4 → 16.0% — A100-80GB 9.1 → 6.1 (linear 10.7 → 5.6), but H100 19.6 → 20.5 and "
    "L4 20.7 → 21.3, whose linear kernels were already predicted too fast (H100 13.9 → 16.6, L4 19.6 → 21.6); "
    "bmm 18.2 → 17.3. Not applied to memory-bound ops (6.1%, target met) or convolution (NeuSight measured none "
    "on the A100-40GB, so there is no fifth training fold). A small gain, the 10% target still missed, and not shipped: it "
    "biases every GEMM latency 5% fast to suit the metric, which the end-to-end prior (recalibrated on top) "
    "does not want from a physical model, and end to end it raises every shipped GEMM fraction by 5% below the plateau and is about neutral (nested, cloudfit "
    "MAPE, model.json refitted; before = the 16.4% kernel model): leave-one-accelerator-out single-anchored "
    "19.0 → 18.9, single-stats-only 22.2 → 22.3, multi-anchored 34.9 → 34.9, multi-stats-only 34.8 → 34.7; "
    "leave-one-model-out 19.1 → 19.3, 35.2 → 35.5, 28.5 → 28.0, 39.5 → 39.3; held-out single-anchored A100 "
    "7.0 → 7.4, A100-80GB 12.0 → 12.0, GH200 18.5 → 17.6, H100 6.2 → 6.2, H100-PCIe 8.9 → 8.9.",
    "",
    "Also tried in the second pass, not shipped (GEMM class; *inner* = five-fold leave-one-training-GPU-out MAPE, "
    "*held-out* = the A100-80GB/H100/L4 split; base 20.1 / 16.4%): separate linear and bmm models 20.9 / 18.9 "
    "(H100 linear 27.7); a host/launch floor, latency = F + roofline × efficiency, F = 10 / 20 µs: 20.1 / 16.5, "
    "20.2 / 16.6 (only ~2% of the held-out kernels are under 60 µs: the error is in the large kernels); "
    "explicit wave quantisation as the normaliser, latency / (⌈tiles / SMs⌉ × tile time) at the sustained "
    "per-SM rate, tiles 128 / 64 / 32: 22.8 / 20.3, 21.9 / 17.8, 20.0 / 15.6 (the finer the tile, the closer "
    "to the plain roofline; the quantised times as extra features: 19.8 / 16.9); a power duty-cycle term "
    "(short kernels escape the power ceiling: cap × (1 + τ / t), τ = 30–1000 µs): 20.1–23.1 / 17.4–18.7; the "
    "kernel's own launch from NeuSight's records (tile sides from the kernel name, CTAs, waves, fill, padded "
    "work; what NeuSight takes as input) as features: 19.1 / 17.4 (H100 linear 23.2), without the shape "
    "features 18.8 / 18.9, and as the normaliser (padded FLOPs / peak) 25.4–41.3 / 20.0–36.6; FP32 lanes per "
    "warp scheduler (32 on Pascal, Ada, Hopper; 16 on Volta, Turing, GA100: the issue-slot argument for why "
    "128-lane SMs stop at ~75% of peak) replacing lanes per SM 27.6 / 18.8 (P4 fold 46.7: it then pairs the "
    "power-held P4 with the P100), added 20.0 / 16.1; the power-cap ratio or log(TDP / peak) replacing lanes "
    "per SM 29.1 / 14.9 and 22.3 / 15.9 (held-out better, inner worse: not chosen); dropping one feature at a "
    "time: inner 19.4–24.5, held-out 14.9–19.9 — dropping log k is the inner CV's best (19.4) and the held-out "
    "worst (19.9: H100 bmm 31.4, L4 bmm 36.2), so no drop was made on either basis; averaging the base model "
    "with five one-feature-dropped models 19.5 / 16.4 (with the shift 19.1 / 15.9: not worth six GEMM fits); "
    "colsample 0.5 / 0.7 by tree or 0.5 by node, 300 rounds: 19.8–20.6 / 16.0–16.6; a squared-relative-error "
    "objective 19.8 / 18.8.",
    "",
    "What dominates what is left (16.4%): the per-shape scatter on the new chips, not their level. With one "
    "oracle constant per held-out GPU and op: H100 bmm 25.3 → 24.3%, L4 bmm 21.8 → 20.8, L4 "
    "linear 19.6 → 16.9, H100 linear 13.9 → 11.0, A100-80GB linear 10.7 → 2.6 (its level is the whole error). "
    "H100 bmm's residual follows the kernel cuBLAS picks (its median log residual per kernel from −0.31 to "
    "+0.67): shapes with a 64-wide side run 0.19–0.23 of the A100's time on H100 (a 64-wide tile) against "
    "0.32–0.45 elsewhere, because the A100 runs every bmm as `ampere_sgemm_128x128_nn` and wastes half of each "
    "tile — the training GPUs teach that such shapes are slow. The L4 runs the A100's very kernel on every bmm "
    "yet scatters ±25% in log around the prediction (short kernels predicted slow, +0.11; long ones fast, "
    "−0.07): the 72 W board's clock varies with the load in a way no training GPU shows. Linear on H100 and "
    "L4 stays 13% / 16% too fast in level (both 128 FP32 lanes per SM; the only such training GPU, the P4, sits "
    "at its power ceiling).",
    "",
    "What changed in the previous round (GEMM 20.1 → 16.4%): (1) **a power ceiling under the roofline** (`kernels.sustained_fp32_tflops`): "
    "the compute roofline runs at min(fp32 peak, TDP / e), e = 15 W per TFLOPS at 12 nm × node / 12 nm (energy "
    "per FLOP ∝ feature size; the node from the architecture, `kernels.PROCESS_NM`). It binds on the 70–75 W "
    "cards only (T4 0.58 of its peak, P4 0.68, L4 0.38; of the unmeasured catalog GPUs A10 0.48 and L40S 0.61) "
    "and on no 250 W+ board. e and the node exponent were chosen by leave-one-training-GPU-out cross-validation "
    "on the five training GPUs alone (GEMM MAPE over the five folds): no ceiling 32.0%; exponent 1 with e = 12 / "
    "15 / 18 / 21 / 24 / 30 W: 23.8 / **20.6** / 25.4 / 23.5 / 23.8 / 24.1%; exponent 0 (no node): 23.0–34.9%; "
    "0.5: 21.4–31.9%; 1.5: 22.4–27.0% (e = 12–21 W). On the held-out split e = 12–24 W all land at 15.1–17.6% "
    "(L4 20.2–21.4%), so the gain does not hang on the chosen value. (The previous round fitted the exponent to "
    "the training GPUs' levels by least squares, 0.2, which put the L4 at 16% of its peak; selected on the "
    "training GPUs' own held-out MAPE, exponent 1 wins.) (2) **The shape itself as features** (log "
    "batch count, log m, log n: the same on every GPU, so they cannot name one): inner CV 20.6 → 20.1%. "
    "Held-out split, GEMM: 20.1 → 17.6% with the ceiling alone (L4 30.8 → 21.2, H100 17.6 → 19.4, A100-80GB "
    "11.9 → 12.2), 20.6% with the shape features alone, 16.4% with both (xgboost seeds 1–3: 16.4–16.6%); "
    "convolution 29.9 → 20.8%, memory-bound 6.9 → 6.1%. Leave-one-GPU-out over all eight GPUs (GEMM, each "
    "GPU held out with the other seven in training; the 118% failure mode's check): P4 92.2 → 28.2, P100 "
    "22.1 → 21.2, T4 49.5 → 21.5, V100 27.0 → 15.1, A100 10.1 → 8.8, A100-80GB 12.0 → 9.0, H100 19.7 → 18.2, "
    "L4 30.1 → 20.8 (mean 32.8 → 17.9%): no GPU worse.",
    "",
    "Earlier (the 20.1% model): no raw SM-count and clock features — as features of their own the trees used them "
    "to recognise a GPU (leave-one-GPU-out over all eight GPUs, H100 held out with the L4 in training: 117.9% → "
    "19.7%, because H100's 1.98 GHz sat next to the L4's 2.04); the kernel sample keeps the shapes measured on "
    "more GPUs first (NeuSight's test split, timed on all eight), so the split holds out GPUs, not shapes, as "
    "NeuSight's does (the roofline × median baseline moves with the sample: GEMM 61.0 → 32.4).",
    "",
    "Checked: every GEMM here is fp32 on CUDA cores (kernel names `*_sgemm_*`, `cutlass_80_simt_sgemm_*`, "
    "and on H100 `sm80_xmma_gemm_f32f32_…_ffma`: FFMA, no TF32), so the fp32 datasheet peak is the right "
    "roofline on every GPU; NeuSight's H100 is the SXM part (H100 80GB HBM3: 132 SMs, 1980 MHz, 67 TFLOPS), "
    "the catalog's `H100`; the A100s and V100 are PCIe boards (`BOARDS` in `cloudfit/perf/kernels.py`).",
    "",
    "Tried, not shipped (GEMM class, same split; *inner* = the five-fold leave-one-training-GPU-out MAPE; tried "
    "on the ceiling without shape features, inner 20.6%, held-out 17.6%): a soft knee instead of the min, (1 + cap^−n)^(−1/n), n = 2 / 4 / 8 "
    "with e = 10–15 W: inner 20.7–23.0%, held-out 16.4–17.6% (A100-80GB down to 9.4% at n = 2: the 250 W A100 "
    "is slightly power-held, the 300 W one less), not chosen; TDP / peak as a tree feature instead of a ceiling "
    "19.8% (monotone 20.1%); an issue-rate factor for 128-lane SMs (0.75 / 0.85 of the peak, as a min or a "
    "product with the ceiling; looked at on the held-out split only): H100 22.5–29.4%, worse; without the "
    "FP32-lanes-per-SM feature 15.8% on the held-out split (L4 16.9, H100 18.0: the P4 is the only 128-lane "
    "training GPU, so the feature mostly names it) but inner 23.6%, so kept; without bandwidth per SM 19.3% "
    "(inner 25.2), without both 17.3% (inner 22.2); xgboost depth 3 / 4 / 8 or min_child_weight 50: inner "
    "20.1–20.9%, held-out 16.9–19.6%, defaults kept; min/max(m, n) instead of m, n: inner 20.2, held-out 16.7%; "
    "FLOPs per SM: 20.6 / 17.5%; an L1 (median) objective 22.8% (L4 40%); before that round: base/boost clock "
    "ratio 25.2 / 26.4%, monotone in waves 19.8%, the held-out GPU's own launch (tile, CTAs: NeuSight's input) 20.7%.",
    "",
    "The first pass's analysis of the 16.4%: per-shape behaviour on H100 and L4 bmm that no training GPU shows. "
    "Even the best constant latency ratio to any training GPU on the same shapes leaves, around it, H100 bmm "
    "20.0% (vs A100; 9.7% vs V100 on its 36 shared shapes), L4 bmm 18.4% (vs A100), and linear 11–12% (H100 vs "
    "A100, L4 vs T4 / V100), where the A100-80GB is the A100's twin (a constant 0.90–0.92 ratio, 1.6% / 3.9% "
    "around it): the library picks other tiles and kernels on the new chips (H100 runs `sm80_xmma` FFMA kernels "
    "the training GPUs never ran). In-sample (fitted and scored on the five training GPUs, ceiling "
    "without shape features) the model is 5–13% per GPU and op. Level: H100 and L4 "
    "linear are predicted 13% / 16% too fast (median log bias −0.14 / −0.18); both have 128 FP32 lanes per SM, "
    "whose only training example, the P4, sits at its power ceiling. H100's shortest timings are ~24 µs "
    "against 29–58 µs on the training GPUs (NeuSight's timings include host overhead; small-k bmm on H100 "
    "+0.22 in log).",
    "",
    "End to end (`bench/perf_eval.py`, nested, cloudfit MAPE; *before* = the 20.1% kernel model, model.json "
    "refitted for each): leave-one-accelerator-out single-anchored 21.1 → 20.7, single-stats-only 24.6 → 24.0, "
    "multi-anchored 36.8 → 36.6, multi-stats-only 36.4 → 35.8; leave-one-model-out single-anchored 21.8 → 21.6, "
    "single-stats-only 35.7 → 36.4 (worse), multi-anchored 28.3 → 28.0, multi-stats-only 37.4 → 37.4. Held-out "
    "single-anchored: A100 7.4 → 7.1, A100-80GB 13.1 → 12.9, H100 8.5 → 8.3, H100-PCIe 14.0 → 10.1, GH200 "
    "21.5 → 18.5%. The ceiling alone (17.6% kernel model): leave-one-accelerator-out 20.5 / 23.9 / 36.7 / 35.8, "
    "leave-one-model-out 21.6 / 34.9 / 28.2 / 37.0 (same cell order). The shape features on the memory-bound "
    "class too (not shipped): 20.3 / 23.4 / 36.0 / 35.4 and 20.7 / 36.2 / 27.5 / 40.1, but the memory tables' "
    "one-row probes (b = 1, below every measured kernel) then gave the H100, which has no memory-bound "
    "measurement, 3–5× the tiny-kernel speed (a tiny MLP 2.4× a T4, against the physics test's 2.0): an "
    "extrapolation artefact, so memory-bound ops keep the shape-free features. The shipped GEMM tables stay the "
    "K80's extrapolated fraction at small and mid sizes (`_monotone` lifts every accelerator to it, every one "
    "dominating the K80); dominance on achieved throughput or only from measured tables were measured worse end "
    "to end in the previous round ('This round' below).",
]


def generation_tables(report: dict) -> list[str]:
    """Leave-one-accelerator-out per GPU generation of the held-out measurement (all methods)."""
    from cloudfit.perf.evaluate import METHODS

    acc = report["schemes"]["accelerator"]
    lines = ["### Leave-one-accelerator-out by GPU generation", "",
             "MAPE / median APE in %, band coverage; the generation of the held-out accelerator (Kepler: K80; "
             "Pascal/Volta: P100, V100; Ampere: A100, A100-80GB; Hopper: H100, H100-PCIe, GH200). The training data "
             "has no Turing (T4), Ada (L4) or Blackwell (B200) rows, so those generations cannot be held out.", "",
             "| regime | generation | n | " + " | ".join(METHODS) + " | band |",
             "|---|---|---:|" + "---:|" * len(METHODS) + "---:|"]
    for regime, b in acc.items():
        for g, gb in b.get("generations", {}).items():
            cov = f"{gb['coverage'] * 100:.0f}%" if "coverage" in gb else "—"
            lines.append(f"| {regime} | {g} | {gb['n']} | " + " | ".join(_fmt(gb, m) for m in METHODS) + f" | {cov} |")
    lines.append("")
    return lines


def issue15_targets(report: dict) -> list[str]:
    """Issue 15's end-to-end targets from the held-out records."""
    import numpy as np

    from cloudfit.perf.evaluate import generation

    acc = report["schemes"]["accelerator"]
    recs = report.get("records", {}).get("accelerator", [])
    ok = lambda v: "met" if v else "missed"  # noqa: E731
    ma = acc["multi-anchored"]["cloudfit"]["mape"]
    lines = ["### Targets of issue 15 (end to end)", "",
             f"- Leave-one-accelerator-out, multi-device, anchored: MAPE {ma * 100:.1f}% (target ≤ 15%: {ok(ma <= 0.15)}; "
             f"{BEFORE['accelerator']['multi-anchored'][0]:.1f}% before this round)."]
    amp = {g: b for g, b in acc["single-anchored"]["groups"].items()
           if generation(g) in ("Ampere", "Ada", "Hopper", "Blackwell")}
    worst = max(b["cloudfit"]["mape"] for b in amp.values())
    lines.append("- Leave-one-accelerator-out, single device, anchored, Ampere and newer held out (target ≤ 12% each): "
                 + "; ".join(f"{g} {b['cloudfit']['mape'] * 100:.1f}% (n = {b['n']})" for g, b in sorted(amp.items()))
                 + f" — {ok(worst <= 0.12)}.")
    if recs:
        over = {}
        for r in recs:
            p = r["cloudfit"]["anchored"]
            if r["multi"] or np.isnan(p):
                continue
            key = (r["group"], r["workload"])
            over[key] = max(over.get(key, 0.0), p / r["measured"])
        bad = sorted(((v, k) for k, v in over.items() if v > 1.5), reverse=True)
        top = max(over.values())
        lines.append(f"- No workload predicted above 1.5× its measured throughput on a held-out accelerator "
                     f"(single device, anchored): largest ratio {top:.2f}× — {ok(not bad)}"
                     + ("" if not bad else "; above 1.5×: " + ", ".join(f"{w} on {g} {v:.2f}×" for v, (g, w) in bad[:8]))
                     + ".")
    lines.append("")
    return lines


def relative_speeds() -> list[str]:
    """Predicted single-device fp16 samples/s of the shipped profiles on the catalog's GPUs."""
    from cloudfit.perf import HardwareQuery, predict_many
    from cloudfit.profiling import io as pio

    accs = ["P100", "T4", "L4", "V100", "A100", "A100-80GB", "H100", "H200", "B200"]
    lines = ["### Relative speeds on the shipped profiles", "",
             "Predicted samples/s, one GPU, fp16 (mixed precision), the profile's batch (— : does not fit). "
             "Checked by tests/perf/test_physics.py: L4 > T4 for every fp16 workload, L4 > P100 for BERT and "
             "GPT-2, H100 / A100 within 1.5–3.5× for BERT-large (each bound with its evidence in the test).", "",
             "| profile | " + " | ".join(accs) + " | L4/T4 | H100/A100 |", "|---|" + "---:|" * (len(accs) + 2)]
    for name, path in sorted(pio.shipped_profiles().items()):
        prof = pio.load_profile(path)
        t = predict_many(prof, [HardwareQuery(a, 1, 1, 0.0, "fp16") for a in accs])
        v = dict(zip(accs, t.samples_per_second))
        f = dict(zip(accs, t.fits))
        cell = lambda a: f"{v[a]:,.0f}" if f[a] else "—"  # noqa: E731
        r1 = f"{v['L4'] / v['T4']:.2f}" if f["L4"] and f["T4"] else "—"
        r2 = f"{v['H100'] / v['A100']:.2f}" if f["H100"] and f["A100"] else "—"
        lines.append(f"| {name} | " + " | ".join(cell(a) for a in accs) + f" | {r1} | {r2} |")
    lines.append("")
    return lines


def latency() -> dict:
    code = (
        "import time; t=time.perf_counter(); from cloudfit.perf import predict_many, HardwareQuery; "
        "from cloudfit.perf.model import load_model; load_model(); print(time.perf_counter()-t)"
    )
    imp = min(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                   cwd=REPO).stdout) for _ in range(5))
    from cloudfit import catalog
    from cloudfit.catalog import hardware
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


def _same_scale_rows(report: dict, scheme: str) -> dict:
    """cloudfit on the multi-device rows that have a same-scale anchor: MAPE anchored on single-device runs
    (the issue's regime) vs at the row's scale, overall and per group of ``key``."""
    import math

    import numpy as np

    recs = [r for r in report.get("records", {}).get(scheme, [])
            if r["multi"] and not math.isnan(r["cloudfit"].get("anchored-same-scale", math.nan))]

    def mape(sel, kind, m="cloudfit"):
        return 100 * float(np.mean([abs(r[m][kind] / r["measured"] - 1) for r in sel])) if sel else math.nan

    out = {"n": len(recs), "single": mape(recs, "anchored"), "same": mape(recs, "anchored-same-scale")}
    for key in ("generation", "source"):
        out[key] = {g: (len(v), mape(v, "anchored"), mape(v, "anchored-same-scale"))
                    for g in sorted({r[key] for r in recs}) for v in [[r for r in recs if r[key] == g]]}
    return out


def anchors_round(report: dict) -> list[str]:
    """This round's part on anchors at the query's scale (issue 15, the multi-device target)."""
    acc = report["schemes"]["accelerator"]
    ma, ss = acc["multi-anchored"], acc.get("multi-anchored-same-scale")
    if ss is None or not report.get("records"):
        return []
    sub = _same_scale_rows(report, "accelerator")
    lomo = _same_scale_rows(report, "model")
    gens = "; ".join(f"{g} {b['cloudfit']['mape'] * 100:.1f}% (n = {b['n']})" for g, b in ss["generations"].items())
    by = lambda d: "; ".join(f"{g} {a:.1f} → {b:.1f}% (n = {n})" for g, (n, a, b) in d.items())
    return [
        "The previous round, continued — anchors at the query's scale (issue 15, the multi-device target):",
        "",
        f"- **The issue's regime is unchanged by construction** (multi-anchored = anchored on single-device runs): "
        f"{ma['cloudfit']['mape'] * 100:.1f}% (n = {ma['n']}), by generation "
        + "; ".join(f"{g} {b['cloudfit']['mape'] * 100:.1f}%" for g, b in ma["generations"].items())
        + " — target ≤ 15%: missed. On its own this part left model.json byte-identical (the device term below "
        "weighs single-device anchors alike); the numbers here are the merged model's.",
        f"- **New report line, `multi-anchored-same-scale`**: a multi-device row anchored on the same workload's run "
        f"at its own devices per node × nodes, parallelism and parameter servers on another accelerator (same source, "
        f"nearest batch; multi-node anchors carry their own network from the table), where one exists "
        f"(`fit.anchor_candidates(same_scale=True)`). Leave-one-accelerator-out: cloudfit "
        f"{ss['cloudfit']['mape'] * 100:.1f}% (n = {ss['n']}; band {ss['coverage'] * 100:.0f}%), by generation {gens}; "
        f"on the same {sub['n']} rows the issue's single-device anchoring gives {sub['single']:.1f}% — by source "
        f"{by(sub['source'])}; by generation {by(sub['generation'])}. Leave-one-model-out: "
        f"{lomo['single']:.1f} → {lomo['same']:.1f}% on its {lomo['n']} rows. Here the datasheet prior "
        f"({ss['prior']['mape'] * 100:.1f}%) and the calibrated prior ({ss['calibrated-prior']['mape'] * 100:.1f}%) "
        f"beat cloudfit: with the scaling measured, the learned correction (λ = 1 on multi-device rows, chosen on "
        f"the issue's regime) adds more scatter than it removes (λ = 0 on this regime, quick eval: 29.8 → 28.9%). "
        f"What is left is the cross-accelerator part: Gavel's and tf_cnn_benchmarks' K80 against P100/V100.",
        "- **The product: anchors weighted by devices per node as well as batch** (`model.anchor_weights`, "
        "`ANCHOR_DEVICE_SCALE` = 1: × exp(−|Δ log devices per node|)), shared by `predict_many` and the eval's "
        "weight matrix (`fit.anchor_weight_matrix`). A profile holding 1×V100 and 4×V100 runs now predicts 1×A100 "
        "from the one-GPU run (weight 0.8) and 4×A100 from the four-GPU run, carrying its measured scaling "
        "(tests/perf/test_anchors.py). Multi-node queries take the least shift over c·k GPUs in one VM, k = 1..n "
        "(`model.anchor_shift`), so more nodes never raise per-GPU throughput and N one-GPU VMs never beat one "
        "N-GPU VM whatever counts the anchors were measured at (tested on V100 runs at 0.25–1.0 of linear; each "
        "rule fails its test without the envelope). Multi-node runs still do not anchor in the product: a "
        "`Measurement` holds no network.",
        "- **The evidence for the scale** (`python bench/anchor_scale_sweep.py`: leave-one-accelerator-out, every "
        "row anchored as a profile would be, on all one-node runs of its workload on the other accelerators at any "
        "batch and count, through `anchor_shift` and the cap; quick, λ as shipped; MAPE single-device (those whose "
        "anchors include multi-GPU runs) | multi-device (one node / several)): batch only 21.8 (25.1) | 32.5 "
        "(30.6 / 35.3); scale 4: 21.4 (24.5) | 32.8; 2: 21.0 (23.9) | 32.9; **1: 20.6 (23.3) | 33.2 (31.3 / "
        "36.0)**; 0.5: 20.6 (23.3) | 33.6; 0.25: 20.8 (23.6) | 34.0. One-GPU queries gain up to 1.8 points; "
        "multi-device ones lose 0.3–1.5: on these sources the average over all of a workload's runs (every count, "
        "every batch) predicts a multi-GPU row better than the runs at its own count (one-node rows 30.6 → 31.3), "
        "and the envelope lowers Gavel's spread runs to its one-VM shift (several-node rows 35.3 → 36.0), where "
        "its spread runs beat its consolidated ones in 43 of 165 pairs (median ratio 0.73). Over all 718 rows the scales 1–∞ are level "
        "(29.8–30.0%); 1 is shipped for the one-GPU gain and the behaviour users expect of a multi-GPU "
        "measurement, with the multi-device cost named here. `predict_many` on 2,240 queries: unchanged without "
        "anchors at several counts (13.5 ms here), 14.9 → 15.4 ms with a 1×/8×V100 profile.",
        "- Tried and dropped: weights on total devices (count × nodes) instead of devices per node — mixes Gavel's "
        "consolidated and spread runs at the same GPU count: profile sweep with multi-node anchors, no envelope, "
        "34.7–35.1% (scale 0.1–0.5) against 29.9% with devices per node and nodes weighed apart; a device term only for one-GPU queries (no "
        "envelope needed): single 20.6 | multi 33.1, level with the shipped form; multi-node anchors with a node "
        "term (eval rows carry their network; node scale 0.1, no device term): profile sweep multi 32.5 → 29.2% "
        "without the envelope, 32.7% with it — needs a network on `Measurement` first.",
        "- **Physics of the scaling error (direction B): nothing encoded.** Gavel's workloads at the pinned commit "
        "run `torch.nn.parallel.DistributedDataParallel` over NCCL, one process per GPU, `DistributedSampler`, two "
        "DataLoader workers per process (`workloads/pytorch/image_classification/cifar10/main.py`); so not "
        "single-process DataParallel, and its 0.64–0.90 of linear is not the GIL or a scatter/gather through GPU 0. "
        "Its artifact ran on AWS (EXPERIMENTS.md: an us-east-1 AMI; the worker example has 4 GPUs), but the servers' "
        "GPU topology, vCPUs and whether an 8-GPU 'consolidated' job spanned two 4-GPU servers are not documented "
        "in the stored sources — no measurement property to encode, and no fudge by source name.",
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "RESULTS_perf.md")
    ap.add_argument("--report", type=Path, help="Reuse a saved evaluation (JSON from --save) instead of running it.")
    ap.add_argument("--save", type=Path, help="Save the evaluation (with its records) as JSON.")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import json

    from cloudfit.perf import evaluate, fit, kernels
    from cloudfit.perf.model import load_model, model_version

    t0 = time.perf_counter()
    if args.report:
        report = json.loads(args.report.read_text())
    else:
        report = evaluate.run(progress=lambda s: print(s, file=sys.stderr), keep_records=True)
        report["seconds"] = time.perf_counter() - t0
        if args.save:
            args.save.write_text(json.dumps(report))
    eval_s = report.get("seconds", time.perf_counter() - t0)
    kern = kernels.leave_gpu_out()
    lat = latency()
    m = load_model()
    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    machine = f"{platform.machine()}, {os.cpu_count()} cores, no GPU, Python {platform.python_version()}"
    cons = {k: m.constants[k] for k in sorted(fit.CALIBRATED)}
    lines = [
        "## Performance model (issues 4 and 15)", "",
        f"Command: `python bench/perf_eval.py [--save eval.json | --report eval.json]` (the accuracy part is "
        f"`cloudfit model eval`). Date: {when}. "
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
    lines += kernel_tables(kern)
    lines += issue15_targets(report)
    lines += targets(report)
    lines += changes(report)
    lines += generation_tables(report)
    lines += relative_speeds()
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
