"""``cloudfit search``: active search — short paid probe runs, chosen from the model's predictions."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from cloudfit.cli import options as opts
from cloudfit.cli.render import console, money, print_json


def search(
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
    catalog_path: Optional[Path] = opts.CATALOG,
    confidence: float = opts.CONFIDENCE,
    precision: str = opts.PRECISION,
    batch_size: Optional[int] = opts.BATCH_SIZE,
    probe_budget: str = typer.Option(..., "--probe-budget", help="Spend at most this many USD on probe runs."),
    max_trials: int = typer.Option(10, "--max-trials", help="Most probe runs."),
    probe_minutes: float = typer.Option(10.0, "--probe-minutes", help="Length of one probe run (its cost cap: this long at the VM's price)."),
    probe_steps: int = typer.Option(50, "--probe-steps", help="Training steps of one probe run (it also ends at --probe-minutes)."),
    backend: str = typer.Option("replay", "--backend", help="replay (a table of measurements), local or gcp."),
    replay_data: Optional[Path] = typer.Option(None, "--replay-data", help="With --backend replay: CSV of measured throughput.", dir_okay=False),
    storage: Optional[str] = typer.Option(None, "--storage", help="optuna storage to resume from, e.g. sqlite:///study.db."),
    study_name: Optional[str] = typer.Option(None, "--study-name", help="Study name in --storage (default: cloudfit-MODEL)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the optuna sampler."),
    project: Optional[str] = typer.Option(None, "--project", help="gcp: Google Cloud project."),
    compute_endpoint: Optional[str] = typer.Option(None, "--compute-endpoint", envvar="CLOUDFIT_COMPUTE_ENDPOINT", help="gcp: Compute Engine API endpoint."),
    check_interval: Optional[float] = typer.Option(None, "--check-interval", help="local/gcp: seconds between budget checks and polls of a probe (default: 30 on gcp, 1 locally)."),
    checkpoint_dir: Optional[str] = typer.Option(None, "--checkpoint-dir", help="gcp: gs://BUCKET/PATH the probe VMs write to (one folder per probe)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the final plan here (plan.json).", dir_okay=False, callback=opts.in_existing_folder),
    save_profile: Optional[Path] = typer.Option(None, "--save-profile", help="Write the profile with every probe's measurement here (for later `recommend --profile`).", dir_okay=False, callback=opts.in_existing_folder),
    as_json: bool = typer.Option(False, "--json", help="Print trials, spend and the plan as JSON to stdout."),
) -> None:
    """Active search: a few short paid probe runs, chosen by Bayesian optimisation, then a plan."""
    from cloudfit.errors import UsageError
    from cloudfit.units import parse_usd

    workload = opts.workload(
        model=model, profile=profile, samples=samples, epochs=epochs, dataset_size=dataset_size, deadline=deadline,
        budget=budget, objective=objective, regions=regions, accelerators=accelerators,
        spot_mode=opts.spot_mode(spot, spot_only), max_nodes=max_nodes, confidence=confidence, precision=precision,
        batch_size=batch_size)
    probe_usd = parse_usd(probe_budget, "probe budget")
    if not probe_minutes > 0:
        raise UsageError(f"--probe-minutes must be positive, got {probe_minutes:g}")
    if probe_steps < 1:
        raise UsageError(f"--probe-steps must be at least 1, got {probe_steps}")
    if check_interval is not None and not check_interval > 0:
        raise UsageError(f"--check-interval must be positive, got {check_interval:g}")
    from cloudfit.executors import check_backend, get_executor

    restrict = None
    use_measurements = True
    check_backend(backend, ("replay", "local", "gcp"))  # probes run on GCP VMs (SkyPilot probes: not yet)
    if backend == "replay":
        if replay_data is None:
            raise UsageError("--backend replay needs --replay-data FILE.csv")
        executor = get_executor("replay", table=replay_data, probe_seconds=probe_minutes * 60)
        restrict = {k[:3] for k in executor.table}  # a replay world is its table
    elif backend == "local":
        executor = get_executor("local", interval_s=check_interval)
        use_measurements = False  # a CPU rehearsal of the probes says nothing about GPU throughput
    else:
        if not (checkpoint_dir or "").startswith("gs://"):
            raise UsageError("--backend gcp needs --checkpoint-dir gs://BUCKET/PATH (the probe VMs write there)")
        executor = get_executor("gcp", project=project, endpoint=compute_endpoint, interval_s=check_interval)

    from cloudfit.active import active_search

    err = console(stderr=True)

    def show(t) -> None:
        got = f"{t.samples_per_second:,.0f} samples/s" if t.status == "ok" else f"failed: {t.reason}"
        err.print(f"probe {t.number}: {t.nodes}× {t.machine_type} ({t.accelerators_per_node}×{t.accelerator}) "
                  f"in {t.zone}: {got} (predicted {t.predicted_samples_per_second:,.0f}), {money(t.probe_cost_usd)}")

    from cloudfit.cli.launch import _sigterm_as_interrupt

    with _sigterm_as_interrupt():  # SIGTERM stops like Ctrl-C: the running probe is torn down and recorded
        result = active_search(workload, executor=executor, probe_budget_usd=probe_usd, catalog=catalog_path,
                               max_trials=max_trials, probe_seconds=probe_minutes * 60, probe_steps=probe_steps,
                               checkpoint_dir=checkpoint_dir, storage=storage, study_name=study_name, seed=seed,
                               restrict_to=restrict, use_measurements=use_measurements,
                               on_trial=None if as_json else show)
    if save_profile is not None:
        from cloudfit.profiling.io import save_profile as write_profile

        write_profile(result.profile, save_profile)
    if out is not None:
        from cloudfit.plan.io import save_plan

        save_plan(result.plan, out)
    if as_json:
        print_json(result.to_dict())
        return
    c = result.plan.chosen
    con = console()
    con.print(f"Stopped: {result.stop_reason} after {len(result.trials)} probe(s), {money(result.probe_spend_usd)} spent on probes.")
    con.print(f"Plan: {c.config.label()}: {c.samples_per_second:,.0f} samples/s, {c.hours:.2f} h, "
              f"{money(c.cost_usd)} expected ({money(c.cost_p90_usd)} P90), P(on time) {c.p_on_time:.0%}.")
    con.print(f"Total with probes: {money(result.total_expected_usd)} expected.")
    if result.plan.workload.budget_usd is not None:
        con.print(f"Budget left for training after the probes: {money(result.plan.workload.budget_usd)}.")
    if out is not None:
        con.print(f"Plan written to {out}")
    if save_profile is not None:
        con.print(f"Profile with {sum(t.status == 'ok' for t in result.trials)} probe measurement(s) written to {save_profile}")
