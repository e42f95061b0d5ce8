"""What the DAG files call: task bodies, Airflow connections -> Settings; imported lazily, inside tasks."""
