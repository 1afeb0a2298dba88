"""A fake Cloud Billing Catalog REST API (v1) on 127.0.0.1, for the real google-cloud-billing client.

It answers ``GET /v1/services`` and ``GET /v1/services/{id}/skus`` in the API's JSON wire format
(camelCase; int64 ``units`` as strings), pages with ``pageSize``/``pageToken``/``nextPageToken``,
records every request, and can fail on purpose (401/403/503 with Google's error body).

    with FakeBillingServer(skus=[sku("Nvidia L4 GPU running in Americas", price=0.56, regions=["us-central1"])]) as fake:
        client = CloudCatalogClient(credentials=AnonymousCredentials(), transport="rest",
                                    client_options={"api_endpoint": fake.url})

``compute_engine_skus(...)`` builds a synthetic Compute Engine price list (host core/RAM SKUs per
machine family + GPU SKUs, on-demand and Spot) with the real descriptions' wording.
"""

from __future__ import annotations

import base64
import json
import threading
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterable, Mapping
from urllib.parse import parse_qs, urlsplit

COMPUTE_ENGINE = "6F81-5844-456A"

_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
           429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}


def money(price: float) -> dict[str, Any]:
    """A ``google.type.Money`` in JSON: whole ``units`` (int64 → string) and ``nanos``."""
    nanos_total = round(price * 1e9)
    return {"currencyCode": "USD", "units": str(nanos_total // 10**9), "nanos": nanos_total % 10**9}


_counter = iter(range(1, 10**9))


def sku(description: str, *, price: float, regions: Iterable[str], usage_type: str = "OnDemand",
        resource_group: str = "GPU", unit: str = "h", resource_family: str = "Compute",
        sku_id: str | None = None, currency: str = "USD", tiers: Iterable[tuple[float, float]] | None = None) -> dict:
    """One SKU as the API sends it. ``tiers`` = ((start_usage_amount, unit_price), …) overrides ``price``."""
    sid = sku_id or f"F{next(_counter):03X}-{zlib.crc32(description.encode()) % 0xFFFF:04X}-{len(description):04X}"
    rates = [{"startUsageAmount": start, "unitPrice": {**money(p), "currencyCode": currency}}
             for start, p in (tiers if tiers is not None else [(0, price)])]
    unit_desc = {"h": "hour", "GiBy.h": "gibibyte hour"}.get(unit, unit)
    return {
        "name": f"services/{COMPUTE_ENGINE}/skus/{sid}",
        "skuId": sid,
        "description": description,
        "category": {"serviceDisplayName": "Compute Engine", "resourceFamily": resource_family,
                     "resourceGroup": resource_group, "usageType": usage_type},
        "serviceRegions": list(regions),
        "pricingInfo": [{
            "summary": "",
            "pricingExpression": {"usageUnit": unit, "usageUnitDescription": unit_desc, "baseUnit": "s",
                                  "baseUnitDescription": "second", "baseUnitConversionFactor": 3600,
                                  "displayQuantity": 1, "tieredRates": rates},
            "currencyConversionRate": 1,
            "effectiveTime": "2026-11-01T08:00:00.000Z",
        }],
        "serviceProviderName": "Google",
    }


# Wording of the real SKUs: host "<Family> Instance Core|Ram running in <geo>", Spot hosts prefixed
# "Spot Preemptible "; GPUs "<name> running in <geo>", Spot GPUs "<name> attached to Spot Preemptible VMs running in <geo>".
HOST_FAMILY_WORDS = {"a2": "A2 Instance", "a3": "A3 Instance", "a3plus": "A3Plus Instance",
                     "a3ultra": "A3Ultra Instance", "g2": "G2 Instance", "n1": "N1 Predefined Instance"}
GPU_WORDS = {"T4": "Nvidia Tesla T4 GPU", "P4": "Nvidia Tesla P4 GPU", "P100": "Nvidia Tesla P100 GPU",
             "V100": "Nvidia Tesla V100 GPU", "A100": "Nvidia Tesla A100 GPU", "A100-80GB": "Nvidia A100 80GB GPU",
             "H100": "Nvidia H100 80GB GPU", "H100-MEGA": "Nvidia H100 80GB Mega GPU", "H200": "H200 141GB GPU",
             "B200": "A4 Nvidia B200 (1 gpu slice)", "L4": "Nvidia L4 GPU"}


def geo_of(region: str) -> str:
    if region.startswith(("us-", "northamerica-", "southamerica-")):
        return "Americas"
    if region.startswith(("europe-", "me-", "africa-")):
        return "EMEA"
    return "APAC"


def compute_engine_skus(regions: Iterable[str], *, host: Mapping[str, tuple[float, float, float, float]],
                        gpu: Mapping[str, tuple[float, float]], geo_factor: Mapping[str, float] | None = None) -> list[dict]:
    """A synthetic Compute Engine price list, one SKU per (item, usage type, geo) listing that geo's regions.

    ``host[family] = (core $/vCPU-h, RAM $/GiB-h, spot core, spot RAM)``; ``gpu[name] = ($/GPU-h, spot)``;
    every price in a geo is multiplied by ``geo_factor[geo]`` (default 1).
    """
    by_geo: dict[str, list[str]] = {}
    for r in regions:
        by_geo.setdefault(geo_of(r), []).append(r)
    out = []
    for geo, regs in sorted(by_geo.items()):
        f = (geo_factor or {}).get(geo, 1.0)
        for fam, (core, ram, spot_core, spot_ram) in host.items():
            words = HOST_FAMILY_WORDS[fam]
            group = ("N1Standard", "N1Standard") if fam == "n1" else ("CPU", "RAM")
            for prefix, usage, c, m in (("", "OnDemand", core, ram), ("Spot Preemptible ", "Preemptible", spot_core, spot_ram)):
                out.append(sku(f"{prefix}{words} Core running in {geo}", price=c * f, regions=regs, usage_type=usage,
                               resource_group=group[0]))
                out.append(sku(f"{prefix}{words} Ram running in {geo}", price=m * f, regions=regs, usage_type=usage,
                               resource_group=group[1], unit="GiBy.h"))
        for name, (od, spot) in gpu.items():
            words = GPU_WORDS[name]
            out.append(sku(f"{words} running in {geo}", price=od * f, regions=regs))
            out.append(sku(f"{words} attached to Spot Preemptible VMs running in {geo}", price=spot * f, regions=regs,
                           usage_type="Preemptible"))
    return out


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str] = field(default_factory=dict)


class FakeBillingServer:
    """The fake API in a background thread. ``max_page_size`` caps pages (the client asks for more)."""

    def __init__(self, skus: list[dict] | None = None, *, services: list[dict] | None = None,
                 max_page_size: int = 100, fail_status: int | None = None, fail_message: str = "",
                 transient_failures: int = 0) -> None:
        self.skus = list(skus or [])
        self.services = services if services is not None else [
            {"name": f"services/{COMPUTE_ENGINE}", "serviceId": COMPUTE_ENGINE, "displayName": "Compute Engine",
             "businessEntityName": "businessEntities/GCP"},
            {"name": "services/E000-3F24-B8AA", "serviceId": "E000-3F24-B8AA", "displayName": "Cloud TPU",
             "businessEntityName": "businessEntities/GCP"},
        ]
        self.max_page_size = max_page_size
        self.fail_status = fail_status
        self.fail_message = fail_message or "request failed on purpose"
        self.transient_failures = transient_failures  # this many 503s before answering
        self.requests: list[Seen] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> "FakeBillingServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802 (http.server naming)
                status, body = server._answer(self)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # keep test output clean
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="fake-billing", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> "FakeBillingServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def sku_requests(self) -> list[Seen]:
        return [r for r in self.requests if r.path.endswith("/skus")]

    # -- the API ---------------------------------------------------------------------------
    def _answer(self, req: BaseHTTPRequestHandler) -> tuple[int, dict]:
        parts = urlsplit(req.path)
        query = parse_qs(parts.query)
        with self._lock:
            self.requests.append(Seen("GET", parts.path, query, {k.lower(): v for k, v in req.headers.items()}))
            if self.transient_failures > 0:
                self.transient_failures -= 1
                return _error(503, "The service is currently unavailable.")
        if self.fail_status is not None:
            return _error(self.fail_status, self.fail_message)
        path = parts.path.rstrip("/")
        if path == "/v1/services":
            return self._page(self.services, "services", query)
        segs = path.split("/")
        if len(segs) == 5 and segs[1:3] == ["v1", "services"] and segs[4] == "skus":
            if segs[3] not in {s["serviceId"] for s in self.services}:
                return _error(404, f"Service {segs[3]} not found.")
            currency = (query.get("currencyCode") or ["USD"])[0]
            if currency != "USD":
                return _error(400, f"Currency {currency} is not supported by this fake.")
            return self._page(self.skus if segs[3] == COMPUTE_ENGINE else [], "skus", query)
        return _error(404, f"No route for {parts.path}.")

    def _page(self, items: list[dict], key: str, query: dict[str, list[str]]) -> tuple[int, dict]:
        size = int((query.get("pageSize") or [str(self.max_page_size)])[0]) or self.max_page_size
        size = min(size, self.max_page_size)
        token = (query.get("pageToken") or [""])[0]
        try:
            start = int(base64.urlsafe_b64decode(token.encode()).decode().removeprefix("offset:")) if token else 0
        except (ValueError, UnicodeDecodeError):
            return _error(400, f"Invalid page token {token!r}.")
        end = start + size
        body: dict[str, Any] = {key: items[start:end]}
        body["nextPageToken"] = base64.urlsafe_b64encode(f"offset:{end}".encode()).decode() if end < len(items) else ""
        return 200, body


def _error(code: int, message: str) -> tuple[int, dict]:
    return code, {"error": {"code": code, "message": message, "status": _STATUS.get(code, "UNKNOWN")}}
