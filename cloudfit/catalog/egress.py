"""Data-transfer (egress) and object-storage prices per cloud, read from ``catalogs/egress.csv`` and
``catalogs/storage.csv`` (sources and dates: ``catalogs/README.md``, "Data transfer and storage").

``egress_usd(gb, src_cloud, src_region, dst_cloud, dst_region)``: what moving ``gb`` gigabytes costs
once. Rules: the same region is free; another region of the same cloud pays that cloud's
``inter_region`` rate (``inter_continent`` when the regions lie on different continents and the cloud
lists one); another cloud pays the source cloud's ``internet`` rate, tiered (each GB at the rate of
the tier it falls in, as the clouds bill). Data uploaded from the user's own machine (``local``) is
ingress: free on every cloud here.

``TRANSFER_GBPS``: the rate a copy reaches, for the time before training can start (see the README).
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass

from cloudfit.errors import UsageError

#: Sustained copy rate into a training VM, in gigabytes per second: 0.2 GB/s (~1.6 Gbit/s). Source:
#: doit-mattporter's gsutil measurements (gist.github.com/doit-mattporter/977f6cfb575fa8b36b06128e37c955fc,
#: 2020): one 30 GB object copied with `gsutil cp` at 216 MB/s (n2-standard-4) and 233 MB/s (n2-standard-80);
#: parallel composite 307–589 MB/s. The plain single-stream figure is used: conservative for a cross-cloud copy.
TRANSFER_GBPS = 0.2

#: Where a bucket is assumed to be when ``--data-region`` is not given: each cloud's primary region.
PRIMARY_REGION = {"gcp": "us-central1", "aws": "us-east-1", "lambda": "us-east-1", "runpod": "US", "nebius": "eu-north1"}

#: Storage price used for a cloud the table lacks (and egress rate likewise): the dearest listed.
_FALLBACK_KIND = "internet"


@dataclass(frozen=True)
class Tier:
    up_to_gb: float  # inf for the last tier
    usd_per_gb: float


def _rows(name: str) -> list[dict[str, str]]:
    from cloudfit.resources import shipped

    with open(shipped(f"catalogs/{name}"), newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@functools.lru_cache(maxsize=1)
def egress_table() -> dict[tuple[str, str], tuple[Tier, ...]]:
    """(cloud, kind) → tiers, ascending; kind is internet, inter_region or inter_continent."""
    out: dict[tuple[str, str], list[Tier]] = {}
    for r in _rows("egress.csv"):
        up = float(r["up_to_gb"]) if r["up_to_gb"].strip() else float("inf")
        out.setdefault((r["cloud"], r["kind"]), []).append(Tier(up, float(r["usd_per_gb"])))
    return {k: tuple(sorted(v, key=lambda t: t.up_to_gb)) for k, v in out.items()}


@functools.lru_cache(maxsize=1)
def storage_table() -> dict[str, tuple[float, str]]:
    """cloud → (USD per GB-month, product)."""
    return {r["cloud"]: (float(r["usd_per_gb_month"]), r["product"]) for r in _rows("storage.csv")}


def storage_usd_per_gb_month(cloud: str) -> float:
    t = storage_table()
    return t[cloud][0] if cloud in t else max(v[0] for v in t.values())


def tiered(gb: float, tiers: tuple[Tier, ...]) -> float:
    """Cost of ``gb`` through ascending ``tiers``, each GB at its own tier's rate."""
    cost, lo = 0.0, 0.0
    for t in tiers:
        if gb <= lo:
            break
        cost += (min(gb, t.up_to_gb) - lo) * t.usd_per_gb
        lo = t.up_to_gb
    return cost


def continent(cloud: str, region: str) -> str:
    """A coarse continent of a region name (GCP and AWS spellings), for inter-region vs inter-continent."""
    r = region.lower()
    for prefixes, name in ((("us", "northamerica", "ca-", "na-"), "na"), (("southamerica", "sa-"), "sa"),
                           (("europe", "eu", "uk"), "eu"), (("asia", "ap-", "jp", "kr", "in-"), "asia"),
                           (("australia",), "oceania"), (("me-", "africa", "af-", "il-"), "emea")):
        if r.startswith(prefixes):
            return name
    return r


def rate_kind(src_cloud: str, src_region: str, dst_cloud: str, dst_region: str) -> str:
    """"free" (nothing moves), "ingress" (uploaded from the user's machine: free, but it takes time),
    "inter_region", "inter_continent" or "internet": which price moving the data pays."""
    if src_cloud == "local":
        return "ingress"
    if src_cloud != dst_cloud:
        return "internet"
    if src_region == dst_region:
        return "free"
    if continent(src_cloud, src_region) != continent(dst_cloud, dst_region):
        return "inter_continent"
    return "inter_region"


def egress_usd(gb: float, src_cloud: str, src_region: str, dst_cloud: str, dst_region: str) -> float:
    """One-time cost of moving ``gb`` GB from (src cloud, region) to (dst cloud, region)."""
    kind = rate_kind(src_cloud, src_region, dst_cloud, dst_region)
    if kind in ("free", "ingress") or gb <= 0:
        return 0.0
    table = egress_table()
    tiers = table.get((src_cloud, kind)) or table.get((src_cloud, "inter_region" if kind != "internet" else kind))
    if tiers is None:  # a cloud without rows: the dearest first-tier rate listed
        tiers = (Tier(float("inf"), max(t[0].usd_per_gb for t in table.values())),)
    return tiered(gb, tiers)


def transfer_hours(gb: float, kind: str) -> float:
    """Hours before training can start while ``gb`` GB are copied (0 when nothing moves)."""
    return 0.0 if kind == "free" or gb <= 0 else gb / TRANSFER_GBPS / 3600.0


def check_tables() -> None:
    """Raise ``UsageError`` if the shipped tables are unreadable (a broken install)."""
    try:
        egress_table(), storage_table()
    except (OSError, KeyError, ValueError) as e:
        raise UsageError(f"cannot read the shipped egress/storage prices: {e}") from None
