-- Runs once, on the first start of the compose Postgres: Airflow's metadata DB and the lineage store.
CREATE ROLE airflow LOGIN PASSWORD 'airflow';
CREATE DATABASE airflow OWNER airflow;
CREATE ROLE cdc LOGIN PASSWORD 'cdc';
CREATE DATABASE spanner_cdc OWNER cdc;
