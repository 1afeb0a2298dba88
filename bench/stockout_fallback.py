"""How long `cloudfit launch` takes to get past a zone that refuses the insert with HTTP 503
ZONE_RESOURCE_POOL_EXHAUSTED (Compute Engine's synchronous stockout), against the fake server.

    PYTHONPATH=. python bench/stockout_fallback.py [--tree /path/to/other/checkout]

The plan: 2× n1-highmem-8 + T4 spot in us-central1-a (stocked out, answered synchronously), then the
same in us-central1-b. Reports the exit code, the seconds until the first VM exists in the next zone
(or the launch ended), and how many insert calls each zone got. ``--tree`` runs another checkout's
cloudfit (e.g. the code before the fix) against this tree's fake.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", default=str(REPO), help="checkout whose cloudfit runs the launch")
    a = ap.parse_args()
    from cloudfit.types import ClusterConfig
    from tests.executors.plans import catalog_offering, write_plan
    from tests.fakes.compute_server import FakeCompute

    with tempfile.TemporaryDirectory() as tmp, FakeCompute(op_delay_s=0.02, simulate_job_s=0.5) as fake:
        plan = write_plan(Path(tmp) / "plan.json", [ClusterConfig(catalog_offering("us-central1-a"), 2, True),
                                                    ClusterConfig(catalog_offering("us-central1-b"), 2, True)],
                          budget_usd=30)
        fake.stockout("us-central1-a", sync=True)
        env = {**os.environ, "PYTHONPATH": a.tree, "CLOUDFIT_HOME": str(Path(tmp) / "home"), "OMP_NUM_THREADS": "1"}
        t0 = time.monotonic()
        p = subprocess.Popen([sys.executable, "-m", "cloudfit", "launch", str(plan), "--yes", "--name", "so",
                              "--backend", "gcp", "--project", "p", "--compute-endpoint", fake.endpoint,
                              "--checkpoint-dir", "gs://ckpt-bucket/so", "--steps", "20", "--check-interval", "0.2"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp)
        first = None
        while p.poll() is None:
            if first is None and any(b["name"] for b in fake.inserted if "us-central1-b" in b["machineType"]):
                first = time.monotonic() - t0
            time.sleep(0.05)
        out, err = p.communicate()
        total = time.monotonic() - t0
    print(json.dumps({"tree": a.tree, "exit_code": p.returncode, "seconds_to_next_zone": first,
                      "seconds_total": round(total, 1),
                      "inserts_us_central1_a": fake.count("POST", r"/zones/us-central1-a/instances$"),
                      "inserts_us_central1_b": fake.count("POST", r"/zones/us-central1-b/instances$"),
                      "last_stderr_line": (err.strip().splitlines() or [""])[-1][:200]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
