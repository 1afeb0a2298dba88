#!/usr/bin/env python
"""Evidence for ``model.ANCHOR_DEVICE_SCALE``: leave-one-accelerator-out over profile-like anchors.

    python bench/anchor_scale_sweep.py

Each held-out row is anchored, as ``predict_many`` anchors a profile, on *every* one-node run of its
workload on the other accelerators (same source, precision, parallelism and parameter servers; any
batch, any number of devices per node), through ``model.anchor_shift`` (batch and device weights, the
multi-node envelope) and the linear-scaling cap against the row's one-node and one-device versions;
the fold's prior and correction are fitted without the held-out accelerator (``fit.fold_model``), λ is
the shipped model's. Printed per device scale (``inf`` = batch only, as before issue 15's anchors
round): MAPE of single-device rows (all, and those whose anchors include multi-device runs) and of
multi-device rows, by generation. Quick: no inner calibration, no band.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SCALES = (math.inf, 4.0, 2.0, 1.0, 0.5, 0.25)


def profile_anchors(t) -> list[np.ndarray]:
    key = [f"{t['source'][i]}|{t['workload'][i]}|{t['precision'][i]}|{t['parallelism'][i]}|{t['ps_count'][i]}"
           for i in range(len(t))]
    by: dict[str, list[int]] = {}
    for i in range(len(t)):
        if t["nodes"][i] == 1:  # a profile's anchors are one-node runs (a Measurement holds no network)
            by.setdefault(key[i], []).append(i)
    return [np.array([j for j in by.get(key[i], []) if t["accelerator"][j] != t["accelerator"][i]], dtype=int)
            for i in range(len(t))]


def main() -> int:
    from cloudfit.perf import evaluate, fit, prior
    from cloudfit.perf import model as model_mod

    lam = model_mod.load_model().anchor_lambda
    prep = fit.prepare()
    t, n = prep.table, len(prep.measured)
    rows = np.arange(n)
    cands = profile_anchors(t)
    folds = []
    for _, held in fit.group_folds(prep, rows, "accelerator"):
        folds.append((held, fit.fold_model(prep, np.setdiff1d(rows, held))[1]))
    lb, count, nodes = np.log(prep.setup.batch), prep.setup.count, prep.setup.nodes
    mixed = np.array([len(set(count[a])) > 1 for a in cands])
    gen = np.array([evaluate.generation(a) for a in t["accelerator"]])
    for scale in SCALES:
        model_mod.ANCHOR_DEVICE_SCALE = scale
        pred = np.full(n, np.nan)
        for held, fm in folds:
            logr = np.log(prep.measured) - np.log(fm.prior_sps)
            for i in held:
                a = cands[i]
                if not len(a):
                    continue
                c, nn = count[i], nodes[i]
                la = np.array([lam["multi" if c * nn > 1 else "single"], lam["multi" if c > 1 else "single"],
                               lam["single"]])
                anchors = model_mod._Anchors(logr[a], fm.f[a], lb[a], (), np.zeros(len(a)), np.log(count[a]))
                shift, _ = model_mod.anchor_shift(anchors, np.full(3, lb[i]), np.array([c, c, 1.0]),
                                                  np.array([nn, 1.0, 1.0]), la)
                p = math.exp(math.log(fm.prior_sps[i]) + la[0] * fm.f[i] + shift[0])
                p = min(p, float(prior.launch_bound_sps(prep.work.kernels[i:i + 1], prep.setup.batch[i:i + 1],
                                                        np.array([c * nn]))[0]))
                if c * nn > 1:
                    node1 = math.exp(math.log(fm.prior_v[i]) + la[1] * fm.f_v[i] + shift[1])
                    dev1 = math.exp(math.log(fm.prior_v[n + i]) + la[2] * fm.f_v[n + i] + shift[2])
                    p = min(p, nn * node1, c * nn * dev1)
                pred[i] = p
        ape = np.abs(pred / prep.measured - 1)
        ok = ~np.isnan(pred)
        single, multi = ok & ~prep.multi, ok & prep.multi
        by_gen = " ".join(f"{g} {100 * np.mean(ape[multi & (gen == g)]):.1f}"
                          for g in ("Kepler", "Pascal/Volta", "Ampere", "Hopper") if np.any(multi & (gen == g)))
        one_node = multi & (nodes == 1)
        print(f"scale {scale:>4}: single {100 * np.mean(ape[single]):.1f} (n={single.sum()}; with multi-device "
              f"anchors {100 * np.mean(ape[single & mixed]):.1f}, n={(single & mixed).sum()}) | multi "
              f"{100 * np.mean(ape[multi]):.1f} (n={multi.sum()}; {by_gen}; one node "
              f"{100 * np.mean(ape[one_node]):.1f}, n={one_node.sum()}; several nodes "
              f"{100 * np.mean(ape[multi & ~one_node]):.1f}, n={(multi & ~one_node).sum()})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
