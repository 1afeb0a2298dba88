"""Refresh a catalog's prices from the Cloud Billing Catalog API, keeping its shapes.

Every row of the base catalog (machine type, accelerators, vCPUs, memory, zone) is kept, row for
row; only ``price_per_hour`` and ``spot_price_per_hour`` are recomputed from Compute Engine's SKUs
(service ``6F81-5844-456A``) with the catalog's pricing rule (catalogs/README.md):

    price = vCPUs × <family> Core $/vCPU-h + memory GiB × <family> Ram $/GiB-h + GPUs × GPU $/GPU-h

per region (a SKU lists the regions it prices in ``service_regions``), on-demand from
``usage_type == "OnDemand"`` SKUs and Spot from ``"Preemptible"`` ones. A4 (B200) is billed per
"1 gpu slice" that includes the host, so its host part is 0 — as in the shipped catalog.

A price with no matching SKU keeps its old value and is counted, with the reason, in the
``RefreshReport``; no row is ever dropped. A refresh that prices nothing at all is an error.

    offerings, report = refresh_catalog(catalog.load())
    write_catalog(offerings, "catalogs/gcp-new.csv")

The library never prints; it raises ``BillingError`` (exit 1) with one actionable line when the API
cannot be reached, rejects the credentials, or denies access. google-cloud is imported lazily.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Sequence
from urllib.parse import urlsplit

from cloudfit.endpoints import is_loopback_host
from cloudfit.errors import BillingError, CatalogError, CloudfitError, UsageError, one_line
from cloudfit.types import Offering, to_jsonable

COMPUTE_ENGINE_SERVICE_ID = "6F81-5844-456A"
DEFAULT_ENDPOINT = "https://cloudbilling.googleapis.com"
_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
_PAGE_SIZE = 5000  # the API's maximum; Compute Engine has ~30k SKUs



# --------------------------------------------------------------------------------------------
# What the SKU descriptions say (wording checked against public users of the API, e.g. SkyPilot's
# fetch_gcp.py: "A2 Instance Core running in Americas", "Spot Preemptible N1 Predefined Instance Ram
# running in Frankfurt", "Nvidia H100 80GB GPU attached to Spot Preemptible VMs running in Americas").

#: machine-type prefix → host families whose Core/Ram SKUs price it (first found wins);
#: ``()`` = the GPU SKU covers the whole VM. Longer prefixes first.
HOST_FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("a3-megagpu-", ("a3plus", "a3mega")),
    ("a3-ultragpu-", ("a3ultra",)),
    ("a4-", ()),  # "A4 Nvidia B200 (1 gpu slice)": Google publishes no A4 Core/Ram SKUs
    ("a2-", ("a2",)),
    ("a3-", ("a3",)),
    ("g2-", ("g2",)),
    ("n1-", ("n1predefined",)),
)
_FAMILY_LABEL = {"a2": "A2", "a3": "A3", "a3plus": "A3Plus", "a3mega": "A3 Mega", "a3ultra": "A3Ultra",
                 "g2": "G2", "n1predefined": "N1 Predefined"}

#: canonical accelerator → GPU SKU names (region clause and Spot wording removed, lower case), preferred first.
GPU_SKU_NAMES: dict[str, tuple[str, ...]] = {
    "T4": ("nvidia tesla t4 gpu",),
    "P4": ("nvidia tesla p4 gpu",),
    "P100": ("nvidia tesla p100 gpu",),
    "V100": ("nvidia tesla v100 gpu",),
    "A100": ("nvidia tesla a100 gpu",),
    "A100-80GB": ("nvidia a100 80gb gpu", "nvidia tesla a100 80gb gpu"),
    "H100": ("nvidia h100 80gb gpu",),
    "H100-MEGA": ("nvidia h100 80gb mega gpu", "nvidia h100 mega 80gb gpu"),
    "H200": ("h200 141gb gpu", "nvidia h200 141gb gpu"),
    "B200": ("a4 nvidia b200 (1 gpu slice)", "nvidia b200 (1 gpu slice)"),
    "L4": ("nvidia l4 gpu",),
}
_GPU_BY_NAME = {name: (acc, rank) for acc, names in GPU_SKU_NAMES.items() for rank, name in enumerate(names)}

# Prices that are not the plain list rate of a running VM: commitments, reservations, Dynamic Workload
# Scheduler (DWS) and Calendar-mode blocks, sole-tenant and custom shapes, workstation licences.
_NOT_LIST_PRICE = ("commitment", "reserved", "reservation", "dws", "calendar mode", "flex start", "sole tenancy",
                   "custom", "extended", "premium", "virtual workstation", "licen")
_SPOT_WORDS = re.compile(r"^(?:spot preemptible|preemptible)\s+|\s+attached to (?:spot )?preemptible vms\b")
_REGION_CLAUSE = re.compile(r"\s+(?:running\s+)?in\s+\S.*$")
_HOST_NAME = re.compile(r"^(?P<family>.+?)\s+(?:instance\s+)?(?P<part>core|ram)$")
_USAGE = {"OnDemand": "on_demand", "Preemptible": "spot"}


@dataclass(frozen=True)
class SkuPrice:
    """One usable price read from one SKU: ``item`` is ("core"|"ram", family) or ("gpu", accelerator)."""

    sku_id: str
    description: str
    item: tuple[str, str]
    usage: str  # "on_demand" | "spot"
    regions: tuple[str, ...]
    usd_per_unit: float  # per vCPU-hour, GiB-hour or GPU-hour
    rank: int = 0  # preference among names of the same item (0 = first)


def sku_item(description: str) -> tuple[tuple[str, str], int] | None:
    """(item, rank) a SKU description prices, or None when it is not a host Core/Ram or known GPU SKU."""
    d = " ".join(description.lower().split())
    if any(w in d for w in _NOT_LIST_PRICE):
        return None
    d = _REGION_CLAUSE.sub("", _SPOT_WORDS.sub("", d)).strip()
    if d in _GPU_BY_NAME:
        acc, rank = _GPU_BY_NAME[d]
        return ("gpu", acc), rank
    m = _HOST_NAME.match(d)
    if m:
        return (m["part"], m["family"].replace(" ", "")), 0
    return None


# --------------------------------------------------------------------------------------------
# Report


@dataclass(frozen=True)
class PriceChange:
    """A row whose refreshed price differs from the base catalog's."""

    machine_type: str
    accelerator: str
    accelerators_per_node: int
    zone: str
    old_price_per_hour: float
    new_price_per_hour: float
    old_spot_price_per_hour: float | None
    new_spot_price_per_hour: float | None


@dataclass(frozen=True)
class KeptPrice:
    """A price the refresh could not compute; the base catalog's value was kept."""

    machine_type: str
    accelerator: str
    accelerators_per_node: int
    zone: str
    price: str  # "on_demand" | "spot"
    reason: str


@dataclass(frozen=True)
class RefreshReport:
    """What a refresh did. Rows are never dropped: a price without a SKU keeps its old value."""

    service_id: str
    service_name: str
    endpoint: str
    sku_pages: int
    skus_read: int
    skus_used: int  # SKUs that price a host part or a GPU of some catalog row
    rows: int
    on_demand_updated: int
    on_demand_kept: int
    spot_updated: int
    spot_kept: int  # includes rows whose spot price was and stays empty
    kept_reasons: tuple[tuple[str, int], ...]  # (reason, prices kept for it), most frequent first
    regions_without_skus: tuple[str, ...]  # catalog regions no SKU lists at all
    changed: tuple[PriceChange, ...]
    kept: tuple[KeptPrice, ...]
    warnings: tuple[str, ...] = ()
    rows_dropped: int = 0  # by design: shapes are kept

    def to_dict(self) -> dict[str, Any]:
        d = to_jsonable(self)
        d["kept_reasons"] = [{"reason": r, "prices": n} for r, n in self.kept_reasons]
        d["rows_changed"] = len(self.changed)
        return d


# --------------------------------------------------------------------------------------------
# Repricing (pure)


class PriceBook:
    """Best SKU price per (item, usage, region); ties broken by name preference, then the most
    region-specific SKU, then SKU id, so a refresh is deterministic."""

    def __init__(self, prices: Iterable[SkuPrice]) -> None:
        self._best: dict[tuple[tuple[str, str], str, str], SkuPrice] = {}
        self.regions: set[str] = set()
        self.conflicts: list[str] = []
        for p in sorted(prices, key=lambda p: (p.rank, len(p.regions), p.sku_id)):
            for region in p.regions:
                self.regions.add(region)
                key = (p.item, p.usage, region)
                first = self._best.setdefault(key, p)
                if first is not p and abs(first.usd_per_unit - p.usd_per_unit) > 1e-9:
                    self.conflicts.append(f"{first.description!r} over {p.description!r} in {region}")
        self.used: set[str] = set()

    def get(self, item: tuple[str, str], usage: str, region: str) -> SkuPrice | None:
        return self._best.get((item, usage, region))

    def mark_used(self, *prices: SkuPrice) -> None:
        self.used.update(p.sku_id for p in prices)


def host_families(machine_type: str) -> tuple[str, ...] | None:
    """Host SKU families for a machine type; ``()`` when the GPU SKU carries the host; None if unknown."""
    for prefix, fams in HOST_FAMILIES:
        if machine_type.startswith(prefix):
            return fams
    return None


def price_offering(o: Offering, book: PriceBook, usage: str) -> tuple[float | None, str]:
    """(USD/hour of one VM, "") from the book, or (None, reason) when a part has no SKU."""
    word = "on-demand" if usage == "on_demand" else "Spot"
    if o.region not in book.regions:
        return None, f"no SKU lists region {o.region}"
    fams = host_families(o.machine_type)
    if fams is None:
        return None, f"unknown machine family of {o.machine_type}"
    if o.accelerator not in GPU_SKU_NAMES:
        return None, f"no billing SKU name known for {o.accelerator}"
    gpu = book.get(("gpu", o.accelerator), usage, o.region)
    if gpu is None:
        return None, f"no {word} {o.accelerator} GPU SKU in {o.region}"
    host, parts = 0.0, [gpu]
    if fams:
        for fam in fams:
            core, ram = book.get(("core", fam), usage, o.region), book.get(("ram", fam), usage, o.region)
            if core is not None and ram is not None:
                host, parts = o.vcpus * core.usd_per_unit + o.memory_gib * ram.usd_per_unit, [gpu, core, ram]
                break
        else:
            return None, f"no {word} {_FAMILY_LABEL.get(fams[0], fams[0])} Core/Ram SKUs in {o.region}"
    book.mark_used(*parts)
    return round(host + o.accelerators_per_node * gpu.usd_per_unit, 5), ""


def reprice(offerings: Sequence[Offering], book: PriceBook) -> tuple[tuple[Offering, ...], dict[str, Any]]:
    """New offerings (same order and shapes) and the counting half of a ``RefreshReport``."""
    out: list[Offering] = []
    changed: list[PriceChange] = []
    kept: list[KeptPrice] = []
    counts = Counter()
    for o in offerings:
        od, od_why = price_offering(o, book, "on_demand")
        spot, spot_why = price_offering(o, book, "spot")
        for which, new, why in (("on_demand", od, od_why), ("spot", spot, spot_why)):
            counts[(which, new is not None)] += 1
            if new is None:
                kept.append(KeptPrice(o.machine_type, o.accelerator, o.accelerators_per_node, o.zone,
                                      which, f"{why} ({'on-demand' if which == 'on_demand' else 'spot'} kept)"))
        n = dataclasses.replace(o, price_per_hour=o.price_per_hour if od is None else od,
                                spot_price_per_hour=o.spot_price_per_hour if spot is None else spot)
        if (n.price_per_hour, n.spot_price_per_hour) != (o.price_per_hour, o.spot_price_per_hour):
            changed.append(PriceChange(o.machine_type, o.accelerator, o.accelerators_per_node, o.zone,
                                       o.price_per_hour, n.price_per_hour, o.spot_price_per_hour, n.spot_price_per_hour))
        out.append(n)
    spot_above = sum(1 for n in out if n.spot_price_per_hour is not None and n.spot_price_per_hour > n.price_per_hour)
    warnings = []
    if spot_above:
        warnings.append(f"{spot_above} rows have a spot price above the on-demand price (kept as billed)")
    if book.conflicts:
        warnings.append(f"{len(book.conflicts)} region prices had competing SKUs; e.g. used {book.conflicts[0]}")
    regions = sorted({o.region for o in offerings} - book.regions)
    return tuple(out), {
        "rows": len(offerings),
        "on_demand_updated": counts[("on_demand", True)], "on_demand_kept": counts[("on_demand", False)],
        "spot_updated": counts[("spot", True)], "spot_kept": counts[("spot", False)],
        "kept_reasons": tuple(Counter(k.reason for k in kept).most_common()),
        "regions_without_skus": tuple(regions),
        "changed": tuple(changed), "kept": tuple(kept), "warnings": tuple(warnings),
    }


# --------------------------------------------------------------------------------------------
# The API


def make_client(endpoint: str | None = None, *, credentials: Any = None, api_key: str | None = None):
    """A REST ``CloudCatalogClient`` for ``endpoint`` (default: Google's).

    Credentials: ``credentials`` if given; else ``api_key`` if given; else anonymous for a plain-http
    loopback endpoint (a test server); else google-auth's application-default credentials.
    """
    endpoint = (endpoint or DEFAULT_ENDPOINT).strip().rstrip("/")
    parts = urlsplit(endpoint if "://" in endpoint else "https://" + endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        raise UsageError(f"billing endpoint {endpoint!r} is not a URL like https://HOST[:PORT]")
    if parts.scheme == "http" and not is_loopback_host(parts.hostname):
        raise UsageError(f"refusing to send requests for billing data over plain http to {parts.hostname}; use https")
    from google.cloud import billing_v1

    options: dict[str, Any] = {"api_endpoint": endpoint}
    if credentials is None and api_key:
        options["api_key"] = api_key
    elif credentials is None and parts.scheme == "http":
        from google.auth.credentials import AnonymousCredentials

        credentials = AnonymousCredentials()
    elif credentials is None:
        import google.auth
        import google.auth.exceptions

        try:
            credentials, _ = google.auth.default(scopes=list(_SCOPES))
        except google.auth.exceptions.DefaultCredentialsError as e:
            why = one_line(e, 160).split(". ")[0].rstrip(".")  # first sentence; the rest is a long docs pointer
            raise BillingError(
                f"no Google Cloud credentials ({why}): run `gcloud auth application-default login`, "
                "or set CLOUDFIT_BILLING_API_KEY to an API key") from None
    return billing_v1.CloudCatalogClient(credentials=credentials, transport="rest", client_options=options)


def refresh_catalog(base: Any, *, client: Any = None, endpoint: str | None = None, credentials: Any = None,
                    api_key: str | None = None, service_id: str = COMPUTE_ENGINE_SERVICE_ID,
                    timeout_s: float = 60.0) -> tuple[tuple[Offering, ...], RefreshReport]:
    """Reprice every row of ``base`` (a ``Catalog`` or a sequence of ``Offering``) from the billing API.

    ``client`` is a ``billing_v1.CloudCatalogClient`` (built by ``make_client(endpoint, ...)`` when
    None). ``timeout_s`` bounds each request and the retries of transient errors (429/500/503).
    Raises ``BillingError`` if the API fails or no row could be priced at all.
    """
    offerings = tuple(getattr(base, "offerings", base))
    if not offerings:
        raise CatalogError("the base catalog has no offerings to refresh")
    if client is None:
        client = make_client(endpoint, credentials=credentials, api_key=api_key)
    where = str(getattr(client, "api_endpoint", None) or endpoint or DEFAULT_ENDPOINT)
    if "://" not in where:
        where = "https://" + where
    call = _call_options(timeout_s)
    with _ApiErrors(where, service_id):
        service_name = _service_name(client, service_id, call)
        pages, skus = 0, []
        pager = client.list_skus(request={"parent": f"services/{service_id}", "currency_code": "USD",
                                          "page_size": _PAGE_SIZE}, **call)
        for page in pager.pages:
            pages += 1
            skus.extend(page.skus)
    prices, skipped = _read_prices(skus)
    book = PriceBook(prices)
    new, counts = reprice(offerings, book)
    if counts["on_demand_updated"] == 0 and counts["spot_updated"] == 0:
        top = counts["kept_reasons"][0][0] if counts["kept_reasons"] else "no SKUs"
        raise BillingError(f"the {len(skus)} SKUs of service {service_id} ({service_name}) at {where} priced none of "
                           f"the {len(offerings)} catalog rows (e.g. {top}); nothing written")
    warnings = counts.pop("warnings") + ((f"skipped {skipped} SKUs priced per an unexpected unit",) if skipped else ())
    report = RefreshReport(service_id=service_id, service_name=service_name, endpoint=where, sku_pages=pages,
                           skus_read=len(skus), skus_used=len(book.used), warnings=warnings, **counts)
    return new, report


def _call_options(timeout_s: float) -> dict[str, Any]:
    from google.api_core import exceptions as gexc
    from google.api_core import retry as gretry

    transient = gretry.if_exception_type(gexc.ServiceUnavailable, gexc.TooManyRequests, gexc.InternalServerError)
    retry = gretry.Retry(predicate=transient, initial=0.25, maximum=8.0, multiplier=2.0, timeout=timeout_s)
    return {"retry": retry, "timeout": timeout_s}


def _service_name(client: Any, service_id: str, call: dict[str, Any]) -> str:
    for s in client.list_services(request={"page_size": _PAGE_SIZE}, **call):
        if s.service_id == service_id:
            return str(s.display_name)
    raise BillingError(f"service {service_id} is not in the Cloud Billing catalog")


def _read_prices(skus: Iterable[Any]) -> tuple[list[SkuPrice], int]:
    """SkuPrices from API ``Sku`` messages: list-price Compute SKUs of known items, in USD per the right unit."""
    prices, skipped = [], 0
    for s in skus:
        usage = _USAGE.get(s.category.usage_type)
        if usage is None or s.category.resource_family != "Compute" or not s.pricing_info:
            continue
        hit = sku_item(s.description)
        if hit is None:
            continue
        item, rank = hit
        expr = s.pricing_info[-1].pricing_expression  # the API lists pricing in chronological order
        if expr.usage_unit != ("GiBy.h" if item[0] == "ram" else "h"):
            skipped += 1
            continue
        usd = _list_rate(expr.tiered_rates, s.description)
        if usd is None:
            continue
        prices.append(SkuPrice(str(s.sku_id), str(s.description), item, usage, tuple(s.service_regions), usd, rank))
    return prices, skipped


def _list_rate(tiers: Sequence[Any], description: str) -> float | None:
    """The first positive tier's unit price (a leading $0 tier is a free allowance, not the rate)."""
    for t in tiers:
        m = t.unit_price
        if m.currency_code not in ("", "USD"):
            raise BillingError(f"the billing API priced {description!r} in {m.currency_code}, expected USD")
        usd = int(m.units) + int(m.nanos) / 1e9
        if usd > 0:
            return usd
    return None


class _ApiErrors:
    """Map client, auth and transport failures to one-line ``BillingError``s."""

    def __init__(self, where: str, service_id: str) -> None:
        self.where, self.service_id = where, service_id

    def __enter__(self) -> None:
        return None

    def __exit__(self, et, e, tb) -> bool:
        if e is None or isinstance(e, CloudfitError):
            return False
        import google.auth.exceptions as aexc
        import requests
        from google.api_core import exceptions as gexc

        api = f"the Cloud Billing Catalog API at {self.where}"
        if isinstance(e, gexc.RetryError):
            e = e.cause or e
        if isinstance(e, aexc.InvalidOperation):  # a 401 made the session try to refresh anonymous credentials
            msg = f"{api} rejected the request (401: it does not accept anonymous requests)"
        elif isinstance(e, (gexc.Unauthorized, aexc.RefreshError)):  # HTTP 401 (REST maps by status)
            msg = (f"{api} rejected the credentials ({one_line(e, 160)}); check $CLOUDFIT_BILLING_API_KEY or run "
                   "`gcloud auth application-default login`")
        elif isinstance(e, gexc.Forbidden):  # HTTP 403
            msg = (f"permission denied by {api} ({one_line(e, 160)}); enable cloudbilling.googleapis.com in the "
                   "project of your credentials")
        elif isinstance(e, gexc.NotFound):
            msg = f"{api} does not know service {self.service_id} ({one_line(e, 160)})"
        elif isinstance(e, (gexc.ServiceUnavailable, gexc.TooManyRequests, gexc.InternalServerError,
                            gexc.DeadlineExceeded, gexc.RetryError)):
            msg = f"{api} is unavailable ({one_line(e, 160)}); try again later"
        elif isinstance(e, gexc.GoogleAPICallError):
            msg = f"{api} failed: {one_line(e, 160)}"
        elif isinstance(e, (requests.exceptions.RequestException, aexc.TransportError, OSError)):
            msg = f"cannot reach {api} ({_network_reason(e)}); check the network or --billing-endpoint"
        else:
            return False
        raise BillingError(msg) from None




def _network_reason(e: BaseException) -> str:
    text = str(e).lower()
    for needle, reason in (("refused", "connection refused"), ("name or service not known", "host not found"),
                           ("nodename nor servname", "host not found"), ("temporary failure in name", "host not found"),
                           ("timed out", "timed out"), ("ssl", "TLS error")):
        if needle in text:
            return reason
    return type(e).__name__
