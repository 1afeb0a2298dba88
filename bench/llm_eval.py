"""LLM step-model evaluation on the public runs: grouped CV vs a constant-MFU baseline, ranking, memory.

    python bench/llm_eval.py                 # prints the markdown section of bench/RESULTS_llm.md
    python bench/llm_eval.py --json out.json # also the full report
Same numbers as `cloudfit model eval --llm`.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cloudfit.llm import evaluate  # noqa: E402
from cloudfit.llm.report import markdown  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    t0 = time.perf_counter()
    rep = evaluate.run(progress=lambda s: sys.stderr.write(f"  {s}\n"))
    rep["seconds"] = round(time.perf_counter() - t0, 1)
    rep["machine"] = f"{platform.machine()} {platform.system()}, 2-core VM, no GPU"
    if args.json:
        args.json.write_text(json.dumps(rep, indent=1, default=str) + "\n", encoding="utf-8")
    sys.stdout.write(markdown(rep) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
