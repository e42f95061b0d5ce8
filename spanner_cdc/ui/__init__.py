"""The monitoring UI: lineage graph, checkpoints, window health and metrics, served inside Airflow's API server."""
