"""Multi-node all-reduce: shipped network term vs NCCL's effective all-reduce by fabric (issue 33, item 2).

    python bench/multinode.py [--json out.json]

The multi-node all-reduce runs of the training table (``data/measurements.csv``, ``nodes > 1``,
``parallelism == allreduce``) are Gavel's: 1 GPU per VM on 2, 4 and 8 VMs over 10 Gbit/s Ethernet (NCCL sockets),
K80/P100/V100, LSTM, ResNet-18 (CIFAR-10) and Transformer. Each multi-node row is predicted from the **same
cluster's 1-VM run at the same batch** (compute = its measured step), plus the exposed all-reduce of the workload's
gradient bytes (``data/workload_stats.json``):

* **before** — the shipped prior's term: ring at 85% of the VM's Gbit/s, 50 µs a step, exposed =
  max(ring − ⅔·compute, 0.2·ring) (``cloudfit/perf/prior.py``, ``network_model`` off);
* **after** — ``cloudfit/catalog/network.py``: the transport's share and step latency, 25 MB buckets, the last bucket
  never hidden (``network_model`` on);
* **after+overlap LOWO** — the same, with the share of compute that hides the all-reduce over sockets chosen on a
  grid on the other workloads' rows (leave-one-workload-out: 0–0.1; ``network.TCP_OVERLAP_SHARE`` = 0.05 is the choice on all rows);
* **linear** — n × the 1-VM throughput.

Bands, leave-one-workload-out (the workload's rows never set its own band): **before**, the 10th/90th percentiles
of log(measured / predicted) over the other workloads' rows; **now** (:func:`conformal_bands`), a nested
conformal band — with workload w held out, an inner leave-one-workload-out over the other three picks the
narrowest tail share (10%, 7.5%, 5%, 2.5%, 0) whose inner coverage is ≥ 80%, and w's band is that quantile pair of
the three workloads' errors (also reported per batch bucket). The rule is fixed before w is looked at. The parameter-server runs (CM-DARE, tf_cnn_benchmarks) do not all-reduce; they are
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

from cloudfit.catalog import network  # noqa: E402
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


def _arrays(r: list[dict]):
    b = np.array([x["batch"] for x in r])
    nodes = np.array([x["nodes"] for x in r])
    n = nodes * np.array([x["count"] for x in r])
    g = np.array([x["gradient_bytes"] for x in r])
    gbps = np.array([x["gbps"] for x in r])
    t1 = b / np.array([x["sps1"] for x in r])
    return b, nodes, n, g, gbps, t1


def predict(r: list[dict], kind: str, overlap=None) -> np.ndarray:
    """Samples/s of every row by ``kind``; ``overlap`` (after+overlap LOWO only): the socket overlap share per row
    (None: each row's from the other workloads, :func:`lowo_overlap`)."""
    b, nodes, n, g, gbps, t1 = _arrays(r)
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
            share = lowo_overlap(r) if overlap is None else overlap
        exposed = network.exposed_s(ring, t1, g, share, c["tail"])
    return n * b / (t1 + exposed)


OVERLAP_GRID = np.round(np.arange(0.0, 0.70, 0.05), 2)


def overlap_fit(r: list[dict], train: np.ndarray) -> float:
    """The overlap share (of :data:`OVERLAP_GRID`) with the least MAPE on the ``train`` rows."""
    meas = np.array([x["measured"] for x in r])
    ape = np.array([np.abs(predict(r, "after+overlap LOWO", s) - meas) / meas for s in OVERLAP_GRID])
    return float(OVERLAP_GRID[int(np.argmin(ape[:, train].mean(1)))])


def lowo_overlap(r: list[dict]) -> np.ndarray:
    """Per row, the overlap share fitted on the *other* workloads' rows."""
    wl = np.array([x["workload"] for x in r])
    out = np.empty(len(r))
    for w in set(wl):
        out[wl == w] = overlap_fit(r, wl != w)
    return out


def bands(r: list[dict], pred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Leave-one-workload-out 10–90% band around ``pred`` (the band before: percentiles of the others' errors)."""
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


#: Tail shares the conformal band may take (narrowest first): band = [q(a), q(1−a)] of the pooled log errors.
TAIL_GRID = (0.10, 0.075, 0.05, 0.025, 0.0)
TARGET_COVERAGE = 0.80


def _interval(resid: np.ndarray, a: float) -> tuple[float, float]:
    lo, hi = np.quantile(resid, [a, 1.0 - a])
    return min(float(lo), 0.0), max(float(hi), 0.0)


def conformal_bands(r: list[dict], kind: str, by_batch: bool = False):
    """Leave-one-workload-out band whose width is chosen without the held-out workload (nested conformal):
    for held-out workload w, the model (its overlap share too) is fitted on the other workloads W'; over W' an
    inner leave-one-workload-out picks the narrowest tail share a of :data:`TAIL_GRID` whose inner coverage is
    ≥ :data:`TARGET_COVERAGE`; w's band is [q(a), q(1−a)] of W''s log errors (``by_batch``: of those in w's row's
    batch bucket, when it has ≥ 5). Returns (prediction, low, high, chosen a per row)."""
    meas = np.array([x["measured"] for x in r])
    wl = np.array([x["workload"] for x in r])
    bucket = np.digitize([x["batch"] for x in r], [16.5, 64.5])
    pred, lo, hi, tail = (np.empty(len(r)) for _ in range(4))

    def cover(resid, train, test, a):
        ok = []
        for i in np.where(test)[0]:
            pool = resid[train & (bucket == bucket[i])] if by_batch else resid[train]
            q = _interval(pool if len(pool) >= 5 else resid[train], a)
            ok.append(q[0] <= resid[i] <= q[1])
        return np.array(ok, bool)

    for w in sorted(set(wl)):
        out, train = wl == w, wl != w
        p = predict(r, kind, overlap_fit(r, train)) if kind == "after+overlap LOWO" else predict(r, kind)
        resid = np.log(meas / p)
        a = TAIL_GRID[-1]
        for cand in TAIL_GRID:
            inner = np.concatenate([cover(resid, train & (wl != v), wl == v, cand) for v in sorted(set(wl[train]))])
            if inner.mean() >= TARGET_COVERAGE:
                a = cand
                break
        for i in np.where(out)[0]:
            pool = resid[train & (bucket == bucket[i])] if by_batch else resid[train]
            q = _interval(pool if len(pool) >= 5 else resid[train], a)
            lo[i], hi[i] = p[i] * np.exp(q[0]), p[i] * np.exp(q[1])
        pred[out], tail[out] = p[out], a
    return pred, lo, hi, tail


def summarize(r: list[dict], sel: np.ndarray, pred: np.ndarray, bands_: dict | None = None) -> dict:
    """MAPE, too-fast count and, per band in ``bands_`` (name → (low, high)), coverage and median width (high/low)."""
    meas = np.array([x["measured"] for x in r])[sel]
    p = pred[sel]
    ape = np.abs(p - meas) / meas
    out = {"n": int(sel.sum()), "mape": float(ape.mean()), "median_ape": float(np.median(ape)),
           "too_fast": int((p > meas).sum()), "worst_ratio": float((p / meas).max())}
    for name, (lo, hi) in (bands_ or {}).items():
        out[f"coverage_{name}"] = float(((meas >= lo[sel]) & (meas <= hi[sel])).mean())
        out[f"width_{name}"] = float(np.median(hi[sel] / lo[sel]))
    return out


#: Link Gbit/s of each public socket point (data/raw/network/nccl_transport.csv ``setting``), and its source.
_TCP_LINKS = {"32 Gbit/s Ethernet": 32.0, "100 Gbit/s TCP": 100.0, "(24 Gbit/s cap)": 24.0, "(32 Gbit/s cap)": 32.0,
              "(50 Gbit/s cap)": 50.0, "25 Gbit/s TCP": 25.0}


def public_points() -> list[dict]:
    """The public NCCL share points by fabric: transport, source (one per thread or repository), Gbit/s, nodes, share."""
    import csv

    out = []
    for r in csv.DictReader(open(REPO / "data/raw/network/nccl_transport.csv")):
        if r["quantity"] != "nccl_gbps_over_link":
            continue
        src = "sailor" if ("sailor" in r["source"] or r["source"].startswith("same file")) else r["source"].split(" (")[0]
        if r["transport"] == "tcp":
            link = next(v for k, v in _TCP_LINKS.items() if k in r["setting"])
            nodes = 4.0 if r["setting"].startswith("4 nodes") else 2.0  # the socket share does not depend on it
        else:
            link = 100.0 if "100 Gbit/s" in r["setting"] else 400.0
            nodes = 8.0 if "8-32 nodes" in r["setting"] else (3.5 if "3-4 nodes" in r["setting"] else 2.0)
        out.append({"transport": r["transport"], "source": src, "gbps": link, "nodes": nodes,
                    "share": float(r["value"])})
    return out


def public_lo_so() -> dict:
    """Leave-one-source-out on the public NCCL share points, per fabric: each source's points predicted from the
    others' — sockets by refitting the ceiling C of ``1/(1/(η₀·link) + 1/C)`` (least squares in log share, grid
    50–1000 Gbit/s), EFA by interpolating the others' shares in log(nodes) (a single point: its share), RDMA by the
    others' mean share. Returns per fabric the held-out APE per point."""
    pts = public_points()
    out: dict[str, list] = {}
    grid = np.arange(50.0, 1000.0, 1.0)
    for tr in ("tcp", "efa", "rdma"):
        mine = [x for x in pts if x["transport"] == tr]
        for src in sorted({x["source"] for x in mine}):
            train = [x for x in mine if x["source"] != src]
            for x in (x for x in mine if x["source"] == src):
                if tr == "tcp":
                    err = [sum((np.log(t["share"]) - np.log(1 / (1 / network.TCP_ETA0 + t["gbps"] / c))) ** 2
                               for t in train) for c in grid]
                    c = grid[int(np.argmin(err))]
                    pred = 1 / (1 / network.TCP_ETA0 + x["gbps"] / c)
                elif tr == "efa":
                    by_n = sorted((t["nodes"], t["share"]) for t in train)
                    pred = float(np.interp(np.log(x["nodes"]), [np.log(n) for n, _ in by_n], [v for _, v in by_n]))
                else:
                    pred = float(np.mean([t["share"] for t in train]))
                out.setdefault(tr, []).append({"source": src, "gbps": x["gbps"], "nodes": x["nodes"],
                                               "measured": x["share"], "predicted": float(pred),
                                               "ape": float(abs(pred - x["share"]) / x["share"])})
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
                                 f"{network.transport_of_gbps(x['gbps'])}" for x in r}), "kinds": {}, "tail": {}}
    for kind in ("linear", "before", "after", "after+overlap LOWO"):
        if kind == "linear":
            pred, b = predict(r, kind), None
        else:
            pred, lo, hi, tail = conformal_bands(r, kind)
            _, blo, bhi, btail = conformal_bands(r, kind, by_batch=True)
            b = {"1090": bands(r, pred), "conformal": (lo, hi), "conformal_by_batch": (blo, bhi)}
            report["tail"][kind] = {w: float(tail[[x["workload"] == w for x in r]][0])
                                    for w in sorted({x["workload"] for x in r})}
        report["kinds"][kind] = {g: summarize(r, sel, pred, b) for g, sel in groups.items() if sel.any()}
    report["public_leave_one_source_out"] = public_lo_so()
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the report as JSON here")
    a = ap.parse_args()
    rep = run()
    print(f"{rep['rows']} multi-node all-reduce rows ({', '.join(rep['fabrics'])}); "
          f"{rep['parameter_server_rows_not_scored']} parameter-server rows not scored")
    print("cells: MAPE, too fast, coverage of the 10–90% band / the nested-conformal band / conformal by batch bucket")
    print(f"{'group':28s} {'n':>4s}  " + "  ".join(f"{k:>34s}" for k in rep["kinds"]))
    for g in rep["kinds"]["after"]:
        cells = []
        for k, v in rep["kinds"].items():
            s = v[g]
            cov = (f" {s['coverage_1090']:4.0%}/{s['coverage_conformal']:4.0%}/{s['coverage_conformal_by_batch']:4.0%}"
                   if "coverage_1090" in s else "")
            cells.append(f"{s['mape']:5.0%} {s['too_fast']:3d}{cov}")
        print(f"{g:28s} {rep['kinds']['after'][g]['n']:4d}  " + "  ".join(f"{c:>34s}" for c in cells))
    for k, t in rep["tail"].items():
        w = rep["kinds"][k]["all"]["width_conformal"]
        print(f"conformal tail share by held-out workload, {k}: "
              + ", ".join(f"{n} {v:g}" for n, v in t.items()) + f"; median width high/low {w:.2f}×")
    print("public NCCL share points, leave-one-source-out (held-out source: measured → predicted share):")
    for tr, pts in rep["public_leave_one_source_out"].items():
        cells = "; ".join(f"{p['source']} {p['gbps']:g} Gbit/s {p['nodes']:g} nodes {p['measured']:.2f} → "
                          f"{p['predicted']:.2f}" for p in pts)
        print(f"  {tr}: MAPE {np.mean([p['ape'] for p in pts]):.0%} over {len(pts)} points ({cells})")
    if a.json:
        Path(a.json).write_text(json.dumps(rep, indent=1))


if __name__ == "__main__":
    main()
