"""Benchmarks: each bench_*.py module has main(argv) -> exit code and prints its own report."""

# one partition that never splits or merges, so every reader drains exactly the same records
SINGLE_PARTITION_SERVER_ARGS = [
    "--policy-initial-partitions", "1", "--policy-max-partitions", "1", "--policy-split-records", "100000000",
    "--policy-event-every", "none", "--policy-merge-idle", "none",
]  # fmt: skip
