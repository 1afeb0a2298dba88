"""Interleaved wall time of one `cloudfit recommend` command over several source trees (start-up growth).

    python bench/startup_compare.py [--rounds 25] DIR [DIR ...]

Each DIR is a tree with cloudfit/, catalogs/, profiles/ (e.g. `git archive REV cloudfit catalogs profiles
data/workload_stats.json | tar -x -C DIR`); every round runs the command once per tree, in turn, so load on
this shared machine falls on all of them alike. Bytecode caching is on (PYTHONDONTWRITEBYTECODE is
dropped), OPENBLAS_NUM_THREADS=1 as `recommend` sets it, 2 warm-up rounds. Prints median and minimum ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

CMD = ["recommend", "--model", "resnet50", "--epochs", "90", "--dataset-size", "1281167", "--deadline", "24h"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("dirs", nargs="+")
    args = ap.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["OPENBLAS_NUM_THREADS"] = "1"
    times: dict[str, list[float]] = {d: [] for d in args.dirs}
    for r in range(args.rounds + 2):
        for d in args.dirs:
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "cloudfit", *CMD], env=dict(env, PYTHONPATH=d), cwd=d,
                           stdout=subprocess.DEVNULL, check=True)
            if r >= 2:
                times[d].append(time.perf_counter() - t)
    for d in args.dirs:
        print(f"{d}: median {statistics.median(times[d]) * 1e3:.0f} ms, min {min(times[d]) * 1e3:.0f} ms "
              f"({args.rounds} rounds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
