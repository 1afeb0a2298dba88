"""Data-transfer (egress) and object-storage prices per cloud, read from ``catalogs/egress.csv`` and
``catalogs/storage.csv`` (sources and dates: ``catalogs/README.md``, "Data transfer and storage").

``egress_usd(gb, src_cloud, src_region, dst_cloud, dst_region)``: what moving ``gb`` gigabytes costs
once. Rules: the same region is free; another region of the same cloud pays that cloud's
``inter_region`` rate (``inter_continent`` when the regions lie on different continents,
``inter_continent_oceania`` when one of them is in Oceania, each falling back on the one before when the
cloud lists none); another cloud pays the source cloud's ``internet`` rate, tiered (each GB at the rate
of the tier it falls in, as the clouds bill). A row may hold for one source continent only (``from``:
AWS bills inter-region transfer by source region); a row with an empty ``from`` holds for the rest. Data
uploaded from the user's own machine (``local``) is ingress: free on every cloud here.

``TRANSFER_GBPS``: the rate a copy reaches, for the time before training can start (see the README).
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass

from cloudfit.errors import UsageError

#: Sustained copy rate into a training VM, in gigabytes per second: 0.2 GB/s (~1.6 Gbit/s). Source:
#: doit-mattporter's gsutil measurements (gist.github.com/doit-mattporter/977f6cfb575fa8b36b06128e37c955fc,
#: written up at www.doit.com/optimize-data-transfer-between-compute-engine-and-cloud-storage/, 2020): one
#: 30 GB object copied with `gsutil cp` at 216 MB/s (n2-standard-4) and 233 MB/s (n2-standard-80); parallel
#: composite 307–589 MB/s. www.beginswithdata.com/2024/02/01/google-cloud-storage-max-throughput/ (2024):
#: "200 MiB/s for a single stream" (0.21 GB/s), over 8 GiB/s with parallel streams. Both read 2026-11-27. The
#: plain single-stream figure is used: conservative for a cross-cloud copy (a parallel copy is faster).
TRANSFER_GBPS = 0.2

#: Where a bucket is assumed to be when ``--data-region`` is not given: each cloud's primary region.
PRIMARY_REGION = {"gcp": "us-central1", "aws": "us-east-1", "lambda": "us-east-1", "runpod": "US", "nebius": "eu-north1"}


@dataclass(frozen=True)
class Tier:
    up_to_gb: float  # inf for the last tier
    usd_per_gb: float


def _rows(name: str) -> list[dict[str, str]]:
    from cloudfit.resources import shipped

    with open(shipped(f"catalogs/{name}"), newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


KINDS = ("internet", "inter_region", "inter_continent", "inter_continent_oceania")


@functools.lru_cache(maxsize=1)
def egress_table() -> dict[tuple[str, str, str], tuple[Tier, ...]]:
    """(cloud, kind, source continent or "" for any) → tiers, ascending; kind is one of ``KINDS``."""
    out: dict[tuple[str, str, str], list[Tier]] = {}
    for r in _rows("egress.csv"):
        if r["kind"] not in KINDS:
            raise ValueError(f"egress.csv: unknown kind {r['kind']!r}")
        up = float(r["up_to_gb"]) if r["up_to_gb"].strip() else float("inf")
        price = float(r["usd_per_gb"])
        if not price >= 0:
            raise ValueError(f"egress.csv: negative price {price}")
        out.setdefault((r["cloud"], r["kind"], (r.get("from") or "").strip()), []).append(Tier(up, price))
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
    if r in ("ap-southeast-2", "ap-southeast-4"):  # AWS Sydney and Melbourne
        return "oceania"
    for prefixes, name in ((("us", "northamerica", "ca-", "na-"), "na"), (("southamerica", "sa-"), "sa"),
                           (("europe", "eu", "uk"), "eu"), (("asia", "ap-", "jp", "kr", "in-"), "asia"),
                           (("australia",), "oceania"), (("me-", "africa", "af-", "il-"), "emea")):
        if r.startswith(prefixes):
            return name
    return r


def rate_kind(src_cloud: str, src_region: str, dst_cloud: str, dst_region: str) -> str:
    """"free" (nothing moves), "ingress" (uploaded from the user's machine: free, but it takes time),
    "inter_region", "inter_continent", "inter_continent_oceania" or "internet": which price moving the data pays."""
    if src_cloud == "local":
        return "ingress"
    if src_cloud != dst_cloud:
        return "internet"
    if src_region == dst_region:
        return "free"
    a, b = continent(src_cloud, src_region), continent(dst_cloud, dst_region)
    if a != b:
        return "inter_continent_oceania" if "oceania" in (a, b) else "inter_continent"
    return "inter_region"


def tiers_for(src_cloud: str, src_region: str, kind: str) -> tuple[Tier, ...]:
    """The tiers ``kind`` of transfer out of (src cloud, region) pays: the row for the source's continent, else
    the cloud's row for any source; a kind the cloud lacks falls back on the one before it in ``KINDS``
    (Oceania → inter-continent → inter-region); a cloud without rows pays the dearest first-tier rate listed."""
    table = egress_table()
    src = continent(src_cloud, src_region)
    k = kind
    while True:
        for key in ((src_cloud, k, src), (src_cloud, k, "")):
            if key in table:
                return table[key]
        if k in ("internet", "inter_region"):
            break
        k = KINDS[KINDS.index(k) - 1]
    return (Tier(float("inf"), max(t[0].usd_per_gb for t in table.values())),)


def egress_usd(gb: float, src_cloud: str, src_region: str, dst_cloud: str, dst_region: str) -> float:
    """One-time cost of moving ``gb`` GB from (src cloud, region) to (dst cloud, region)."""
    kind = rate_kind(src_cloud, src_region, dst_cloud, dst_region)
    if kind in ("free", "ingress") or gb <= 0:
        return 0.0
    return tiered(gb, tiers_for(src_cloud, src_region, kind))


def transfer_hours(gb: float, kind: str) -> float:
    """Hours before training can start while ``gb`` GB are copied (0 when nothing moves)."""
    return 0.0 if kind == "free" or gb <= 0 else gb / TRANSFER_GBPS / 3600.0


def check_tables() -> None:
    """Raise ``UsageError`` if the shipped tables are unreadable (a broken install)."""
    try:
        egress_table(), storage_table()
    except (OSError, KeyError, ValueError) as e:
        raise UsageError(f"cannot read the shipped egress/storage prices: {e}") from None
