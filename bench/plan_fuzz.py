"""Fuzz `cloudfit launch` with mutated plan files against the fake Compute Engine server.

    PYTHONPATH=. python bench/plan_fuzz.py --mutations 200 --seed 0

Each round takes a valid plan (real catalog rows: a chosen config and two alternatives), applies 1–3
random mutations (a field deleted, zeroed, negated, made huge, NaN, a string, a boolean-as-string, a
path, a price halved or doubled, a zone swapped, …), writes it, and runs
``cloudfit launch PLAN --backend gcp --yes`` in-process (typer's runner) against the fake. It checks:

1. no traceback: every run ends with an exit code in {0, 1, 2, 4, 5} and one-line errors;
2. no launch below the catalog's price: every VM the state store recorded is priced at least at the
   catalog's price for its machine type, zone and provisioning model;
3. nothing left: after the run, ``cloudfit down NAME --yes`` exits 0 (or 2 for a cluster that never
   existed) and no VM carrying the name remains at the fake.

Prints one JSON summary line; exit code 1 if any check failed (the failures are listed).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FIELDS = [
    ("chosen", "config", "nodes"), ("chosen", "config", "spot"),
    ("chosen", "config", "offering", "price_per_hour"), ("chosen", "config", "offering", "spot_price_per_hour"),
    ("chosen", "config", "offering", "zone"), ("chosen", "config", "offering", "region"),
    ("chosen", "config", "offering", "machine_type"), ("chosen", "config", "offering", "accelerator"),
    ("chosen", "config", "offering", "accelerators_per_node"), ("chosen", "config", "offering", "vcpus"),
    ("chosen", "cost_p90_usd"), ("chosen", "hours_p90"), ("chosen", "samples_per_second"),
    ("alternatives", 0, "config", "nodes"), ("alternatives", 0, "config", "offering", "price_per_hour"),
    ("alternatives", 0, "config", "offering", "spot_price_per_hour"), ("alternatives", 1, "config", "spot"),
    ("alternatives", 1, "config", "offering", "zone"),
    ("workload", "samples"), ("workload", "budget_usd"), ("workload", "model"), ("workload", "precision"),
    ("workload", "batch_size_per_device"), ("schema_version",), ("alternatives",), ("chosen", "config"),
]
#: Mutations a valid plan survives (so that many rounds launch and the price and cleanup checks bite).
BENIGN = [
    (("chosen", "hours"), lambda v: v * 3), (("chosen", "cost_usd"), lambda v: v / 7),
    (("explanation",), lambda v: "edited by hand"), (("provenance",), lambda v: {"edited": True}),
    (("pareto",), lambda v: []), (("chosen", "config", "offering", "price_per_hour"), lambda v: round(v * (1 + 1e-6), 7)),
    (("chosen", "config", "offering", "vcpus"), lambda v: v + 1), (("alternatives",), lambda v: v[:1]),
]


def _mutators(rng: random.Random):
    return [
        ("delete", lambda v: KeyError),
        ("zero", lambda v: 0), ("negative", lambda v: -3), ("negative-float", lambda v: -0.5),
        ("huge", lambda v: 1e308), ("nan", lambda v: float("nan")), ("inf", lambda v: float("inf")),
        ("string", lambda v: "12"), ("bool-string", lambda v: "false"), ("bool", lambda v: True),
        ("none", lambda v: None), ("list", lambda v: [v]), ("dict", lambda v: {"v": v}),
        ("path", lambda v: "us-central1-a/../../etc"), ("shell", lambda v: "$(touch /tmp/pwned)"),
        ("half", lambda v: v / 2 if isinstance(v, (int, float)) and not isinstance(v, bool) else v),
        ("double", lambda v: v * 2 if isinstance(v, (int, float)) and not isinstance(v, bool) else v),
        ("tiny-price", lambda v: 1e-9), ("fraction", lambda v: 2.5),
        ("other-zone", lambda v: rng.choice(["us-central1-b", "europe-west4-a", "mars-north1-a", "us-central1-z"])),
        ("upper", lambda v: v.upper() if isinstance(v, str) else v),
        ("long", lambda v: "x" * 5000),
    ]


def _set(d, path, value):
    cur = d
    for k in path[:-1]:
        cur = cur[k]
    if value is KeyError:
        if isinstance(cur, dict):
            cur.pop(path[-1], None)
        elif isinstance(cur, list) and isinstance(path[-1], int) and path[-1] < len(cur):
            cur.pop(path[-1])
    else:
        cur[path[-1]] = value


def _get(d, path):
    cur = d
    for k in path:
        cur = cur[k]
    return cur


def base_plan() -> dict:
    from cloudfit.plan.io import plan_to_dict
    from cloudfit.types import ClusterConfig
    from tests.executors.plans import catalog_offering, make_plan

    cfgs = [ClusterConfig(catalog_offering("us-central1-a"), 2, True),
            ClusterConfig(catalog_offering("us-central1-b"), 2, True),
            ClusterConfig(catalog_offering("us-east1-c"), 1, False)]
    return plan_to_dict(make_plan(cfgs, model="mlp", samples=64 * 40, budget_usd=5))


def run(mutations: int, seed: int, verbose: bool = False) -> dict:
    from typer.testing import CliRunner

    from cloudfit import catalog
    from cloudfit.cli.main import app
    from cloudfit.executors.state import StateStore
    from tests.fakes.compute_server import FakeCompute

    rng = random.Random(seed)
    muts = _mutators(rng)
    rows = {(o.machine_type, o.accelerator, o.accelerators_per_node, o.zone): o for o in catalog.load().offerings}
    runner = CliRunner()
    failures: list[str] = []
    codes: Counter = Counter()
    kinds: Counter = Counter()
    launched = 0
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, FakeCompute(op_delay_s=0.01, simulate_job_s=0.3) as fake:
        os.environ["CLOUDFIT_HOME"] = str(Path(tmp) / "home")
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        endpoint = ["--backend", "gcp", "--project", "fuzz", "--compute-endpoint", fake.endpoint]
        for i in range(mutations):
            plan = copy.deepcopy(base_plan())
            applied = []
            for path, fn in rng.sample(BENIGN, rng.randint(0, 3)):
                _set(plan, path, fn(_get(plan, path)))
                applied.append(f"{'.'.join(map(str, path))}:benign")
            for _ in range(rng.choice([0, 1, 1, 1, 2, 3])):
                path = rng.choice(FIELDS)
                name, fn = rng.choice(muts)
                try:
                    old = _get(plan, path)
                except (KeyError, IndexError, TypeError):
                    continue
                try:
                    _set(plan, path, fn(old))
                except (KeyError, IndexError, TypeError):
                    continue
                applied.append(f"{'.'.join(map(str, path))}:{name}")
                kinds[name] += 1
            path = Path(tmp) / f"plan-{i}.json"
            path.write_text(json.dumps(plan, allow_nan=True))  # NaN/Infinity as Python's json writes them
            cluster = f"fz-{i}"
            trust = ["--trust-plan-prices"] if rng.random() < 0.3 else []
            applied += ["--trust-plan-prices"] if trust else []
            r = runner.invoke(app, ["launch", str(path), "--yes", "--name", cluster, "--check-interval", "0.1",
                                    "--checkpoint-dir", "gs://fuzz-bucket/x", "--steps", "10", *trust, *endpoint])
            codes[r.exit_code] += 1
            what = f"#{i} [{', '.join(applied)}]"
            if r.exception is not None and not isinstance(r.exception, SystemExit):
                failures.append(f"{what}: traceback {type(r.exception).__name__}: {r.exception}")
            elif "Traceback" in r.output or r.exit_code not in (0, 1, 2, 4, 5):
                failures.append(f"{what}: exit {r.exit_code}: {r.output[-300:]}")
            elif r.exit_code != 0 and len(r.output.strip().splitlines()) > 1 and r.exit_code == 2:
                failures.append(f"{what}: a usage error of more than one line: {r.output[-300:]}")
            store = StateStore()
            rec = store.find_cluster(cluster)
            if rec is not None:
                launched += 1
                for res in store.resources(cluster):
                    spot = bool(res.info.get("spot"))
                    row = rows.get((res.info.get("machine_type"), res.info.get("accelerator"),
                                    res.info.get("accelerators"), res.zone))
                    want = None if row is None else (row.spot_price_per_hour if spot else row.price_per_hour)
                    if want is None or not res.price_per_hour >= want - 1e-9:
                        failures.append(f"{what}: {res.name} priced ${res.price_per_hour}/h, catalog {want}")
            d = runner.invoke(app, ["down", cluster, "--yes", *endpoint])
            if d.exception is not None and not isinstance(d.exception, SystemExit):
                failures.append(f"{what}: down traceback {type(d.exception).__name__}: {d.exception}")
            elif d.exit_code not in (0, 2) or (d.exit_code == 2 and rec is not None):
                failures.append(f"{what}: down exit {d.exit_code}: {d.output[-300:]}")
            if fake.vms(cluster):
                failures.append(f"{what}: VMs left after down: {fake.vms(cluster)}")
            if verbose:
                print(what, r.exit_code, r.output.strip().splitlines()[-1:] if r.output.strip() else "", file=sys.stderr)
        leftover = fake.vms()
    if leftover:
        failures.append(f"VMs left at the end: {leftover}")
    return {"mutations": mutations, "seed": seed, "launched": launched, "exit_codes": dict(sorted(codes.items())),
            "failures": failures, "seconds": round(time.monotonic() - t0, 1),
            "mutation_kinds": dict(kinds.most_common())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mutations", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    out = run(a.mutations, a.seed, a.verbose)
    print(json.dumps(out))
    return 1 if out["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
