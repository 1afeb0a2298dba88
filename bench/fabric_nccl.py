"""NCCL's all-reduce by cloud fabric, leave-one-source-out (issue 33, item 2).

    python bench/fabric_nccl.py [--json out.json]        # ~5 s, no GPU

Every public nccl-tests row of ``data/raw/network/nccl_transport.csv`` (its PROVENANCE) is predicted by
``cloudfit/catalog/network.py`` with the constants :func:`cloudfit.catalog.network.fit` derives **without that row's
source** (one thread or file × fabric): the bus bandwidth of a ``busbw`` row at its message size, node count and GPUs
per VM (:func:`network.busbw_gbs`), the share of an as-stated ``nccl_gbps_over_link`` row (:func:`network.share`). A
source that is a fabric's only one is then predicted from its base class (TCPX from EFA's sources). Rows printed as
< 0.1 GB/s (nccl-tests' two decimals) are not scored on busbw; rows ≤ 4 KiB with a time are scored on time (the latency).

**Band** (:func:`conformal_band`, the rule fixed before the numbers were read): for held-out source s, every other
source t is predicted from a fit without s and t; the calibration sources are those of the row's regime (small / mid
/ large) in the row's fabric class if there are at least 4, else every class's sources of that regime; each source
weighs 1 (its rows share the weight) and the band is their source-weighted quantiles at (1 − q, q),
q = 0.9 · (k + 1)/k for k sources (split-conformal over sources; below 9 sources, their range).
**Before** = main 06400a5's ``bench/fabric_nccl.py`` and ``network.py`` (read from git, :func:`main_report`) on this
csv: its leave-one-source-out model and its 10–90% band. MAPE and coverage are per row, pooled by fabric.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cloudfit.catalog import network  # noqa: E402

CSV = REPO / "data/raw/network/nccl_transport.csv"
MIN_SCORED_GBS = 0.1

def load_rows(path: Path = CSV) -> list[dict]:
    """The csv's rows as ``csv.DictReader`` gives them (the format ``network.fit`` reads)."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def source_of(row: dict) -> tuple[str, str]:
    return network._source_key(row)


@contextlib.contextmanager
def constants(c: dict):
    """``network``'s module constants set to fit result ``c`` for the duration (bench only)."""
    names = ("SHARES", "STEP_LATENCY_S", "RAMP_BYTES", "RAMP_EXP", "TCP_CEILING_GBPS", "TREE_CLASSES")
    saved = {k: getattr(network, k) for k in names}
    network.SHARES = dict(c["share"])
    network.STEP_LATENCY_S = dict(c["latency_s"])
    network.RAMP_BYTES = {k: c.get("ramp_bytes", {}).get(k, 0.0) for k in network.TRANSPORTS}
    network.RAMP_EXP = {k: c.get("ramp_exp", {}).get(k, 1.0) for k in network.TRANSPORTS}
    network.TCP_CEILING_GBPS = c["tcp_ceiling_gbps"]
    network.TREE_CLASSES = tuple(c.get("tree", ()))
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(network, k, v)


def scored(row: dict) -> str | None:
    """What a row is scored on: "share", "busbw", "time" or None."""
    if row["quantity"] == "nccl_gbps_over_link":
        return "share"
    if row["quantity"] != "busbw":
        return None
    if float(row["bytes"]) <= network.SMALL_BYTES and row.get("time_us"):
        return "time"
    return "busbw" if float(row["busbw_GBps"]) >= MIN_SCORED_GBS else None


def regime(row: dict) -> str:
    """small (≤ 4 KiB, scored on time), mid (to 256 MiB), large (≥ 256 MiB, or a stated share)."""
    kind = scored(row)
    if kind == "time":
        return "small"
    if kind == "share" or float(row["bytes"]) >= network.LARGE_BYTES:
        return "large"
    return "mid"


def predict(row: dict, c: dict) -> tuple[float, float]:
    """(measured, predicted) of a scored row under constants ``c``."""
    cls = c["classes"][network.row_fabric(row)]
    kind = scored(row)
    with constants(c):
        if kind == "share":
            return float(row["value"]), float(network.share(cls, float(row["nodes"]), float(row["link_gbps"])))
        nodes, gpn = float(row["nodes"]), float(row["gpus_per_node"])
        coll = row["collective"]
        t = float(network.collective_s(float(row["bytes"]), nodes * gpn, nodes, float(row["link_gbps"]), cls, coll,
                                       tree=row["algo"] != "ring"))
        if kind == "time":
            return float(row["time_us"]) * 1e-6, t
        n = nodes * gpn
        factor = (n - 1) / n if coll == "all_gather" else 2 * (n - 1) / n
        return float(row["busbw_GBps"]), factor * float(row["bytes"]) / t / 1e9


#: Band rule (chosen before the numbers were seen): a class pools its own calibration sources only when it has at
#: least this many in the row's regime; else every class's sources in that regime (wider where a class has few).
BAND_MIN_SOURCES = 4
BAND_COVERAGE = 0.8


def conformal_band(resid: dict, reg: str, cls: str) -> tuple[float, float]:
    """(low, high) of log(measured / predicted) for a held-out source's row of regime ``reg`` in class ``cls``:
    conformal over sources. ``resid``: other source → its rows' (regime, class, log error), each predicted without
    it and the held-out source. The calibration sources are those with rows of ``reg`` in ``cls`` if there are at
    least :data:`BAND_MIN_SOURCES`, else every source with rows of ``reg``; each source weighs 1 (its rows share
    it: a source is one exchangeable draw, its rows are not); with k sources the band is the source-weighted
    quantiles at (1 − q, q), q = min(1, (1 + :data:`BAND_COVERAGE`)/2 · (k + 1)/k) (split-conformal's finite-k
    correction: ≥ 10 per cent in each tail becomes all of it below 9 sources), and always holds 0 (the prediction)."""
    def pick(same_class: bool):
        return {t: [e for g, c, e in v if g == reg and (c == cls or not same_class)] for t, v in resid.items()}
    cal = {t: v for t, v in pick(True).items() if v}
    if len(cal) < BAND_MIN_SOURCES:
        cal = {t: v for t, v in pick(False).items() if v}
    if not cal:
        return 0.0, 0.0
    k = len(cal)
    e = np.concatenate([np.asarray(v) for v in cal.values()])
    w = np.concatenate([np.full(len(v), 1.0 / len(v)) for v in cal.values()])
    order = np.argsort(e)
    e, cw = e[order], np.cumsum(w[order]) / k
    q = min(1.0, (1 + BAND_COVERAGE) / 2 * (k + 1) / k)
    hi = e[min(int(np.searchsorted(cw, q - 1e-12)), len(e) - 1)]
    lo = e[max(int(np.searchsorted(cw, 1 - q + 1e-12, side="right")) - (1 if q >= 1.0 else 0), 0)]
    return min(float(lo), 0.0), max(float(hi), 0.0)


#: The "before" of the report: main's model and band, leave-one-source-out on this csv (its own bench, read from git).
MAIN_REF = "06400a5"


def main_report(rows: list[dict], ref: str = MAIN_REF) -> dict | None:
    """Main's ``bench/fabric_nccl.py`` and ``cloudfit/catalog/network.py`` at ``ref`` (from git), run on ``rows``:
    its table (None where git or the ref is not there)."""
    import importlib.util
    import subprocess
    import types

    def show(path):
        return subprocess.run(["git", "-C", str(REPO), "show", f"{ref}:{path}"], capture_output=True, text=True,
                              check=True).stdout
    try:
        net_src, bench_src = show("cloudfit/catalog/network.py"), show("bench/fabric_nccl.py")
    except (OSError, subprocess.CalledProcessError):
        return None
    net = types.ModuleType(f"network_{ref}")
    exec(compile(net_src, f"{ref}:cloudfit/catalog/network.py", "exec"), net.__dict__)
    spec = importlib.util.spec_from_loader(f"fabric_nccl_{ref}", loader=None)
    old = importlib.util.module_from_spec(spec)
    old.__dict__.update(__file__=__file__, network=net)
    sys.modules[f"network_{ref}"] = net
    bench_src = bench_src.replace("from cloudfit.catalog import network  # noqa: E402", "")
    exec(compile(bench_src, f"{ref}:bench/fabric_nccl.py", "exec"), old.__dict__)
    return old.run(rows)["table"]


def _fit_without(rows: list[dict], drop: set) -> dict:
    return network.fit([r for r in rows if source_of(r) not in drop])


def run(rows: list[dict] | None = None) -> dict:
    rows = load_rows() if rows is None else rows
    idx = [i for i, r in enumerate(rows) if scored(r)]
    sources = sorted({source_of(rows[i]) for i in idx})
    full = network.fit(rows)
    loso = {s: _fit_without(rows, {s}) for s in sources}
    pair = {}
    for s in sources:
        for t in sources:
            if t != s and (t, s) not in pair:
                pair[(s, t)] = _fit_without(rows, {s, t})
    # every other source's rows, each predicted without it and the held-out source: the calibration residuals
    resid: dict = {}  # (held-out s, other t) -> list of (regime, class of t's fabric, log(measured / predicted))
    for s in sources:
        for j in idx:
            t = source_of(rows[j])
            if t == s:
                continue
            ct = pair.get((s, t)) or pair[(t, s)]
            m2, p2 = predict(rows[j], ct)
            resid.setdefault((s, t), []).append((regime(rows[j]), ct["classes"][network.row_fabric(rows[j])], np.log(m2 / p2)))

    def errors() -> dict:
        """Per row: measured, predicted (leave-one-source-out) and its band (:func:`conformal_band`)."""
        out = {}
        for i in idx:
            r = rows[i]
            s = source_of(r)
            meas, pred = predict(r, loso[s])
            lo, hi = conformal_band({t: v for (ss, t), v in resid.items() if ss == s}, regime(r),
                                    loso[s]["classes"][network.row_fabric(r)])
            out[i] = {"measured": meas, "predicted": pred, "low": pred * np.exp(lo), "high": pred * np.exp(hi)}
        return out

    res = {"after": errors()}
    main_table = main_report(rows)
    table = {}
    groups: dict[str, list[int]] = {}
    for i in idx:
        r = rows[i]
        groups.setdefault(network.row_fabric(r), []).append(i)
        groups.setdefault(f"{network.row_fabric(r)} · {regime(r)}", []).append(i)
        groups.setdefault(f"all · {regime(r)}", []).append(i)
        if r["bytes"] and 2**20 <= float(r["bytes"]) <= network.BUCKET_MAX_BYTES:  # DDP's / FSDP's bucket sizes
            groups.setdefault("all · mid, 1-64 MiB", []).append(i)
    groups["all"] = idx
    for g, ii in sorted(groups.items()):
        cell = {"rows": len(ii), "sources": len({source_of(rows[i]) for i in ii})}
        if main_table is not None and g in main_table:
            cell["before"] = main_table[g]["after"]
        for k, e in res.items():
            ape = [abs(e[i]["predicted"] - e[i]["measured"]) / e[i]["measured"] for i in ii]
            cov = [e[i]["low"] <= e[i]["measured"] <= e[i]["high"] for i in ii]
            cell[k] = {"mape": float(np.mean(ape)), "coverage": float(np.mean(cov)),
                       "too_fast": int(sum(e[i]["predicted"] > e[i]["measured"] for i in ii
                                           if scored(rows[i]) != "time"))}
        table[g] = cell
    per_source = {}
    for s in sources:
        ii = [i for i in idx if source_of(rows[i]) == s]
        e = res["after"]
        big = [i for i in ii if scored(rows[i]) in ("busbw", "share")]
        per_source[f"{s[0]} [{s[1]}]"] = {
            "rows": len(ii),
            "mape_after": float(np.mean([abs(e[i]["predicted"] - e[i]["measured"]) / e[i]["measured"] for i in ii])),
            "largest": (max(((e[i]["predicted"] / e[i]["measured"], rows[i]["bytes"] or "share") for i in big),
                            key=lambda x: abs(np.log(x[0]))) if big else None),
            "classes_without_it": loso[s]["classes"][s[1]] if s[1] in loso[s]["classes"] else None}
    return {"fit": {k: v for k, v in full.items() if k in ("classes", "share", "tcp_ceiling_gbps", "latency_s",
                                                           "ramp_bytes", "ramp_exp", "tree")},
            "table": table, "per_source": per_source, "main_ref": MAIN_REF if main_table is not None else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the report as JSON here")
    a = ap.parse_args()
    rep = run()
    f = rep["fit"]
    print("fit on all rows: classes", {k: v for k, v in f["classes"].items() if k != v})
    print("  shares (2, 3-7, >=8 VMs):", f["share"], " socket C", f["tcp_ceiling_gbps"])
    print("  step latency (us):", {k: round(v * 1e6, 2) for k, v in f["latency_s"].items()},
          " ramp S_h (MiB), p:", {k: (round(f["ramp_bytes"][k] / 2**20, 1), f["ramp_exp"][k]) for k in f["ramp_bytes"]})
    print(f"before = main {rep['main_ref']} (its model and band, this csv)" if rep["main_ref"] else
          "before: main's code not found in git")
    print(f"{'group':30s} {'rows':>4s} {'src':>3s}   {'MAPE before':>11s} {'cov':>5s} {'fast':>4s}   {'MAPE after':>10s}"
          f" {'cov':>5s} {'fast':>4s}")
    for g, c in rep["table"].items():
        b, a_ = c.get("before"), c["after"]
        bs = f"{b['mape']:11.0%} {b['coverage']:5.0%} {b['too_fast']:4d}" if b else f"{'-':>11s} {'-':>5s} {'-':>4s}"
        print(f"{g:30s} {c['rows']:4d} {c['sources']:3d}   {bs}   "
              f"{a_['mape']:10.0%} {a_['coverage']:5.0%} {a_['too_fast']:4d}")
    print("per source (held out): MAPE; worst busbw or share row predicted/measured")
    for s, v in rep["per_source"].items():
        w = v["largest"]
        print(f"  {s}: {v['rows']} rows, {v['mape_after']:.0%}"
              + (f"; worst {w[0]:.2f}x at {w[1]}" if w else "") + f"; its fabric's class without it: "
              f"{v['classes_without_it']}")
    if a.json:
        Path(a.json).write_text(json.dumps(rep, indent=1, default=str))


if __name__ == "__main__":
    main()
