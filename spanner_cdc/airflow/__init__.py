"""Airflow's side of the package: the DAG factory (`dags`) and the UI plugin (`plugin`); nothing here imports Airflow on import."""
