"""Where moving ImageNet-sized data out of a GCS bucket stops paying (issue 35): the README's ResNet-50
`--clouds all` job with `--data gs://my-bucket/imagenet --data-size N` (bucket in us-central1, the default),
bisected on N twice: where the plan's cloud flips from AWS's cheaper GPUs to GCP, and where it stops moving
the data at all (a plan in the bucket's own region).

    python bench/bill_crossover.py [--return-to gs://my-bucket/models]

Prints, for sizes around the crossover, the chosen plan, the transfer it pays and the bill's comparison line
(both numbers), then the crossover size. In-process (`cloudfit.bill.plan.recommend`), the shipped catalogs.
"""

from __future__ import annotations

import argparse
import time

from cloudfit.bill import Bill
from cloudfit.bill import plan as bill_plan
from cloudfit.workload import make_workload


def plan(gb: float, return_to: str | None):
    w = make_workload(model="resnet50", epochs=90, dataset_size=1281167, deadline="24h", clouds=["all"])
    return bill_plan.recommend(w, Bill.of("gs://my-bucket/imagenet", f"{gb}GB", None, 2, return_to), None)


def on_gcp(r) -> bool:
    return r.plan.chosen.config.offering.cloud == "gcp"


def near_data(r) -> bool:
    return r.split(r.plan.chosen)["transfer_usd"] == 0.0


def crossover(test=on_gcp, return_to: str | None = None, lo: float = 50.0, hi: float = 1000.0,
              tol: float = 0.5) -> tuple[float, float]:
    """(largest size where ``test`` of the plan is false, smallest where it is true), ``tol`` GB apart."""
    assert not test(plan(lo, return_to)) and test(plan(hi, return_to))
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if test(plan(mid, return_to)):
            hi = mid
        else:
            lo = mid
    return lo, hi


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--return-to", default=None)
    args = ap.parse_args()
    t0 = time.perf_counter()
    lo, hi = crossover(on_gcp, args.return_to)
    lo2, hi2 = crossover(near_data, args.return_to)
    print(f"--return-to {args.return_to or 'not given'}: the plan leaves GCP up to {lo:.1f} GB and is on GCP from "
          f"{hi:.1f} GB; it moves the data up to {lo2:.1f} GB and runs next to it (us-central1) from {hi2:.1f} GB")
    for gb in (150, int(lo), int(hi) + 1, int(lo2), int(hi2) + 1, 400):
        r = plan(gb, args.return_to)
        c = r.plan.chosen
        s = r.split(c)
        o = c.config.offering
        print(f"\n{gb} GB: #1 {o.cloud} {c.config.nodes}x {o.machine_type} in {o.zone}: ${c.cost_usd:,.2f} "
              f"(compute ${s['compute_usd']:,.2f} + transfer ${s['transfer_usd']:,.2f} + storage ${s['storage_usd']:,.2f})")
        for line in r.lines:
            if line.startswith(("Moving", "Staying")):
                print("  " + line)
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
