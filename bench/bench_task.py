"""Benchmark: one wave task's own work (read a small token, land its files and summary row) in this process, without Spark."""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import tempfile
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path

from bench import figures
from bench.extract_support import INSTANCE, PROJECT, STREAM, new_database, policy_args, window_after, write_orders
from spanner_cdc.devstack.spanner_server import LocalSpanner

COMMAND = "python -m bench.bench_task"
DIALECT = "GOOGLE_STANDARD_SQL"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--tokens", type=int, default=32, help="partitions of the window (as bench_extract's overhead part)")
    parser.add_argument("--transactions", type=int, default=96, help="transactions spread over them")
    parser.add_argument("--profile", type=int, default=0, help="print the N costliest functions (cProfile, cumulative)")
    args = parser.parse_args(argv)
    from spanner_cdc.extract.planning import root_partitions
    from spanner_cdc.lineage.rules import inclusive_end
    from spanner_cdc.source.client import stream_metadata
    from spanner_cdc.spark.executor import land_wave_tokens
    from spanner_cdc.spark.spec import TokenJobSpec

    with tempfile.TemporaryDirectory(prefix="bench-task-") as name, LocalSpanner(
        extra_args=policy_args(args.tokens), log_path=Path(name) / "server.log"
    ) as server:
        tmp = Path(name)
        database = new_database(server)
        created = stream_metadata(database, STREAM, DIALECT).created_at
        assert created is not None
        end = window_after(write_orders(database, args.transactions, lines=1, spread=2**58 // args.transactions))
        start, roots = root_partitions(database, STREAM, dialect=DIALECT, heartbeat_ms=10_000, at=created, retention=None, namespace="b")
        specs = [
            TokenJobSpec(
                project=PROJECT, instance=INSTANCE, database=database.database_id, emulator_host=server.host, stream=STREAM,
                dialect=DIALECT, heartbeat_ms=10_000, token=root.token, read_from=start, read_to=inclusive_end(end),
                window_start=created, window_end=end, read_method="spanner-change-stream", attempt_dir=str(tmp / f"a{n}"),
                partition_mode="IMMUTABLE_KEY_RANGE", lake_root=str(tmp / "lake"), lineage_id=1,
            )  # fmt: skip
            for n, root in enumerate(roots)
        ]
        began = time.perf_counter()
        list(land_wave_tokens([specs[0]], 1))  # the first task of a worker also opens its Spanner client
        first_s = time.perf_counter() - began
        profile = cProfile.Profile()
        began = time.perf_counter()
        with profile if args.profile else nullcontext():
            for spec in specs[1:]:
                list(land_wave_tokens([spec], 1))
        per_token = (time.perf_counter() - began) / max(1, len(specs) - 1)
    print(f"{COMMAND} --tokens {args.tokens} --transactions {args.transactions}: one process, no Spark")
    print(f"  first token (with the worker's client) {first_s:.3f} s; each next token {per_token * 1000:.1f} ms (read, land, summary row)")
    figures.report("wave task's own work per small token", per_token, 0.1, "s/token", higher_is_better=False)
    if args.profile:
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(args.profile)
        print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
