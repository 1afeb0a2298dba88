"""``cloudfit catalog …``: browse the offering catalog and refresh its prices."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from cloudfit.cli.render import console, money, print_json

app = typer.Typer(help="Browse GPU offerings and their prices; refresh prices from the Cloud Billing API.", no_args_is_help=True)

CatalogOpt = typer.Option(None, "--catalog", help="Catalog CSV (default: the shipped GCP catalog).", dir_okay=False)
CloudOpt = typer.Option(None, "--cloud", "--clouds",
                        help="Clouds, comma-separated: gcp, aws, lambda, runpod, nebius, or all (default: gcp).")


def _load(catalog_path, cloud):
    """The catalog of ``cloud`` (parsed as ``recommend --clouds``), and whether it spans several clouds."""
    from cloudfit import catalog
    from cloudfit.cli.options import split
    from cloudfit.workload import parse_clouds

    clouds = parse_clouds(None if cloud is None else split(cloud))
    return catalog.load(catalog_path, clouds=clouds), clouds != ("gcp",)


@app.command("list")
def list_(
    accelerator: Optional[list[str]] = typer.Option(None, "--accelerator", "-a", help="Accelerator name or glob (repeatable), e.g. A100 or 'H*'."),
    region: Optional[list[str]] = typer.Option(None, "--region", "-r", help="Region name or glob (repeatable), e.g. us-central1 or 'europe-*'."),
    spot: bool = typer.Option(False, "--spot", help="Only offerings with a spot price, sorted by it."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON to stdout."),
    catalog_path: Optional[Path] = CatalogOpt,
    cloud: Optional[list[str]] = CloudOpt,
) -> None:
    """List offerings (machine type × accelerators × zone) with on-demand and spot prices."""
    cat, _ = _load(catalog_path, cloud)
    cat = cat.filter(accelerators=accelerator or (), regions=region or (), spot=spot)
    key = (lambda o: (o.spot_price_per_hour, o.zone)) if spot else (lambda o: (o.price_per_hour, o.zone))
    offs = sorted(cat.offerings, key=key)
    if as_json:
        print_json([o.to_dict() for o in offs])
        return
    from cloudfit.cli.table import Column, fit, print_table

    names = ", ".join(Path(x).name for x in cat.path.split(" + "))
    cols = [Column("machine type"), Column("accelerators"), Column("vCPUs", "right", keep=1),
            Column("memory GiB", "right", keep=2), Column("zone"), Column("$/h", "right"), Column("spot $/h", "right")]
    rows = [[o.machine_type, f"{o.accelerators_per_node}× {o.accelerator}", f"{o.vcpus:g}", f"{o.memory_gib:g}",
             o.zone if o.cloud == "gcp" else f"{o.cloud}:{o.zone}", money(o.price_per_hour), money(o.spot_price_per_hour)]
            for o in offs]
    con = console()
    t, dropped = fit(f"{len(offs)} offerings ({names})", cols, rows, con.width)  # columns dropped, never cut
    print_table(con, t)
    if dropped:
        con.print(f"[dim](left out at {con.width} columns: {', '.join(dropped)}; --json shows them)[/dim]")


@app.command("gpus")
def gpus(
    as_json: bool = typer.Option(False, "--json", help="Print JSON to stdout."),
    catalog_path: Optional[Path] = CatalogOpt,
    wide: bool = typer.Option(False, "--wide", help="Show every column whatever the terminal width."),
    cloud: Optional[list[str]] = CloudOpt,
) -> None:
    """Per accelerator (and cloud): counts per VM and the cheapest on-demand and spot $/GPU-hour, and where."""
    from cloudfit.catalog import hardware

    from cloudfit.catalog.outliers import spot_outliers

    cat, multi = _load(catalog_path, cloud)
    outlier = {id(o) for o, bad in zip(cat.offerings, spot_outliers(cat.offerings)) if bad}
    rows = []
    keys = sorted({(o.accelerator, o.cloud if multi else "") for o in cat.offerings},
                  key=lambda k: (hardware.get(k[0]).year, k[0], k[1]))
    for acc, where in keys:
        offs = [o for o in cat.offerings if o.accelerator == acc and (not multi or o.cloud == where)]
        od = min(offs, key=lambda o: (o.price_per_hour / o.accelerators_per_node, o.zone))
        # outlier spot prices are left out, as recommend leaves them out (cloudfit.catalog.outliers)
        spots = [o for o in offs if o.spot_price_per_hour is not None and id(o) not in outlier]
        sp = min(spots, key=lambda o: (o.spot_price_per_hour / o.accelerators_per_node, o.zone)) if spots else None
        spec = hardware.get(acc)
        rows.append({
            **({"cloud": where} if multi else {}),
            "accelerator": acc,
            "memory_gib": spec.memory_gib,
            "counts_per_vm": sorted({o.accelerators_per_node for o in offs}),
            "regions": len({o.region for o in offs}),
            "cheapest_usd_per_gpu_hour": round(od.price_per_hour / od.accelerators_per_node, 5),
            "cheapest_where": {"machine_type": od.machine_type, "zone": od.zone},
            "cheapest_spot_usd_per_gpu_hour": None if sp is None else round(sp.spot_price_per_hour / sp.accelerators_per_node, 5),
            "cheapest_spot_where": None if sp is None else {"machine_type": sp.machine_type, "zone": sp.zone},
        })
    if as_json:
        print_json(rows)
        return
    con = console()
    render_gpus(rows, con, wide=wide)
    if outlier:
        con.print(f"[dim]Spot: {len(outlier)} offerings whose spot price is below 55% of the same VM's median across "
                  f"zones are left out (outliers of the price source; recommend --allow-outlier-prices uses them).[/dim]")


def render_gpus(rows: list[dict], con, *, wide: bool = False) -> None:
    """The ``catalog gpus`` table, fitted to ``con``'s width (columns dropped, never cut)."""
    from cloudfit.cli.table import Column, fit

    from cloudfit.cli.table import print_table

    multi = any("cloud" in r for r in rows)
    cols = [Column("GPU"), Column("GiB", "right", keep=2), Column("per VM", keep=3), Column("regions", "right", keep=1),
            Column("on-demand", "right"), Column("where"), Column("spot", "right"), Column("spot where", keep=4)]
    if multi:
        cols.insert(1, Column("cloud"))
    body = []
    for r in rows:
        sw = r["cheapest_spot_where"]
        body.append([r["accelerator"], *([r["cloud"]] if multi else []), f"{r['memory_gib']:g}",
                     ",".join(map(str, r["counts_per_vm"])), str(r["regions"]),
                     money(r["cheapest_usd_per_gpu_hour"]), f"{r['cheapest_where']['zone']}",
                     money(r["cheapest_spot_usd_per_gpu_hour"]), sw["zone"] if sw else "—"])
    t, dropped = fit("Cheapest $/GPU-hour per GPU (the host VM's share included)", cols, body, con.width, wide=wide)
    print_table(con, t)
    if dropped:
        con.print(f"[dim](left out at {con.width} columns: {', '.join(dropped)}; --wide or --json show them)[/dim]")


@app.command("refresh")
def refresh(
    out: Path = typer.Option(..., "--out", "-o", help="Where to write the refreshed catalog CSV (written atomically, validated first).", dir_okay=False),
    base: Optional[Path] = typer.Option(None, "--base", help="Catalog whose rows (shapes, zones) are kept (default: the shipped GCP catalog).", dir_okay=False),
    billing_endpoint: Optional[str] = typer.Option(None, "--billing-endpoint", envvar="CLOUDFIT_BILLING_ENDPOINT",
                                                   help="Cloud Billing API endpoint (default https://cloudbilling.googleapis.com)."),
    as_json: bool = typer.Option(False, "--json", help="Print the refresh report as JSON to stdout."),
) -> None:
    """Reprice every catalog row from the Cloud Billing Catalog API (host vCPU/RAM + GPU SKUs, on-demand and Spot).

    Uses Google application-default credentials (or an API key in $CLOUDFIT_BILLING_API_KEY). A price with
    no matching SKU keeps its old value and is reported; no row is dropped.
    """
    import os

    from cloudfit import catalog
    from cloudfit.catalog import refresh as refreshing

    base_cat = catalog.load(base)
    offerings, report = refreshing.refresh_catalog(base_cat, endpoint=billing_endpoint,
                                                   api_key=os.environ.get("CLOUDFIT_BILLING_API_KEY") or None)
    written = catalog.write_catalog(offerings, out)
    from cloudfit.catalog.dates import write_meta

    write_meta(out, source=f"Cloud Billing Catalog API ({report.service_name}), rows of {Path(base_cat.path).name}")
    if as_json:
        print_json({"out": written.path, "digest": written.digest, "base": base_cat.path, **report.to_dict()})
        return
    from rich.table import Table

    c = console()
    c.print(f"Repriced {report.rows} offerings of {Path(base_cat.path).name} from {report.service_name} SKUs.")
    c.print(f"  {report.skus_read:,} SKUs read ({report.sku_pages} pages), {report.skus_used} used, from {report.endpoint}")
    c.print(f"  on-demand: {report.on_demand_updated} from billing, {report.on_demand_kept} kept;  "
            f"spot: {report.spot_updated} from billing, {report.spot_kept} kept")
    c.print(f"  {len(report.changed)} rows changed price, {report.rows_dropped} dropped")
    if report.regions_without_skus:
        c.print(f"  regions without any SKU (prices kept): {', '.join(report.regions_without_skus)}")
    if report.kept_reasons:
        t = Table(title="Prices kept from the base catalog (no matching SKU)", title_justify="left")
        t.add_column("prices", justify="right")
        t.add_column("reason")
        for reason, n in report.kept_reasons[:15]:
            t.add_row(str(n), reason)
        if len(report.kept_reasons) > 15:
            t.add_row("…", f"{len(report.kept_reasons) - 15} more reasons (see --json)")
        c.print(t)
    if report.changed:
        moved = sorted(report.changed, key=lambda ch: -abs(ch.new_price_per_hour / ch.old_price_per_hour - 1))[:10]
        t = Table(title="Largest on-demand changes", title_justify="left")
        for col, just in [("machine type", "left"), ("zone", "left"), ("old $/h", "right"), ("new $/h", "right"),
                          ("old spot", "right"), ("new spot", "right")]:
            t.add_column(col, justify=just)  # type: ignore[arg-type]
        for ch in moved:
            t.add_row(ch.machine_type, ch.zone, money(ch.old_price_per_hour), money(ch.new_price_per_hour),
                      money(ch.old_spot_price_per_hour), money(ch.new_spot_price_per_hour))
        c.print(t)
    for w in report.warnings:
        c.print(f"  note: {w}")
    c.print(f"Wrote {written.path} ({len(written)} offerings, {written.digest[:19]}…).")
