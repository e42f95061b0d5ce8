"""The development stack: embedded Postgres, Airflow's local environment, Spark and local Spanner launchers, the demo and its
workload. May import anything; nothing in the production path imports it (only cli/ commands, tests and benchmarks)."""
