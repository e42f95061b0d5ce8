from spanner_cdc.cli.main import run

run()
