"""``cloudfit model fit|eval``: rebuild the shipped performance model; cross-validate it."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Optional

import typer

from cloudfit.cli.render import console, print_json

app = typer.Typer(help="Rebuild the performance model from the shipped measurements, or cross-validate it.",
                  no_args_is_help=True)


@app.command("fit")
def fit(
    out: Optional[Path] = typer.Option(None, "--out", "-o", dir_okay=False,
                                       help="Model file to write (default: the one cloudfit ships and loads)."),
    measurements: Optional[Path] = typer.Option(None, "--measurements", dir_okay=False, help="Measurement table (CSV)."),
    stats: Optional[Path] = typer.Option(None, "--stats", dir_okay=False, help="Workload stats (JSON)."),
    as_json: bool = typer.Option(False, "--json", help="Print a summary as JSON to stdout."),
) -> None:
    """Fit the learned correction and its conformal band on every shipped measurement (deterministic)."""
    from cloudfit.errors import UsageError
    from cloudfit.perf import fit as fit_mod

    for p in (measurements, stats):
        if p is not None and not p.is_file():
            raise UsageError(f"{p} not found")
    t0 = time.perf_counter()
    doc = fit_mod.fit_model(measurements=measurements, stats=stats,
                            progress=None if as_json else lambda s: sys.stderr.write(f"  calibrating band: {s}\n"))
    path = fit_mod.write_model(doc, out)
    from cloudfit.perf import model as perf

    summary = {"path": str(path), "model_version": perf.model_version(str(path)), "rows": doc["training"]["rows"],
               "trees": len(doc["forest"]["trees"]), "band_log_quantiles": doc["band"]["log_quantiles"],
               "seconds": round(time.perf_counter() - t0, 2)}
    if as_json:
        print_json(summary)
        return
    console().print(f"fitted {summary['trees']} trees on {summary['rows']} measurements in {summary['seconds']} s "
                    f"→ {path} ({summary['model_version']})")


@app.command("eval")
def eval_(
    as_json: bool = typer.Option(False, "--json", help="Print the full report as JSON to stdout."),
    groups: bool = typer.Option(False, "--groups", help="Also print the per-group tables."),
    llm: bool = typer.Option(False, "--llm", help="Evaluate the large-model (LLM) step model on the public LLM runs."),
    kernels_only: bool = typer.Option(False, "--kernels-only",
                                      help="Only the kernel-level leave-GPU-out evaluation (seconds)."),
) -> None:
    """Leave-one-accelerator-out and leave-one-model-out CV of cloudfit vs TFLOPS-ratio, SVR and the prior.

    Nested: every held-out group gets its own prior calibration, correction, λ and conformal band,
    fitted without it (a few minutes on 2 cores)."""
    if llm:
        _eval_llm(as_json)
        return
    from cloudfit.perf import evaluate, kernels

    t0 = time.perf_counter()
    report = {} if kernels_only else evaluate.run(progress=None if as_json else lambda s: sys.stderr.write(f"  {s}\n"))
    report["kernels"] = kernels.leave_gpu_out()
    report["seconds"] = round(time.perf_counter() - t0, 1)
    if as_json:
        print_json(report)
        return
    render_report(report, groups=groups)


def _eval_llm(as_json: bool) -> None:
    """The LLM section: grouped CV of ``cloudfit.llm`` on data/llm (vTrain, Megatron-Bridge, llm-foundry)."""
    from cloudfit.llm import evaluate as llm_eval
    from cloudfit.llm.report import markdown

    t0 = time.perf_counter()
    report = llm_eval.run(progress=None if as_json else lambda s: sys.stderr.write(f"  {s}\n"))
    report["seconds"] = round(time.perf_counter() - t0, 1)
    if as_json:
        print_json(report)
        return
    from rich.markdown import Markdown

    console().print(Markdown(markdown(report)))


_SHORT = {"cloudfit": "cloudfit", "tflops-ratio": "tflops", "svr": "svr", "prior": "prior", "calibrated-prior": "cal.prior"}


def render_report(report: dict[str, Any], *, groups: bool = False) -> None:
    from rich.table import Table

    from cloudfit.perf.evaluate import METHODS, SCHEMES

    c = console()
    if "kernels" in report:
        render_kernels(report["kernels"])
    for scheme, regimes in report.get("schemes", {}).items():
        t = Table(title=f"{SCHEMES[scheme]}, {report['rows']} measurements: MAPE/median APE %",
                  title_justify="left", pad_edge=False, padding=(0, 1))
        t.add_column("regime", no_wrap=True)
        t.add_column("n", justify="right")
        for m in METHODS:
            t.add_column(_SHORT.get(m, m), justify="right", no_wrap=True)
        t.add_column("band", justify="right")
        for regime, blk in regimes.items():
            rows = [(regime, blk)]
            if groups:
                rows += [(f"  {g}", b) for g, b in blk["groups"].items()]
            if "generations" in blk:
                rows += [(f"  {g}", b) for g, b in blk["generations"].items()]
            for name, b in rows:
                cov = f"{b['coverage'] * 100:.0f}%" if "coverage" in b else "—"
                t.add_row(name, str(b["n"]), *(f"{b[m]['mape'] * 100:.0f}/{b[m]['mdape'] * 100:.0f}" for m in METHODS), cov)
        c.print(t)
    if report.get("schemes"):
        c.print("band: share of held-out measurements inside the calibrated 10–90% band (target 75–85%); "
                "indented rows: by GPU generation of the held-out measurement")


def render_kernels(k: dict[str, Any]) -> None:
    from rich.table import Table

    t = Table(title=f"kernel level, leave-GPU-out: trained on {', '.join(k['train'])} ({k['rows_train']} kernels), "
                    f"tested on {', '.join(k['test'])} ({k['rows_test']}): latency MAPE/median APE %",
              title_justify="left", pad_edge=False, padding=(0, 1))
    t.add_column("op", no_wrap=True)
    t.add_column("n", justify="right")
    t.add_column("model", justify="right")
    for g in k["test"]:
        t.add_column(g, justify="right")
    t.add_column("roofline×median", justify="right")
    for name, blk in [(f"{c} (class)", b) for c, b in k["classes"].items()] + list(k["ops"].items()):
        t.add_row(name, str(blk["n"]), f"{blk['mape'] * 100:.1f}/{blk['mdape'] * 100:.1f}",
                  *(f"{blk['gpus'][g]['mape'] * 100:.1f}" if g in blk["gpus"] else "—" for g in k["test"]),
                  f"{blk['roofline_mape'] * 100:.1f}")
    console().print(t)
