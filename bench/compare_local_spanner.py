"""Side by side: the local server of a previous tree and of this one, two servers alternating in one run: the undecoded
change stream drain of one 20,000-record partition (records/s) and 4 writer processes through the official client
(tx/s and the server's CPU per transaction), each round on both, medians and per-round ratios.

    python -m bench.compare_local_spanner --previous /path/to/previous/checkout
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Sequence
from datetime import timedelta

from bench import SINGLE_PARTITION_SERVER_ARGS
from bench.bench_local_spanner import DDL, INSTANCE, PROJECT, _root, _write, concurrent_writes, drain

COMMAND = "python -m bench.compare_local_spanner"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--previous", required=True, help="a checkout of the previous code: its server runs with it as PYTHONPATH")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds (default 4)")
    parser.add_argument("--writes", type=int, default=600, help="transactions per writer per round; 0 skips writes (default 600)")
    parser.add_argument("--dialect", choices=("GOOGLE_STANDARD_SQL", "POSTGRESQL"), default="GOOGLE_STANDARD_SQL")
    args = parser.parse_args(argv)
    from spanner_cdc.devstack.spanner_server import LocalSpanner, create_database

    dialect, servers = args.dialect, {}
    mine = os.environ.get("PYTHONPATH")
    try:
        os.environ["PYTHONPATH"] = args.previous
        servers["previous"] = LocalSpanner(extra_args=SINGLE_PARTITION_SERVER_ARGS).start()
        os.environ.pop("PYTHONPATH")
        if mine is not None:
            os.environ["PYTHONPATH"] = mine
        servers["this"] = LocalSpanner(extra_args=SINGLE_PARTITION_SERVER_ARGS).start()
        partitions = {}
        for name, server in servers.items():
            database = create_database(server.host, PROJECT, INSTANCE, f"b{uuid.uuid4().hex[:12]}", DDL[dialect], dialect)
            start, end = _write(database, dialect, 20_000)
            start -= timedelta(microseconds=1)
            (root,) = _root(database, dialect, start)
            drain(database, dialect, root, start, end, True)  # the first read encodes the records
            partitions[name] = (database, root, start, end)
        keys = ("read rec/s", "tx/s", "server ms/tx")
        results: dict[str, dict[str, list[float]]] = {name: {k: [] for k in keys} for name in servers}
        for round_ in range(args.rounds):
            for name, server in servers.items():
                database, root, start, end = partitions[name]
                began = time.perf_counter()
                results[name]["read rec/s"].append(drain(database, dialect, root, start, end, True) / (time.perf_counter() - began))
                if args.writes:
                    written = create_database(server.host, PROJECT, INSTANCE, f"w{uuid.uuid4().hex[:12]}", DDL[dialect], dialect)
                    tx_rate, server_ms = concurrent_writes(server, written.database_id, dialect, 4, args.writes)
                    results[name]["tx/s"].append(tx_rate)
                    results[name]["server ms/tx"].append(server_ms)
            ratios = ", ".join(f"{k} {results['this'][k][-1] / results['previous'][k][-1]:.2f}x" for k in keys if results["this"][k])
            print(f"round {round_} (load {os.getloadavg()[0]:.1f}): this / previous {ratios}", flush=True)
        for name in servers:
            print(f"{name:>9}: " + ", ".join(f"{k} {statistics.median(v):.4g}" for k, v in results[name].items() if v))
        print(f"medians over {args.rounds} alternating rounds, {dialect}; server CPU per transaction from its /proc")
    finally:
        for server in servers.values():
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
