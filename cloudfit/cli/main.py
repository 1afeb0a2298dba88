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


class _Group(TyperGroup):
    """Top-level group: maps cloudfit errors to one line on stderr and an exit code."""

    def invoke(self, ctx):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except CloudfitError as e:
            error_line(str(e))
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt:
            error_line("interrupted")
            raise typer.Exit(130) from None


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


def _register() -> None:
    # Each command module only imports typer and the standard library at the top, so --help is fast.
    from cloudfit.cli import catalog as catalog_cli

    app.add_typer(catalog_cli.app, name="catalog")
    from cloudfit.cli import recommend as recommend_cli

    app.command("recommend")(recommend_cli.recommend)
    from cloudfit.cli import models as models_cli, profile as profile_cli

    app.add_typer(profile_cli.app, name="profile")
    app.command("models")(models_cli.models)
    from cloudfit.cli import launch as launch_cli

    launch_cli.register(app)  # launch, status, down
    from cloudfit.cli import model as model_cli, predict as predict_cli

    app.command("predict")(predict_cli.predict)
    app.add_typer(model_cli.app, name="model")


_register()


def run() -> None:
    """Console-script entry point."""
    app(prog_name="cloudfit")


if __name__ == "__main__":
    run()
