"""``cloudfit profile run|add|show``: measure a model, record measurements from elsewhere, read a profile."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from cloudfit.cli.options import in_existing_folder
from cloudfit.cli.render import console, print_json

app = typer.Typer(help="Profile a model (a short real training run), add measurements from elsewhere, show a profile.",
                  no_args_is_help=True)

DEFAULT_STEPS = 10  # keep equal to cloudfit.profiling.runner.DEFAULT_STEPS (not imported: --help stays light)
DEFAULT_WARMUP = 2


@app.command("run")
def run(
    model: Optional[str] = typer.Argument(
        None, help="A zoo model (see `cloudfit models`), or the name to record for --model-file (default: the file's stem)."),
    model_file: Optional[str] = typer.Option(
        None, "--model-file", metavar="PATH.py:FACTORY",
        help="Profile your own model: FACTORY() returns (model, make_batch[, loss]); make_batch(batch_size, device)."),
    batch_size: Optional[int] = typer.Option(
        None, "--batch-size", "-b",
        help="Batch per device to time (default: the zoo's CPU batch on a CPU, its per-GPU batch on a GPU)."),
    steps: int = typer.Option(DEFAULT_STEPS, "--steps", help="Timed optimizer steps."),
    warmup: int = typer.Option(DEFAULT_WARMUP, "--warmup", help="Untimed warm-up steps before the timed ones."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    precision: str = typer.Option("fp32", "--precision", help="fp32, fp16 or bf16 (autocast; fp16 with loss scaling)."),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", dir_okay=False, callback=in_existing_folder,
        help="Profile file to write (default ./MODEL.json). An existing profile of MODEL keeps its other measurements."),
    stats_only: bool = typer.Option(False, "--stats-only", help="Count FLOPs/bytes/parameters only (seconds, no training); writes only with --out."),
    replace: bool = typer.Option(False, "--replace", help="Overwrite --out instead of merging into it."),
    as_json: bool = typer.Option(False, "--json", help="Print the profile as JSON to stdout."),
    llm: Optional[str] = typer.Option(None, "--model", "-m", help="A large model of the LLM zoo (llama3-8b …): "
                                                                  "a few layers at the real width (shrunk on a CPU)."),
    config: Optional[str] = typer.Option(None, "--config", help="A large model's Hugging Face config.json."),
    layers: Optional[int] = typer.Option(None, "--layers", help="LLM: layers to run, 1–4 (default 4 on a GPU, 2 on a CPU)."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="LLM: tokens per sequence (default 8192 on a GPU, 256 on a CPU)."),
    ac: str = typer.Option("selective", "--ac", help="LLM: activation checkpointing, none | selective | full."),
    ranks: Optional[int] = typer.Option(None, "--ranks", help="LLM: time FSDP's all-gather / reduce-scatter over N "
                                                              "local ranks (default: every GPU when several are "
                                                              "visible; on a CPU, gloo ranks when given)."),
) -> None:
    """Run a short real training run of MODEL and write its throughput profile."""
    from cloudfit.errors import ProfileError
    from cloudfit.profiling import io, zoo
    from cloudfit.types import Profile

    if llm is not None or config is not None or (model is not None and not model_file and _is_llm_only(model)):
        if model is not None and llm is not None:
            raise ProfileError("give the model once: MODEL or --model")
        _run_llm(llm or model, config, device=device, layers=layers, seq_len=seq_len, micro_batch=batch_size,
                 steps=None if steps == DEFAULT_STEPS else steps, warmup=None if warmup == DEFAULT_WARMUP else warmup,
                 ac=ac, ranks=ranks, out=out, replace=replace, as_json=as_json)
        return

    if model is None and not model_file:
        raise ProfileError("give a zoo MODEL (see `cloudfit models`) or --model-file path/to/file.py:factory")
    if batch_size is not None and batch_size < 1:
        raise ProfileError(f"batch size must be a positive integer, got {batch_size}")
    if not stats_only:
        from cloudfit.profiling.runner import check_run_options

        check_run_options(steps=steps, warmup=warmup, precision=precision, device=device, batch_size=batch_size)
    with _Progress() as bar:
        bar.phase(f"building {model or model_file}")
        if model_file:
            zm = zoo.load_user_model(model_file)
            model = zm.name = model or zm.name
        else:
            # Counting alone needs no weights: build on the meta device (instant, no memory).
            zm = zoo.build(model, device="meta" if stats_only else None)
        bar.phase(f"counting FLOPs of {model}")
        from cloudfit.profiling.stats import model_stats

        if stats_only:
            profile = Profile(model=model, stats=model_stats(zm, batch_size))
        else:
            from cloudfit.profiling.runner import profile_run

            stats = model_stats(zm)
            bar.phase(f"training {model}")
            profile = profile_run(zm, batch_size=batch_size, steps=steps, warmup=warmup, device=device,
                                  precision=precision, progress=bar.steps, stats=stats)
    path = None if (stats_only and out is None) else (out or Path(f"{model}.json"))
    kept = 0
    if path is not None:
        profile, kept = _merge_into(path, profile, replace)
        io.save_profile(profile, path)
    if as_json:
        print_json(io.profile_to_dict(profile))
        return
    render_profile(profile, path)
    if path is not None:
        extra = f" (kept {kept} earlier measurement{'s' if kept != 1 else ''})" if kept else ""
        console().print(f"wrote {path}{extra}", markup=False, soft_wrap=True)


def _is_llm_only(name: str) -> bool:
    """A name of the LLM zoo that is not also a model of the profiling zoo."""
    from cloudfit.llm.zoo import is_llm
    from cloudfit.profiling import zoo

    return is_llm(name) and name not in zoo.names()


def _run_llm(model, config, *, device, layers, seq_len, micro_batch, steps, warmup, ac, ranks, out, replace,
             as_json) -> None:
    """``profile run`` of a large model: a few real layers (``cloudfit.profiling.llm_run``), appended to FILE."""
    from cloudfit.errors import ProfileError
    from cloudfit.profiling import llm_run as profile_run
    from cloudfit.llm.zoo import resolve
    from cloudfit.profiling import io
    from cloudfit.types import LLMProfile

    shape = resolve(model, config)
    profile_run.check_options(layers=layers or 1, seq_len=seq_len or 2, micro_batch=micro_batch or 1,
                              steps=steps or 1, warmup=warmup or 0, ac=ac)
    path = out or Path(f"{shape.name}.json")
    prof = io.new_llm_profile(shape, "config" if config else "zoo")
    if path.exists() and not replace:
        old = io.load_profile(path, llm_ok=True)
        if not isinstance(old, LLMProfile) or dict(old.shape) != shape.to_dict():
            raise ProfileError(f"{path} holds a profile of {old.model!r}, not of {shape.name!r}; choose another --out "
                               "or pass --replace")
        prof = old
    with _Progress() as bar:
        bar.phase(f"training {layers or 'a few'} layers of {shape.name}")
        m = profile_run.run(shape, device=device, layers=layers, seq_len=seq_len, micro_batch=micro_batch,
                            steps=steps, warmup=warmup, ac=ac, ranks=ranks, progress=bar.steps)
    updated = prof.with_measurement(io.validate_llm_measurement(m, shape))
    io.save_profile(updated, path)
    if as_json:
        print_json(io.profile_to_dict(updated))
        return
    render_llm_profile(updated, path)
    console().print(f"wrote {path}", markup=False, soft_wrap=True)


def _merge_into(path: Path, profile, replace: bool):
    """The profile to write at ``path``: merged with what is there unless --replace; refuses to clobber."""
    from cloudfit.errors import ProfileError
    from cloudfit.profiling import io

    if replace or not path.exists():
        return profile, 0
    try:
        old = io.load_profile(path)
    except ProfileError as e:
        raise ProfileError(f"{path} exists and is not a profile this version can read ({e}); "
                           "choose another --out or pass --replace") from None
    if old.model != profile.model:
        raise ProfileError(f"{path} holds a profile of {old.model!r}, not {profile.model!r}; "
                           "choose another --out or pass --replace")
    merged = io.merge_measurements(old, profile)
    return merged, len(merged.measurements) - len(profile.measurements)


@app.command("add")
def add(
    profile: str = typer.Argument(..., help="Profile file, or a shipped profile name (e.g. resnet50). An LLM "
                                            "profile FILE is created when absent (with --model or --config)."),
    accelerator: str = typer.Option(..., "--accelerator", "-a", help="Accelerator (A100, H100, T4 …) or cpu."),
    count: int = typer.Option(1, "--count", help="Accelerators per node."),
    nodes: int = typer.Option(1, "--nodes", help="Nodes."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", "-b",
                                             help="Batch per device (LLM: sequences per data-parallel rank and step)."),
    precision: Optional[str] = typer.Option(None, "--precision", help="fp32, tf32, fp16, bf16 or fp8."),
    samples_per_second: Optional[float] = typer.Option(None, "--samples-per-second",
                                                       help="Training throughput of the whole cluster."),
    source: str = typer.Option("reported", "--source", help="measured, reported or probe."),
    note: str = typer.Option("", "--note", help="Where the number comes from (paper, URL, run id)."),
    as_json: bool = typer.Option(False, "--json", help="Print the updated profile as JSON to stdout."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="LLM: a zoo model (llama3-8b …)."),
    config: Optional[str] = typer.Option(None, "--config", help="LLM: a Hugging Face config.json of the model."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="LLM: tokens per sequence."),
    layout: str = typer.Option("", "--layout", help="LLM: the run's layout, e.g. fsdp=8,ac=selective."),
    tokens_per_second: Optional[float] = typer.Option(None, "--tokens-per-second",
                                                      help="LLM: tokens/s of the whole cluster."),
    memory_gib: Optional[float] = typer.Option(None, "--memory-gib", help="LLM: peak memory per GPU (GiB)."),
    framework: Optional[str] = typer.Option(None, "--framework", hidden=True, help="Deprecated: use --stack."),
    from_log: Optional[Path] = typer.Option(None, "--from-log",
                                            help="LLM: read tokens/s, memory, MFU and the layout from this training "
                                                 "log (rank 0's), parsed by --stack."),
    stack: Optional[str] = typer.Option(None, "--stack", help="LLM: the stack that ran it (torchtitan, megatron, "
                                                              "accelerate, custom, cloudfit; the step model's "
                                                              "fsdp / megatron-deepspeed too); with --from-log the "
                                                              "one whose log it is (default: torchtitan)."),
    stack_config: Optional[Path] = typer.Option(None, "--stack-config",
                                                help="LLM --from-log: the run's own configuration (torchtitan TOML/"
                                                     "JSON/flags, Megatron arguments) for what the log does not print."),
    warmup_steps: int = typer.Option(3, "--warmup-steps", help="LLM --from-log: steps left out as warm-up (the "
                                                                "first logged interval always is)."),
) -> None:
    """Append a measurement taken elsewhere (validated) to a profile."""
    import datetime as dt

    from cloudfit.errors import ProfileError
    from cloudfit.profiling import io
    from cloudfit.types import Measurement

    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()
    from cloudfit.cli import options as opts

    stack = opts.stack_option(stack, framework)  # --framework: the old word, mapped silently
    if from_log is None:  # a manual add names the step model's constants: a stack's, or their own name
        from cloudfit.llm.step import FRAMEWORKS

        framework = "fsdp" if stack is None else stack if stack in FRAMEWORKS else None
        if framework is None:
            from cloudfit.stacks import get as get_stack

            framework = get_stack(stack).framework
    else:
        stack = stack or "torchtitan"
        framework = "fsdp"
    if from_log is not None:
        if tokens_per_second is not None or samples_per_second is not None:
            raise ProfileError("--from-log reads the speed from the log: leave out --tokens-per-second")
        from cloudfit.profiling.from_log import measurement_from_log
        from cloudfit.stacks import get as get_stack

        r = measurement_from_log(stack, from_log, gpus=count * nodes, stack_config=stack_config,
                                 layout=layout or None, seq_len=seq_len, batch_size=batch_size, precision=precision,
                                 warmup_steps=warmup_steps)
        fw = framework if framework != "fsdp" else get_stack(stack).framework
        _add_llm(profile, accelerator=accelerator, count=count, nodes=nodes, batch_size=r["batch_size"],
                 precision=r["precision"], source="measured" if source == "reported" else source,
                 note=(note + "; " if note else "") + r["note"], as_json=as_json, model=model, config=config,
                 seq_len=r["seq_len"], layout=r["layout"], tokens_per_second=r["tokens_per_second"],
                 memory_gib=r["memory_gib"], framework=fw, now=now)
        return
    if precision is None:
        raise ProfileError("give --precision (fp32, tf32, fp16, bf16 or fp8)")
    if batch_size is None:
        raise ProfileError("give --batch-size (per device; LLM: sequences per data-parallel rank and step)")
    if tokens_per_second is not None or model is not None or config is not None:
        if samples_per_second is not None:
            raise ProfileError("an LLM measurement is given in --tokens-per-second, not --samples-per-second")
        _add_llm(profile, accelerator=accelerator, count=count, nodes=nodes, batch_size=batch_size,
                 precision=precision, source=source, note=note, as_json=as_json, model=model, config=config,
                 seq_len=seq_len, layout=layout, tokens_per_second=tokens_per_second, memory_gib=memory_gib,
                 framework=framework, now=now)
        return
    if samples_per_second is None:
        raise ProfileError("give --samples-per-second (or, for a large model, --tokens-per-second)")
    path = io.resolve_profile(profile)
    from cloudfit.types import LLMProfile

    if isinstance(io.load_profile(path, llm_ok=True), LLMProfile):
        raise ProfileError(f"{path} is a large-model (LLM) profile: give its runs as --tokens-per-second with "
                           "--seq-len and --layout")
    m = Measurement(accelerator=accelerator, count=count, nodes=nodes, batch_size_per_device=batch_size,
                    precision=precision.lower(), samples_per_second=samples_per_second, source=source, note=note,
                    measured_at=now)
    updated = io.add_measurement(path, m)
    if accelerator.lower() != "cpu":
        from cloudfit.catalog import hardware

        warning = hardware.precision_note(accelerator, precision)
        if warning:
            import sys

            sys.stderr.write(f"warning: {warning}\n")
    if as_json:
        print_json(io.profile_to_dict(updated))
        return
    added = updated.measurements[-1]
    console().print(f"added {added.count}× {added.accelerator} × {added.nodes} node(s), batch {added.batch_size_per_device}, "
                    f"{added.precision}: {added.samples_per_second:g} samples/s to {path} "
                    f"({len(updated.measurements)} measurements)", markup=False, soft_wrap=True)


def _add_llm(profile: str, *, accelerator, count, nodes, batch_size, precision, source, note, as_json, model, config,
             seq_len, layout, tokens_per_second, memory_gib, framework, now) -> None:
    """``profile add`` of an LLM run: validated against the model, written atomically (FILE created when absent);
    a bad measurement leaves the file untouched."""
    from cloudfit.errors import ProfileError
    from cloudfit.llm.zoo import resolve
    from cloudfit.profiling import io
    from cloudfit.types import LLMMeasurement, LLMProfile

    if tokens_per_second is None:
        raise ProfileError("give --tokens-per-second (the whole cluster's) for an LLM measurement")
    if seq_len is None:
        raise ProfileError("give --seq-len for an LLM measurement")
    path = Path(profile).expanduser()
    if path.exists():
        prof = io.load_profile(io.resolve_profile(profile), llm_ok=True)
        if not isinstance(prof, LLMProfile):
            raise ProfileError(f"{path} is a profile of {prof.model!r} (not a large model): an LLM measurement "
                               "cannot be added to it")
        if model is not None or config is not None:
            given = resolve(model, config)
            if given.to_dict() != dict(prof.shape):
                raise ProfileError(f"{path} holds a profile of {prof.model!r}, not of {given.name!r}")
    else:
        if model is None and config is None:
            raise ProfileError(f"{path} does not exist: give --model or --config to create it")
        prof = io.new_llm_profile(resolve(model, config), "config" if config else "zoo")
    m = LLMMeasurement(accelerator=accelerator, gpus_per_node=count, nodes=nodes, precision=precision.lower(),
                       seq_len=seq_len, batch_size=batch_size, layout=layout, framework=framework,
                       tokens_per_second=tokens_per_second, memory_gib=memory_gib, source=source, note=note,
                       measured_at=now)
    m = io.validate_llm_measurement(m, io.llm_shape(prof))
    updated = prof.with_measurement(m)
    io.save_profile(updated, path)
    if as_json:
        print_json(io.profile_to_dict(updated))
        return
    where = f"{m.nodes}×{m.gpus_per_node}×{m.accelerator}" if m.nodes > 1 else f"{m.gpus}×{m.accelerator}"
    console().print(f"added {where} {m.layout} ({m.framework}, {m.precision}, seq {m.seq_len}): "
                    f"{m.tokens_per_second:,.0f} tokens/s to {path} ({len(updated.measurements)} measurements)",
                    markup=False, soft_wrap=True)


@app.command("show")
def show(
    profile: str = typer.Argument(..., help="Profile file, or a shipped profile name (e.g. resnet50)."),
    as_json: bool = typer.Option(False, "--json", help="Print the profile as JSON to stdout."),
) -> None:
    """Show a profile's model stats and measurements."""
    from cloudfit.profiling import io

    from cloudfit.types import LLMProfile

    path = io.resolve_profile(profile)
    p = io.load_profile(path, llm_ok=True)
    if as_json:
        print_json(io.profile_to_dict(p))
        return
    if isinstance(p, LLMProfile):
        render_llm_profile(p, path)
        return
    render_profile(p, path)


# --------------------------------------------------------------------------------------------
# Rendering


def _si(x: float, unit: str) -> str:
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= factor:
            return f"{x / factor:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def _seconds(x: float) -> str:
    return f"{x * 1000:.3g} ms" if x < 1 else f"{x:.3g} s"


def render_profile(p, path: Optional[Path]) -> None:
    """Model stats, op-class split and measurements as rich tables on stdout."""
    from rich import box
    from rich.table import Table

    from cloudfit.cli.table import Column

    s = p.stats
    con = console()
    where = f"  [{path}]" if path else ""
    con.print(f"{p.model} — {s.task or 'model'}, {s.input or 'one sample'}{where}", markup=False)
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(justify="left")
    t.add_column(justify="right")
    rows = [
        ("parameters", f"{s.parameters / 1e6:.2f} M"),
        ("FLOPs per sample, forward + backward", _si(s.flops_per_sample, "FLOP")),
        ("FLOPs per sample, forward", _si(s.forward_flops_per_sample, "FLOP")),
        ("gradient bytes per step", _si(s.gradient_bytes, "B")),
        ("saved activations per sample", _si(s.activation_bytes_per_sample, "B")),
        ("stats batch size", str(s.batch_size)),
    ]
    for k, v in rows:
        t.add_row(k, v)
    con.print(t)
    ops = Table(title="per sample by op class (multiply-add = 2 FLOPs)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("op class", "FLOPs", "bytes moved", "FLOP/byte"):
        ops.add_column(col, justify="left" if col == "op class" else "right", no_wrap=True)
    for name, oc in s.op_classes.items():
        if oc.flops or oc.bytes:
            ops.add_row(name, _si(oc.flops, "FLOP"), _si(oc.bytes, "B"), f"{oc.flops / oc.bytes:.1f}" if oc.bytes else "—")
    con.print(ops)
    if not p.measurements:
        con.print("no measurements (stats only)")
        return
    cols = [Column("device"), Column("n×nodes", "right"), Column("batch", "right"), Column("prec.", keep=2),
            Column("samples/s", "right"), Column("step", "right"), Column("p90", "right", keep=1),
            Column("peak mem", "right", keep=3)]
    rows, notes = [], []
    for i, m in enumerate(p.measurements, 1):
        med, p90 = (_seconds(m.step_time_s.median), _seconds(m.step_time_s.p90)) if m.step_time_s else ("—", "—")
        mem = _si(m.peak_memory_bytes, "B") if m.peak_memory_bytes else "—"
        rate = f"{m.samples_per_second:,.0f}" if m.samples_per_second >= 100 else f"{m.samples_per_second:.3g}"
        rows.append([f"{i}. {m.accelerator}", f"{m.count}×{m.nodes}", str(m.batch_size_per_device), m.precision, rate,
                     med, p90, mem])
        where = ", ".join(x for x in (m.device_name, m.host, m.torch_version and f"torch {m.torch_version}", m.measured_at) if x)
        notes.append(f"  {i}. {m.source}" + (f": {m.note}" if m.note else "") + (f" [{where}]" if where else ""))
    _measurements_table(con, f"{len(p.measurements)} measurement(s)", cols, rows, notes)


def _measurements_table(con, title, cols, rows, notes) -> None:
    """A profile's measurements fitted to the terminal (columns dropped, never cut), each one's note under it."""
    from cloudfit.cli.table import fit, print_table

    t, dropped = fit(title, cols, rows, con.width)
    print_table(con, t)
    for line in notes:
        con.print(line, overflow="fold", markup=False)
    if dropped:
        con.print(f"[dim](left out at {con.width} columns: {', '.join(dropped)}; --json shows them)[/dim]")


def render_llm_profile(p, path: Optional[Path]) -> None:
    """An LLM profile: the model, its stats and every measurement (per-layer timings where profiled)."""
    from cloudfit.cli.recommend_llm import _short  # the layout without its defaults
    from cloudfit.cli.table import WIDE_COLUMNS, Column

    con = console()
    narrow = con.width < WIDE_COLUMNS  # as recommend's table: the degrees and checkpointing only
    st = p.stats
    con.print(f"{p.model} — large model ({p.origin}), {st['parameters'] / 1e9:.2f} B parameters, "
              f"{_si(st['flops_per_token'], 'FLOP')} per token at seq {st['seq_len']:,}" + (f"  [{path}]" if path else ""),
              markup=False)
    if not p.measurements:
        con.print("no measurements")
        return
    cols = [Column("device"), Column("nodes×n", "right"), Column("prec.", keep=1), Column("seq", "right"),
            Column("batch", "right", keep=4), Column("layout"), Column("stack", keep=2), Column("tokens/s", "right"),
            Column("peak mem", "right"), Column("layer f+b", "right", keep=3)]
    rows, notes = [], []
    for i, m in enumerate(p.measurements, 1):
        lay = m.layers or {}
        rows.append([f"{i}. {m.accelerator}", f"{m.nodes}×{m.gpus_per_node}", m.precision, f"{m.seq_len:,}",
                     str(m.batch_size), _short(m.layout, compact=narrow), m.framework, f"{m.tokens_per_second:,.0f}",
                     f"{m.memory_gib:.1f} GiB" if m.memory_gib else "—",
                     _seconds(lay["forward_backward_s"]) if lay else "—"])
        extra = f" ({m.layers['layers_run']} of {p.shape['layers']} layers, width {m.layers['shape']['hidden']})" \
            if m.layers else ""
        notes.append(f"  {i}. {m.source}{extra}" + (f": {m.note}" if m.note else "") +
                     (f" [{m.device_name or ''} {m.measured_at}]" if m.measured_at else ""))
    _measurements_table(con, None, cols, rows, notes)


class _Progress:
    """A rich progress bar on stderr: a spinner per phase, then a bar over the training steps."""

    def __init__(self) -> None:
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)

        err = console(stderr=True)
        # Only on a terminal: in a pipe or a log a live bar is noise.
        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), TimeRemainingColumn(), console=err, transient=True,
                                  disable=not err.is_terminal)
        self._task: Any = None

    def __enter__(self) -> "_Progress":
        self._progress.__enter__()
        self._task = self._progress.add_task("starting", total=None)
        return self

    def __exit__(self, *exc) -> None:
        self._progress.__exit__(*exc)

    def phase(self, description: str) -> None:
        self._progress.update(self._task, description=description, total=None, completed=0)

    def steps(self, done: int, total: int) -> None:
        self._progress.update(self._task, total=total, completed=done)
