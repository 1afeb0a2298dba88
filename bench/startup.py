"""Start-up time of cloudfit commands against `python -c "import typer, rich"`, measured side by side.

    python bench/startup.py                      # cloudfit --help (issue 2 goal: ≤ 1.3×)
    python bench/startup.py -- recommend --model resnet50 …   # any cloudfit command line

Runs the baseline and the command alternately (so drift hits both), N rounds after a warm-up,
and prints medians and their ratio as a Markdown table row.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

BASELINE = [sys.executable, "-c", "import typer, rich"]
# Both sides run as a user's shell would: bytecode caching on (some sandboxes export
# PYTHONDONTWRITEBYTECODE=1, which makes every cloudfit import recompile its sources).
ENV = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def cloudfit_argv(args: list[str]) -> list[str]:
    exe = shutil.which("cloudfit", path=str(Path(sys.executable).parent))
    return ([exe] if exe else [sys.executable, "-m", "cloudfit"]) + args


def wall(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=ENV)
    return time.perf_counter() - t0


def measure(args: list[str], rounds: int) -> tuple[float, float]:
    cmd = cloudfit_argv(args)
    for _ in range(3):  # warm the page cache and .pyc files
        wall(BASELINE), wall(cmd)
    base, ours = [], []
    for _ in range(rounds):
        base.append(wall(BASELINE))
        ours.append(wall(cmd))
    return statistics.median(base), statistics.median(ours)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("args", nargs="*", default=["--help"], help="cloudfit arguments (after --)")
    ns = ap.parse_args()
    base, ours = measure(ns.args, ns.rounds)
    print(f"machine: {platform.machine()}, {platform.python_implementation()} {platform.python_version()}, "
          f"{len(__import__('os').sched_getaffinity(0))} cores; rounds: {ns.rounds}")
    print("| command | median s | `import typer, rich` median s | ratio |")
    print("|---|---|---|---|")
    print(f"| `cloudfit {' '.join(ns.args)}` | {ours:.4f} | {base:.4f} | {ours / base:.2f}× |")


if __name__ == "__main__":
    main()
