"""The CLI skeleton: version, catalog commands, the error boundary, JSON purity, a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import run_cloudfit

from cloudfit import __version__


def test_version(cli):
    r = cli("--version")
    assert r.exit_code == 0 and r.stdout.strip() == f"cloudfit {__version__}"


def test_catalog_gpus_json_lists_every_gpu_with_prices(cli):
    r = cli("catalog", "gpus", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {g["accelerator"]: g for g in json.loads(r.stdout)}
    for acc in ("T4", "L4", "V100", "P100", "A100", "A100-80GB", "H100", "H200", "B200"):
        assert rows[acc]["cheapest_usd_per_gpu_hour"] > 0
    assert rows["H100"]["counts_per_vm"] == [1, 2, 4, 8]
    # cheapest on-demand per GPU-hour is really the minimum over the catalog
    from cloudfit import catalog

    t4 = [o.price_per_hour / o.accelerators_per_node for o in catalog.load().offerings if o.accelerator == "T4"]
    assert rows["T4"]["cheapest_usd_per_gpu_hour"] == round(min(t4), 5)


def test_catalog_gpus_table(cli):
    r = cli("catalog", "gpus")
    assert r.exit_code == 0 and "B200" in r.stdout and "spot" in r.stdout


def test_catalog_list_filters_and_json(cli):
    r = cli("catalog", "list", "--accelerator", "H100", "--region", "us-central1", "--json")
    assert r.exit_code == 0
    offs = json.loads(r.stdout)
    assert offs and {o["accelerator"] for o in offs} == {"H100"} and {o["region"] for o in offs} == {"us-central1"}
    prices = [o["price_per_hour"] for o in offs]
    assert prices == sorted(prices)
    r = cli("catalog", "list", "--spot", "--json")
    spots = [o["spot_price_per_hour"] for o in json.loads(r.stdout)]
    assert None not in spots and spots == sorted(spots)


def test_user_errors_are_one_line_exit_2(cli, tmp_path):
    r = cli("catalog", "list", "--accelerator", "Z80")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("cloudfit: error: unknown accelerator 'Z80'")
    bad = tmp_path / "bad.csv"
    bad.write_text("machine_type,accelerator\nx,y\n")
    r = cli("catalog", "gpus", "--catalog", str(bad))
    assert r.exit_code == 2 and "bad.csv:1: missing column(s)" in r.stderr and "Traceback" not in r.stderr


def test_bad_usage_exits_2(cli):
    assert cli("catalog", "list", "--no-such-option").exit_code == 2
    assert cli("no-such-command").exit_code == 2


def test_real_subprocess_json_is_pure_and_errors_have_no_traceback():
    r = run_cloudfit("catalog", "list", "--accelerator", "H100", "--json")
    assert r.returncode == 0
    assert isinstance(json.loads(r.stdout), list)  # nothing else mixed into stdout
    r = run_cloudfit("catalog", "list", "--region", "mars-1")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == r.stderr.strip().splitlines()[0]  # exactly one line


def test_help_does_not_import_heavy_modules():
    code = (
        "import sys\n"
        "from cloudfit.cli.main import app\n"
        "from typer.testing import CliRunner\n"
        "r = CliRunner().invoke(app, ['--help'])\n"
        "assert r.exit_code == 0, r.output\n"
        "heavy = [m for m in ('torch', 'xgboost', 'optuna', 'google.cloud', 'sklearn', 'pandas', 'numpy', 'transformers', 'matplotlib') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def test_lazy_commands_list_the_same_help_as_the_commands_themselves():
    import click

    from cloudfit.cli.main import LAZY, _available, load_command

    for name, (_, _, text) in LAZY.items():
        if not _available(name):
            continue
        real = load_command(name)
        assert click.Command(name, help=text).get_short_help_str(300) == real.get_short_help_str(300), name


def test_help_imports_no_command_module():
    code = ("import sys; from cloudfit.cli.main import run; sys.argv = ['cloudfit', '--help']\n"
            "try:\n    run()\nexcept SystemExit:\n    pass\n"
            "mods = [m for m in sys.modules if m.startswith(('cloudfit.cli.', 'numpy', 'torch'))]\n"
            "sys.stderr.write(repr(sorted(m for m in mods if m not in ('cloudfit.cli.main', 'cloudfit.cli.render'))))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stderr.strip() == "[]", p.stderr
