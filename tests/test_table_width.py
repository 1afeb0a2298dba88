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


# ---- issue 34: the README's tables at 80 columns (each failed on main b051bda) ----------------------------


def _lines_at_80(cli, monkeypatch, *args) -> list[str]:
    monkeypatch.setenv("COLUMNS", "80")
    r = cli(*args)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert "…" not in r.stdout and max(len(line) for line in lines) <= 80, r.stdout
    return lines


def test_catalog_gpus_of_every_cloud_fits_80_columns(cli, monkeypatch):
    """It was 91 wide: the cloud column made the essential columns too wide; the spot zone now goes first."""
    lines = _lines_at_80(cli, monkeypatch, "catalog", "gpus", "--cloud", "all")
    assert any(re.match(r"H100\s+aws\s+\$\d", line) for line in lines)
    assert "left out at 80 columns: regions, GiB, per VM, spot where" in " ".join(lines)


def test_llm_profile_show_fits_80_columns_without_cutting_a_number(cli, monkeypatch):
    """It cut "8,192" to "8,1…" (rich shrank every column); now columns are dropped, never cut."""
    from tests.conftest import REPO

    text = "\n".join(_lines_at_80(cli, monkeypatch, "profile", "show", str(REPO / "profiles/llm/llama3-8b-h100.json")))
    for number in ("8,192", "4,096", "33,785", "25,444", "45.5 GiB"):
        assert re.search(rf"(^|\s){re.escape(number)}(\s|$)", text, re.M), number
    assert "left out at 80 columns" in text


def test_rows_left_after_hiding_look_alikes_are_numbered_1_2_3():
    """The LLM table hides rows that look the same once "zone" is dropped; it numbered what was left 1, 3, 5."""
    from cloudfit.cli.table import Column, fit_distinct

    cols = [Column("#", "right", keep=3), Column("zone", keep=1), Column("machine type" * 3), Column("cost", "right")]
    rows = [[str(i), f"us-east{i % 2}-a", f"m{i // 2}", f"${i // 2}.00"] for i in range(1, 7)]
    t, dropped, hidden = fit_distinct(None, cols, rows, 50)
    assert dropped == ["zone"] and hidden == 2
    assert [r[0] for r in t.rows] == ["1", "2", "3", "4"]
    assert [r[1] for r in t.rows] == ["m0", "m1", "m2", "m3"]  # the first of each look-alike stays


def test_the_llm_table_at_80_columns_numbers_its_rows_1_2_3(cli, monkeypatch):
    lines = _lines_at_80(cli, monkeypatch, "recommend", "--model", "llama3-8b", "--tokens", "1e11", "--seq-len",
                         "8192", "--deadline", "7d")
    numbers = [line.split()[0] for line in lines[lines.index(next(x for x in lines if x.startswith("#   "))) + 2:]
               if line[:1].isdigit()]
    numbers = numbers[: next((i for i, n in enumerate(numbers) if not n.isdigit()), len(numbers))]
    assert len(numbers) >= 2 and numbers == [str(i) for i in range(1, len(numbers) + 1)]


def test_the_pareto_line_tells_its_points_apart(cli, monkeypatch):
    """It showed "4 min" at three prices; each point's time is now given with the decimals it takes."""
    lines = _lines_at_80(cli, monkeypatch, "recommend", "--model", "resnet32", "--samples", "5e6", "--deadline", "2h")
    text = " ".join(lines)
    line = text[text.index("Cost × time Pareto front"):].split("Searched")[0]
    times = re.findall(r"([\d.,]+ (?:s|min|h|d))/\$", line)
    assert len(times) >= 4 and len(set(times)) == len(times), line


def test_hours_apart():
    from cloudfit.cli.render import hours_apart

    assert hours_apart([4.0 / 60, 4.2 / 60, 4.4 / 60, 6 / 60]) == ["4.0 min", "4.2 min", "4.4 min", "6.0 min"]
    assert hours_apart([0.5, 2.0, 3.0]) == ["30 min", "2.0 h", "3.0 h"]  # already apart: format_hours as it is
    assert hours_apart([1.81, 1.84, 50.0, 70.0]) == ["1.81 h", "1.84 h", "2.1 d", "2.9 d"]  # each unit on its own
    assert hours_apart([1.0, 1.0]) == ["1.0 h", "1.0 h"]  # the same time reads the same


def test_catalog_list_fits_80_columns_without_cutting_a_price(cli, monkeypatch):
    """rich shrank its columns and cut prices to "$5.…"; now a column goes instead."""
    from cloudfit import catalog

    text = "\n".join(_lines_at_80(cli, monkeypatch, "catalog", "list", "--accelerator", "H100", "--region", "us-*"))
    offs = catalog.load().filter(accelerators=("H100",), regions=("us-*",)).offerings
    assert offs and all(o.zone in text and money(o.price_per_hour) in text for o in offs)
