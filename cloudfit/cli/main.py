"""The ``cloudfit`` typer app and its one error boundary.

Exit codes: 0 ok; 1 a ``CloudfitError`` (e.g. a launch failed); 2 bad usage or bad input;
3 infeasible limits; 4 budget exceeded; 130 interrupted. User errors never print a traceback.
"""

from __future__ import annotations

import sys
from typing import Optional

import typer
from typer.core import TyperGroup

from cloudfit import __version__
from cloudfit.cli.render import error_line
from cloudfit.errors import CloudfitError


#: Commands imported only when invoked, so ``cloudfit --help`` stays as light as typer itself:
#: name → (module, attribute, one-line help). The attribute is a typer app (a command group), a
#: command function, or ``register`` (a function adding several commands). tests/cli/test_basics.py
#: checks that each help line matches the command's own.
LAZY: dict[str, tuple[str, str, str]] = {
    "recommend": ("cloudfit.cli.recommend", "recommend",
                  "Recommend the cluster to train on: cheapest under --deadline, fastest under --budget."),
    "search": ("cloudfit.cli.search", "search",
               "Active search: a few short paid probe runs, chosen by Bayesian optimisation, then a plan."),
    "launch": ("cloudfit.cli.launch", "register",
               "Launch a plan: train on a local rehearsal cluster or on Compute Engine, within a budget."),
    "status": ("cloudfit.cli.launch", "register",
               "Show clusters: state, spend against the budget, why they ended; with NAME, its nodes and events."),
    "down": ("cloudfit.cli.launch", "register",
             "Delete every VM (or local process) of a cluster — also ones the state store missed."),
    "predict": ("cloudfit.cli.predict", "predict",
                "Predict samples/s (with a 10–90% band) of a profiled model on COUNT × ACCELERATOR × NODES."),
    "catalog": ("cloudfit.cli.catalog", "app",
                "Browse GPU offerings and their prices; refresh prices from the Cloud Billing API."),
    "profile": ("cloudfit.cli.profile", "app",
                "Profile a model (a short real training run), add measurements from elsewhere, show a profile."),
    "models": ("cloudfit.cli.models", "models",
               "List the zoo models `cloudfit profile run` can build (random weights; nothing is downloaded)."),
    "model": ("cloudfit.cli.model", "app",
              "Rebuild the performance model from the shipped measurements, or cross-validate it."),
}


def load_command(name: str):
    """The click command behind a lazy entry of ``LAZY`` (imports its module)."""
    import importlib

    from typer.main import get_group

    module, attr, _ = LAZY[name]
    obj = getattr(importlib.import_module(module), attr)
    holder = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False)
    if isinstance(obj, typer.Typer):
        holder.add_typer(obj, name=name)
    elif attr == "register":
        obj(holder)
    else:
        holder.command(name)(obj)
    return get_group(holder).commands[name]


class _Group(TyperGroup):
    """Top-level group: loads commands lazily; maps cloudfit errors to one line on stderr and an exit code."""

    _listing = False  # True while --help lists the commands: answer from LAZY without importing

    def list_commands(self, ctx):  # type: ignore[override]
        return list(super().list_commands(ctx)) + [n for n in LAZY if n not in self.commands and _available(n)]

    def get_command(self, ctx, cmd_name):  # type: ignore[override]
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None or cmd_name not in LAZY or not _available(cmd_name):
            return cmd
        if self._listing:
            import click

            return click.Command(cmd_name, help=LAZY[cmd_name][2])
        self.commands[cmd_name] = cmd = load_command(cmd_name)
        return cmd

    def format_help(self, ctx, formatter):  # type: ignore[override]
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def invoke(self, ctx):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except CloudfitError as e:
            error_line(str(e))
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt:
            error_line("interrupted")
            raise typer.Exit(130) from None
        except ModuleNotFoundError as e:  # an optional extra is not installed: one line naming it
            extra = EXTRAS.get((e.name or "").split(".")[0])
            if extra is None:
                raise
            error_line(f"this command needs {e.name.split('.')[0]}, which is not installed: "
                       f"pip install \"cloudfit[{extra}]\"")
            raise typer.Exit(1) from None


#: Top-level modules of the optional extras (pyproject.toml) → the extra that brings them.
EXTRAS = {"torch": "profile", "transformers": "profile", "google": "gcp", "requests": "gcp", "pandas": "fit",
          "sklearn": "fit", "xgboost": "fit", "optuna": "fit", "scipy": "fit", "matplotlib": "plot"}


def _available(name: str) -> bool:
    """Whether a lazy command's module exists (without importing it)."""
    from importlib.util import find_spec

    return find_spec(LAZY[name][0]) is not None


app = typer.Typer(
    cls=_Group,
    name="cloudfit",
    help="Pick the cloud cluster to train your model on — cheapest under a deadline, fastest under a budget — and launch it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"cloudfit {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Optional[bool] = typer.Option(
        None, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Pick the cloud cluster to train your model on, then launch it."""


def run() -> None:
    """Console-script entry point."""
    try:
        app(prog_name="cloudfit")
    except SystemExit as e:
        from cloudfit.cli import render

        if render.QUICK_EXIT:  # a command that may skip the interpreter's teardown (render.quick_exit)
            render.quick_exit(e.code)
        raise


if __name__ == "__main__":
    run()
