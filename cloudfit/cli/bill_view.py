"""``recommend --data/--data-size/--data-region/--keep-checkpoints/--return-to/--quota``: the whole bill.

Builds the ``Bill`` and ``Quotas`` from the options, plans through ``cloudfit.bill.plan.recommend`` and adds
the cost split to the table (a ``data $`` column), ``--json`` (``cost_split`` per candidate, ``bill`` in the
plan) and the explanation. None of it runs when no such option is given: ``recommend`` is unchanged then."""

from __future__ import annotations


def wanted(data, return_to, quota) -> bool:
    return data is not None or return_to is not None or quota is not None


def recommend(workload, catalog_path, search: str, options, *, data, data_size, data_region, keep_checkpoints,
              return_to, quota, risk: str = "median"):
    """The ``Billed`` plan of the options (``cloudfit.bill.plan.Billed``)."""
    from cloudfit.bill import Bill
    from cloudfit.bill import plan as bill_plan
    from cloudfit.errors import UsageError

    if data is None and (data_size is not None or data_region is not None):
        raise UsageError("--data-size and --data-region need --data (where the data lives)")
    bill = Bill.of(data, data_size, data_region, keep_checkpoints, return_to)
    quotas, note = None, ""
    if quota is not None:
        quotas, note = _quotas(quota, workload, catalog_path)
    return bill_plan.recommend(workload, bill, quotas, catalog=catalog_path, searcher=search,
                               searcher_options=options, quota_note=note, risk=risk)


def _quotas(quota: str, workload, catalog_path):
    from cloudfit.bill import quota as q

    if quota.strip().lower() != "gcp":
        return q.load_file(quota), ""
    from cloudfit import catalog
    from cloudfit.errors import LaunchError

    cat = catalog.load(catalog_path, clouds=workload.clouds)
    regions = sorted({o.region for o in cat.offerings if o.cloud == "gcp"})
    try:
        return q.from_gcp(regions), ""
    except LaunchError as e:  # no credentials: plan anyway, and say so
        return None, f"Quota: not checked ({e})."


def add_column(billed, cols: list, rows: list, shown: list, keep: float | None = None) -> None:
    """A ``data $`` column (transfer + storage) before ``exp. $`` when the plan has a bill and some row shown pays
    for it; ``keep``: its rank when a narrow terminal drops columns (``cloudfit.cli.table.Column``; ``data_line``
    then says what it held)."""
    if billed is None or billed.bill is None:
        return
    from cloudfit.cli.render import money
    from cloudfit.cli.table import Column

    extra = [billed.split(e) for e in shown]
    extra = [s["transfer_usd"] + s["storage_usd"] for s in extra]
    if not any(x > 0 for x in extra):  # nothing but compute on every row: the column would only say $0.00
        return
    at = next((i for i, c in enumerate(cols) if c.header == "exp. $"), len(cols))
    cols.insert(at, Column("data $", "right", keep=keep))  # type: ignore[arg-type]
    for row, x in zip(rows, extra):
        row.insert(at, money(x))


def data_line(cols: list, rows: list, dropped: list, width: int, *, distinct: bool = False) -> str | None:
    """When a narrow table dropped the ``data $`` column: one line with its cells, by the rows shown (``distinct``:
    the rows ``fit_distinct`` kept, renumbered as it numbers them)."""
    if "data $" not in dropped:
        return None
    from cloudfit.cli.table import distinct_rows

    i = next(k for k, c in enumerate(cols) if c.header == "data $")
    order = distinct_rows(cols, rows, dropped) if distinct else range(len(rows))
    cells = [rows[j][i] for j in order]
    what = f"data $ (transfer + storage; left out at {width} columns)"
    if len(set(cells)) == 1:
        return f"[dim]{what}: {cells[0]} on every row.[/dim]"
    return f"[dim]{what}: " + ", ".join(f"#{n} {c}" for n, c in enumerate(cells, 1)) + ".[/dim]"


def add_json(billed, payload: dict, shown: list) -> None:
    """``cost_split`` on every candidate row, and the bill's provenance and sentences on the plan."""
    if billed is None:
        return
    for row, e in zip(payload["candidates"], shown):
        row["cost_split"] = billed.split(e)
    payload["plan"]["cost_split"] = billed.split(billed.plan.chosen)
    payload["bill"] = billed.lines


def data_step_line(plan) -> str | None:
    """``launch --dry-run``: the data step the plan assumed (``recommend --data``), or None. cloudfit copies nothing."""
    step = ((plan.provenance or {}).get("bill") or {}).get("data_step")
    if not step:
        return None
    from cloudfit.cli.render import money

    src = "your machine" if step["from_cloud"] == "local" else f"{step['from_cloud']} {step['from_region']}"
    dst = f"{step['to_cloud']} {step['to_region']}"
    if not step["moves"]:
        return (f"Data: the plan's first choice runs next to its data ({step['from']}, {step['gb']:,.0f} GB in "
                f"{src}): nothing to copy before training.")
    return (f"Data: the plan's first choice assumed copying {step['from']} ({step['gb']:,.0f} GB) from {src} to "
            f"{dst} before training: {money(step['usd'])}, {step['hours'] * 60:,.0f} min (in its cost and hours). "
            "cloudfit does not copy it: stage it in the destination's bucket first, or have your script read it from the source.")
