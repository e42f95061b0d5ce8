"""One extract DAG per configured stream, `spanner_cdc_hourly__<name>` (built by the package's DAG factory)."""

from spanner_cdc.airflow.dags import hourly_dags

globals().update(hourly_dags())
