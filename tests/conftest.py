"""Shared fixtures; integration fixtures start real services once per run."""

pytest_plugins = ["tests.fixtures.postgres", "tests.fixtures.airflow_ui", "tests.fixtures.spanner", "tests.fixtures.spark",
                  "tests.fixtures.object_store"]
