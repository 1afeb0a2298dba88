"""The cloud column and the "why this cloud" line of ``recommend --clouds`` (both renderers share them)."""

from __future__ import annotations


def multi_cloud(plan) -> bool:
    """Whether the plan searched more than GCP alone (GCP-only output stays as it was)."""
    return tuple(plan.workload.clouds) != ("gcp",)


def add_cloud_column(plan, cols: list, rows: list, shown: list) -> None:
    """Insert a ``cloud`` column after the rank (in place) when the plan searched several clouds."""
    if not multi_cloud(plan):
        return
    from cloudfit.cli.table import Column

    cols.insert(1, Column("cloud"))
    for row, e in zip(rows, shown):
        row.insert(1, (e[1] if isinstance(e, tuple) else e).config.offering.cloud)


def why_cloud(plan, catalog_path) -> str:
    """"Why aws: …" for a multi-cloud plan; "" otherwise."""
    if not multi_cloud(plan):
        return ""
    from cloudfit import catalog
    from cloudfit.plan.clouds import why_this_cloud

    text = why_this_cloud(plan, catalog.load(catalog_path, clouds=plan.workload.clouds))
    return f"Why {plan.chosen.config.offering.cloud}: {text}" if text else ""
