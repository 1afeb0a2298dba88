"""``cloudfit search``: active search — short paid probe runs, chosen from the model's predictions."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from cloudfit.cli.render import console, money, print_json


def search(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="A shipped profile by name (see `cloudfit models`)."),
    profile: Optional[str] = typer.Option(None, "--profile", "-p", help="A profile JSON made by `cloudfit profile run`."),
    samples: Optional[float] = typer.Option(None, "--samples", help="Total training samples."),
    epochs: Optional[float] = typer.Option(None, "--epochs", help="Epochs (with --dataset-size)."),
    dataset_size: Optional[int] = typer.Option(None, "--dataset-size", help="Samples per epoch (with --epochs)."),
    deadline: Optional[str] = typer.Option(None, "--deadline", help="Finish within, e.g. 12h, 90m, 2d."),
    budget: Optional[str] = typer.Option(None, "--budget", help="Spend at most this many USD on the training run."),
    objective: Optional[str] = typer.Option(None, "--objective", help="cost or time."),
    regions: Optional[list[str]] = typer.Option(None, "--regions", "--region", help="Regions, names or globs."),
    accelerators: Optional[list[str]] = typer.Option(None, "--accelerators", "--accelerator", help="Accelerators to consider."),
    spot: Optional[bool] = typer.Option(None, "--spot/--no-spot", help="Allow spot VMs (default) or never use them."),
    spot_only: bool = typer.Option(False, "--spot-only", help="Consider spot VMs only."),
    max_nodes: int = typer.Option(64, "--max-nodes", help="Most VMs in one cluster."),
    catalog_path: Optional[Path] = typer.Option(None, "--catalog", help="Catalog CSV (default: the shipped GCP catalog).", dir_okay=False),
    confidence: float = typer.Option(0.9, "--confidence", help="Required probability of meeting the deadline (and the budget)."),
    precision: str = typer.Option("fp16", "--precision", help="Training precision."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Batch per device (default: the profile's)."),
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
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the final plan here (plan.json).", dir_okay=False),
    save_profile: Optional[Path] = typer.Option(None, "--save-profile", help="Write the profile with every probe's measurement here (for later `recommend --profile`).", dir_okay=False),
    as_json: bool = typer.Option(False, "--json", help="Print trials, spend and the plan as JSON to stdout."),
) -> None:
    """Active search: a few short paid probe runs, chosen by Bayesian optimisation, then a plan."""
    from cloudfit.errors import UsageError
    from cloudfit.units import parse_usd
    from cloudfit.workload import make_workload

    from cloudfit.cli.recommend import _split

    if spot_only and spot is False:
        raise UsageError("--spot-only and --no-spot contradict each other")
    workload = make_workload(
        model=model, profile=profile, samples=samples, epochs=epochs, dataset_size=dataset_size, deadline=deadline,
        budget=budget, objective=objective, regions=_split(regions), accelerators=_split(accelerators),
        spot="only" if spot_only else ("never" if spot is False else "allow"), max_nodes=max_nodes,
        confidence=confidence, precision=precision, batch_size=batch_size)
    probe_usd = parse_usd(probe_budget, "probe budget")
    if not probe_minutes > 0:
        raise UsageError(f"--probe-minutes must be positive, got {probe_minutes:g}")
    if probe_steps < 1:
        raise UsageError(f"--probe-steps must be at least 1, got {probe_steps}")
    if check_interval is not None and not check_interval > 0:
        raise UsageError(f"--check-interval must be positive, got {check_interval:g}")
    timing = {} if check_interval is None else {"interval_s": check_interval}
    restrict = None
    use_measurements = True
    if backend == "replay":
        if replay_data is None:
            raise UsageError("--backend replay needs --replay-data FILE.csv")
        from cloudfit.executors.replay import ReplayExecutor

        executor = ReplayExecutor(replay_data, probe_seconds=probe_minutes * 60)
        restrict = {k[:3] for k in executor.table}  # a replay world is its table
    elif backend == "local":
        from cloudfit.executors.local import LocalExecutor

        executor = LocalExecutor(**timing)
        use_measurements = False  # a CPU rehearsal of the probes says nothing about GPU throughput
    elif backend == "gcp":
        if not (checkpoint_dir or "").startswith("gs://"):
            raise UsageError("--backend gcp needs --checkpoint-dir gs://BUCKET/PATH (the probe VMs write there)")
        from cloudfit.executors.gcp import GcpExecutor

        executor = GcpExecutor(project=project, endpoint=compute_endpoint, **timing)
    else:
        raise UsageError(f"--backend must be replay, local or gcp, not {backend!r}")

    from cloudfit.search.active import active_search

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
        from cloudfit.planio import save_plan

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
