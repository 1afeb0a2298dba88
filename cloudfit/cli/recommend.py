"""``cloudfit recommend``: the cheapest cluster under a deadline, or the fastest under a budget."""

# No `from __future__ import annotations`: typer reads the options' annotations, and string ones would be
# compiled and evaluated one by one (~1 ms) on every run.
import os
from pathlib import Path
from typing import Optional

import typer

from cloudfit import cache

# Before any record class is made: their dataclass methods come compiled from the cache (~10 ms).
cache.compiled_records()

from cloudfit.cli import options as opts  # noqa: E402
from cloudfit.cli.render import console, distinct, hours_apart, limits_and_goal, money, print_json, write_outputs  # noqa: E402

# One OpenBLAS thread unless the user chose: the recommender's matrix products are small, and on a
# 2-core machine whose other core is busy, starting OpenBLAS's second thread at `import numpy`
# (which comes after this module) cost ~9 ms (median of 60 interleaved runs; nothing measurable on
# an idle machine). Results are identical (bench/recommend_equivalence.py runs the code before
# without the setting).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def recommend(
    model: Optional[str] = opts.MODEL,
    profile: Optional[str] = opts.PROFILE,
    samples: Optional[float] = opts.SAMPLES,
    epochs: Optional[float] = opts.EPOCHS,
    dataset_size: Optional[int] = opts.DATASET_SIZE,
    deadline: Optional[str] = opts.DEADLINE,
    budget: Optional[str] = opts.BUDGET,
    objective: Optional[str] = opts.OBJECTIVE,
    regions: Optional[list[str]] = opts.REGIONS,
    accelerators: Optional[list[str]] = opts.ACCELERATORS,
    spot: Optional[bool] = opts.SPOT,
    spot_only: bool = opts.SPOT_ONLY,
    max_nodes: int = opts.MAX_NODES,
    max_gpus: Optional[int] = opts.MAX_GPUS,
    allow_outlier_prices: bool = opts.ALLOW_OUTLIER_PRICES,
    catalog_path: Optional[Path] = opts.CATALOG,
    clouds: Optional[list[str]] = opts.CLOUDS,
    confidence: float = opts.CONFIDENCE,
    precision: str = opts.PRECISION,
    batch_size: Optional[int] = opts.BATCH_SIZE,
    top: int = typer.Option(5, "--top", help="Show the K best distinct options."),
    search: str = typer.Option("exhaustive", "--search", help="exhaustive (exact) or bayes (optuna)."),
    trials: int = typer.Option(200, "--trials", help="Optuna trials with --search bayes."),
    seed: int = typer.Option(0, "--seed", help="Seed of --search bayes."),
    as_json: bool = typer.Option(False, "--json", help='Print {"plan": …, "candidates": […]} to stdout.'),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write plan.json here (the input of `cloudfit launch`).", dir_okay=False, callback=opts.in_existing_folder),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Save the cost × time Pareto front as .png, .svg or .pdf.", dir_okay=False, callback=opts.in_existing_folder),
    emit_skypilot: Optional[Path] = typer.Option(None, "--emit-skypilot", help="Write a SkyPilot task YAML for the chosen config.", dir_okay=False, callback=opts.in_existing_folder),
    tokens: Optional[float] = opts.TOKENS,
    seq_len: int = opts.SEQ_LEN,
    finetune: str = opts.FINETUNE,
    lora_rank: int = opts.LORA_RANK,
    config: Optional[Path] = opts.CONFIG,
    layout: Optional[str] = opts.LAYOUT,
    global_batch: Optional[int] = opts.GLOBAL_BATCH,
    stack: Optional[str] = opts.STACK,
    framework: Optional[str] = opts.FRAMEWORK_ALIAS,
    wide: bool = typer.Option(False, "--wide", help="Show every column of the table whatever the terminal width."),
    data: Optional[str] = opts.DATA,
    data_size: Optional[str] = opts.DATA_SIZE,
    data_region: Optional[str] = opts.DATA_REGION,
    keep_checkpoints: int = opts.KEEP_CHECKPOINTS,
    return_to: Optional[str] = opts.RETURN_TO,
    quota: Optional[str] = opts.QUOTA,
    risk: str = typer.Option("median", "--risk", help="median: choose on the predicted speed; p90: on the speed each candidate beats 9 times in 10 (its band's low end)."),
) -> None:
    """Recommend the cluster to train on: cheapest under --deadline, fastest under --budget."""
    from cloudfit.cli import render

    render.QUICK_EXIT = plot is None  # no thread, no child process; plan/SkyPilot files are written atomically
    from cloudfit.cli.recommend_llm import is_llm_request
    from cloudfit.errors import UsageError

    if plot is not None:  # check before any work: a .gif would otherwise get PNG bytes
        from cloudfit.plot import image_format

        image_format(plot)
    if top < 1:
        raise UsageError(f"--top must be at least 1, got {top}")
    if search not in ("exhaustive", "bayes"):
        raise UsageError(f"--search must be exhaustive or bayes, got {search!r}")
    from cloudfit.plan.unknown import check_risk

    risk = check_risk(risk)
    limits = dict(deadline=deadline, budget=budget, objective=objective, regions=opts.split(regions),
                  accelerators=opts.split(accelerators), spot=opts.spot_mode(spot, spot_only), max_nodes=max_nodes,
                  confidence=confidence, max_gpus=max_gpus, allow_outlier_prices=allow_outlier_prices,
                  clouds=None if clouds is None else opts.split(clouds))
    from cloudfit.cli import bill_view

    billing = bill_view.wanted(data, return_to, quota) or data_size is not None or data_region is not None
    stack = opts.stack_option(stack, framework)
    if is_llm_request(model=model, profile=profile, tokens=tokens, config=config, layout=layout):
        from cloudfit.cli.recommend_llm import token_workload  # a large-model token workload

        workload = token_workload(
            model=model, profile=profile, samples=samples, epochs=epochs, dataset_size=dataset_size, tokens=tokens,
            seq_len=seq_len, finetune=finetune, lora_rank=lora_rank, config=config, layout=layout,
            global_batch=global_batch, precision=precision, batch_size=batch_size, search=search, limits=limits,
            stack=stack)
    else:
        if stack is not None:
            raise UsageError("--stack is for large-model plans (--tokens with an LLM --model or --config); "
                             "a profiled model trains on cloudfit's own DDP trainer")
        from cloudfit.workload import make_workload

        workload = make_workload(model=model, profile=profile, samples=samples, epochs=epochs,
                                 dataset_size=dataset_size, precision=precision, batch_size=batch_size, **limits)
    from cloudfit.plan import recommend as plan_recommend

    options = {"n_trials": trials, "seed": seed} if search == "bayes" else None
    billed = None
    if billing:
        billed = bill_view.recommend(workload, catalog_path, search, options, data=data, data_size=data_size,
                                     data_region=data_region, keep_checkpoints=keep_checkpoints,
                                     return_to=return_to, quota=quota, risk=risk)
        plan = billed.plan
    else:
        plan = plan_recommend(workload, catalog=catalog_path, searcher=search, searcher_options=options, risk=risk)
    write_outputs(plan, out, emit_skypilot, plot)
    if plan.layout is not None:
        from cloudfit.cli.recommend_llm import show

        return show(plan, top, seq_len, out, plot, emit_skypilot, as_json=as_json, wide=wide,
                    catalog_path=catalog_path, billed=billed)
    shown = _distinct(plan, top)
    if as_json:
        from cloudfit.plan.io import plan_to_dict

        from cloudfit.cli.clouds_view import multi_cloud, why_cloud

        extra = {"why_cloud": why_cloud(plan, catalog_path)} if multi_cloud(plan) else {}
        from cloudfit.cli.unknown_view import with_measured

        rows = with_measured(plan, [e.row(cloud=multi_cloud(plan)) for e in shown])
        payload = {"plan": plan_to_dict(plan), "candidates": rows, **extra}
        bill_view.add_json(billed, payload, shown)
        print_json(payload)
        return
    _render(plan, shown, out, plot, emit_skypilot, wide=wide, catalog_path=catalog_path, billed=billed)


def _distinct(plan, k: int) -> list:
    """The estimates of :func:`cloudfit.cli.render.distinct`'s rows."""
    return [e for _, e in distinct(plan, k)]


def _render(plan, shown: list, out: Path | None, plot: Path | None, sky: Path | None, *, wide: bool = False,
            con=None, catalog_path=None, billed=None) -> None:
    from cloudfit.cli.table import WIDE_COLUMNS, Column, fit, print_table
    from cloudfit.units import format_hours

    w = plan.workload
    con = con or console()
    from cloudfit.cli.unknown_view import gpu_marks, risk_title

    title = f"{w.model}: {w.samples:,.0f} samples, {limits_and_goal(w)}{risk_title(plan)}"
    mark = gpu_marks(plan)
    width = con.width
    if wide or width >= WIDE_COLUMNS:
        cols = [Column("#", "right"), Column("zone"), Column("machine type"), Column("GPUs/node"), Column("nodes", "right"),
                Column("spot"), Column("samples/s (10–90%)", "right"), Column("time", "right"), Column("exp. $", "right"),
                Column("P90 $", "right"), Column("P(on time)", "right")]
        rows = []
        for r, e in enumerate(shown, 1):
            c, o = e.config, e.config.offering
            rows.append([str(r), o.zone, o.machine_type, f"{o.accelerators_per_node}×{o.accelerator}{mark(o)}", str(c.nodes),
                         "yes" if c.spot else "no", f"{e.samples_per_second:,.0f} ({e.low:,.0f}–{e.high:,.0f})",
                         format_hours(e.hours), money(e.cost_usd), money(e.cost_p90_usd), f"{e.p_on_time:.0%}"])
    else:  # narrower: GPUs × nodes in one column; drop samples/s, P90 $, machine type, #, zone as the width needs
        cols = [Column("#", "right", keep=4), Column("zone", keep=5), Column("machine type", keep=3), Column("GPUs × nodes"),
                Column("spot"), Column("samples/s", "right", keep=1), Column("time", "right"),
                Column("exp. $", "right"), Column("P90 $", "right", keep=2), Column("on time", "right")]
        rows = []
        for r, e in enumerate(shown, 1):
            c, o = e.config, e.config.offering
            gpus = f"{o.accelerators_per_node}×{o.accelerator}{mark(o)}" + (f" ×{c.nodes}" if c.nodes > 1 else "")
            rows.append([str(r), o.zone, o.machine_type, gpus, "yes" if c.spot else "no", f"{e.samples_per_second:,.0f}",
                         format_hours(e.hours), money(e.cost_usd), money(e.cost_p90_usd), f"{e.p_on_time:.0%}"])
    from cloudfit.cli.clouds_view import add_cloud_column, why_cloud

    add_cloud_column(plan, cols, rows, shown)
    from cloudfit.cli.bill_view import add_column, data_line

    add_column(billed, cols, rows, shown, keep=3.5)  # after machine type, before "#"
    t, dropped = fit(title, cols, rows, width, wide=wide, take_back=True)  # wider only with --wide: printed whole
    print_table(con, t)
    line = data_line(cols, rows, dropped, width)
    if line:
        con.print(line)
    if plan.explanation:
        con.print(f"Why #1: {plan.explanation}")
    from cloudfit.cli.unknown_view import unknown_lines

    for line in [*(billed.lines if billed is not None else ()), *unknown_lines(plan, shown)]:
        con.print(line)
    cloud_line = why_cloud(plan, catalog_path)
    if cloud_line:
        con.print(cloud_line)
    if plan.sensitivity:
        con.print(f"Sensitivity: {plan.sensitivity}")
    front = [e for e in plan.pareto if e.feasible]  # only plans it would pick: within the limits (plan.json has all)
    if front:
        pick = front[:: max(1, len(front) // 6)]
        pick += [] if pick[-1] is front[-1] else [front[-1]]  # both ends: the fastest and the cheapest within the limits
        pts = ", ".join(f"{t}/{money(e.cost_usd)}" for t, e in zip(hours_apart([e.hours for e in pick]), pick))
        con.print(f"Cost × time Pareto front within the limits ({len(front)} points, fastest first): {pts}")
    p = plan.provenance
    ex = sum(p.get("excluded", {}).values())
    note = f"; {ex:,} left out ({'; '.join(p['excluded'])})" if ex else ""
    con.print(f"[dim]Searched {p.get('space_size', 0):,} configurations with {p.get('searcher')} "
              f"({p.get('evaluations', 0):,} evaluated){note}. Prediction basis: {p.get('prediction_basis') or '—'}.[/dim]")
    for line in _notes(plan):
        con.print(line)
    if dropped:
        con.print(f"[dim](left out at {width} columns: {', '.join(dropped)}; --wide shows every column)[/dim]")
    for label, path in (("Plan", out), ("Pareto plot", plot), ("SkyPilot task", sky)):
        if path is not None:
            con.print(f"{label} written to {path}")


def _notes(plan) -> list[str]:
    """Lines on what the numbers rest on: obtainability of the fleet, the spot hazard's data, the prices' date."""
    from cloudfit.spot.capacity import capacity_note

    c = plan.chosen.config
    o = c.offering
    out = []
    same = sum(1 for e in plan.candidates() if (e.config.offering.machine_type, e.config.nodes, e.config.spot)
               == (o.machine_type, c.nodes, c.spot))
    note = capacity_note(o.accelerators_per_node * c.nodes, c.spot, o.accelerator, o.zone, zones=same)
    if note:
        out.append(note)
    if c.spot:
        from cloudfit.spot import hazard_info

        h = hazard_info(o.accelerator, o.region, cloud=o.cloud)
        if h.source == "fallback":
            out.append(f"Spot hazard: {h.detail}; P(on time) rests on it, so read it with that band in mind.")
    pf = plan.provenance.get("profile_file")
    if pf and not Path(pf).is_absolute():  # a profile found here (e.g. written by `profile run`), not the shipped one
        out.append(f"[dim]Profile: {pf} (in this folder; the shipped one is used when there is none).[/dim]")
    prices = plan.provenance.get("prices")
    if prices:
        out.append(f"[dim]Prices: {prices}.[/dim]")
    return out
