"""Why the chosen cloud: the same hardware's hourly price on the other clouds searched, and the best plan
found on another cloud (``recommend --clouds``). Pure: reads the plan and the catalog it was made from."""

from __future__ import annotations

from cloudfit.types import Plan


def _pct(x: float) -> str:
    return f"{abs(x) * 100:.0f}%"


def why_this_cloud(plan: Plan, catalog) -> str:
    """One sentence: the chosen offering's price per hour against the same GPUs (type and count per VM) on
    each other cloud searched, and the best other-cloud plan among the plan's ranked candidates. "" when
    only one cloud was searched."""
    w, c = plan.workload, plan.chosen.config
    o = c.offering
    if len(set(w.clouds)) < 2:
        return ""
    from cloudfit.catalog.outliers import spot_outliers

    offs = [x for x in catalog.offerings if x.cloud in w.clouds]
    flagged = set()
    if c.spot and not w.allow_outlier_prices:
        flagged = {i for i, f in enumerate(spot_outliers(offs)) if f}

    def price(x):
        return x.spot_price_per_hour if c.spot else x.price_per_hour

    best: dict[str, object] = {}
    for i, x in enumerate(offs):
        if (x.cloud == o.cloud or x.accelerator != o.accelerator or x.accelerators_per_node != o.accelerators_per_node
                or price(x) is None or i in flagged):
            continue
        if x.cloud not in best or price(x) < price(best[x.cloud]):
            best[x.cloud] = x
    kind = "spot" if c.spot else "on-demand"
    hw = f"{o.accelerators_per_node}×{o.accelerator}"
    parts = []
    for cloud, x in sorted(best.items(), key=lambda kv: price(kv[1])):
        d = 1.0 - price(o) / price(x)
        parts.append(f"{_pct(d)} {'cheaper' if d >= 0 else 'dearer'} per hour than {cloud} {x.machine_type} "
                     f"(${price(x):,.2f}/h)")
    same = (f"same {hw} {kind}: " + "; ".join(parts)) if parts else f"no other cloud searched sells {hw} {kind}"
    other = next((e for e in plan.candidates() if e.config.offering.cloud != o.cloud), None)
    tail = ""
    if other is not None and other.cost_usd > 0:
        d = other.cost_usd / plan.chosen.cost_usd - 1.0 if plan.chosen.cost_usd > 0 else 0.0
        eo = other.config.offering
        tail = (f"; the best plan on another cloud ({eo.cloud}: {other.config.nodes}× {eo.machine_type}) costs "
                f"${other.cost_usd:,.0f} expected, {_pct(d)} {'more' if d >= 0 else 'less'}")
    return f"{o.cloud} ({o.machine_type} at ${price(o):,.2f}/h): {same}{tail}."
