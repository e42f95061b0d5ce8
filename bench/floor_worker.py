"""`python -m bench.floor_worker HOST DATABASE START END LAKE`: the least a process that lands a window must spend.

A fresh Python process imports the client, then reads and lands every root partition of the window itself, as a wave
task lands its tokens, with no Spark and no store. Prints the seconds after its imports (as JSON): the caller times
the whole process. bench_scale reports it beside the whole extract: no extract that starts a process and lands with
this reader and writer can beat it.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timedelta

from spanner_cdc.extract.planning import root_partitions
from spanner_cdc.lineage.rules import inclusive_end
from spanner_cdc.settings import Settings
from spanner_cdc.source.client import open_database
from spanner_cdc.spark.executor import land_wave_tokens
from spanner_cdc.spark.spec import TokenJobSpec

# bench.extract_support's names, repeated: importing it would pull the benchmarks' own servers into the floor
PROJECT, INSTANCE, STREAM, DIALECT = "bench-project", "bench-instance", "Everything", "GOOGLE_STANDARD_SQL"
TASK = 64  # tokens landed per land_wave_tokens call, as a wave task of many tokens would


def main(argv: list[str]) -> int:
    imported = time.perf_counter()
    host, database_id, start_text, end_text, lake = argv
    database = open_database(Settings(project=PROJECT, instance=INSTANCE, database=database_id, emulator_host=host))
    start, end = datetime.fromisoformat(start_text), datetime.fromisoformat(end_text)
    read_from, roots = root_partitions(database, STREAM, dialect=DIALECT, heartbeat_ms=1000, at=start,
                                       retention=timedelta(days=1), namespace="floor")  # fmt: skip
    specs = [
        TokenJobSpec(project=PROJECT, instance=INSTANCE, database=database_id, emulator_host=host, stream=STREAM, dialect=DIALECT,
                     heartbeat_ms=1000, token=root.token, read_from=read_from, read_to=inclusive_end(end), window_start=start,
                     window_end=end, read_method="floor", attempt_dir=f"{lake}/_attempts/{n}", partition_mode="IMMUTABLE_KEY_RANGE",
                     lake_root=lake, lineage_id=1)
        for n, root in enumerate(roots)
    ]  # fmt: skip
    for n in range(0, len(specs), TASK):
        for batch in land_wave_tokens(specs[n : n + TASK], Settings().task_threads):
            failed = [c for c in batch.column("control").drop_null().to_pylist() if json.loads(c).get("error_type")]
            if failed:
                raise SystemExit(f"floor: a token failed: {failed[0]}")
    print(json.dumps({"land_s": time.perf_counter() - imported}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
