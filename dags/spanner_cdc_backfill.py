"""`spanner_cdc_backfill`: the manual backfill form (built by the package's DAG factory)."""

from spanner_cdc.airflow.dags import backfill_dag

spanner_cdc_backfill = backfill_dag()
