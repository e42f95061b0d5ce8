"""What the DAG files call: task bodies, Airflow connections -> Settings; imported lazily, inside tasks."""

# The Airflow pool that bounds concurrent change stream queries across every DAG of the project.
SPANNER_POOL = "spanner_cdc_spanner_queries"
