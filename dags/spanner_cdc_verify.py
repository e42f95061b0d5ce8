"""A daily verify DAG per stream with `verify = true`, `spanner_cdc_verify__<name>` (built by the package's DAG factory)."""

from spanner_cdc.airflow.dags import verify_dags

globals().update(verify_dags())
