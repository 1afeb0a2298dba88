"""`cloudfit catalog refresh`: the real google-cloud-billing client against a fake Cloud Billing
Catalog REST server on 127.0.0.1 (tests/fakes/billing_server.py). Nothing reaches the internet."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from cloudfit import catalog
from cloudfit.catalog import refresh
from cloudfit.errors import CatalogError, UsageError
from cloudfit.catalog import write_catalog
from cloudfit.catalog.refresh import BillingError, PriceBook, SkuPrice, refresh_catalog, sku_item
from cloudfit.types import Offering
from tests.conftest import run_cloudfit
from tests.fakes.billing_server import FakeBillingServer, compute_engine_skus, sku

HEADER = ",".join(catalog.COLUMNS)
BASE_ROWS = [
    "a2-highgpu-1g,A100,1,12,85,us-central1,us-central1-a,2.65389,1.64853",
    "n1-highmem-8,T4,1,8,52,us-central1,us-central1-b,0.82321,0.30432",
    "g2-standard-24,L4,2,24,96,europe-west4,europe-west4-a,2.00000,0.80000",
    "a4-highgpu-8g,B200,8,224,3968,us-central1,us-central1-b,100.00000,40.00000",
    "a3-megagpu-8g,H100-MEGA,8,208,1872,us-central1,us-central1-a,92.21427,28.17013",
    "a3-ultragpu-8g,H200,8,224,2952,asia-south1,asia-south1-b,90.00000,",
    "n1-highmem-8,V100,1,8,52,me-central2,me-central2-a,2.95000,1.20000",
]

# Hand-picked unit prices ($/vCPU-h, $/GiB-h, $/GPU-h), on-demand / Spot.
A2 = (0.031611, 0.004237, 0.012644, 0.001695)
A3 = (0.0295, 0.0025, 0.0089, 0.0008)
A3PLUS = (0.0331, 0.0029, 0.0101, 0.0009)
A3ULTRA = (0.0357, 0.0031, 0.0112, 0.0011)
G2_EU = (0.0275, 0.0032, 0.0110, 0.0013)
N1 = (0.031611, 0.004237, 0.006655, 0.000892)
GPU = {"A100": (2.933908, 1.173563), "T4": (0.35, 0.14), "L4_EU": (0.616, 0.2464), "B200": (11.0, 4.4),
       "H100-MEGA": (10.5, 3.15), "H200": (11.2, 3.9)}


def _host(family_words: str, geo: str, regions: list[str], prices: tuple[float, float, float, float],
          group: tuple[str, str] = ("CPU", "RAM")) -> list[dict]:
    core, ram, spot_core, spot_ram = prices
    return [
        sku(f"{family_words} Core running in {geo}", price=core, regions=regions, resource_group=group[0]),
        sku(f"{family_words} Ram running in {geo}", price=ram, regions=regions, resource_group=group[1], unit="GiBy.h"),
        sku(f"Spot Preemptible {family_words} Core running in {geo}", price=spot_core, regions=regions,
            usage_type="Preemptible", resource_group=group[0]),
        sku(f"Spot Preemptible {family_words} Ram running in {geo}", price=spot_ram, regions=regions,
            usage_type="Preemptible", resource_group=group[1], unit="GiBy.h"),
    ]


def _gpu(name: str, geo: str, regions: list[str], prices: tuple[float, float], spot_prefix: bool = False) -> list[dict]:
    od, spot = prices
    spot_desc = f"Spot Preemptible {name} running in {geo}" if spot_prefix else f"{name} attached to Spot Preemptible VMs running in {geo}"
    return [sku(f"{name} running in {geo}", price=od, regions=regions),
            sku(spot_desc, price=spot, regions=regions, usage_type="Preemptible")]


US, EU, IN = ["us-central1", "us-east1"], ["europe-west4", "europe-west1"], ["asia-south1"]
NOISE = [
    # Not list prices of a running VM: each would change a price if it were matched.
    sku("Commitment v1: Nvidia Tesla A100 GPU running in Americas for 1 Year", price=0.9, regions=US, usage_type="Commit1Yr"),
    sku("Nvidia Tesla T4 Virtual Workstation GPU running in Americas", price=0.55, regions=US),
    sku("Reserved Nvidia H100 80GB Mega GPU in Americas", price=0.0, regions=US),
    sku("Nvidia L4 GPU running in Netherlands (DWS Defined Duration)", price=0.3, regions=EU),
    sku("N1 Custom Instance Core running in Americas", price=0.5, regions=US, resource_group="N1Standard"),
    sku("A2 Instance Core running in Americas", price=0.5, regions=US, resource_family="Storage"),
    sku("A2 Instance Ram running in Americas", price=0.5, regions=US, unit="GiBy.mo"),  # not an hourly rate
    sku("Storage PD Capacity in Americas", price=0.04, regions=US, resource_group="SSD", unit="GiBy.mo"),
]


def billing_skus(*, drop: tuple[str, ...] = ()) -> list[dict]:
    """The fake's price list for BASE_ROWS' regions except me-central2 (absent from billing)."""
    skus = (
        _host("A2 Instance", "Americas", US, A2)
        + _host("A3 Instance", "Americas", US, A3)  # must NOT price a3-megagpu (that is A3Plus)
        + _host("A3Plus Instance", "Americas", US, A3PLUS)
        + _host("A3Ultra Instance", "Mumbai", IN, A3ULTRA)
        + _host("G2 Instance", "EMEA", EU, G2_EU)
        + _host("N1 Predefined Instance", "Americas", US, N1, group=("N1Standard", "N1Standard"))
        + _gpu("Nvidia Tesla A100 GPU", "Americas", US, GPU["A100"])
        + _gpu("Nvidia Tesla T4 GPU", "Americas", US, GPU["T4"], spot_prefix=True)  # older Spot wording
        + _gpu("Nvidia L4 GPU", "EMEA", EU, GPU["L4_EU"])
        + _gpu("A4 Nvidia B200 (1 gpu slice)", "Americas", US, GPU["B200"])
        + _gpu("Nvidia H100 80GB Mega GPU", "Americas", US, GPU["H100-MEGA"])
        + _gpu("H200 141GB GPU", "Mumbai", IN, GPU["H200"])
        + NOISE
    )
    return [s for s in skus if s["description"] not in drop]


def host_price(vcpus, mem, prices, spot=False):
    core, ram = (prices[2], prices[3]) if spot else (prices[0], prices[1])
    return vcpus * core + mem * ram


@pytest.fixture(autouse=True)
def _no_real_google(monkeypatch):
    monkeypatch.delenv("CLOUDFIT_BILLING_ENDPOINT", raising=False)
    monkeypatch.delenv("CLOUDFIT_BILLING_API_KEY", raising=False)
    # If anything tried application-default credentials it fails here, offline, instead of probing the network.
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/cloudfit-test-credentials.json")


@pytest.fixture
def base_csv(tmp_path) -> Path:
    p = tmp_path / "base.csv"
    p.write_text("\n".join([HEADER, *BASE_ROWS]) + "\n")
    return p


def by_key(offerings) -> dict[tuple[str, str], Offering]:
    return {(o.machine_type, o.zone): o for o in offerings}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------


def test_prices_follow_the_skus_host_plus_gpu_on_demand_and_spot(base_csv):
    base = catalog.load(base_csv)
    with FakeBillingServer(billing_skus()) as fake:
        new, report = refresh_catalog(base, endpoint=fake.url)
        url = fake.url
    got = by_key(new)
    assert [(o.machine_type, o.zone, o.accelerator, o.accelerators_per_node, o.vcpus, o.memory_gib) for o in new] == \
           [(o.machine_type, o.zone, o.accelerator, o.accelerators_per_node, o.vcpus, o.memory_gib) for o in base.offerings]

    a2 = got[("a2-highgpu-1g", "us-central1-a")]
    assert a2.price_per_hour == pytest.approx(host_price(12, 85, A2) + GPU["A100"][0], abs=1e-5)
    assert a2.spot_price_per_hour == pytest.approx(host_price(12, 85, A2, spot=True) + GPU["A100"][1], abs=1e-5)
    # 12 × 0.031611 + 85 × 0.004237 + 2.933908, worked by hand
    assert a2.price_per_hour == pytest.approx(0.379332 + 0.360145 + 2.933908, abs=1e-5)

    n1 = got[("n1-highmem-8", "us-central1-b")]
    assert n1.price_per_hour == pytest.approx(host_price(8, 52, N1) + 0.35, abs=1e-5)
    assert n1.spot_price_per_hour == pytest.approx(host_price(8, 52, N1, spot=True) + 0.14, abs=1e-5)

    g2 = got[("g2-standard-24", "europe-west4-a")]
    assert g2.price_per_hour == pytest.approx(host_price(24, 96, G2_EU) + 2 * GPU["L4_EU"][0], abs=1e-5)
    assert g2.spot_price_per_hour == pytest.approx(host_price(24, 96, G2_EU, spot=True) + 2 * GPU["L4_EU"][1], abs=1e-5)

    a4 = got[("a4-highgpu-8g", "us-central1-b")]  # the B200 slice carries the whole VM
    assert (a4.price_per_hour, a4.spot_price_per_hour) == (pytest.approx(88.0), pytest.approx(35.2))

    mega = got[("a3-megagpu-8g", "us-central1-a")]  # A3Plus host SKUs, not A3's
    assert mega.price_per_hour == pytest.approx(host_price(208, 1872, A3PLUS) + 8 * 10.5, abs=1e-5)
    assert mega.spot_price_per_hour == pytest.approx(host_price(208, 1872, A3PLUS, spot=True) + 8 * 3.15, abs=1e-5)

    h200 = got[("a3-ultragpu-8g", "asia-south1-b")]  # spot was empty in the base, billing has one now
    assert h200.price_per_hour == pytest.approx(host_price(224, 2952, A3ULTRA) + 8 * 11.2, abs=1e-5)
    assert h200.spot_price_per_hour == pytest.approx(host_price(224, 2952, A3ULTRA, spot=True) + 8 * 3.9, abs=1e-5)

    assert report.rows == 7 and report.rows_dropped == 0
    assert (report.on_demand_updated, report.spot_updated) == (6, 6)
    assert report.service_name == "Compute Engine" and report.endpoint == url
    assert {(c.machine_type, c.zone) for c in report.changed} == set(got) - {("n1-highmem-8", "me-central2-a")}
    # A2, A3Plus, A3Ultra, G2, N1 core+RAM on-demand+spot (20) + 6 GPUs × 2; the A3 family and the noise unused
    assert report.skus_used == 32 and report.skus_read == len(billing_skus())
    assert report.warnings == ("skipped 1 SKUs priced per an unexpected unit",)


def test_skus_that_are_not_list_prices_change_nothing(base_csv):
    base = catalog.load(base_csv)
    with FakeBillingServer(billing_skus()) as fake:
        with_noise, _ = refresh_catalog(base, endpoint=fake.url)
    with FakeBillingServer([s for s in billing_skus() if s not in NOISE]) as fake:
        clean, _ = refresh_catalog(base, endpoint=fake.url)
    assert with_noise == clean


@pytest.mark.parametrize("description, item", [
    ("Nvidia Tesla T4 GPU running in Americas", ("gpu", "T4")),
    ("Spot Preemptible Nvidia Tesla T4 GPU running in Belgium", ("gpu", "T4")),
    ("Nvidia H100 80GB GPU attached to Spot Preemptible VMs running in Americas", ("gpu", "H100")),
    ("Nvidia A100 80GB GPU running in Americas", ("gpu", "A100-80GB")),
    ("Nvidia Tesla A100 80GB GPU running in Los Angeles", ("gpu", "A100-80GB")),
    ("Nvidia Tesla A100 GPU running in Americas", ("gpu", "A100")),
    ("Nvidia H100 Mega 80GB GPU running in Tokyo", ("gpu", "H100-MEGA")),
    ("H200 141GB GPU running in Netherlands", ("gpu", "H200")),
    ("A4 Nvidia B200 (1 gpu slice) running in Americas", ("gpu", "B200")),
    ("N1 Predefined Instance Core running in Frankfurt", ("core", "n1predefined")),
    ("Preemptible N1 Predefined Instance Ram running in Americas", ("ram", "n1predefined")),
    ("Spot Preemptible A3Ultra Instance Ram running in Americas", ("ram", "a3ultra")),
    ("G2 Instance Core running in Zurich", ("core", "g2")),
    ("Commitment v1: A2 Cpu in Americas for 1 Year", None),
    ("Nvidia Tesla T4 Virtual Workstation GPU running in Americas", None),
    ("Nvidia H100 80GB Plus GPU running in Americas", None),  # unclear product: not guessed
    ("N1 Custom Instance Core running in Americas", None),
    ("Licensing Fee for Windows Server on VM with 8 VCPU", None),
])
def test_sku_descriptions_map_to_catalog_items(description, item):
    hit = sku_item(description)
    assert (hit[0] if hit else None) == item


def test_pagination_reads_every_page(base_csv):
    base = catalog.load(base_csv)
    with FakeBillingServer(billing_skus(), max_page_size=4) as fake:
        paged, report = refresh_catalog(base, endpoint=fake.url)
        pages = fake.sku_requests()
    n = len(billing_skus())
    assert report.sku_pages == len(pages) == -(-n // 4) and report.skus_read == n
    assert pages[0].query["pageSize"] == ["5000"] and "pageToken" not in pages[0].query
    assert all(p.query.get("pageToken") for p in pages[1:])
    assert pages[0].query["currencyCode"] == ["USD"]
    with FakeBillingServer(billing_skus(), max_page_size=1000) as fake:
        single, one = refresh_catalog(base, endpoint=fake.url)
    assert one.sku_pages == 1 and single == paged


def test_region_missing_in_billing_keeps_old_prices_and_is_reported(base_csv):
    base = catalog.load(base_csv)
    with FakeBillingServer(billing_skus()) as fake:
        new, report = refresh_catalog(base, endpoint=fake.url)
    old = by_key(base.offerings)[("n1-highmem-8", "me-central2-a")]
    assert by_key(new)[("n1-highmem-8", "me-central2-a")] == old
    assert report.regions_without_skus == ("me-central2",)
    assert ("no SKU lists region me-central2 (on-demand kept)", 1) in report.kept_reasons
    assert ("no SKU lists region me-central2 (spot kept)", 1) in report.kept_reasons
    assert [(k.machine_type, k.zone, k.price) for k in report.kept] == [
        ("n1-highmem-8", "me-central2-a", "on_demand"), ("n1-highmem-8", "me-central2-a", "spot")]
    assert (report.on_demand_kept, report.spot_kept, report.rows_dropped) == (1, 1, 0)


def test_a_missing_spot_sku_keeps_the_old_spot_price_only(base_csv):
    base = catalog.load(base_csv)
    with FakeBillingServer(billing_skus(drop=("Nvidia L4 GPU attached to Spot Preemptible VMs running in EMEA",))) as fake:
        new, report = refresh_catalog(base, endpoint=fake.url)
    g2 = by_key(new)[("g2-standard-24", "europe-west4-a")]
    assert g2.price_per_hour == pytest.approx(host_price(24, 96, G2_EU) + 2 * GPU["L4_EU"][0], abs=1e-5)
    assert g2.spot_price_per_hour == 0.8  # the base catalog's
    assert ("no Spot L4 GPU SKU in europe-west4 (spot kept)", 1) in report.kept_reasons


def test_a_refresh_that_prices_nothing_is_an_error_and_writes_nothing(cli, base_csv, tmp_path):
    out = tmp_path / "new.csv"
    with FakeBillingServer(NOISE) as fake:
        with pytest.raises(BillingError, match="priced none of the 7 catalog rows"):
            refresh_catalog(catalog.load(base_csv), endpoint=fake.url)
        r = cli("catalog", "refresh", "--out", str(out), "--base", str(base_csv), "--billing-endpoint", fake.url)
    assert r.exit_code == 1 and "nothing written" in r.stderr and not out.exists()


def test_unreachable_endpoint_is_one_clean_line_and_leaves_no_file(cli, base_csv, tmp_path):
    out = tmp_path / "out" / "new.csv"
    url = f"http://127.0.0.1:{closed_port()}"
    r = cli("catalog", "refresh", "--out", str(out), "--base", str(base_csv), "--billing-endpoint", url)
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr == f"cloudfit: error: cannot reach the Cloud Billing Catalog API at {url} (connection refused); " \
                       "check the network or --billing-endpoint\n"
    assert not out.exists() and not out.parent.exists()


@pytest.mark.parametrize("status, api_key, fake_msg, message", [
    (401, "", "Request had invalid authentication credentials.",
     "rejected the request (401: it does not accept anonymous requests)"),
    (401, "bad-key", "API key not valid. Please pass a valid API key.",
     "rejected the credentials (401 API key not valid. Please pass a valid API key.); check $CLOUDFIT_BILLING_API_KEY"),
    (403, "", "Cloud Billing API has not been used in project 1.",
     "permission denied by the Cloud Billing Catalog API at http://127.0.0.1:"),
])
def test_auth_failures_are_clean_errors(base_csv, tmp_path, status, api_key, fake_msg, message):
    out = tmp_path / "new.csv"
    out.write_text("previous contents\n")
    with FakeBillingServer(billing_skus(), fail_status=status, fail_message=fake_msg) as fake:
        r = run_cloudfit("catalog", "refresh", "--out", str(out), "--base", str(base_csv),
                         env={"CLOUDFIT_BILLING_ENDPOINT": fake.url, "CLOUDFIT_BILLING_API_KEY": api_key})
    assert r.returncode == 1 and message in r.stderr and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1
    assert out.read_text() == "previous contents\n"
    assert {p.name for p in tmp_path.iterdir()} == {"base.csv", "new.csv"}  # no temporary file left


def test_transient_unavailability_is_retried(base_csv):
    with FakeBillingServer(billing_skus(), transient_failures=2) as fake:
        _, report = refresh_catalog(catalog.load(base_csv), endpoint=fake.url)
        assert len(fake.requests) == 2 + 2  # two 503s, then services and one SKU page
    assert report.on_demand_updated == 6


def test_persistent_unavailability_gives_up_within_the_timeout(base_csv):
    with FakeBillingServer(billing_skus(), fail_status=503, fail_message="Backend down.") as fake:
        with pytest.raises(BillingError, match=r"is unavailable \(503 Backend down.\); try again later"):
            refresh_catalog(catalog.load(base_csv), endpoint=fake.url, timeout_s=1.0)
        assert len(fake.requests) > 1  # retried before giving up


def test_unknown_service_and_foreign_currency_are_errors(base_csv):
    base = catalog.load(base_csv)
    with FakeBillingServer(billing_skus()) as fake:
        with pytest.raises(BillingError, match="service 0000-0000-0000 is not in the Cloud Billing catalog"):
            refresh_catalog(base, endpoint=fake.url, service_id="0000-0000-0000")
    with FakeBillingServer([sku("Nvidia Tesla T4 GPU running in Americas", price=0.3, regions=US, currency="EUR")]) as fake:
        with pytest.raises(BillingError, match="in EUR, expected USD"):
            refresh_catalog(base, endpoint=fake.url)


def test_free_tier_then_rate_uses_the_rate_and_competing_skus_are_deterministic():
    hit = [SkuPrice("B", "Nvidia Tesla A100 80GB GPU running in Americas", ("gpu", "A100-80GB"), "on_demand", ("us-central1",), 4.0, 1),
           SkuPrice("A", "Nvidia A100 80GB GPU running in Americas", ("gpu", "A100-80GB"), "on_demand", ("us-central1", "us-east1"), 3.9, 0)]
    book = PriceBook(hit)
    assert book.get(("gpu", "A100-80GB"), "on_demand", "us-central1").sku_id == "A"  # preferred name wins
    assert len(book.conflicts) == 1
    with FakeBillingServer([sku("Nvidia Tesla T4 GPU running in Americas", price=0, regions=US, tiers=[(0, 0.0), (100, 0.33)])]) as fake:
        from google.cloud import billing_v1

        client = refresh.make_client(fake.url)
        [s] = list(client.list_skus(parent="services/6F81-5844-456A"))
        assert isinstance(s, billing_v1.Sku)
    prices, _ = refresh._read_prices([s])
    assert prices[0].usd_per_unit == pytest.approx(0.33)


def test_api_key_is_sent_and_plain_http_elsewhere_is_refused():
    with FakeBillingServer(billing_skus()) as fake:
        client = refresh.make_client(fake.url, api_key="k-123")
        list(client.list_services())
        assert fake.requests[-1].headers.get("x-goog-api-key") == "k-123"
    with pytest.raises(UsageError, match="plain http to 10.1.2.3"):
        refresh.make_client("http://10.1.2.3:8080")
    with pytest.raises(UsageError, match="not a URL"):
        refresh.make_client("ftp://example.com")


def test_no_credentials_is_a_clean_error(cli, base_csv, tmp_path):
    r = cli("catalog", "refresh", "--out", str(tmp_path / "x.csv"), "--base", str(base_csv))
    assert r.exit_code == 1
    assert r.stderr.startswith("cloudfit: error: no Google Cloud credentials (File /nonexistent/cloudfit-test-credentials.json")


def test_write_catalog_validates_before_replacing(tmp_path):
    out = tmp_path / "cat.csv"
    out.write_text("old\n")
    good = catalog.load().offerings[:3]
    bad = good + (Offering("a2-highgpu-1g", "A100", 1, 12, 85, "us-central1", "us-central1-a", -1.0, None),)
    with pytest.raises(CatalogError, match=r"failed validation, .*cat.csv not written: .*:5: price_per_hour must be positive"):
        write_catalog(bad, out)
    assert out.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["cat.csv"]
    written = write_catalog(good, out)
    assert written.offerings == good and written.path == str(out)
    assert written.digest == catalog.load(out).digest
    assert oct(out.stat().st_mode & 0o777) != oct(0o600)


# --------------------------------------------------------------------------------------------
# End to end on the shipped catalog

HOST = {"a2": (0.031611, 0.004237, 0.012644, 0.001695), "a3": (0.0295, 0.0025, 0.0089, 0.0008),
        "a3plus": (0.0331, 0.0029, 0.0101, 0.0009), "a3ultra": (0.0357, 0.0031, 0.0112, 0.0011),
        "g2": (0.024988, 0.002927, 0.009995, 0.001171), "n1": (0.031611, 0.004237, 0.006655, 0.000892)}
GPUS = {"T4": (0.35, 0.14), "P4": (0.6, 0.24), "P100": (1.46, 0.584), "V100": (2.48, 0.992), "A100": (2.933908, 1.173563),
        "A100-80GB": (3.92, 1.568), "H100": (9.796, 3.918), "H100-MEGA": (10.5, 4.2), "H200": (10.9, 4.36),
        "B200": (11.0, 4.4), "L4": (0.56, 0.224)}
GEO = {"Americas": 1.0, "EMEA": 1.1, "APAC": 1.25}
FAMILY = [("a3-megagpu", "a3plus"), ("a3-ultragpu", "a3ultra"), ("a4", None), ("a2", "a2"), ("a3", "a3"), ("g2", "g2"), ("n1", "n1")]


def expected(o: Offering, spot: bool) -> float:
    from tests.fakes.billing_server import geo_of

    f = GEO[geo_of(o.region)]
    fam = next(fam for prefix, fam in FAMILY if o.machine_type.startswith(prefix + "-"))
    host = 0.0 if fam is None else host_price(o.vcpus, o.memory_gib, HOST[fam], spot) * f
    return host + o.accelerators_per_node * GPUS[o.accelerator][1 if spot else 0] * f


def test_cli_refresh_of_the_shipped_catalog_in_process(cli, tmp_path):
    base = catalog.load()
    gone = "southamerica-east1"
    assert gone in base.regions
    out = tmp_path / "gcp-refreshed.csv"
    with FakeBillingServer(compute_engine_skus([r for r in base.regions if r != gone], host=HOST, gpu=GPUS, geo_factor=GEO),
                           max_page_size=60) as fake:
        r = cli("catalog", "refresh", "--out", str(out), "--billing-endpoint", fake.url, "--json")
    assert r.exit_code == 0, r.stderr
    summary = json.loads(r.stdout)
    new = catalog.load(out)
    assert summary["out"] == str(out) and summary["digest"] == new.digest and summary["rows_dropped"] == 0
    assert [(o.machine_type, o.accelerator, o.accelerators_per_node, o.vcpus, o.memory_gib, o.zone) for o in new.offerings] == \
           [(o.machine_type, o.accelerator, o.accelerators_per_node, o.vcpus, o.memory_gib, o.zone) for o in base.offerings]
    n_gone = sum(o.region == gone for o in base.offerings)
    assert n_gone > 0 and summary["regions_without_skus"] == [gone]
    assert summary["on_demand_updated"] == summary["spot_updated"] == len(base) - n_gone
    assert summary["kept_reasons"] == [{"reason": f"no SKU lists region {gone} (on-demand kept)", "prices": n_gone},
                                       {"reason": f"no SKU lists region {gone} (spot kept)", "prices": n_gone}]
    assert summary["sku_pages"] > 1 and summary["rows_changed"] == len(summary["changed"])
    for old, o in zip(base.offerings, new.offerings):
        if o.region == gone:
            assert o == old
        else:
            assert o.price_per_hour == pytest.approx(expected(o, False), abs=1e-5), o
            assert o.spot_price_per_hour == pytest.approx(expected(o, True), abs=1e-5), o


def test_cli_refresh_as_a_real_subprocess(tmp_path, base_csv):
    out = tmp_path / "refreshed.csv"
    with FakeBillingServer(billing_skus()) as fake:
        r = run_cloudfit("catalog", "refresh", "--out", str(out), "--base", str(base_csv),
                         env={"CLOUDFIT_BILLING_ENDPOINT": fake.url, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert "Repriced 7 offerings of base.csv from Compute Engine SKUs." in r.stdout and "on-demand: 6 from billing, 1 kept;" in r.stdout
    assert "no SKU lists region me-central2 (on-demand kept)" in r.stdout
    assert f"Wrote {out}" in r.stdout
    assert by_key(catalog.load(out).offerings)[("a4-highgpu-8g", "us-central1-b")].price_per_hour == 88.0
