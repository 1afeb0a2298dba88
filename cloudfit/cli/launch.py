"""``cloudfit launch``, ``cloudfit status``, ``cloudfit down``: run a plan on a cluster and clean up after it.

``launch`` parses its options, builds the executor, and confirms and renders what the library entry
``cloudfit.launch`` / ``cloudfit.prepare_launch`` (``cloudfit/launcher.py``) makes of the plan: a notebook
launches exactly what the command line launches.

Exit codes of ``launch`` beyond the usual ones (``cloudfit.errors``): 4 when the budget guard stopped
the run (checkpoint saved), 5 when the ``--timeout`` (the deadline rule) stopped it.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from pathlib import Path
from typing import Any, Optional

import typer
from typer.core import TyperCommand

from cloudfit.cli.render import console, money, print_json
from cloudfit.launcher import BUDGET_MARGIN

#: ``launch`` exit codes for runs the guard stopped (the README's table).
EXIT_BUDGET, EXIT_TIMEOUT = 4, 5
LAUNCH_BACKENDS = ("local", "gcp", "sky")

ProjectOpt = typer.Option(None, "--project", help="Google Cloud project (default: from application-default credentials).")
EndpointOpt = typer.Option(None, "--compute-endpoint", envvar="CLOUDFIT_COMPUTE_ENDPOINT",
                           help="Compute Engine API endpoint URL (private endpoints, test servers).")


class _DashDash(TyperCommand):
    """Keeps everything after ``--`` as the command to run (``cloudfit launch plan.json -- python train.py``)."""

    def parse_args(self, ctx, args):  # type: ignore[override]
        if "--" in args:
            i = args.index("--")
            ctx.meta["cloudfit.command"] = list(args[i + 1:])
            args = args[:i]
        return super().parse_args(ctx, args)


def register(app: typer.Typer) -> None:
    app.command("launch", cls=_DashDash)(launch)
    app.command("status")(status)
    app.command("down")(down)


# ------------------------------------------------------------------------------ launch

@contextlib.contextmanager
def _sigterm_as_interrupt():
    """A launcher stopped with SIGTERM (``timeout``, ``kill``, a CI runner) tears down like Ctrl-C
    instead of dying with its cluster still running (the VMs' own caps would stop them, but later). A Python
    handler the host had (a test runner, a notebook kernel) is told first: the CLI turns the interrupt into
    exit 130, and a host running it in-process would not learn of its own stop otherwise."""

    def handler(signum, frame):
        if callable(old):
            old(signum, frame)
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (e.g. called from a notebook worker): leave it alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def launch(
    ctx: typer.Context,
    plan_path: Optional[Path] = typer.Argument(None, metavar="[PLAN.json]", help="A plan from `cloudfit recommend --out`.", dir_okay=False),
    backend: str = typer.Option("local", "--backend", help="local (a rehearsal on this machine), gcp (Compute Engine) or sky (other clouds through SkyPilot)."),
    budget: Optional[str] = typer.Option(None, "--budget", help=f"Spend at most this many USD (default: the plan's budget, else its P90 cost × {BUDGET_MARGIN})."),
    name: Optional[str] = typer.Option(None, "--name", help="Cluster name (VM names and labels derive from it)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be created and the cost cap; create nothing."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    project: Optional[str] = ProjectOpt,
    endpoint: Optional[str] = EndpointOpt,
    checkpoint_dir: Optional[str] = typer.Option(None, "--checkpoint-dir", help="Checkpoint folder (local) or gs://BUCKET/PATH (gcp; required there)."),
    checkpoint_every: Optional[int] = typer.Option(None, "--checkpoint-every", help="Checkpoint every K steps (default: by time, at the Young/Daly interval the plan priced)."),
    trust_plan_prices: bool = typer.Option(False, "--trust-plan-prices", help="Launch a plan whose prices differ from the shipped catalog's (recorded in state; the guard never charges less than the catalog)."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Train this many steps instead of the plan's samples."),
    timeout: Optional[str] = typer.Option(None, "--timeout", help="Stop (with a checkpoint) after this long, e.g. 30m, 2h."),
    image: Optional[str] = typer.Option(None, "--image", help="Boot image for gcp VMs (default: a Deep Learning VM PyTorch image)."),
    check_interval: Optional[float] = typer.Option(None, "--check-interval", help="Seconds between budget checks and polls (default: 30 on gcp, 1 locally)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="No plan file: recommend for this shipped profile under --budget, then launch."),
    samples: Optional[float] = typer.Option(None, "--samples", help="With --model: total training samples."),
    epochs: Optional[float] = typer.Option(None, "--epochs", help="With --model: epochs (with --dataset-size)."),
    dataset_size: Optional[int] = typer.Option(None, "--dataset-size", help="With --model: samples per epoch."),
    as_json: bool = typer.Option(False, "--json", help="Print the preview (--dry-run) or the run's result as JSON to stdout."),
    deadline: Optional[str] = typer.Option(None, "--deadline", help="Keep this deadline from now (e.g. 36h, 5d) instead of the plan's; the launcher moves a spot cluster that falls behind (measured) to on-demand when that keeps it."),
    stack: Optional[str] = typer.Option(None, "--stack", help="The training stack that runs a large-model plan: torchtitan, megatron, accelerate or cloudfit (default: the plan's --stack; else torchtitan on gcp/sky, cloudfit's trainer rehearsing locally). With `-- CMD`: the stack whose log parser reads your command's progress."),
    workdir: Optional[Path] = typer.Option(None, "--workdir", help="With `-- CMD`: the folder that ships to every node and the command runs from (default: the folder of the command's script; size-checked, secrets refused).", file_okay=False),
    ranks: Optional[int] = typer.Option(None, "--ranks", help="local: rehearse on at most this many ranks (default: min(4, CPU cores)); with the same --checkpoint-dir a large-model job resumes re-sharded on another number."),
) -> None:
    """Launch a plan: train on a local rehearsal cluster or on Compute Engine, within a budget.

    A large-model plan runs on its stack (--stack; torchtitan on gcp/sky when none is named). Anything after
    `--` runs under torchrun instead, with the plan's layout in its environment and the script's folder shipped
    to every node, e.g. `cloudfit launch plan.json -- python train.py --lr 0.1`.
    """
    from cloudfit.errors import UsageError
    from cloudfit.executors import check_backend
    from cloudfit.launcher import default_budget, prepare_launch
    from cloudfit.units import parse_hours, parse_usd

    command = tuple(ctx.meta.get("cloudfit.command", ()))
    check_backend(backend, LAUNCH_BACKENDS)
    budget_usd = None if budget is None else parse_usd(budget)
    from_model = plan_path is None
    if plan_path is not None and model is not None:
        raise UsageError("give a plan file or --model (to recommend first), not both")
    if plan_path is None and model is None:
        raise UsageError("give a plan file (from `cloudfit recommend --out plan.json`) or --model with --budget")
    plan = _plan(plan_path, model, samples, epochs, dataset_size, budget_usd)
    from cloudfit.executors import check_launchable

    plan = check_launchable(plan, backend)
    price_notes: list[str] = []
    if plan_path is not None:  # a file is input like any other: re-priced from the catalog the guard trusts
        from cloudfit.plan.io import reprice

        plan, price_notes = reprice(plan, trust_prices=trust_plan_prices, source=str(plan_path))
    if budget_usd is None:  # the plan's P90 hours at the catalog's price (not the file's cost figure, which may lie)
        budget_usd = default_budget(plan)
    record = {"trust_plan_prices": True, "price_notes": price_notes[:10]} if trust_plan_prices else {}
    from cloudfit.executors.base import plan_identity

    record["plan_id"] = plan_identity(plan)  # the budget and the checkpoint key are the plan's, across relaunches
    store = None if dry_run else _open_store()
    if ranks is not None and (ranks < 1 or backend != "local"):
        raise UsageError("--ranks must be at least 1" if ranks < 1 else "--ranks is for --backend local")
    if check_interval is not None and not check_interval > 0:
        raise UsageError(f"--check-interval must be positive, got {check_interval:g}")
    executor = _executor(backend, store, check_interval, ranks, project, endpoint, image)
    ready = prepare_launch(plan, executor, budget_usd=budget_usd, name=name, command=command, checkpoint_dir=checkpoint_dir,
                    checkpoint_every=checkpoint_every, steps=steps,
                    timeout_s=None if timeout is None else parse_hours(timeout, "timeout") * 3600,
                    deadline_hours=None if deadline is None else parse_hours(deadline, "deadline"), record=record,
                    stack=stack, workdir=None if workdir is None else str(workdir))
    spec = ready.spec
    preview = ready.preview(*(f"--trust-plan-prices: {n}" for n in price_notes[:5]))
    if dry_run:
        if as_json:
            step = ((plan.provenance or {}).get("bill") or {}).get("data_step")  # recommend --data's assumption
            print_json({"dry_run": True, "preview": preview, "budget_usd": budget_usd,
                        **({"data_step": step} if step else {})})
        else:
            _render_preview(preview, plan, from_model)
        return
    if (backend in ("gcp", "sky") or from_model) and not yes:
        if as_json or not sys.stdin.isatty():
            raise UsageError("refusing to launch without confirmation: pass --yes (stdin is not a terminal)")
        _render_preview(preview, plan, from_model, stderr=True)
        if not typer.confirm(f"Launch {spec.name} on {backend} for at most {money(budget_usd)}?", default=False, err=True):
            raise typer.Exit(1)
    _run(ready, as_json)


def _run(ready, as_json: bool) -> None:
    """Run a prepared launch, events on stderr; the result on stdout; exit 1 / 2 / 4 / 5 for failed / refused /
    budget / timeout."""
    err = console(stderr=True)
    for note in ready.notes:  # what the rehearsal (or the runnable layout) changed vs the plan
        err.print(f"Note: {note}", soft_wrap=True)
    show = _EventPrinter(err)
    with _sigterm_as_interrupt():
        result = ready.run(on_event=show)
    if as_json:
        print_json(result)
    else:
        _render_result(result)
    if result.reason == "failed":
        raise typer.Exit(1)
    if result.reason == "refused":  # a rank refused its input (a checkpoint that does not verify): bad input
        raise typer.Exit(2)
    if result.reason == "budget":  # a script must not mistake a budget stop for a finished training
        raise typer.Exit(EXIT_BUDGET)
    if result.reason == "timeout":
        raise typer.Exit(EXIT_TIMEOUT)


def _open_store():
    """The state store, with its one-line notice on stderr if a corrupt one was moved aside."""
    from cloudfit.executors.state import StateStore

    store = StateStore()
    if store.recovered:
        console(stderr=True).print(f"[yellow]warning:[/yellow] {store.recovered}", soft_wrap=True)
    return store


def _plan(plan_path, model, samples, epochs, dataset_size, budget_usd):
    if plan_path is not None:
        from cloudfit.plan.io import load_plan

        return load_plan(plan_path)
    from cloudfit.errors import UsageError

    if budget_usd is None:
        raise UsageError("--model needs --budget: cloudfit recommends the fastest cluster under it, then launches")
    from cloudfit.plan import recommend
    from cloudfit.workload import make_workload

    w = make_workload(model=model, samples=samples, epochs=epochs, dataset_size=dataset_size, budget=budget_usd,
                      objective="time")
    return recommend(w)


def _executor(backend, store, check_interval, ranks, project, endpoint, image):
    from cloudfit.executors import get_executor

    if backend == "local":
        return get_executor("local", interval_s=check_interval, store=store, max_ranks=ranks)
    if backend == "sky":
        return get_executor("sky", interval_s=check_interval, store=store)
    return get_executor("gcp", project=project, endpoint=endpoint, image=image, interval_s=check_interval, store=store)


class _EventPrinter:
    """One line per event on stderr; progress at most every 2 s."""

    def __init__(self, con) -> None:
        self.con = con
        self.last_progress = 0.0
        self.since: tuple[float, int, object] | None = None  # (time, step, restart) the rate is measured from

    def __call__(self, e) -> None:
        message = e.message
        if e.kind == "progress":
            eta = self.eta(e.data)
            now = time.monotonic()
            if now - self.last_progress < 2.0:
                return
            self.last_progress = now
            message += f" · ETA {eta}" if eta else ""
        self.con.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {message}", soft_wrap=e.kind == "profile")

    def eta(self, d) -> str | None:
        """Time left at the rate measured since the first progress of this run (or of its latest restart):
        remaining steps × seconds per step seen so far; None until a step has passed."""
        from cloudfit.units import format_hours

        step, total = d.get("step"), d.get("total_steps")
        if not isinstance(step, int) or not isinstance(total, int):
            return None
        t = d.get("updated_at") if isinstance(d.get("updated_at"), (int, float)) else time.time()
        if self.since is None or step < self.since[1] or d.get("restart") != self.since[2]:
            self.since = (t, step, d.get("restart"))
            return None
        done, took = step - self.since[1], t - self.since[0]
        if done <= 0 or took <= 0 or step >= total:
            return None
        return format_hours((total - step) * took / done / 3600.0)


def _render_preview(pv, plan, from_model: bool, stderr: bool = False) -> None:
    con = console(stderr=stderr)
    if from_model:
        e = plan.chosen
        con.print(f"Recommended under {money(plan.workload.budget_usd)}: {e.config.label()} — "
                  f"{e.hours:.1f} h expected, {money(e.cost_usd)} expected (P90 {money(e.cost_p90_usd)})")
    verb = "Will create" if stderr else "Would create"
    kind = {"gcp": "VM(s)", "sky": "node(s) through SkyPilot"}.get(pv.backend, "local process group")
    con.print(f"[bold]{verb} on {pv.backend}: cluster {pv.name}, {len(pv.nodes)} {kind}[/bold]")
    # One block per node, never a table: every value printed in full, whatever the terminal width.
    for n in pv.nodes:
        d = n.detail
        labels = ", ".join(f"{k}={v}" for k, v in n.labels.items())
        if pv.backend == "gcp":
            con.print(f"  {n.name}: zone {n.zone}, machine type {n.machine_type}, "
                      f"{n.accelerators}× {n.accelerator} ({d.get('guest_accelerator')}), {n.provisioning}, "
                      f"${n.price_per_hour:.4g}/h, max_run_duration {n.max_run_duration_s} s then "
                      f"{d.get('instance_termination_action')}, labels {labels}")
        elif pv.backend == "sky":
            con.print(f"  {n.name}: {d.get('cloud')} {d.get('region')}, instance type {n.machine_type}, "
                      f"{n.accelerators}× {n.accelerator}, {n.provisioning}, ${n.price_per_hour:.4g}/h, job capped at "
                      f"{n.max_run_duration_s} s, via {d.get('via')}")
        else:
            con.print(f"  {n.name}: {n.accelerators} rank(s) on this machine rehearsing {d.get('rehearsal_of')}, "
                      f"${n.price_per_hour:.4g}/h, stops itself after {n.max_run_duration_s} s, labels {labels}")
    d = pv.nodes[0].detail if pv.nodes else {}
    if pv.backend == "gcp":
        con.print(f"  image {d.get('image')}, boot disk {d.get('boot_disk')}, on_host_maintenance "
                  f"{d.get('on_host_maintenance')}, startup script {d.get('startup_script_bytes')} bytes")
    if pv.install and pv.backend in ("gcp", "sky"):
        con.print(f"  install: {pv.install}", soft_wrap=True, markup=False)
    _render_job(con, pv.job)  # Launch.preview always fills it (cloudfit.launcher.job_view), every backend
    con.print(f"Budget {money(pv.budget_usd)}; cost cap {money(pv.cost_cap_usd)} (every node to its max_run_duration "
              f"plus {pv.teardown_s:g} s teardown); guard checks every {pv.interval_s:g} s"
              + (f"; {pv.fallbacks} fallback config(s) on stockout/quota" if pv.fallbacks else ""))
    for note in pv.notes:
        con.print(f"Note: {note}")
    from cloudfit.cli.bill_view import data_step_line

    line = data_step_line(plan)
    if line:
        con.print(line)


def _render_job(con, job: dict) -> None:
    """What runs and ships (``cloudfit.launcher.job_view``): printed in full, for every backend."""
    if not job:
        return
    con.print(f"  stack: {job.get('stack')}" + (f" (progress: {job['progress']})" if job.get("progress") else ""),
              soft_wrap=True, markup=False)
    for c in job.get("commands", []):
        con.print(f"  command on {c['node']}" + (f" (in {c['cwd']})" if c.get("cwd") else "") + f": {c['command']}",
                  soft_wrap=True, markup=False)
    if job.get("env"):
        con.print("  environment: " + " ".join(f"{k}={v}" for k, v in sorted(job["env"].items())), soft_wrap=True,
                  markup=False)
    for sh in job.get("ships", []):
        if sh.get("what") == "workdir archive":
            con.print(f"  ships: workdir {sh['folder']} as a {sh['bytes']:,}-byte tar.gz (sha256 {sh['sha256']}, "
                      "checked on every node before use):", soft_wrap=True, markup=False)
            for f in sh["files"]:
                con.print(f"    {f['path']} ({f['bytes']:,} bytes)", soft_wrap=True, markup=False)
        elif sh.get("what") != "cloudfit":  # the install line above says it
            con.print(f"  ships: {sh.get('describe')}", soft_wrap=True, markup=False)
    for name, text in (job.get("config_files") or {}).items():
        con.print(f"  config file {name} ({len(text.encode()):,} bytes):", soft_wrap=True, markup=False)
        for line in text.splitlines():
            con.print(f"    {line}", soft_wrap=True, markup=False)
    con.print(f"  checkpoints: {job.get('checkpoints')}" + (f" (on the nodes: {job['node_checkpoints']})"
                                                             if job.get("node_checkpoints") else ""),
              soft_wrap=True, markup=False)
    if job.get("guarantee"):
        con.print(f"  at a budget or deadline stop: {job['guarantee']}", soft_wrap=True, markup=False)


def _speed(rec, progress) -> dict | None:
    """Measured vs planned speed of a large-model run (``cloudfit.profiling.measured.compare``) as a JSON-able
    dict with its ``line``; None before warm-up, for a run that recorded no planned speed, or a local rehearsal
    (a shrunk model on CPU: its speed is not comparable)."""
    from cloudfit.errors import UsageError
    from cloudfit.profiling import measured

    facts = rec.info.get("planned_speed")
    if not facts:
        return None
    if rec.info.get("rehearsal"):
        return {"line": "Speed not compared with the plan: the local rehearsal runs a shrunk model on CPU",
                "outside_band": False}
    tps = measured.measured_tokens_per_second(progress, seq_len=facts.get("seq_len"))
    if tps is None:
        return None
    try:
        return measured.compare(facts, tps).to_dict()
    except UsageError:
        return None


def _render_result(r) -> None:
    con = console()
    what = {"completed": "completed", "budget": "stopped at the budget (checkpoint saved)",
            "timeout": "stopped at the timeout (checkpoint saved)", "failed": "failed",
            "refused": "refused (not restarted)", "interrupted": "interrupted", "down": "deleted by `cloudfit down`",
            "exited": "ended on its own before the plan's steps (exit 0; cloudfit did not stop it)"}.get(r.reason, r.reason)
    line = f"{r.name}: {what} after {r.elapsed_s:.0f} s; spent {money(r.spend_usd) if r.spend_usd >= 0.01 else f'${r.spend_usd:.4f}'}"
    if r.total_steps:
        line += f"; step {r.steps}/{r.total_steps}"
    if r.samples_per_second:  # an LLM's sequences per second can be below 1
        sps = r.samples_per_second
        line += f"; {sps:,.0f} samples/s" if sps >= 10 else f"; {sps:.3g} samples/s"
    if r.restarts:
        line += f"; {r.restarts} restart(s)"
    if r.preemptions:
        line += f"; {r.preemptions} preemption(s)"
    con.print(line)
    for f in r.fallbacks:
        con.print(f"Skipped {f}")
    if r.detail:
        con.print(r.detail)


# ------------------------------------------------------------------------------ status

def status(
    name: Optional[str] = typer.Argument(None, help="A cluster (default: list all)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON to stdout."),
    project: Optional[str] = ProjectOpt,
    endpoint: Optional[str] = EndpointOpt,
    show_all: bool = typer.Option(False, "--all", help="Also list ended clusters that `down` has cleared."),
) -> None:
    """Show clusters: state, spend against the budget, why they ended; with NAME, its nodes and events."""
    store = _open_store()
    if name is None:
        rows = [_cluster_row(store, c) for c in store.clusters()
                if "@" not in c.name and (show_all or not (c.ended and c.info.get("cleared_at")))]
        for r in rows:  # a gcp cluster whose launcher is gone: ask Compute Engine what its VMs are doing
            if r.get("launcher_alive") is False and r["backend"] == "gcp":
                _gcp_vms(r, store.cluster(r["name"]), project, endpoint)
        if as_json:
            print_json({"clusters": rows})
            return
        from cloudfit.cli.status_view import render_clusters

        render_clusters(rows, console(), f"{len(rows)} cluster(s) in {store.path}")
        return
    rec = store.cluster(name)
    row = _cluster_row(store, rec)
    row["resources"] = [{"kind": r.kind, "name": r.name, "zone": r.zone, "state": r.state,
                         "price_per_hour": r.price_per_hour, "cap_s": r.cap_s, "intent_at": r.intent_at,
                         "created_at": r.created_at, "deleted_at": r.deleted_at,
                         **{k: v for k, v in r.info.items() if k in ("pid", "internal_ip", "error", "ended")}}
                        for r in store.resources(name)]
    row["events"] = [{"at": at, "kind": k, "message": m} for at, k, m in store.events(name)]
    row["progress"] = (_live_progress(rec) if not rec.ended else None) or rec.info.get("progress") or {}
    row["deadline"] = rec.info.get("deadline")
    row["switches"] = rec.info.get("switches", [])
    if rec.info.get("rehearsal") or rec.info.get("layout"):
        row["layout"] = rec.info.get("rehearsal") or rec.info.get("layout")
    if not rec.ended and rec.backend == "gcp":
        _gcp_vms(row, rec, project, endpoint)
    speed = _speed(rec, row["progress"] or {})
    if speed is not None:
        row["speed"] = speed
    if as_json:
        print_json(row)
        return
    con = console()
    from cloudfit.cli.status_view import headline

    con.print(headline(name, row))
    con.print(f"Spend {money(row['spend_usd'])} of {money(row['budget_usd'])}"
              + (" (estimated: the launcher is not running)" if row.get("spend_estimated") else ""))
    if row["config"]:
        con.print(f"Config {row['config']}")
    p = row["progress"] or {}
    if p.get("step") is not None:
        con.print(f"Progress step {p.get('step')}/{p.get('total_steps')}"
                  + (f", {p['samples_per_second']:,.0f} samples/s" if p.get("samples_per_second") else "")
                  + (f", {p['restart']} restart(s)" if p.get("restart") else ""))
    if speed is not None:  # every launch is a profile: measured vs planned, and what the plan would be now
        from rich.markup import escape

        line = speed["line"]
        con.print(f"[yellow]{escape(line)}[/yellow]" if speed.get("outside_band") else escape(line), soft_wrap=True)
    if p.get("loss") is not None and p.get("layout"):
        lay = p["layout"]
        con.print(f"Layout {lay.get('label', lay) if isinstance(lay, dict) else lay} on {p.get('world_size')} rank(s), "
                  f"loss {p['loss']:.3f}" + (f", checkpoint at step {p['checkpoint_step']}" if p.get("checkpoint_step") else ""))
    dl = row.get("deadline") or {}
    if dl.get("predicted_finish_at"):
        late = dl["predicted_finish_at"] - dl["deadline_at"]
        con.print(f"Predicted finish {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(dl['predicted_finish_at']))} "
                  f"(deadline {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(dl['deadline_at']))}, "
                  + (f"{-late:,.0f} s early" if late <= 0 else f"{late:,.0f} s late") + f") at "
                  f"{dl.get('steps_per_second', 0):.3g} steps/s on {dl.get('config')}"
                  + (f"; {dl['alternative']} would need {dl.get('alternative_needs_s', 0):,.0f} s of the "
                     f"{dl.get('deadline_in_s', 0):,.0f} s left" if dl.get("alternative") else ""), soft_wrap=True)
        if dl.get("reason"):
            con.print(f"Deadline rule: {dl['reason']}", soft_wrap=True)
    for sw in row["switches"]:
        con.print(f"Switched {time.strftime('%H:%M:%S', time.localtime(sw['at']))} to {sw['to']} ({sw['kind']}): {sw['reason']}",
                  soft_wrap=True)
    if row.get("warning"):
        con.print(f"[yellow]{row['warning']}[/yellow]")
    if "live_vms" in row:
        vms = row["live_vms"]
        if isinstance(vms, list):
            vms = ", ".join(vm + (" (stopped, billing)" if vm in row.get("stopped_vms", ()) else "") for vm in vms)
        con.print(f"Live VMs: {vms or 'none'}")
    for r in row["resources"]:
        con.print(f"  {r['kind']} {r['name']} {r['zone']} {r['state']}" + (f" ({r['error']})" if r.get("error") else ""))
    for e in row["events"][-10:]:
        con.print(f"  [dim]{time.strftime('%H:%M:%S', time.localtime(e['at']))}[/dim] {e['kind']}: {e['message']}")


def _launcher_alive(rec) -> bool:
    if rec.launcher_pid is None:
        return False
    try:
        import psutil

        p = psutil.Process(rec.launcher_pid)
        return rec.launcher_started is None or abs(p.create_time() - rec.launcher_started) < 0.01
    except Exception:
        return False


def _cluster_row(store, rec) -> dict[str, Any]:
    from cloudfit.executors import billing_bounds

    cfg = rec.info.get("config")
    label = None
    if cfg:
        from cloudfit.types import ClusterConfig

        label = ClusterConfig.from_dict(cfg).label()
    row: dict[str, Any] = {"name": rec.name, "backend": rec.backend, "status": rec.status, "reason": rec.reason,
                           "budget_usd": rec.budget_usd, "spend_usd": rec.spend_usd, "config": label,
                           "created_at": rec.created_at, "ended_at": rec.ended_at}
    if not rec.ended:
        alive = _launcher_alive(rec)
        row["launcher_alive"] = alive
        if not alive:
            min_billed_s, teardown_s = billing_bounds(rec.backend)  # the executor's own timing, not a copy of it
            row["spend_usd"] = store.refresh_spend(rec.name, min_billed_s=min_billed_s, teardown_s=teardown_s,
                                                   wait_s=0.5)
            row["spend_estimated"] = True
            row["warning"] = (f"the launcher is gone; its VMs stop at their max_run_duration — run `cloudfit down {rec.name}` "
                              "to delete them now" if rec.backend == "gcp" else
                              f"the launcher is gone; run `cloudfit down {rec.name}` to stop its processes")
    return row


def _live_progress(rec) -> dict[str, Any]:
    import json

    d = rec.info.get("run_dir")
    if not d:
        return {}
    try:
        return json.loads((Path(d) / "progress.json").read_text())
    except (OSError, ValueError):
        return {}


#: Compute Engine states of a VM that exists without running: its disks are billed until it is deleted, and
#: max_run_duration (which counts running time) never ends it.
_STOPPED_STATES = ("TERMINATED", "STOPPED", "SUSPENDED")


def _gcp_vms(row: dict[str, Any], rec, project, endpoint) -> None:
    """``row["live_vms"]``: every VM of the cluster (or ``unknown (why)``). With the launcher gone, VMs that
    shut themselves down without being deleted (their delete was refused: ``shutdown -h now`` leaves them
    TERMINATED) are ``row["stopped_vms"]``, the status says stopped but billing, and the warning names the
    command that ends the bill."""
    from cloudfit.errors import CloudfitError
    from cloudfit.executors import get_executor
    from cloudfit.executors.gcp.clients import Retry

    try:  # a look, not a launch: a few seconds of retries, then "unknown"
        ex = get_executor("gcp", project=project or rec.info.get("project"), endpoint=endpoint or rec.info.get("endpoint"),
                          retry=Retry(attempts=3, base_s=0.5, cap_s=2.0, total_s=10.0))
        states = ex.vm_states(rec.name)
    except CloudfitError as e:
        row["live_vms"] = f"unknown ({e})"
        return
    row["live_vms"] = sorted(states)
    if row.get("launcher_alive") is not False:
        return  # a live launcher replaces or deletes stopped VMs itself
    stopped = [vm for vm, s in states.items() if s in _STOPPED_STATES]
    row["stopped_vms"] = stopped
    down = f"run `cloudfit down {rec.name} --yes`"
    if stopped:
        row["status"] = "stopped, billing"
        running = len(states) - len(stopped)
        row["warning"] = (f"the launcher is gone and {len(stopped)} VM(s) shut themselves down without being deleted "
                          f"({', '.join(stopped)}): stopped, their disks billed until deleted"
                          + (f"; {running} still running until their max_run_duration" if running else "")
                          + f" — {down} to end the bill")
    elif not states:
        row["warning"] = f"the launcher is gone and no VM of {rec.name} is left — {down} to record it as ended"


# ------------------------------------------------------------------------------ down

def down(
    name: str = typer.Argument(..., help="The cluster to delete."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    project: Optional[str] = ProjectOpt,
    endpoint: Optional[str] = EndpointOpt,
    backend: Optional[str] = typer.Option(None, "--backend", help="local or gcp (default: from the state store; gcp if --project is given)."),
    all_with_label: bool = typer.Option(False, "--all-with-label", help="Delete every VM labelled with NAME, also ones of launches this state store did not record (another machine's)."),
    as_json: bool = typer.Option(False, "--json", help="Print what was deleted as JSON to stdout."),
) -> None:
    """Delete every VM (or local process) of a cluster — also ones the state store missed.

    Only VMs of launches recorded in this state store are deleted; --all-with-label deletes every VM
    carrying the cluster label (another machine's launch of the same name too).
    """
    from cloudfit.errors import UsageError
    from cloudfit.executors import check_backend, get_executor

    store = _open_store()
    rec = store.find_cluster(name)
    if backend is None:
        backend = rec.backend if rec is not None else ("gcp" if project or endpoint else "local")
    check_backend(backend, LAUNCH_BACKENDS)
    if not yes:
        if as_json or not sys.stdin.isatty():
            raise UsageError(f"refusing to delete {name} without confirmation: pass --yes (stdin is not a terminal)")
        if not typer.confirm(f"Delete every {'VM' if backend == 'gcp' else 'process'} of {name}?", default=False, err=True):
            raise typer.Exit(1)
    info = rec.info if rec is not None else {}
    if backend == "gcp":
        ex: Any = get_executor("gcp", project=project or info.get("project"), endpoint=endpoint or info.get("endpoint"),
                               store=store)
    else:
        ex = get_executor(backend, store=store)
    res = ex.down(name, all_with_label=all_with_label)
    rec = store.find_cluster(name)
    if rec is not None and rec.ended and not res.foreign:  # nothing of it left running: off the status list
        import time as _time

        store.update_cluster(name, info={"cleared_at": _time.time()})
    if as_json:
        print_json(res)
        return
    con = console()
    what = {"gcp": "VM(s)", "sky": "SkyPilot cluster(s)/job(s)"}.get(backend, "process group(s)")
    if backend == "sky" and res.already_gone and not (res.deleted or res.untracked or res.foreign):
        con.print(f"{name}: already gone — SkyPilot lists no cluster or managed job of it; nothing to delete")
        return
    con.print(f"{name}: deleted {len(res.deleted) + len(res.untracked)} {what}"
              + (f" ({', '.join(res.deleted + res.untracked)})" if res.deleted or res.untracked else "")
              + (f"; {len(res.already_gone)} already gone" if res.already_gone else "")
              + (f"; {len(res.untracked)} found by label but missing from the state store" if res.untracked else "")
              + (f"; left {len(res.foreign)} VM(s) of another launch of {name} alone ({', '.join(res.foreign)}; "
                 "--all-with-label deletes them)" if res.foreign else "")
              + (f"; {len(res.pending)} insert(s) still unanswered ({', '.join(res.pending)}): run `cloudfit down "
                 f"{name}` again" if res.pending else ""))
