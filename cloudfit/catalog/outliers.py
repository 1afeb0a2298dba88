"""Spot prices that look wrong: flagged, and left out of recommendations unless asked for.

The price source (SkyPilot's scrape of the GCP billing API) has a few spot prices far below the
rest: H100 spot in europe-north1-c is 87% below on-demand, half the H100 spot price of every other
zone. Nothing says whether such a price is real, a promotion or a scraping error, and every spot
plan would land in that one zone. Rule: a VM shape's spot price in a zone is an **outlier** when it
is below ``OUTLIER_FRACTION`` (55%) of the median spot price of the same shape (machine type,
accelerator, count) over the zones that price it, where at least ``MIN_ZONES`` (3) zones do. On the
shipped catalog this flags 20 offerings, all with spot 87–89% below on-demand where their shape's
other zones sit at 60–77%: P100 hosts in asia-east1-a/c (36% of the median), the a3-highgpu H100
shapes in europe-north1-c (50%), a3-edgegpu-8g in europe-west2-b (54%) and P4 hosts in
asia-southeast1 (54.6%); the next lowest, V100 in asia-east1-c, is at 59% and kept.
"""

from __future__ import annotations

from typing import Sequence

from cloudfit.types import Offering

OUTLIER_FRACTION = 0.55
MIN_ZONES = 3


def spot_outliers(offerings: Sequence[Offering]) -> list[bool]:
    """Per offering: is its spot price an outlier (see the module docstring)?"""
    by_shape: dict[tuple, list[float]] = {}
    for o in offerings:
        if o.spot_price_per_hour is not None:
            by_shape.setdefault((o.machine_type, o.accelerator, o.accelerators_per_node), []).append(o.spot_price_per_hour)
    median = {k: _median(v) for k, v in by_shape.items() if len(v) >= MIN_ZONES}
    out = []
    for o in offerings:
        m = median.get((o.machine_type, o.accelerator, o.accelerators_per_node))
        out.append(o.spot_price_per_hour is not None and m is not None and o.spot_price_per_hour < OUTLIER_FRACTION * m)
    return out


OUTLIER_REASON = (f"spot price below {OUTLIER_FRACTION:.0%} of the same VM's median spot price across zones "
                  "(an outlier of the price source; --allow-outlier-prices uses it)")


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    m = len(s) // 2
    return s[m] if len(s) % 2 else 0.5 * (s[m - 1] + s[m])
