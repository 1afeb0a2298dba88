"""``cloudfit recommend`` for large-model token workloads (``--tokens``, ``--config``, an LLM ``--model``):
the cluster and its parallel layout. ``cloudfit.cli.recommend`` is the one command; this module parses the
token options into a ``cloudfit.plan.llm.TokenWorkload`` and renders the plan. It imports nothing back."""

from __future__ import annotations

from pathlib import Path

from cloudfit.cli.render import distinct as _distinct


def is_llm_request(*, model, profile, tokens, config, layout) -> bool:
    """A token workload: --tokens, --config or --layout given, or --model names an LLM of the zoo."""
    if tokens is not None or config is not None or layout is not None:
        return True
    if model is None or profile is not None:
        return False
    from cloudfit import resources

    if (resources.profiles_dir() / f"{model}.json").is_file():  # a shipped single-model profile: no LLM
        return False  # has such a name (tests/llm_recommend/test_plan.py), so the zoo need not be imported
    from cloudfit.llm.zoo import is_llm

    return is_llm(model)


def token_workload(*, model, profile, samples, epochs, dataset_size, tokens, seq_len, finetune, lora_rank, config,
                   layout, global_batch, precision, batch_size, search, limits: dict, stack=None):
    """The ``TokenWorkload`` these options describe; ``UsageError`` for single-model options given with it."""
    from cloudfit.errors import UsageError
    from cloudfit.plan.llm import token_workload as make

    if samples is not None or epochs is not None or dataset_size is not None:
        raise UsageError("a large-model workload is given in --tokens (with --seq-len), not --samples/--epochs")
    if batch_size is not None:
        raise UsageError("for a large model give --global-batch (sequences per step), not --batch-size")
    if search != "exhaustive":
        raise UsageError("large-model recommend searches exhaustively (every offering × nodes × layout)")
    if tokens is None:
        raise UsageError("give --tokens N for a large-model workload, e.g. --tokens 1e11")
    llm_profile = _llm_profile(profile, model, config)
    shape = None if llm_profile is None else _shape_of(llm_profile)
    tw = make(tokens=tokens, model=model, config=config, seq_len=seq_len, finetune=finetune, lora_rank=lora_rank,
              global_batch=global_batch, layout=layout, precision=precision, shape=shape, stack=stack, **limits)
    if llm_profile is None:
        return tw
    from dataclasses import replace

    from cloudfit.profiling import io as pio

    job = replace(anchored_job(tw.job, llm_profile, tw.limits.accelerators),
                  profile_file=str(Path(pio.resolve_profile(profile)).resolve()))  # the plan records where
    return replace(tw, job=job)


def show(plan, top: int, seq_len: int, out, plot, sky, *, as_json: bool = False, wide: bool = False,
         catalog_path=None, billed=None) -> None:
    """A large-model plan on stdout: JSON (plan, candidates with their layouts, the layout ranking) or the table;
    ``billed`` (``recommend --data …``) adds the cost split (``cloudfit.cli.bill_view``)."""
    from cloudfit.cli import bill_view

    shown = _distinct(plan, top)
    if as_json:
        from cloudfit.cli.render import print_json
        from cloudfit.plan.io import plan_to_dict

        from cloudfit.cli.clouds_view import multi_cloud, why_cloud

        from cloudfit.cli.unknown_view import with_measured

        rows = []
        for i, e in shown:
            lo = _layout_of(plan, i)
            rows.append({**e.row(cloud=multi_cloud(plan)), "tokens_per_second": e.samples_per_second * seq_len, "layout": lo["text"],
                         "mfu": lo["mfu"], "memory_gib_per_device": lo["memory_gib_per_device"]})
        extra = {"why_cloud": why_cloud(plan, catalog_path)} if multi_cloud(plan) else {}
        payload = {"plan": plan_to_dict(plan), "stack": stack_of(plan), "candidates": with_measured(plan, rows),
                   "layouts": plan.layout["ranking"], **extra}
        bill_view.add_json(billed, payload, [e for _, e in shown])
        print_json(payload)
        return
    _render(plan, shown, seq_len, out, plot, sky, wide=wide, catalog_path=catalog_path, billed=billed)


def stack_of(plan) -> str:
    """The stack a large-model plan's numbers are for (``recommend --stack``; cloudfit's trainer without one)."""
    return (plan.layout or {}).get("stack") or "cloudfit"


def stack_label(plan) -> str:
    """The title's words for the stack: the named one, or that none was named."""
    named = (plan.layout or {}).get("stack")
    return f"stack {named}" if named else "no --stack"


def _llm_profile(profile, model, config):
    """The LLM profile ``--profile`` names (None without one); it replaces --model/--config."""
    if profile is None:
        return None
    from cloudfit.errors import UsageError
    from cloudfit.profiling import io as pio
    from cloudfit.types import LLMProfile

    if model is not None or config is not None:
        raise UsageError("give either --profile (an LLM profile) or --model/--config, not both")
    p = pio.load_profile(pio.resolve_profile(profile), llm_ok=True)
    if not isinstance(p, LLMProfile):
        raise UsageError(f"{profile} is a profile of {p.model!r}, not of a large model: a --tokens workload needs an "
                         "LLM profile (`cloudfit profile add FILE --model …` or `profile run --model …`)")
    return p


def _shape_of(p):
    from cloudfit.profiling import io as pio

    return pio.llm_shape(p)


def anchored_job(job, p, accelerators):
    """``job`` planned with constants anchored on the LLM profile ``p`` (``cloudfit.llm.anchor.for_search``) and
    memory anchored on its measured peaks (``LLMJob.memory_fits``)."""
    from dataclasses import replace

    from cloudfit.llm import anchor

    c, basis, peaks = anchor.for_search(p, job.shape, accelerators)
    return replace(job, anchored=c, anchor_basis=basis or "stack-generic: the profile has no GPU measurement",
                   memory_anchors=tuple(peaks),
                   anchored_on=tuple(sorted({m.accelerator for m in p.measurements if m.accelerator != "cpu"})))


def _layout_of(plan, i: int) -> dict:
    """text, tokens_per_second, mfu, memory of candidate ``i`` (0 = chosen) of the plan."""
    L = plan.layout
    return L if i == 0 else L["alternatives"][i - 1]


def _layout_text(plan, i: int) -> str:
    return _layout_of(plan, i)["text"]


def _short(text: str, compact: bool = False) -> str:
    """The layout without its defaults, for a table cell; ``compact``: only the parallel degrees and the
    checkpointing (micro-batch and accumulation are in the "Layout #1" line under the table)."""
    keep = []
    for part in text.split(","):
        k, v = part.split("=")
        if (k in ("tp", "pp", "cp", "vp") and v == "1") or k in ("schedule", "zero") or (k == "dp" and v == "1"):
            continue
        if compact and k in ("mb", "ga"):
            continue
        keep.append(f"ac={v[:3]}" if compact and k == "ac" else part)
    return ",".join(keep)


def _render(plan, shown: list, seq_len: int, out: Path | None, plot: Path | None, sky: Path | None, *,
            wide: bool = False, con=None, catalog_path=None, billed=None) -> None:
    from cloudfit.cli.bill_view import add_column, data_line
    from cloudfit.cli.render import console, limits_and_goal, money
    from cloudfit.cli.table import WIDE_COLUMNS, Column, fit_distinct, print_table
    from cloudfit.llm.memory import FULL_FRACTION
    from cloudfit.units import format_hours

    w, L = plan.workload, plan.layout
    con = con or console()
    ft = f"LoRA r={L['lora_rank']}" if L["finetune"] == "lora" else "full training"
    title = (f"{w.model} ({ft}, {L['precision']}, {stack_label(plan)}): {L['tokens']:.3g} tokens at "
             f"{seq_len:,}/sequence, {limits_and_goal(w)}")
    width = con.width
    from cloudfit.cli.unknown_view import gpu_marks, unknown_lines

    mark = gpu_marks(plan)
    if wide or width >= WIDE_COLUMNS:
        cols = [Column("#", "right"), Column("zone"), Column("machine type"), Column("GPUs/node"),
                Column("nodes", "right"), Column("spot"), Column("layout"), Column("tokens/s", "right"),
                Column("MFU", "right"), Column("time", "right"), Column("exp. $", "right"), Column("P90 $", "right"),
                Column("P(on time)", "right")]
    else:  # narrower: GPUs × nodes in one column; drop tokens/s, P90 $, machine type, MFU, zone as the width needs
        cols = [Column("#", "right", keep=6), Column("zone", keep=5), Column("machine type", keep=3), Column("GPUs × nodes"),
                Column("spot"), Column("layout"), Column("tokens/s", "right", keep=1), Column("MFU", "right", keep=4),
                Column("time", "right"), Column("exp. $", "right"), Column("P90 $", "right", keep=2),
                Column("on time", "right")]
    rows = []
    for r, (i, e) in enumerate(shown, 1):
        c, o = e.config, e.config.offering
        mfu = f"{_layout_of(plan, i)['mfu']:.0%}"
        common = [_short(_layout_text(plan, i), compact=not (wide or width >= WIDE_COLUMNS)), f"{e.samples_per_second * seq_len:,.0f}", mfu, format_hours(e.hours),
                  money(e.cost_usd), money(e.cost_p90_usd), f"{e.p_on_time:.0%}"]
        if wide or width >= WIDE_COLUMNS:
            rows.append([str(r), o.zone, o.machine_type, f"{o.accelerators_per_node}×{o.accelerator}{mark(o)}",
                         str(c.nodes), "yes" if c.spot else "no", *common])
        else:
            gpus = f"{o.accelerators_per_node}×{o.accelerator}{mark(o)}" + (f" ×{c.nodes}" if c.nodes > 1 else "")
            rows.append([str(r), o.zone, o.machine_type, gpus, "yes" if c.spot else "no", *common])
    from cloudfit.cli.clouds_view import add_cloud_column, why_cloud

    add_cloud_column(plan, cols, rows, shown)
    add_column(billed, cols, rows, [e for _, e in shown], keep=5.5)  # after zone, before "#"
    t, dropped, hidden = fit_distinct(title, cols, rows, width, wide=wide)
    print_table(con, t)
    line = data_line(cols, rows, dropped, width, distinct=True)
    if line:
        con.print(line)
    con.print(f"Layout #1: {L['text']} — {L['tokens_per_second']:,.0f} tokens/s, {L['mfu']:.0%} MFU, "
              f"{L['memory_gib_per_device']:,.1f} of {L['memory_capacity_gib']:g} GiB per GPU, global batch "
              f"{L['global_batch']:,} × {seq_len:,} tokens, {L['steps']:,} steps.")
    used = L["memory_gib_per_device"] / L["memory_capacity_gib"]
    if used > FULL_FRACTION:  # no roomy layout or plan was within 2% of it (memory.crowded, plan.llm.recommend_llm)
        d = L["degrees"]
        ways = [f"tp={2 * d['tp']}"] + (["ac=full"] if d["ac"] != "full" else []) + \
            ([f"mb={d['micro_batch'] // 2}"] if d["micro_batch"] > 1 else [])
        free = 1 - used
        con.print(f"Memory: the estimate leaves {free:.1%} of each GPU free, no room for its own error or the "
                  f"allocator's fragmentation; --layout with {' or '.join(ways)} buys headroom for speed.")
    if plan.explanation:
        con.print(f"Why #1: {plan.explanation}")
    for line in [*(billed.lines if billed is not None else ()), *unknown_lines(plan, [e for _, e in shown])]:
        con.print(line)
    cloud_line = why_cloud(plan, catalog_path)
    if cloud_line:
        con.print(cloud_line)
    ck = L["checkpoint"]
    every = f"every {format_hours(ck['interval_h'])}" if ck.get("interval_h") and plan.chosen.config.spot else "at the end"
    con.print(f"Checkpoints: {ck['bytes'] / 1e9:,.1f} GB (sharded over {L['gpus']} ranks), {ck['write_s']:,.0f} s to "
              f"write, {every}; a restart costs {ck['restart_s'] / 60:,.1f} min.")
    if L["launch"]["note"]:
        con.print(f"[yellow]Note: {L['launch']['note']}.[/yellow]")
    from cloudfit.launcher import default_stack_refusal

    refused = default_stack_refusal(plan)
    if refused:
        con.print(f"[yellow]Launch: {refused[0].upper()}{refused[1:]}.[/yellow]")
    if plan.sensitivity:
        con.print(f"Sensitivity: {plan.sensitivity}")
    p = plan.provenance
    ex = sum(p.get("excluded", {}).values())
    note = f"; {ex:,} left out ({'; '.join(p['excluded'])})" if ex else ""
    con.print(f"[dim]Searched {p.get('space_size', 0):,} configurations × {p.get('layouts_enumerated', 0):,} layouts "
              f"({p.get('layouts_fit', 0):,} fit in memory; {p.get('layouts_evaluated', 0):,} timed, the rest dominated)"
              f"{note}. "
              f"Prediction basis: {p.get('prediction_basis') or '—'}.[/dim]")
    for label, path in (("Plan", out), ("Pareto plot", plot), ("SkyPilot task", sky)):
        if path is not None:
            con.print(f"{label} written to {path}")
    if dropped:
        same = f"; {hidden} row{'s' if hidden > 1 else ''} that differ only in what was left out not shown" if hidden else ""
        con.print(f"[dim](left out at {width} columns: {', '.join(dropped)}{same}; --wide shows every column)[/dim]")
