"""``cloudfit predict``: predicted training throughput of a profile on one hardware configuration."""

from __future__ import annotations

from typing import Optional

import typer

from cloudfit.cli.render import console, print_json


def predict(
    profile: str = typer.Option(..., "--profile", "-p", help="Profile file, or a shipped profile name (e.g. resnet50)."),
    accelerator: str = typer.Option(..., "--accelerator", "-a", help="Accelerator, e.g. H100, A100-80GB, L4, T4."),
    count: int = typer.Option(1, "--count", "-c", help="Accelerators per node."),
    nodes: int = typer.Option(1, "--nodes", "-n", help="Nodes (VMs)."),
    precision: str = typer.Option("fp16", "--precision", help="fp32, tf32, fp16, bf16 or fp8."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", "-b", help="Batch per device (default: the profile's)."),
    machine_type: Optional[str] = typer.Option(
        None, "--machine-type", help="VM machine type: sets the inter-node network (default: the catalog's largest VM)."),
    network_gbps: Optional[float] = typer.Option(None, "--network-gbps", help="Inter-node network cap in Gbit/s."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON to stdout."),
) -> None:
    """Predict samples/s (with a 10–90% band) of a profiled model on COUNT × ACCELERATOR × NODES."""
    from cloudfit.errors import UsageError
    from cloudfit.perf import model as perf
    from cloudfit.profiling import io as pio

    if count < 1 or nodes < 1:
        raise UsageError(f"--count and --nodes must be at least 1 (got {count} and {nodes})")
    prof = pio.load_profile(pio.resolve_profile(profile))
    p = perf.predict(prof, accelerator, count, nodes, precision=precision, batch_size=batch_size,
                     machine_type=machine_type, network_gbps=network_gbps)
    from cloudfit.catalog import hardware

    acc = hardware.canonical_name(accelerator)
    batch = prof.stats.batch_size if batch_size is None else batch_size
    out = {
        "model": prof.model,
        "accelerator": acc,
        "count": count,
        "nodes": nodes,
        "precision": precision,
        "batch_size_per_device": batch,
        "fits": p.fits,
        "reason": p.reason,
        "samples_per_second": p.samples_per_second,
        "low": p.low,
        "high": p.high,
        "step_time_s": p.step_time_s,
        "breakdown": {"compute_s": p.compute_s, "communication_s": p.communication_s},
        "basis": p.basis,
        "model_version": perf.model_version(),
    }
    if as_json:
        print_json(out)
        return
    c = console()
    where = f"{nodes} × {count}× {acc}" if nodes > 1 else f"{count}× {acc}"
    if not p.fits:
        c.print(f"{prof.model} on {where}: does not fit — {p.reason}")
        return
    c.print(f"{prof.model} on {where} ({precision}, batch {batch} per device)")
    c.print(f"  {p.samples_per_second:,.1f} samples/s  (10–90%: {p.low:,.1f} – {p.high:,.1f})")
    c.print(f"  step {p.step_time_s * 1e3:,.1f} ms = compute {p.compute_s * 1e3:,.1f} ms + communication "
            f"{p.communication_s * 1e3:,.1f} ms")
    c.print(f"  basis: {p.basis}")
