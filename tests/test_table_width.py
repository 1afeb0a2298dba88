"""recommend and catalog gpus at 80 and 100 columns: no cell is cut, every shown number is whole."""

from __future__ import annotations

import re

import pytest
from rich.console import Console

from cloudfit.cli.recommend import _distinct, _render
from cloudfit.cli.render import money
from cloudfit.plan import recommend
from cloudfit.units import format_hours
from cloudfit.workload import make_workload

WORKLOADS = [
    dict(model="bert-base", epochs=2, dataset_size=88_000, budget="10", spot="only"),
    dict(model="gpt2", samples=2e7, budget="600", spot="never"),
    dict(model="resnet50", epochs=90, dataset_size=1_281_167, deadline="24h"),
]


@pytest.fixture(scope="module")
def plans():
    return [recommend(make_workload(**kw)) for kw in WORKLOADS]


def _text(width: int, draw) -> str:
    con = Console(width=width, record=True, highlight=False, soft_wrap=False, file=open("/dev/null", "w"))
    draw(con)
    return con.export_text()


@pytest.mark.parametrize("width", [80, 100])
def test_recommend_table_fits(plans, width):
    for plan in plans:
        shown = _distinct(plan, 5)
        text = _text(width, lambda con: _render(plan, shown, None, None, None, con=con))
        table = text.split("Why #1")[0]
        assert "…" not in table
        assert max(len(line.rstrip()) for line in table.splitlines()) <= width
        for e in shown:  # every row's zone, time and expected cost are there in full
            o = e.config.offering
            assert o.zone in table and format_hours(e.hours) in table and money(e.cost_usd) in table
        assert "Prices:" in text


def test_wide_shows_every_column(plans):
    plan = plans[0]
    text = _text(80, lambda con: _render(plan, _distinct(plan, 5), None, None, None, con=con, wide=True))
    assert "samples/s (10–90%)" in text and "P90 $" in text and "machine type" in text and "…" not in text


@pytest.mark.parametrize("width", [80, 100])
def test_catalog_gpus_fits(width):
    from cloudfit import catalog
    from cloudfit.cli.catalog import render_gpus

    rows = []
    cat = catalog.load()
    for acc in sorted(cat.accelerators):
        o = min((x for x in cat.offerings if x.accelerator == acc), key=lambda x: x.price_per_hour / x.accelerators_per_node)
        rows.append({"accelerator": acc, "memory_gib": 80, "counts_per_vm": [1, 2, 4, 8], "regions": 30,
                     "cheapest_usd_per_gpu_hour": o.price_per_hour / o.accelerators_per_node,
                     "cheapest_where": {"zone": o.zone}, "cheapest_spot_usd_per_gpu_hour": None, "cheapest_spot_where": None})
    text = _text(width, lambda con: render_gpus(rows, con))
    assert "…" not in text
    for r in rows:
        assert re.search(rf"(^|\W){re.escape(r['accelerator'])}\s", text, re.M), r["accelerator"]
        assert r["cheapest_where"]["zone"] in text and money(r["cheapest_usd_per_gpu_hour"]) in text


def test_a_table_too_wide_for_any_drop_is_printed_whole():
    from cloudfit.cli.table import Column, fit, print_table

    cols = [Column("name"), Column("value", "right")]
    rows = [["x" * 70, "$1,234.56"]]
    t, _ = fit(None, cols, rows, 40)
    text = _text(40, lambda con: print_table(con, t))
    assert "x" * 70 in text and "$1,234.56" in text and "…" not in text


@pytest.mark.parametrize("width", [80, 100])
def test_status_never_cuts_a_cluster_name(width):
    from cloudfit.cli.status_view import headline, render_clusters

    rows = [{"name": f"cf-bert-large-1123-17{i:02d}08-long", "backend": "gcp", "status": "running", "reason": None,
             "spend_usd": 1234.5 + i, "budget_usd": 5000.0, "config": "16× a3-highgpu-8g (8×H100) us-central1-a spot",
             "created_at": 1.7e9} for i in range(3)]
    text = _text(width, lambda con: render_clusters(rows, con, "3 cluster(s)"))
    assert "…" not in text
    for r in rows:
        assert r["name"] in text and money(r["spend_usd"]) in text
    ended = {"backend": "local", "status": "ended", "reason": "completed"}
    assert headline("x", ended).endswith("ended: completed") and "ended, ended" not in headline("x", ended)


def test_computed_width_is_what_rich_renders():
    import random

    from cloudfit.cli.table import Column, _build, _width, natural_width

    rnd = random.Random(1)
    for _ in range(100):
        n = rnd.randint(1, 8)
        cols = [Column("h" * rnd.randint(1, 12), rnd.choice(["left", "right"])) for _ in range(n)]
        rows = [["x" * rnd.randint(1, 20) for _ in range(n)] for _ in range(rnd.randint(0, 6))]
        for compact in (False, True):
            idx = list(range(n))
            assert _width(cols, rows, idx, compact) == natural_width(_build("t", cols, rows, idx, compact))
