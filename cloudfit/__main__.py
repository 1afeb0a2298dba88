from cloudfit.cli.main import run

run()
