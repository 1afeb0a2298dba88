"""What dominates the anchored misses (issue 24, second pass): leave-source-out, method ``shipped``.

    python bench/llm_anchor_misses.py [--nearest]

For every anchor→query pair of the same model and stack (constants fitted without the query's source, as the
headline table of bench/RESULTS_llm_anchor.md), the error of the shipped anchored prediction is grouped by source,
trust class and *which run fields differ* between anchor and query (activation checkpointing, ZeRO stage,
micro-batch, tp/pp/cp, GPU, node count, ...). Pair-level MAPE (every pair counts), not the nearest-anchor MAPE.
``--nearest``: only the nearest anchors of each held-out run and class (``cloudfit.llm.anchor.distance``; its ties
all kept), as the headline of ``bench/llm_anchor.py`` scores them, grouped with the values that moved; the last
column is the mean log residual (log measured ÷ predicted: + means predicted too slow).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from llm_anchor import evaluate, loso, setups  # noqa: E402

from cloudfit.llm.data import load_rows, table  # noqa: E402

FIELDS = ("accelerator", "gpus", "seq_len", "micro_batch", "grad_accum", "tp", "pp", "cp", "vp", "zero", "ac")


def diff(a: dict, q: dict, values: bool = False) -> str:
    """The fields that differ (``values``: with the anchor's and the query's value of each)."""
    words = [f"{f} {a[f]}→{q[f]}" if values else (f if f != "accelerator" else f"{a[f]}→{q[f]}")
             for f in FIELDS if a[f] != q[f]]
    return ",".join(words) or "(container only)"


def main() -> int:
    nearest_only = "--nearest" in sys.argv[1:]
    rows = load_rows()
    t = table(rows)
    st = setups(rows)
    groups: dict = defaultdict(list)
    for s, (idx, _c, logp, logp0, logw) in loso(rows, t, t.measured).items():
        rs = [rows[i] for i in idx]
        ev = evaluate(rs, [st[i] for i in idx], logp, t.measured[idx], logp0, logw)
        best: dict = {}  # (query, class) → its nearest anchors' distance (--nearest only)
        for k in range(len(ev["q"]) if nearest_only else 0):
            key = (int(ev["q"][k]), str(ev["cls"][k]))
            best[key] = min(best.get(key, np.inf), float(ev["dist"][k]))
        for k in range(len(ev["q"])):
            qi, ai, cls = int(ev["q"][k]), int(ev["a"][k]), str(ev["cls"][k])
            if nearest_only and ev["dist"][k] > best[(qi, cls)]:
                continue
            r = ev["speed"][k] if cls == "gpu" else ev["whole"][k]
            groups[(s, cls, diff(rs[ai], rs[qi], values=nearest_only))].append(float(r))
    print("| source | class | fields that differ | pairs | MAPE | mean log residual |")
    print("|---|---|---|---:|---:|---:|")
    for key in sorted(groups, key=lambda k: (k[0], k[1], -len(groups[k]))):
        v = np.array(groups[key])
        if len(v) < 3 and key[1] != "gpu":
            continue
        print(f"| {key[0]} | {key[1]} | {key[2]} | {len(v)} | {np.mean(np.abs(np.exp(-v) - 1)) * 100:.1f}% | "
              f"{v.mean():+.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
