"""Multi-node all-reduce: shipped network term vs NCCL's effective all-reduce by fabric (issue 33, item 2).

    python bench/multinode.py [--json out.json]

The multi-node all-reduce runs of the training table (``data/measurements.csv``, ``nodes > 1``,
``parallelism == allreduce``) are Gavel's: 1 GPU per VM on 2, 4 and 8 VMs over 10 Gbit/s Ethernet (NCCL sockets),
K80/P100/V100, LSTM, ResNet-18 (CIFAR-10) and Transformer. Each multi-node row is predicted from the **same
cluster's 1-VM run at the same batch** (compute = its measured step), plus the exposed all-reduce of the workload's
gradient bytes (``data/workload_stats.json``):

* **before** — the shipped prior's term: ring at 85% of the VM's Gbit/s, 50 µs a step, exposed =
  max(ring − ⅔·compute, 0.2·ring) (``cloudfit/perf/prior.py``, ``network_model`` off);
* **after** — ``cloudfit/perf/network.py``: the transport's share and step latency, 25 MB buckets, the last bucket
  never hidden (``network_model`` on);
* **after+overlap LOWO** — the same, with the share of compute that hides the all-reduce over sockets chosen on a
  grid on the other workloads' rows (leave-one-workload-out: 0–0.1; ``network.TCP_OVERLAP_SHARE`` = 0.05 is the choice on all rows);
* **linear** — n × the 1-VM throughput.

The band (10–90%) is leave-one-workload-out: the 10th/90th percentiles of log(measured / predicted) over the other
workloads' multi-node rows. The parameter-server runs (CM-DARE, tf_cnn_benchmarks) do not all-reduce; they are
counted, not scored. Nothing here is fitted to these rows: the network numbers come from public NCCL threads.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cloudfit.perf import network  # noqa: E402
from cloudfit.perf import prior as prior_mod  # noqa: E402
from cloudfit.perf.data import load_table  # noqa: E402

BATCH_BUCKETS = (("≤16", 0, 16), ("32–64", 17, 64), ("≥80", 65, 10**9))


def rows():
    t = load_table()
    c = t.columns
    one = {}
    for i in range(len(t)):
        if c["nodes"][i] == 1 and c["count"][i] == 1:
            one[(c["source"][i], c["workload"][i], c["accelerator"][i], c["batch_per_device"][i])] = i
    out, ps = [], 0
    for i in range(len(t)):
        if c["nodes"][i] <= 1:
            continue
        if c["parallelism"][i] != "allreduce":
            ps += 1
            continue
        key = (c["source"][i], c["workload"][i], c["accelerator"][i], c["batch_per_device"][i])
        if key not in one:
            continue
        j = one[key]
        st = t.stats[f"{c['workload'][i]}@{int(c['batch_per_device'][i])}"]
        out.append({"source": c["source"][i], "workload": c["workload"][i], "accelerator": c["accelerator"][i],
                    "batch": float(c["batch_per_device"][i]), "nodes": float(c["nodes"][i]),
                    "count": float(c["count"][i]), "gbps": float(c["network_gbps"][i]),
                    "gradient_bytes": float(st.gradient_bytes), "sps1": float(c["samples_per_second"][j]),
                    "measured": float(c["samples_per_second"][i])})
    return out, ps


def predict(r: list[dict], kind: str) -> np.ndarray:
    b = np.array([x["batch"] for x in r])
    nodes = np.array([x["nodes"] for x in r])
    n = nodes * np.array([x["count"] for x in r])
    g = np.array([x["gradient_bytes"] for x in r])
    gbps = np.array([x["gbps"] for x in r])
    t1 = b / np.array([x["sps1"] for x in r])
    if kind == "linear":
        return n * b / t1
    c = prior_mod.CONSTANTS
    if kind == "before":
        link = gbps * 1e9 / 8 * c["eta_net"]
        ring = 2 * (n - 1) / n * g / link + 2 * (n - 1) * c["latency_inter_s"]
        exposed = np.maximum(ring - c["backward_share"] * t1, c["tail"] * ring)
    else:
        ring = network.allreduce_s(g, n, nodes, gbps, np.inf)
        share = c["backward_share"] if kind == "after" else network.overlap_share(network.transport_of_gbps(gbps),
                                                                                   c["backward_share"])
        if kind == "after+overlap LOWO":  # the socket overlap share learned on the other workloads only
            share = lowo_overlap(r, ring, t1, g)
        exposed = network.exposed_s(ring, t1, g, share, c["tail"])
    return n * b / (t1 + exposed)


OVERLAP_GRID = np.round(np.arange(0.0, 0.70, 0.05), 2)


def lowo_overlap(r: list[dict], ring, t1, g) -> np.ndarray:
    """Per row, the overlap share (of :data:`OVERLAP_GRID`) with the least MAPE on the *other* workloads' rows."""
    c = prior_mod.CONSTANTS
    meas = np.array([x["measured"] for x in r])
    n = np.array([x["nodes"] * x["count"] for x in r])
    b = np.array([x["batch"] for x in r])
    wl = np.array([x["workload"] for x in r])
    ape = np.array([np.abs(n * b / (t1 + network.exposed_s(ring, t1, g, s, c["tail"])) - meas) / meas
                    for s in OVERLAP_GRID])
    out = np.empty(len(r))
    for w in set(wl):
        out[wl == w] = OVERLAP_GRID[int(np.argmin(ape[:, wl != w].mean(1)))]
    return out


def bands(r: list[dict], pred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Leave-one-workload-out 10–90% band around ``pred``."""
    meas = np.array([x["measured"] for x in r])
    resid = np.log(meas / pred)
    wl = np.array([x["workload"] for x in r])
    lo, hi = np.empty_like(pred), np.empty_like(pred)
    for w in set(wl):
        other = resid[wl != w]
        q10, q90 = np.quantile(other, [0.1, 0.9])
        lo[wl == w] = pred[wl == w] * np.exp(min(q10, 0.0))
        hi[wl == w] = pred[wl == w] * np.exp(max(q90, 0.0))
    return lo, hi


def summarize(r: list[dict], sel: np.ndarray, pred: np.ndarray, lo=None, hi=None) -> dict:
    meas = np.array([x["measured"] for x in r])[sel]
    p = pred[sel]
    ape = np.abs(p - meas) / meas
    out = {"n": int(sel.sum()), "mape": float(ape.mean()), "median_ape": float(np.median(ape)),
           "too_fast": int((p > meas).sum()), "worst_ratio": float((p / meas).max())}
    if lo is not None:
        out["coverage"] = float(((meas >= lo[sel]) & (meas <= hi[sel])).mean())
    return out


def run() -> dict:
    r, ps = rows()
    batch = np.array([x["batch"] for x in r])
    groups = {"all": np.ones(len(r), bool)}
    for name, a, b in BATCH_BUCKETS:
        groups[f"batch {name}"] = (batch >= a) & (batch <= b)
    for w in sorted({x["workload"] for x in r}):
        groups[w] = np.array([x["workload"] == w for x in r])
    for k in sorted({int(x["nodes"]) for x in r}):
        groups[f"{k} nodes"] = np.array([x["nodes"] == k for x in r])
    report = {"rows": len(r), "parameter_server_rows_not_scored": ps,
              "fabrics": sorted({f"{x['source']}: {x['gbps']:g} Gbit/s "
                                 f"{network.transport_of_gbps(x['gbps'])}" for x in r}), "kinds": {}}
    for kind in ("linear", "before", "after", "after+overlap LOWO"):
        pred = predict(r, kind)
        lo, hi = bands(r, pred) if kind != "linear" else (None, None)
        report["kinds"][kind] = {g: summarize(r, sel, pred, lo, hi) for g, sel in groups.items() if sel.any()}
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the report as JSON here")
    a = ap.parse_args()
    rep = run()
    print(f"{rep['rows']} multi-node all-reduce rows ({', '.join(rep['fabrics'])}); "
          f"{rep['parameter_server_rows_not_scored']} parameter-server rows not scored")
    print(f"{'group':34s} {'n':>4s}  " + "  ".join(f"{k:>22s}" for k in rep["kinds"]))
    for g in rep["kinds"]["after"]:
        cells = []
        for k, v in rep["kinds"].items():
            s = v[g]
            cov = f" cov {s['coverage']:.0%}" if "coverage" in s else ""
            cells.append(f"{s['mape']:6.0%} fast {s['too_fast']:3d}{cov:>8s}")
        print(f"{g:34s} {rep['kinds']['after'][g]['n']:4d}  " + "  ".join(f"{c:>22s}" for c in cells))
    if a.json:
        Path(a.json).write_text(json.dumps(rep, indent=1))


if __name__ == "__main__":
    main()
