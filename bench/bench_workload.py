"""Benchmark: committed transactions/s of the seeded workload generator on one local server, one Commit per
transaction vs BatchWrite requests (group commit), in memory and with --data-dir --fsync, and the CPU each side spends."""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import SINGLE_PARTITION_SERVER_ARGS, figures

COMMAND = "python -m bench.bench_workload"
TARGET = 1_000  # committed transactions/s for the workload generator (issue 15)
PROJECT, INSTANCE = "bench-project", "bench-instance"


def server_cpu_seconds(pid: int | None) -> float:
    """User + system CPU of a process so far (Linux /proc); 0 where it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_run(server: Any, transactions: int, batch: int, tmp: Path) -> dict[str, float]:
    """A fresh database with the workload's tables; (tx/s, client and server CPU ms per transaction) of one run."""
    from spanner_cdc.devstack.spanner_server import create_database
    from spanner_cdc.devstack.workload import run_workload, setup_database

    database = create_database(server.host, PROJECT, INSTANCE, f"w{uuid.uuid4().hex[:12]}", (), "GOOGLE_STANDARD_SQL")
    setup_database(database, "GOOGLE_STANDARD_SQL", "bench_stream")
    client0, server0 = time.process_time(), server_cpu_seconds(server.pid)
    stats = run_workload(database, transactions=transactions, seed=7, ground_truth=tmp / f"truth-{batch}.jsonl", batch=batch)
    client_ms = (time.process_time() - client0) * 1000 / transactions
    server_ms = (server_cpu_seconds(server.pid) - server0) * 1000 / transactions
    return {"tx/s": stats.tx_per_second, "client ms/tx": client_ms, "server ms/tx": server_ms}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--transactions", type=int, default=1500, help="transactions per run (default 1500)")
    parser.add_argument("--batch", type=int, default=50, help="transactions per BatchWrite request (default 50)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are reported (default 3)")
    args = parser.parse_args(argv)
    from spanner_cdc.devstack.spanner_server import LocalSpanner

    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-workload-") as tmp:
        durable = ["--data-dir", str(Path(tmp) / "data"), "--fsync"]
        with (LocalSpanner(extra_args=SINGLE_PARTITION_SERVER_ARGS, log_path=Path(tmp) / "memory.log") as memory,
              LocalSpanner(extra_args=[*SINGLE_PARTITION_SERVER_ARGS, *durable], log_path=Path(tmp) / "durable.log") as disk):
            for _ in range(args.rounds):  # interleaved, so background load hits every scenario alike
                for label, server in (("in memory", memory), ("--data-dir --fsync", disk)):
                    for batch in (1, args.batch):
                        results.setdefault((label, batch), []).append(one_run(server, args.transactions, batch, Path(tmp)))
    medians = {key: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for key, runs in results.items()}
    print(f"{COMMAND}: the workload generator (google-cloud-spanner) committing {args.transactions} transactions of 1-5 rows")
    print(f"  per run on one local server process, {os.cpu_count()} CPUs; batch 1 = one Commit per transaction (every fifth a")
    print(f"  read-write transaction), batch {args.batch} = BatchWrite requests of up to {args.batch} transactions over disjoint rows")
    print(f"{'server':<20} {'batch':>6} {'tx/s':>8} {'tx/s / target':>14} {'client ms/tx':>13} {'server ms/tx':>13}")
    for (label, batch), m in medians.items():
        print(f"{label:<20} {batch:>6} {m['tx/s']:>8.0f} {m['tx/s'] / TARGET:>13.0%} {m['client ms/tx']:>13.2f} {m['server ms/tx']:>13.2f}")
    for label in ("in memory", "--data-dir --fsync"):
        ratio = medians[(label, args.batch)]["tx/s"] / medians[(label, 1)]["tx/s"]
        print(f"  {label}: batch {args.batch} / batch 1 = {ratio:.2f}x (same run)")
        figures.report(f"workload tx/s, BatchWrite, {label}", medians[(label, args.batch)]["tx/s"], TARGET, "tx/s")
    print(f"medians over {args.rounds} interleaved rounds; CPU per transaction from the client process and the server's /proc")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
