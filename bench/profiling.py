"""Wall time of `cloudfit profile run` as users run it (real subprocesses), and the counted figures.

    python bench/profiling.py                  # --stats-only on every zoo model + resnet50 with defaults
    python bench/profiling.py --skip-run       # stats-only part only
    python bench/profiling.py --models gpt2 bert-large

Prints a Markdown table (model, parameters, forward and forward+backward GFLOPs per sample, stats-only
wall time) and the wall time of the default resnet50 profile run (the issue's ≤ 90 s goal on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def cloudfit() -> list[str]:
    exe = shutil.which("cloudfit", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "cloudfit"]


def timed(args: list[str], cwd: str) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    r = subprocess.run(cloudfit() + args, capture_output=True, text=True, cwd=cwd)
    return time.perf_counter() - t0, r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="*", help="zoo models (default: all)")
    ap.add_argument("--skip-run", action="store_true", help="skip the timed resnet50 run")
    a = ap.parse_args()
    from cloudfit.profiling import zoo

    names = a.models or zoo.names()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}; "
          f"load average {os.getloadavg()[0]:.2f}\n")
    print("| model | parameters | fwd GFLOP/sample | fwd+bwd GFLOP/sample | `--stats-only` wall s |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            wall, r = timed(["profile", "run", name, "--stats-only", "--json"], tmp)
            if r.returncode:
                print(f"| {name} | failed: {r.stderr.strip()} | | | |")
                continue
            s = json.loads(r.stdout)["stats"]
            print(f"| {name} | {s['parameters'] / 1e6:.2f} M | {s['forward_flops_per_sample'] / 1e9:.4g} | "
                  f"{s['flops_per_sample'] / 1e9:.4g} | {wall:.1f} |")
        if not a.skip_run:
            wall, r = timed(["profile", "run", "resnet50", "--out", "resnet50.json"], tmp)
            m = json.loads(Path(tmp, "resnet50.json").read_text())["measurements"][-1] if r.returncode == 0 else {}
            print(f"\n`cloudfit profile run resnet50` (defaults: batch {m.get('batch_size_per_device')}, 10 steps, "
                  f"2 warm-up): wall {wall:.1f} s, exit {r.returncode}, {m.get('samples_per_second')} samples/s, "
                  f"note: {m.get('note')}")


if __name__ == "__main__":
    main()
