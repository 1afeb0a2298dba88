"""The ``cloudfit`` command line (typer + rich): the only part of cloudfit that prints."""
