"""Bands by distance (issue 33, item 3): the band designs and the transition design tried against main's, nested.

Every number is leave-one-generation-out as ``bench/generation.py --after`` computes it (Ampere from ≤ Volta, Hopper
from ≤ Ampere; the carried predictions are the shipped path's, ``fit.generation_fold``), and every band is learned only
from the target's *inner* folds (``generation.nested``: for Ampere, Volta from ≤ Pascal; for Hopper, also Ampere from
≤ Pascal and ≤ Volta). A band design is three choices:

- **split** — the device regimes a band is kept for: ``sm`` single / multi-device (main); ``sim`` single / in-node
  multi-device / multi-node (a sub-regime with fewer than ``fit.GENERATION_BAND_MIN`` residuals takes the pooled
  multi-device ones, then every device count's); ``sim-anch`` the ``sim`` split for anchored bands only.
- **weight** — ``group``: each (source, workload) group's residuals weigh 1/√(its count) (main,
  ``fit._group_quantiles``); ``source``: on top of that, each source weighs the same in total (one source's noise
  does not set the band alone).
- **folds** — ``all`` residuals of every inner fold (main); ``recent``: only the newest held-out generation's when it
  has enough; ``lastcut``: only the newest cut-off's fold when it has enough; ``decay``: each generation older than
  the newest weighs half as much per generation.

Otherwise as ``fit.generation_band`` (10/90% quantiles per regime and distance; a regime short of residuals at a
distance takes both regimes of its kind, then the nearer distance × d/d′; each band holds 0 and every nearer band).
``sm group all`` reproduces ``fit.generation_band`` (checked on every run).

``--t2``: the transition prior with its tensor-op peak term split into the FP32 (CUDA-core) rate ratio and the
tensor-core multiplier ratio (peak at the precision / FP32 rate), each learned by NNLS on the older pairs as
``fit.fit_transitions`` learns main's; main's band design on top.

``--residuals``: the anchored multi-device rows' log residuals by accelerator, interconnect and device count, split
into the one-device level and the carried scaling (log measured / carried multi-device ÷ one-device ratio).

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python bench/generation_variants.py [--t2] [--residuals]   # ~1 min each
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generation as G  # noqa: E402  (bench/generation.py: the folds, the same arithmetic)

from cloudfit.catalog import hardware  # noqa: E402
from cloudfit.perf import features  # noqa: E402
from cloudfit.perf import fit as fit_mod  # noqa: E402

KINDS = ("stats-only", "anchored")
VARIANTS = [(s, w, f) for s in ("sm", "sim") for w in ("group", "source") for f in ("all", "recent", "lastcut", "decay")]
VARIANTS += [("sim-anch", "group", "all"), ("sim-anch", "group", "decay")]


def scale_of(prep, i: int) -> str:
    if not prep.multi[i]:
        return "single"
    return "multinode" if prep.setup.nodes[i] > 1 else "innode"


def residuals(prep, folds) -> list[dict]:
    """log(measured / carried) of every held row at distance ≥ 1 of ``folds``, with what the designs split on."""
    t = prep.table
    out = []
    for f in folds:
        cut = max(G.gen_of(a) for a in t["accelerator"][f.train])
        for kind in KINDS:
            p = f.carried[kind]
            for k in np.flatnonzero(np.isfinite(p) & (p > 0) & (f.distance > 0)):
                i = f.held[k]
                out.append({"kind": kind, "scale": scale_of(prep, i), "d": int(f.distance[k]),
                            "r": float(np.log(prep.measured[i] / p[k])), "group": f"{t['source'][i]}|{t['workload'][i]}",
                            "source": str(t["source"][i]), "gen": G.gen_of(t["accelerator"][i]), "cut": cut})
    return out


def quantiles(v: list[dict], weight: str, decay: bool) -> tuple[float, float]:
    """10/90% weighted quantiles, the rule of ``fit._group_quantiles``."""
    cnt: dict[str, int] = {}
    for x in v:
        cnt[x["group"]] = cnt.get(x["group"], 0) + 1
    w = np.array([1.0 / math.sqrt(cnt[x["group"]]) for x in v])
    if weight == "source":
        tot: dict[str, float] = {}
        for x, wx in zip(v, w):
            tot[x["source"]] = tot.get(x["source"], 0.0) + wx
        w = np.array([wx / tot[x["source"]] for x, wx in zip(v, w)])
    if decay:
        newest = max(x["gen"] for x in v)
        w = w * np.array([0.5 ** (newest - x["gen"]) for x in v])
    r = np.array([x["r"] for x in v])
    o = np.argsort(r, kind="stable")
    r, c = r[o], np.cumsum(w[o]) / w.sum()
    lo = r[max(0, int(np.searchsorted(c, fit_mod.ALPHA_LOW, side="left")) - 1)]
    hi = r[min(len(r) - 1, int(np.searchsorted(c, fit_mod.ALPHA_HIGH - 1e-12, side="left")))]
    return float(lo), float(hi)


def band(res: list[dict], split: str, weight: str, folds: str) -> dict[tuple[str, str, int], tuple[float, float]]:
    """(kind, regime, distance) → (low, high) log band."""
    if split == "sim-anch":
        return {**band([x for x in res if x["kind"] == "anchored"], "sim", weight, folds),
                **band([x for x in res if x["kind"] == "stats-only"], "sm", weight, folds)}
    regimes = ("single", "innode", "multinode") if split == "sim" else ("single", "multi")
    members = {"single": ("single",), "innode": ("innode",), "multinode": ("multinode",), "multi": ("innode", "multinode"),
               "all": ("single", "innode", "multinode")}
    q = {}
    for kind in {x["kind"] for x in res}:
        top = max(x["d"] for x in res if x["kind"] == kind)
        for regime in regimes:
            chain = [regime] + (["multi"] if regime in ("innode", "multinode") else []) + ["all"]
            last = None
            for d in range(1, top + 1):
                for pool in chain:
                    v = [x for x in res if x["kind"] == kind and x["d"] == d and x["scale"] in members[pool]]
                    if len(v) >= fit_mod.GENERATION_BAND_MIN:
                        break
                if folds in ("recent", "lastcut") and len(v) >= fit_mod.GENERATION_BAND_MIN:
                    key = "gen" if folds == "recent" else "cut"
                    vv = [x for x in v if x[key] == max(y[key] for y in v)]
                    v = vv if len(vv) >= fit_mod.GENERATION_BAND_MIN else v
                if len(v) >= fit_mod.GENERATION_BAND_MIN:
                    lo, hi = quantiles(v, weight, folds == "decay")
                elif last is not None:
                    lo, hi = last[1] * d / last[0], last[2] * d / last[0]
                else:
                    continue
                lo, hi = min(lo, 0.0), max(hi, 0.0)
                if last is not None:
                    lo, hi = min(lo, last[1]), max(hi, last[2])
                q[kind, regime, d] = (lo, hi)
                last = (d, lo, hi)
    return q


def cells(prep, gf, q, split: str, measured_q) -> dict[str, tuple[float, float, float, float]]:
    """kind → (MAPE %, coverage %, single-device coverage %, multi-device coverage %) of the held rows; an anchored
    band never narrower than the measured accelerator's (``measured_q``), as ``predict_many`` gives it."""
    out = {}
    for kind in KINDS:
        p, m = gf.carried[kind], prep.measured[gf.held]
        inside = {"single": [], "multi": []}
        for k in np.flatnonzero(np.isfinite(p)):
            i = gf.held[k]
            regime = scale_of(prep, i)
            if regime != "single" and (split == "sm" or (split == "sim-anch" and kind == "stats-only")):
                regime = "multi"
            d = max(int(gf.distance[k]), 1)
            top = max(dd for (kk, rr, dd) in q if kk == kind and rr == regime)
            lo, hi = q[kind, regime, min(d, top)]
            s = max(1.0, d / top)
            lo, hi = lo * s, hi * s
            if kind == "anchored":
                lo, hi = min(lo, measured_q[0][k]), max(hi, measured_q[1][k])
            inside["multi" if prep.multi[i] else "single"].append(lo <= np.log(m[k] / p[k]) <= hi)
        ok = np.isfinite(p)
        both = inside["single"] + inside["multi"]
        out[kind] = (100 * float(np.mean(np.abs(p[ok] / m[ok] - 1))), 100 * float(np.mean(both)),
                     100 * float(np.mean(inside["single"])), 100 * float(np.mean(inside["multi"])))
    return out


def folds_of(prep, log) -> dict:
    out = {}
    for target in G.TARGETS:
        log(f"{G.GEN_NAME[target]}: outer fit + calibrate, inner folds")
        f, cal = G.fold(prep, target)
        inner, mu = G.nested(prep, target, cal.anchor_lambda)
        out[target] = (fit_mod.carried_scaling(f.gf, mu), inner, f.measured_q["anchored"])
    return out


def variant_table(prep, folds, variants) -> list[str]:
    lines = ["| split | weight | folds | Ampere stats-only MAPE / coverage (single, multi) | Ampere anchored "
             "| Hopper stats-only | Hopper anchored |", "|---|---|---|---|---|---|---|"]
    res = {target: residuals(prep, inner) for target, (_, inner, _) in folds.items()}
    for target, (_, inner, _) in folds.items():  # main's design is reproduced exactly
        mine = band(res[target], "sm", "group", "all")
        theirs = fit_mod.generation_band(prep, inner)["log_quantiles"]
        for (kind, regime, d), (lo, hi) in mine.items():
            assert np.allclose(theirs[f"{regime}-{kind}"][str(d)], (lo, hi), atol=1e-6), (kind, regime, d)
    for v in variants:
        row = []
        for target, (gf, _, mq) in folds.items():
            c = cells(prep, gf, band(res[target], *v), v[0], mq)
            row += [f"{c[k][0]:.1f}% / {c[k][1]:.0f}% ({c[k][2]:.0f}, {c[k][3]:.0f})" for k in KINDS]
        lines.append("| " + " | ".join(v) + " | " + " | ".join(row) + " |")
    return lines


def residual_table(prep, folds) -> list[str]:
    """Anchored multi-device rows: the level and the scaling parts of the log residual."""
    t = prep.table
    lines = ["| target | fold | accelerator | nodes | link Gbit/s (in node; network across nodes) | devices | rows | median log residual | 10% | 90% "
             "| median scaling residual | measured / carried per-device efficiency (median) |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for target, (gf, inner, _) in folds.items():
        for lab, f in [(f"inner ≤ {G.GEN_NAME[int(max(G.gen_of(a) for a in t['accelerator'][fi.train]))]}", fi)
                       for fi in inner] + [("held out", gf)]:
            p, m = f.carried["anchored"], prep.measured[f.held]
            one = {(t["source"][i], t["workload"][i], t["accelerator"][i], t["precision"][i], t["batch_per_device"][i]): k
                   for k, i in enumerate(f.held) if not prep.multi[i]}
            groups: dict = {}
            for k, i in enumerate(f.held):
                if not prep.multi[i] or not np.isfinite(p[k]):
                    continue
                acc, n, c = str(t["accelerator"][i]), int(prep.setup.nodes[i]), int(prep.setup.count[i])
                if n > 1:  # across nodes: the network's link
                    link = float(t["network_gbps"][i])
                else:
                    link = t["intra_gbps"][i] if np.isfinite(t["intra_gbps"][i]) else hardware.intra_node_gbps(acc, c)
                k1 = one.get((t["source"][i], t["workload"][i], acc, t["precision"][i], t["batch_per_device"][i]))
                dev = c * n
                eff = (m[k] / m[k1] / dev, p[k] / p[k1] / dev) if k1 is not None and np.isfinite(p[k1]) else (np.nan, np.nan)
                groups.setdefault((acc, n, round(float(link), 1), dev), []).append(
                    (np.log(m[k] / p[k]), np.log(eff[0] / eff[1]), *eff))
            for (acc, n, link, dev), v in sorted(groups.items()):
                a = np.array(v)
                lines.append(f"| {G.GEN_NAME[target]} | {lab} | {acc} | {n} | {link:g} | {dev} | {len(v)} "
                             f"| {np.median(a[:, 0]):+.3f} | {np.quantile(a[:, 0], .1):+.3f} | {np.quantile(a[:, 0], .9):+.3f} "
                             f"| {np.nanmedian(a[:, 1]):+.3f} | {np.nanmedian(a[:, 2]):.2f} / {np.nanmedian(a[:, 3]):.2f} |")
    return lines


@contextlib.contextmanager
def split_tensor_term():
    """The transition design with the tensor-op peak term split: s·log FP32 rate, s·log(peak / FP32 rate), then main's
    (1−s)·log peak, s·log bw, (1−s)·log memory-bound speed, log batch (``features`` patched for the block)."""
    saved = features.transition_logs, features.transition_design, features.TRANSITION_TERMS
    logs0 = saved[0]

    def logs(accelerators, precisions):
        hw = features.hardware_arrays(list(accelerators), list(precisions))
        return np.column_stack([logs0(accelerators, precisions), np.log(hw.vector_tflops)])

    def design(d_logs, d_log_memory_speed, d_log_batch, share):
        d, s = np.atleast_2d(np.asarray(d_logs, dtype=float)), np.asarray(share, dtype=float)
        return np.column_stack([s * d[:, 2], s * (d[:, 0] - d[:, 2]), (1 - s) * d[:, 0], s * d[:, 1],
                                (1 - s) * np.asarray(d_log_memory_speed, dtype=float), np.asarray(d_log_batch, dtype=float)])

    features.transition_logs, features.transition_design = logs, design
    features.TRANSITION_TERMS = ("s·log fp32", "s·log tensor multiplier", "(1−s)·log peak", "s·log bw",
                                 "(1−s)·log memory-bound speed", "log batch")
    try:
        yield
    finally:
        features.transition_logs, features.transition_design, features.TRANSITION_TERMS = saved


@contextlib.contextmanager
def transition_recency(recency: float):
    """The transition prior's pairs weighted by ``recency`` per generation of age (``fit.fit_transitions``; 1.0 is
    main's design before ``fit.TRANSITION_RECENCY``)."""
    saved = fit_mod.fit_transitions
    fit_mod.fit_transitions = functools.partial(saved, recency=recency)
    try:
        yield
    finally:
        fit_mod.fit_transitions = saved


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--t2", action="store_true", help="the transition design with the tensor term split (main's band)")
    ap.add_argument("--recency", type=float, default=fit_mod.TRANSITION_RECENCY,
                    help="weight of a transition pair per generation of age (1: main before this change)")
    ap.add_argument("--residuals", action="store_true", help="anchored multi-device residuals by interconnect and count")
    args = ap.parse_args(argv)
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    prep = fit_mod.prepare()
    if args.t2:
        with split_tensor_term(), transition_recency(1.0):
            folds = folds_of(prep, log)
            print("\n".join(variant_table(prep, folds, [("sm", "group", "all")]) + coefficients(folds)))
        return 0
    with transition_recency(args.recency):
        folds = folds_of(prep, log)
    print("\n".join(residual_table(prep, folds) if args.residuals else variant_table(prep, folds, VARIANTS) + coefficients(folds)))
    return 0


def coefficients(folds) -> list[str]:
    return [f"\n{G.GEN_NAME[target]}: transition prior on the older rows, {list(gf.transition['terms'])} = "
            f"{gf.transition['c']} ({len(gf.transition['pairs'])} pairs)" for target, (gf, _, _) in folds.items()]


if __name__ == "__main__":
    raise SystemExit(main())
