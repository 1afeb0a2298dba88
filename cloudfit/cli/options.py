"""Workload options shared by ``cloudfit recommend`` and ``cloudfit search``: one definition, one help text.

Typer reads an option's declaration from the parameter's default, so one ``typer.Option`` object can
serve several commands (as ``--project`` does in ``cloudfit.cli.launch``).
"""

from __future__ import annotations

from typing import Optional

import typer

MODEL = typer.Option(None, "--model", "-m", help="A shipped profile by name (see `cloudfit models`).")
PROFILE = typer.Option(None, "--profile", "-p", help="A profile JSON made by `cloudfit profile run`.")
SAMPLES = typer.Option(None, "--samples", help="Total training samples.")
EPOCHS = typer.Option(None, "--epochs", help="Epochs (with --dataset-size).")
DATASET_SIZE = typer.Option(None, "--dataset-size", help="Samples per epoch (with --epochs).")
DEADLINE = typer.Option(None, "--deadline", help="Finish within, e.g. 12h, 90m, 2d (a unit is required; at most 365d).")
BUDGET = typer.Option(None, "--budget",
                      help="Spend at most this many USD, e.g. 300. What must fit is the plan's 90% cost quantile "
                           "(the P90 $ column; the --confidence quantile) plus 30 s of the cluster's price that the "
                           "budget guard keeps in reserve, not its expected cost.")
OBJECTIVE = typer.Option(None, "--objective",
                         help="cost, time (the cost × time knee: fastest while 1% less time costs under ~1% more) "
                              "or fastest (the literal fastest). Default: cost under a deadline, time under a budget.")
REGIONS = typer.Option(None, "--regions", "--region",
                       help="Regions, names or globs (comma-separated or repeated), e.g. 'us-*'.")
ACCELERATORS = typer.Option(None, "--accelerators", "--accelerator", help="Accelerators to consider, e.g. A100,H100.")
SPOT = typer.Option(None, "--spot/--no-spot", help="Allow spot VMs (default) or never use them.")
SPOT_ONLY = typer.Option(False, "--spot-only", help="Consider spot VMs only.")
MAX_NODES = typer.Option(64, "--max-nodes", help="Most VMs in one cluster.")
MAX_GPUS = typer.Option(None, "--max-gpus", help="Most GPUs in the whole cluster (e.g. your quota).")
ALLOW_OUTLIER_PRICES = typer.Option(False, "--allow-outlier-prices",
                                    help="Use spot prices far below the same VM's other zones (left out by default).")
CLOUDS = typer.Option(None, "--clouds", "--cloud",
                      help="Clouds to search, comma-separated: gcp, aws, lambda, runpod, nebius, or all (default: gcp).")
CATALOG = typer.Option(None, "--catalog", help="Catalog CSV (default: the shipped GCP catalog).", dir_okay=False)
CONFIDENCE = typer.Option(0.9, "--confidence", help="Required probability of meeting the deadline (and the budget).")
PRECISION = typer.Option("fp16", "--precision", help="Training precision: fp32, tf32, fp16 (mixed), bf16, fp8.")
BATCH_SIZE = typer.Option(None, "--batch-size", help="Batch per device (default: the profile's).")

# Large-model token workloads (``recommend --tokens``; see cloudfit.cli.recommend_llm)
TOKENS = typer.Option(None, "--tokens", help="LLM: total training tokens, e.g. 1e11 (samples = tokens ÷ --seq-len).")
SEQ_LEN = typer.Option(8192, "--seq-len", help="LLM: tokens per sequence.")
FINETUNE = typer.Option("full", "--finetune", help="LLM: full (all parameters train) or lora (frozen base + adapters).")
LORA_RANK = typer.Option(16, "--lora-rank", help="LLM: rank of the LoRA adapters.")
CONFIG = typer.Option(None, "--config", help="LLM: a Hugging Face config.json of your own decoder.", dir_okay=False)
LAYOUT = typer.Option(None, "--layout", help="LLM: pin layout degrees, e.g. 'tp=8,ac=full' (the rest searched); auto = search all.")
GLOBAL_BATCH = typer.Option(None, "--global-batch", help="LLM: sequences per optimizer step (default ≈4M tokens; ≈1M for LoRA).")


def in_existing_folder(value):
    """Option callback for a file cloudfit writes: its folder must exist (``UsageError`` otherwise): a typo in
    ``--out`` is not a folder tree created silently."""
    if value is not None:
        from pathlib import Path

        parent = Path(value).expanduser().parent
        if not parent.is_dir():
            from cloudfit.errors import UsageError

            raise UsageError(f"cannot write {value}: the folder {parent} does not exist (create it first)")
    return value


def split(values: Optional[list[str]]) -> list[str]:
    """Accept repeated options and comma-separated lists alike."""
    out: list[str] = []
    for v in values or []:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


def spot_mode(spot: Optional[bool], spot_only: bool) -> str:
    """``Workload.spot`` from --spot/--no-spot and --spot-only: "allow", "never" or "only"."""
    if spot_only and spot is False:
        from cloudfit.errors import UsageError

        raise UsageError("--spot-only and --no-spot contradict each other")
    return "only" if spot_only else ("never" if spot is False else "allow")


def workload(*, model, profile, samples, epochs, dataset_size, deadline, budget, objective, regions, accelerators,
             spot_mode, max_nodes, confidence, precision, batch_size, max_gpus=None, allow_outlier_prices=False,
             clouds=None):
    """The ``Workload`` these options describe (``UsageError`` for bad values); ``spot_mode`` from
    :func:`spot_mode`."""
    from cloudfit.workload import make_workload

    return make_workload(
        model=model, profile=profile, samples=samples, epochs=epochs, dataset_size=dataset_size,
        deadline=deadline, budget=budget, objective=objective, regions=split(regions),
        accelerators=split(accelerators), spot=spot_mode, max_nodes=max_nodes, confidence=confidence,
        precision=precision, batch_size=batch_size, max_gpus=max_gpus, allow_outlier_prices=allow_outlier_prices,
        clouds=None if clouds is None else split(clouds),
    )

# The whole bill (``recommend --data …``; see cloudfit.bill and cloudfit.cli.bill_view)
DATA = typer.Option(None, "--data", help="Where the training data lives: gs://BUCKET/PATH, s3://BUCKET/PATH or a local path "
                                         "(moving it is added to each plan's cost and hours).")
DATA_SIZE = typer.Option(None, "--data-size", help="Size of --data, e.g. 150GB, 4TB (read from disk for a local path).")
DATA_REGION = typer.Option(None, "--data-region", help="Region of the --data bucket (default: the cloud's primary region).")
KEEP_CHECKPOINTS = typer.Option(2, "--keep-checkpoints", help="Checkpoint copies kept in object storage while the job runs.")
RETURN_TO = typer.Option(None, "--return-to", help="Send the final model here: gs://…, s3://… or local (its egress is billed).")
QUOTA = typer.Option(None, "--quota", help="GPU quotas to plan within: a CSV/JSON table (cloud,region,gpu,mode,limit) "
                                           "or 'gcp' (the project's live quotas).")

STACK = typer.Option(None, "--stack", help="LLM: the training stack that will run it — torchtitan, megatron, accelerate "
                                           "or cloudfit (cloudfit's own trainer): priced with that stack's constants, "
                                           "only layouts it runs (default: cloudfit's constants).")
#: The word before --stack: kept so old scripts and profiles' commands run, hidden from --help, mapped silently (a
#: warning line would break the one-line error contract of every command that takes it).
FRAMEWORK_ALIAS = typer.Option(None, "--framework", hidden=True, help="Deprecated: use --stack.")


def stack_option(stack: Optional[str], framework: Optional[str]) -> Optional[str]:
    """The stack ``--stack`` names, or the deprecated ``--framework`` (the same word; never both)."""
    from cloudfit.errors import UsageError

    if framework is None:
        return stack
    if stack is not None:
        raise UsageError("give --stack (--framework is its old name), not both")
    return framework
