"""Side by side: the whole `spanner-cdc extract` of a previous tree and of this one on one window of one server, alternating
in one run (which runs first swaps each round), each round beside the bare client's drains of the same partitions;
medians (wall, and the CPU of each extract's process tree) and the phases this tree's extract reports.

    python -m bench.compare_extract --previous /path/to/previous/checkout --partitions 1000 --transactions 2000
    python -m bench.compare_extract --previous /path/to/previous/checkout --partitions 1 --bulk-mods 400000
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.bench_scale import BULK_PER_COMMIT, _bare_drains
from bench.extract_support import (
    INSTANCE,
    PROJECT,
    STREAM,
    bench_store,
    bulk_rows,
    extract_with_memory,
    new_database,
    policy_args,
    window_after,
    write_orders,
)
from spanner_cdc.devstack.spanner_server import LocalSpanner
from spanner_cdc.settings import TUNING_FIELDS, Settings, env_name

COMMAND = "python -m bench.compare_extract"
HERE = Path(__file__).resolve().parent.parent


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--previous", required=True, help="a checkout of the previous code: its extract runs there, with it as PYTHONPATH")
    parser.add_argument("--partitions", type=int, default=1000, help="partitions of the stream (fixed: no splits or merges)")
    parser.add_argument("--transactions", type=int, default=2000, help="transactions (2 records each) spread over the partitions")
    parser.add_argument("--bulk-mods", type=int, default=0, help=f"instead: this many rows, {BULK_PER_COMMIT} per commit")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds (default 4)")
    args = parser.parse_args(argv)
    from spanner_cdc.source.client import stream_metadata

    trees = {"previous": Path(args.previous).resolve(), "this": HERE}
    times: dict[str, list[float]] = {name: [] for name in trees}
    cpus: dict[str, list[float]] = {name: [] for name in trees}  # CPU s of each extract's process tree (JVM, Python workers)
    with tempfile.TemporaryDirectory(prefix="compare-extract-") as name, bench_store(Path(name)) as url:
        tmp = Path(name)
        with LocalSpanner(extra_args=policy_args(args.partitions), log_path=tmp / "server.log") as server:
            database = new_database(server)
            created = stream_metadata(database, STREAM, "GOOGLE_STANDARD_SQL").created_at
            assert created is not None
            if args.bulk_mods:
                end = window_after(bulk_rows(database, args.bulk_mods, per_transaction=BULK_PER_COMMIT))
            else:
                end = window_after(write_orders(database, args.transactions, lines=1, spread=2**62 // args.transactions))
            base = Settings(project=PROJECT, instance=INSTANCE, stream=STREAM, metadata_url=url, output_root=tmp / "lake", heartbeat_ms=1000,
                            home=tmp / "home", concurrency=4, database=database.database_id, emulator_host=server.host,
                            spark_master="local[2]")  # fmt: skip
            print(f"{COMMAND}: {args.partitions:,} partition(s), previous {trees['previous']}, this {trees['this']}")
            bares: list[float] = []
            # each tree's own tuning defaults (an empty variable means the default): this tree's values may be ones the
            # previous one refuses or reads otherwise
            own_defaults = {env_name(name): "" for name in TUNING_FIELDS}
            for round_ in range(args.rounds):
                _, records, bare_s = _bare_drains(database, created, end)
                bares.append(bare_s)
                line = f"  round {round_ + 1}: load {os.getloadavg()[0]:.1f}, bare drains {bare_s:.2f} s ({records:,} records)"
                for which in list(trees)[:: 1 if round_ % 2 == 0 else -1]:
                    settings = dataclasses.replace(base, namespace=f"c{round_}_{which}")
                    began = time.perf_counter()
                    summary, peaks = extract_with_memory(settings, created, end, cwd=trees[which], PYTHONPATH=str(trees[which]),
                                                         PYSPARK_SUBMIT_ARGS="--driver-memory 1g pyspark-shell", **own_defaults)  # fmt: skip
                    times[which].append(time.perf_counter() - began)
                    cpus[which].append(peaks.get("tree cpu s", 0.0))
                    if not summary["complete"]:
                        raise SystemExit(f"{which}: the window did not complete: {summary}")
                    phases = ", ".join(f"{k} {v:.1f}" for k, v in summary.get("phases", {}).items())
                    line += f"; {which} {times[which][-1]:.1f} s, CPU {cpus[which][-1]:.1f} s" + (f" ({phases})" if phases else "")
                print(line, flush=True)
    previous, this = (statistics.median(times[n]) for n in trees)
    faster = sum(p > t for p, t in zip(times["previous"], times["this"], strict=True))
    print(f"  medians: previous {previous:.1f} s, this {this:.1f} s ({previous / this:.2f}x; this faster in {faster} of {args.rounds} rounds)")
    bare = statistics.median(bares)
    print(f"  median / bare drains ({bare:.2f} s): previous {previous / bare:.2f}x, this {this / bare:.2f}x")
    previous_cpu, this_cpu = (statistics.median(cpus[n]) for n in trees)
    print(f"  median CPU of the process tree: previous {previous_cpu:.1f} s, this {this_cpu:.1f} s ({previous_cpu / max(this_cpu, 1e-9):.2f}x); "
          "the wall times follow the machine's load, the CPU much less")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
