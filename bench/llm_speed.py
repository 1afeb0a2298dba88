"""Speed of the LLM predictor: `cloudfit predict --model` wall time (a real process), a 405B stats-only
profile (analytic + meta-device count), and predict_layouts throughput (layouts per second) for a layout search.

    python bench/llm_speed.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ARGS = ["predict", "--model", "llama3-8b", "--accelerator", "H100", "--count", "8", "--nodes", "16", "--precision",
        "bf16", "--seq-len", "8192", "--batch-size", "2", "--layout", "fsdp=128,ac=selective", "--json"]


def wall(cmd: list[str], n: int = 5) -> float:
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, capture_output=True, check=True)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main() -> int:
    py = sys.executable
    base = wall([py, "-c", "import typer, rich, numpy"])
    pred = wall([py, "-m", "cloudfit", *ARGS])
    auto = wall([py, "-m", "cloudfit", *ARGS[:-3], "--layout", "auto", "--json"])
    t0 = time.perf_counter()
    subprocess.run([py, "-c", "from cloudfit.llm import stats, zoo; stats.stats_profile(zoo.get('llama3-405b'), 8192)"],
                   cwd=ROOT, check=True)
    prof = time.perf_counter() - t0
    from cloudfit.llm import predict as P
    from cloudfit.llm import zoo

    shape = zoo.get("llama3-70b")
    lays = P.candidate_layouts(shape, 512, global_batch=1024, seq_len=8192)
    t0 = time.perf_counter()
    P.predict_layouts(shape, "H100", lays, seq_len=8192)
    dt = time.perf_counter() - t0
    print(f"| `python -c \"import typer, rich, numpy\"` (reference) | {base:.2f} s |")
    print(f"| `cloudfit predict --model llama3-8b … --layout fsdp=128,ac=selective --json` | {pred:.2f} s "
          f"({pred / base:.1f}× the reference) |")
    print(f"| same with `--layout auto` (enumerates and prices every candidate) | {auto:.2f} s |")
    print(f"| 405B stats-only profile (analytic stats + parameter count of the meta-device module, incl. torch "
          f"import) | {prof:.1f} s |")
    print(f"| `predict_layouts`: {len(lays)} candidate layouts of llama3-70b on 512 H100 (incl. memory) | "
          f"{dt * 1e3:.0f} ms ({dt / len(lays) * 1e6:.0f} µs per layout) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
