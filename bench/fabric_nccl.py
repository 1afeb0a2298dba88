"""NCCL's all-reduce by cloud fabric, leave-one-source-out (issue 33, item 2).

    python bench/fabric_nccl.py [--json out.json]        # ~10 s, no GPU

Every public nccl-tests row of ``data/raw/network/nccl_transport.csv`` (its PROVENANCE) is predicted by
``cloudfit/catalog/network.py`` with the constants :func:`cloudfit.catalog.network.fit` derives **without that row's
source** (one thread or file × fabric): the bus bandwidth of a ``busbw`` row at its message size, node count and GPUs
per VM (:func:`network.busbw_gbs`), the share of an as-stated ``nccl_gbps_over_link`` row (:func:`network.share`). A
source that is a fabric's only one is then predicted from its base class (TCPX from EFA's sources). Rows printed as
< 0.1 GB/s (nccl-tests' two decimals) are not scored on busbw; rows ≤ 4 KiB with a time are scored on time (the latency).

**Band** (10–90%): for held-out source s, every other source s' is predicted from a fit without s and s'; the band
is the 10th–90th percentile of those log(measured / predicted) errors of s's fabric class (all classes pooled when
the class has fewer than two other sources). **Before** = main's constants (1591024): EFA 0.80 / 0.60 / 0.55 of the
link, RDMA 0.75, TCPX/TCPXO taken as EFA, 20 / 10 / 45.8 µs a step, no two-VM tree gain; its band the same
percentiles of the other sources' errors under those constants. MAPE and coverage are per row, pooled by fabric.
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

#: main's constants (1591024), the "before" of the report.
BEFORE = {"classes": {**network.BASE_CLASS}, "share": {"efa": (0.80, 0.60, 0.55), "rdma": (0.75, 0.75, 0.75)},
          "tcp_ceiling_gbps": 127.0, "latency_s": {"tcp": 45.8e-6, "efa": 20e-6, "rdma": 10e-6}, "gain": False}


def load_rows(path: Path = CSV) -> list[dict]:
    """The csv's rows as ``csv.DictReader`` gives them (the format ``network.fit`` reads)."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def source_of(row: dict) -> tuple[str, str]:
    return network._source_key(row)


@contextlib.contextmanager
def constants(c: dict):
    """``network``'s module constants set to fit result ``c`` for the duration (bench only)."""
    saved = (network.SHARES, network.STEP_LATENCY_S, network.BUCKET_STEP_S, network.TCP_CEILING_GBPS)
    network.SHARES = dict(c["share"])
    network.STEP_LATENCY_S = dict(c["latency_s"])
    network.BUCKET_STEP_S = dict(c.get("bucket_step_s", c["latency_s"]))
    network.TCP_CEILING_GBPS = c["tcp_ceiling_gbps"]
    try:
        yield
    finally:
        network.SHARES, network.STEP_LATENCY_S, network.BUCKET_STEP_S, network.TCP_CEILING_GBPS = saved


def _fabric(row: dict) -> str:
    return row.get("fabric") or ("sockets" if row["transport"] == "tcp" else row["transport"])


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
    cls = c["classes"][_fabric(row)]
    kind = scored(row)
    with constants(c):
        if kind == "share":
            return float(row["value"]), float(network.share(cls, float(row["nodes"]), float(row["link_gbps"])))
        nodes, gpn = float(row["nodes"]), float(row["gpus_per_node"])
        n = nodes * gpn
        link = float(row["link_gbps"])
        coll = row["collective"]
        gain_ok = c.get("gain", True) and cls in c.get("tree", ()) and not (coll == "all_reduce" and row["algo"] == "ring")
        s = float(row["bytes"])
        gather = coll == "all_gather"
        factor = (n - 1) / n if gather else 2 * (n - 1) / n
        steps = (n - 1) if gather else 2 * (n - 1)
        gain = float(network.tree_gain(nodes, gpn)) if (gain_ok and not gather) else 1.0
        bw = link * float(network.share(cls, nodes, link)) * gain / 8 * 1e9
        t = factor * s / bw + steps * float(network.step_overhead_s(s, cls))
        if kind == "time":
            return float(row["time_us"]) * 1e-6, t
        return float(row["busbw_GBps"]), factor * s / t / 1e9


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
    before = {**BEFORE, "classes": dict(network.BASE_CLASS)}

    def errors(kind: str) -> dict:
        """Per row: measured, predicted and the row's band, for "after" (leave-one-source-out) or "before"."""
        out = {}
        for i in idx:
            r = rows[i]
            s = source_of(r)
            c = loso[s] if kind == "after" else before
            meas, pred = predict(r, c)
            cls = c["classes"][_fabric(r)]
            pool, n_src = [], set()
            for j in idx:
                t = source_of(rows[j])
                if t == s:
                    continue
                ct = (pair.get((s, t)) or pair[(t, s)]) if kind == "after" else before
                if ct["classes"][_fabric(rows[j])] != cls and c["classes"][_fabric(rows[j])] != cls:
                    continue
                m2, p2 = predict(rows[j], ct)
                pool.append(np.log(m2 / p2))
                n_src.add(t)
            if len(n_src) < 2:
                pool = []
                for j in idx:
                    t = source_of(rows[j])
                    if t != s:
                        ct = (pair.get((s, t)) or pair[(t, s)]) if kind == "after" else before
                        m2, p2 = predict(rows[j], ct)
                        pool.append(np.log(m2 / p2))
            lo, hi = np.quantile(pool, [0.1, 0.9])
            out[i] = {"measured": meas, "predicted": pred, "low": pred * np.exp(min(lo, 0.0)),
                      "high": pred * np.exp(max(hi, 0.0))}
        return out

    res = {k: errors(k) for k in ("before", "after")}
    table = {}
    groups: dict[str, list[int]] = {}
    for i in idx:
        r = rows[i]
        groups.setdefault(_fabric(r), []).append(i)
        groups.setdefault(f"{_fabric(r)} · {regime(r)}", []).append(i)
        groups.setdefault(f"all · {regime(r)}", []).append(i)
    groups["all"] = idx
    for g, ii in sorted(groups.items()):
        cell = {"rows": len(ii), "sources": len({source_of(rows[i]) for i in ii})}
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
            "mape_before": float(np.mean([abs(res["before"][i]["predicted"] - res["before"][i]["measured"])
                                          / res["before"][i]["measured"] for i in ii])),
            "largest": (max(((e[i]["predicted"] / e[i]["measured"], rows[i]["bytes"] or "share") for i in big),
                            key=lambda x: abs(np.log(x[0]))) if big else None),
            "classes_without_it": loso[s]["classes"][s[1]] if s[1] in loso[s]["classes"] else None}
    return {"fit": {k: v for k, v in full.items() if k in ("classes", "share", "tcp_ceiling_gbps", "latency_s",
                                                           "bucket_step_s", "tree")},
            "table": table, "per_source": per_source}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the report as JSON here")
    a = ap.parse_args()
    rep = run()
    f = rep["fit"]
    print("fit on all rows: classes", {k: v for k, v in f["classes"].items() if k != v})
    print("  shares (2, 3-7, >=8 VMs):", f["share"], " socket C", f["tcp_ceiling_gbps"])
    print("  step latency (us):", {k: round(v * 1e6, 2) for k, v in f["latency_s"].items()},
          " overhead a step at 1-64 MiB (us):", {k: round(v * 1e6, 2) for k, v in f["bucket_step_s"].items()})
    print(f"{'group':30s} {'rows':>4s} {'src':>3s}   {'MAPE before':>11s} {'cov':>5s}   {'MAPE after':>10s} {'cov':>5s}"
          f" {'fast':>4s}")
    for g, c in rep["table"].items():
        b, a_ = c["before"], c["after"]
        print(f"{g:30s} {c['rows']:4d} {c['sources']:3d}   {b['mape']:11.0%} {b['coverage']:5.0%}   "
              f"{a_['mape']:10.0%} {a_['coverage']:5.0%} {a_['too_fast']:4d}")
    print("per source (held out): MAPE before -> after; worst busbw or share row predicted/measured")
    for s, v in rep["per_source"].items():
        w = v["largest"]
        print(f"  {s}: {v['rows']} rows, {v['mape_before']:.0%} -> {v['mape_after']:.0%}"
              + (f"; worst {w[0]:.2f}x at {w[1]}" if w else "") + f"; its fabric's class without it: "
              f"{v['classes_without_it']}")
    if a.json:
        Path(a.json).write_text(json.dumps(rep, indent=1, default=str))


if __name__ == "__main__":
    main()
