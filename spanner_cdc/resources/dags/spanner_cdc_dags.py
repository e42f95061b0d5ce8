"""spanner-cdc's DAGs for the streams of $SPANNER_CDC_CONFIG: put this file in Airflow's dags folder."""

from spanner_cdc.airflow.dags import all_dags

globals().update(all_dags())
