"""One maintenance DAG per configured stream, `spanner_cdc_maintenance__<name>` (built by the package's DAG factory)."""

from spanner_cdc.airflow.dags import maintenance_dags

globals().update(maintenance_dags())
