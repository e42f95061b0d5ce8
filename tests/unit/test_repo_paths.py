"""Modules that find the checkout's folders from their own location still find them after a move."""

from __future__ import annotations

from pathlib import Path

from spanner_cdc.devstack.airflow_env import repo_root
from spanner_cdc.store.migrations import SQL_DIR

ROOT = Path(__file__).resolve().parents[2]


def test_the_dev_stack_finds_the_dags_and_plugins_of_this_checkout() -> None:
    assert repo_root() == ROOT
    assert (repo_root() / "dags" / "spanner_cdc_hourly.py").is_file()
    assert (repo_root() / "plugins").is_dir()


def test_migrations_are_read_from_this_checkouts_sql_folder() -> None:
    assert SQL_DIR == ROOT / "sql" and sorted(SQL_DIR.glob("0001_*.sql"))
