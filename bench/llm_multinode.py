"""The LLM step model on the public multi-node training runs, by fabric, leave-one-source-out (issue 33).

    python bench/llm_multinode.py [--json out.json]   # ~2–4 minutes on 2 shared cores (24 deterministic fits)

Protocol (written before the numbers were looked at; nothing here is tuned to them):

- Rows: ``data/llm/measurements.csv`` as the fit uses it (newest Megatron-Bridge container per configuration),
  *multi-node* = ``gpus > gpus_per_node``. Groups: source × system (vTrain's A100-80GB cluster, llm-foundry's
  MosaicML A100 and H100 clusters, Megatron-Bridge's DGX-H100 / B200 / GB200 / GB300).
- Split ``system`` (the headline, as the brief asks): for each group, constants are refitted
  (``cloudfit.llm.fit.fit``, shipped hyperparameters, nothing changed) on every row **but that group's multi-node
  rows** — the same cluster's single-node rows stay in (the stack's constants are still learned; how that cluster
  scales across nodes is not seen: the analogue of Gavel's anchoring on the same cluster's 1-VM run) — and the
  held-out multi-node rows are predicted with the row's own stack (``framework`` column), layout and network.
- Split ``source`` (stricter, also reported): every multi-node row of the source on every system held out at once
  (Megatron-Bridge's GB300 multi-node rows then cannot inform its GB200 ones).
- Scores per group, per fabric and per node-count bucket (2, 3–8, 9–64, > 64 nodes): rows, MAPE and median APE of
  tokens/s, *too fast* = predicted > measured, and band coverage (measured inside [low, high]).
- Bands, both recomputed without the held-out rows:
  * ``fitted``: the fitted model's 10–90% band (``Constants.band``, what ``cloudfit.llm.predict.predict`` gives
    when the stack is named). Shipped, it is the 10/90% quantiles of the grouped-CV residuals of
    ``cloudfit.llm.evaluate.run`` (leave-model-size-out on vTrain multi-node + leave-accelerator-out on
    Megatron-Bridge / llm-foundry), pooled; here the same CV residuals are computed once and the held-out rows'
    own residuals are dropped before the quantiles. Stated leak: the *other* rows' CV residuals come from fits
    that had the held-out rows in their training set (a second-order effect on the band's width).
  * ``shipped`` (stack-generic, what ``cloudfit predict`` without a profile prints: ``anchor.stack_generic``):
    [min over stacks × e^(lo − w), max over stacks × e^(hi + w)], the stacks fsdp / megatron /
    megatron-deepspeed (cloudfit's trainer borrows fsdp's constants) priced with the split's constants, (lo, hi)
    the ``fitted`` band above, and w the ``stack_generic_widen`` margin recalibrated as ``bench/llm_anchor.py``
    does (``generic_widen``: each source predicted by constants fitted without it) with the held-out rows
    removed from its coverage count.
- Fabric: what the system's nodes use between them, from ``data/llm/PROVENANCE.md`` (``FABRIC``: stated or
  **assumed**, per system). GB200 / GB300 rows are NVL72 racks: a run of ≤ 72 GPUs never leaves the rack's NVLink
  domain (the step model prices it so: ``hardware.nvlink_domain`` = 72); larger runs cross racks over
  InfiniBand.
- Done-when (issue 33): per fabric MAPE ≤ 15% and coverage ≥ 80%. Misses are reported as they come out.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cloudfit.llm import data  # noqa: E402
from cloudfit.llm import fit as fit_mod  # noqa: E402
from cloudfit.llm import hardware as lhw  # noqa: E402

#: system → (fabric between its nodes, where that comes from). Nodes per ``data/llm/PROVENANCE.md``.
FABRIC = {
    "VTRAIN-A100": ("InfiniBand HDR-class, 800 Gbit/s per 8-GPU node",
                    "assumed transport: vTrain's simulation config states 800 Gbit/s between nodes, not the fabric"),
    "MOSAICML-A100": ("RoCE, 1,600 Gbit/s per node", "stated in llm-foundry's A100 tables"),
    "MOSAICML-H100": ("RDMA (IB or RoCE), 3,200 Gbit/s per node",
                      "assumed: llm-foundry's H100 tables state no network"),
    "DGX-H100": ("InfiniBand NDR, 8 × 400 Gbit/s", "DGX H100 system (PROVENANCE)"),
    "DGX-B200": ("InfiniBand NDR, 8 × 400 Gbit/s", "DGX B200 system (PROVENANCE)"),
    "DGX-GB200": ("NVL72 rack (NVLink); InfiniBand 400 Gbit/s per GPU between racks", "GB200 NVL72 (PROVENANCE)"),
    "DGX-GB300": ("NVL72 rack (NVLink); InfiniBand 400 Gbit/s per GPU between racks", "GB300 NVL72 (PROVENANCE)"),
}
#: the stacks the stack-generic band spans (``predict.FRAMEWORKS``; cloudfit borrows fsdp's constants)
STACKS = ("fsdp", "megatron", "megatron-deepspeed")
BUCKETS = ((2, 2, "2"), (3, 8, "3–8"), (9, 64, "9–64"), (65, 10**9, "> 64"))


def nodes(t: data.Table) -> np.ndarray:
    return (t.gpus // t.hw_args["gpus_per_node"]).astype(int)


def multinode(t: data.Table) -> np.ndarray:
    return t.gpus > t.hw_args["gpus_per_node"]


def fabric_of(t: data.Table) -> np.ndarray:
    """Each row's fabric class: the system's, GB200/GB300 split by whether the run fits one NVL72 rack."""
    out = []
    for r, g, h, gpn in zip(t.rows, t.gpus, t.hw_args["nvlink_domain"], t.hw_args["gpus_per_node"]):
        f = FABRIC.get(r["system"], (r["system"], ""))[0]
        if h > gpn:
            f = "NVL72, one rack (NVLink only)" if g <= h else "NVL72 racks + InfiniBand 400 Gbit/s per GPU"
        out.append(f)
    return np.array(out)


def splits(t: data.Table, by: str = "system") -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    """(name, training mask, held-out mask): each group's multi-node rows held out, everything else trains.
    ``by="system"``: one source × system at a time; ``by="source"``: all of a source's multi-node rows."""
    src, sysm, mn = t.column("source"), t.column("system"), multinode(t)
    keys = sorted({(s, y) for s, y, m in zip(src, sysm, mn) if m}) if by == "system" else \
        sorted({(s, "") for s, m in zip(src, mn) if m})
    for s, y in keys:
        held = mn & (src == s) & ((sysm == y) if y else True)
        yield (f"{s} {y}" if y else s), ~held, held


def cv_residuals(t: data.Table, fit: Callable, say: Callable[[str], None]) -> np.ndarray:
    """log(measured ÷ predicted) of the grouped CV whose pooled 10/90% quantiles are the shipped band
    (``evaluate.run``'s two schemes); NaN for rows outside them."""
    src, models = t.column("source"), t.column("model")
    accs = np.array([k.split("/")[0] for k in t.keys])
    res = np.full(len(t.rows), np.nan)
    vt = src == "vtrain-multi"
    pub = (src == "megatron-bridge") | (src == "llm-foundry")
    groups = [(vt & (models == g), ~(vt & (models == g))) for g in sorted(set(models[vt]))]
    groups += [(pub & (accs == a), accs != a) for a in sorted(set(accs[pub]))]
    for i, (test, train) in enumerate(groups):
        say(f"band CV fit {i + 1}/{len(groups)}")
        c = fit(t.subset(train))
        res[test] = np.log(t.measured[test] / data.predict_table(t.subset(test), c)["tokens_per_second"])
    return res


def envelope_log(t: data.Table, c) -> tuple[np.ndarray, np.ndarray]:
    """log tokens/s of the lowest and highest prediction over ``STACKS`` (the stack-generic band before the
    fitted band and the margin are applied)."""
    env = [np.log(data.predict_table(data.table([dict(r, framework=fw) for r in t.rows]), c)["tokens_per_second"])
           for fw in STACKS]
    own = np.log(data.predict_table(t, c)["tokens_per_second"])
    return np.minimum(np.min(env, 0), own), np.maximum(np.max(env, 0), own)


def source_fits(t: data.Table, fit: Callable, say: Callable[[str], None]) -> dict:
    """For ``generic_widen``: every source's rows with constants fitted without that source (band: the training
    rows' own residual quantiles, as ``bench/llm_anchor.py``'s ``loso``)."""
    from dataclasses import replace

    src = t.column("source")
    out = {}
    for s in sorted(set(src)):
        say(f"widen: constants without {s}")
        keep = src != s
        c = fit(t.subset(keep))
        tr = np.log(t.measured[keep] / data.predict_table(t.subset(keep), c)["tokens_per_second"])
        c = replace(c, band=fit_mod.band_from_residuals(tr))
        lo, hi = envelope_log(t.subset(~keep), c)
        out[s] = (np.flatnonzero(~keep), lo + c.band[0], hi + c.band[1])
    return out


def widen_without(src_fits: dict, t: data.Table, held: np.ndarray) -> float:
    """``bench/llm_anchor.generic_widen``'s margin (smallest w whose source-averaged coverage is ≥ 80%) with the
    ``held`` rows left out of the count."""
    y = np.log(t.measured)
    edges = {}
    for s, (idx, lo, hi) in src_fits.items():
        k = ~held[idx]
        if k.any():
            edges[s] = (lo[k], hi[k], y[idx][k])
    for w in np.arange(0.0, 1.5, 0.01):
        if np.mean([np.mean((v >= a - w) & (v <= b + w)) for a, b, v in edges.values()]) >= 0.8:
            return float(w)
    return 1.5


def band_inputs(t: data.Table, fit: Callable = fit_mod.fit, say: Callable[[str], None] = lambda s: None) -> tuple:
    """What the bands are recomputed from (shared by both splits): the CV residuals and the per-source fits."""
    return cv_residuals(t, fit, say), source_fits(t, fit, say)


def holdout(t: data.Table, *, by: str = "system", fit: Callable = fit_mod.fit,
            say: Callable[[str], None] = lambda s: None, inputs: tuple | None = None) -> dict:
    """Predictions and bands of every multi-node row with its group held out of the fit (``inputs``: from
    ``band_inputs``; None = predictions only). Returns arrays over ``t``'s rows (NaN outside the multi-node rows):
    ``pred``, ``fitted_lo``/``fitted_hi`` and ``shipped_lo``/``shipped_hi`` (tokens/s), plus ``split`` (group
    name) and ``widen``/``band`` per group."""
    n = len(t.rows)
    out = {k: np.full(n, np.nan) for k in ("pred", "fitted_lo", "fitted_hi", "shipped_lo", "shipped_hi")}
    out["split"], out["widen"], out["band"] = np.full(n, "", dtype=object), {}, {}
    bands = inputs is not None
    cvr, sf = inputs if bands else (None, None)
    for name, train, held in splits(t, by):
        say(f"hold out {name} multi-node ({int(held.sum())} rows)")
        c = fit(t.subset(train))
        te = t.subset(held)
        p = data.predict_table(te, c)["tokens_per_second"]
        out["pred"][held], out["split"][held] = p, name
        if not bands:
            continue
        r = cvr[~held & np.isfinite(cvr)]
        lo, hi = fit_mod.band_from_residuals(r)
        w = widen_without(sf, t, held)
        elo, ehi = envelope_log(te, c)
        out["fitted_lo"][held], out["fitted_hi"][held] = p * np.exp(lo), p * np.exp(hi)
        out["shipped_lo"][held], out["shipped_hi"][held] = np.exp(elo + lo - w), np.exp(ehi + hi + w)
        out["band"][name], out["widen"][name] = (lo, hi), w
    return out


def scores(pred, meas) -> dict:
    ape = np.abs(pred - meas) / meas
    return {"rows": int(len(meas)), "mape": float(ape.mean()), "mdape": float(np.median(ape)),
            "too_fast": int((pred > meas).sum())}


def report(t: data.Table, res: dict) -> dict:
    mn = multinode(t) & np.isfinite(res["pred"])
    nd, fab, meas = nodes(t), fabric_of(t), t.measured

    def sc(m):
        d = scores(res["pred"][m], meas[m])
        for b in ("fitted", "shipped"):
            lo, hi = res[f"{b}_lo"][m], res[f"{b}_hi"][m]
            if np.isfinite(lo).all():
                d[f"cov_{b}"] = float(np.mean((meas[m] >= lo) & (meas[m] <= hi)))
                d[f"width_{b}"] = float(np.median(hi / lo))
        return d

    out = {"all": sc(mn), "by_split": {}, "by_fabric": {}, "by_nodes": {}}
    for g in sorted(set(res["split"][mn])):
        m = mn & (res["split"] == g)
        out["by_split"][g] = {**sc(m), "fabric": sorted(set(fab[m])), "nodes": sorted(set(nd[m].tolist())),
                              "fabric_source": FABRIC.get(t.rows[int(np.flatnonzero(m)[0])]["system"], ("", ""))[1]}
    for f in sorted(set(fab[mn])):
        out["by_fabric"][f] = sc(mn & (fab == f))
    for a, b, label in BUCKETS:
        m = mn & (nd >= a) & (nd <= b)
        if m.any():
            out["by_nodes"][label] = sc(m)
    return out


def _row(name, d) -> str:
    cov = lambda k: f"{d[k] * 100:.0f}%" if k in d else "–"  # noqa: E731
    return (f"| {name} | {d['rows']} | {d['mape'] * 100:.1f}% | {d['mdape'] * 100:.1f}% | {d['too_fast']} | "
            f"{cov('cov_fitted')} | {cov('cov_shipped')} |")


def markdown(rep: dict) -> str:
    head = "| {} | rows | MAPE | median APE | too fast | cov. fitted band | cov. shipped band |\n|---|---:|---:|---:|---:|---:|---:|"
    lines = []
    for by, r in rep["splits"].items():
        lines += [f"**Held out: each {by}'s multi-node rows** (all: {r['all']['rows']} rows, "
                  f"MAPE {r['all']['mape'] * 100:.1f}%, coverage {r['all'].get('cov_shipped', float('nan')) * 100:.0f}% "
                  "shipped band)", "", head.format("source × system (nodes)"), _row("all", r["all"])]
        for g, d in r["by_split"].items():
            lines.append(_row(f"{g} ({', '.join(map(str, d['nodes']))})", d))
        lines += ["", head.format("fabric"), *[_row(f, d) for f, d in r["by_fabric"].items()], "",
                  head.format("nodes"), *[_row(k, d) for k, d in r["by_nodes"].items()], ""]
    return "\n".join(lines)


def run(t: data.Table, say: Callable[[str], None] = lambda s: None) -> dict:
    """The whole bench: both splits' reports and their bands."""
    inputs = band_inputs(t, say=say)
    cvr, sf = inputs
    # sanity: with nothing held out these are the shipped band and margin (cloudfit/llm/calibration.json,
    # anchor_bands.json) when those were written from the current table
    rep = {"splits": {}, "bands": {},
           "reproduced_shipped": {"band_log": list(fit_mod.band_from_residuals(cvr[np.isfinite(cvr)])),
                                  "widen": widen_without(sf, t, np.zeros(len(t.rows), bool))}}
    for by in ("system", "source"):
        res = holdout(t, by=by, say=say, inputs=inputs)
        rep["splits"][by] = report(t, res)
        rep["bands"][by] = {g: {"fitted_log": list(res["band"][g]), "widen": res["widen"][g]} for g in res["band"]}
    return rep


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path, help="also write the full report")
    t0 = time.perf_counter()
    rep = run(data.table(), say=lambda s: sys.stderr.write(f"  {s}\n"))
    rep["seconds"] = round(time.perf_counter() - t0, 1)
    rep["machine"] = f"{platform.machine()} {platform.system()}, 2-core shared VM, no GPU"
    out = ap.parse_args().json
    if out:
        out.write_text(json.dumps(rep, indent=1, default=str) + "\n", encoding="utf-8")
    sys.stdout.write(markdown(rep) + f"\n({rep['seconds']:.0f} s, {rep['machine']})\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
