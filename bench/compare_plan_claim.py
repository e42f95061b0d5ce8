"""Side by side: the store's plan and claim of a new lineage of N root partitions through the extract's own code path
(`extract.window.plan_window`, the claim by name `extract_tokens` makes, `ready_tasks` after the wave, and a second
run's `plan_window` of the same window, on the lineage now existing), for a previous
tree and this one, alternating in one run, each in a fresh process with its tree as PYTHONPATH, against one embedded
Postgres (a database per tree: each installs its own schema and functions).

The source's queries (the stream's metadata, the NULL-token query) are answered in memory, so what is timed is the
store's part alone, which is what issue 33's "the store's plan and claim < 2 s" names.

    python -m bench.compare_plan_claim --previous /path/to/previous/checkout --partitions 10000 --rounds 4
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

COMMAND = "python -m bench.compare_plan_claim"
HERE = Path(__file__).resolve().parent.parent
WINDOW_START = datetime(2030, 1, 1, tzinfo=UTC)
WINDOW_END = WINDOW_START + timedelta(hours=1)
PHASES = ("plan_s", "claim_s", "replan_s", "second_plan_s")


def worker(url: str, namespace: str, partitions: int, lake: str) -> dict[str, float]:
    """One plan, claim and re-plan through the extract's code of the tree on PYTHONPATH; seconds of each."""
    import time
    from unittest import mock

    from spanner_cdc.extract import window
    from spanner_cdc.model.records import ChildPartition
    from spanner_cdc.settings import Settings
    from spanner_cdc.store import MetadataStore

    with MetadataStore.connect(url) as store:
        store.upgrade()
    settings = Settings(project="p", instance="i", database="d", stream="S", metadata_url=url, namespace=namespace,
                        output_root=Path(lake), home=Path(lake) / "home")  # fmt: skip
    roots = [ChildPartition(f"token-{i:06d}-" + "x" * 40, ()) for i in range(partitions)]
    meta = SimpleNamespace(created_at=WINDOW_START - timedelta(days=1), retention=timedelta(days=3650))
    source: Any = SimpleNamespace(database=SimpleNamespace(name="projects/p/instances/i/databases/d"), dialect="GOOGLE_STANDARD_SQL")

    def source_in_memory() -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        stack.enter_context(mock.patch("spanner_cdc.source.client.stream_metadata", lambda *a, **k: meta))
        stack.enter_context(mock.patch.object(window, "root_partitions", lambda *a, **k: (WINDOW_START, roots)))
        stack.enter_context(mock.patch.object(window, "check_retention", lambda *a, **k: None))
        return stack

    with source_in_memory():
        began = time.perf_counter()
        plan = window.plan_window(settings, WINDOW_START, WINDOW_END, source=source)
        planned = time.perf_counter()
    assert len(plan.ready) == partitions, len(plan.ready)
    from spanner_cdc.store import open_store

    # as extract_tokens claims the tokens of a wave, by name (open_store: the same in the previous tree)
    with open_store(settings) as store:
        claiming = time.perf_counter()
        lineage = store.get_lineage(settings.stream, namespace)
        claims = store.claim(lineage.id, window_end=WINDOW_END, owner="bench", lease=timedelta(minutes=10),
                             tokens=[t.token for t in plan.ready], liveness=True)  # fmt: skip
        claimed = time.perf_counter()
        assert len(claims) == partitions, len(claims)
        replanning = time.perf_counter()  # the next wave's plan, while the claims' owner lives: nothing READY
        left = window.ready_tasks(settings, WINDOW_START, WINDOW_END)
        replanned = time.perf_counter()
        with source_in_memory():  # a second run of the window plans it on the existing lineage: nothing READY either
            again = window.plan_window(settings, WINDOW_START, WINDOW_END, source=source)
        second = time.perf_counter()
        assert not again.ready, len(again.ready)
    assert not left, len(left)
    return {"plan_s": planned - began, "claim_s": claimed - claiming, "replan_s": replanned - replanning,
            "second_plan_s": second - replanned}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--previous", required=True, help="a checkout of the previous code: its plan runs there, with it as PYTHONPATH")
    parser.add_argument("--partitions", type=int, default=10_000, help="root partitions of the new lineage (default 10,000)")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds (default 4; which tree runs first swaps each round)")
    parser.add_argument("--worker", nargs=4, metavar=("URL", "NAMESPACE", "PARTITIONS", "LAKE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        url, namespace, partitions, lake = args.worker
        print(json.dumps(worker(url, namespace, int(partitions), lake)))
        return 0
    from bench.extract_support import bench_store

    trees = {"previous": Path(args.previous).resolve(), "this": HERE}
    times: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory(prefix="compare-plan-") as name, bench_store(Path(name)) as bench_url:
        urls = {which: bench_url.rsplit("/", 1)[0] + f"/plan_{which}" for which in trees}
        _create_databases(bench_url, [u.rsplit("/", 1)[1] for u in urls.values()])
        print(f"{COMMAND}: a new lineage of {args.partitions:,} root partitions planned, claimed by name and planned again (the next wave), "
              f"then the window planned by a second run; previous {trees['previous']}, this {trees['this']}")  # fmt: skip
        for round_ in range(args.rounds):
            line = f"  round {round_ + 1}: load {os.getloadavg()[0]:.1f}"
            for which in list(trees)[:: 1 if round_ % 2 == 0 else -1]:
                done = subprocess.run(
                    [sys.executable, __file__, "--previous", ".", "--worker", urls[which], f"r{round_}",
                     str(args.partitions), str(Path(name) / f"lake-{which}")],
                    cwd=HERE, env={**os.environ, "PYTHONPATH": str(trees[which])}, capture_output=True, text=True,
                    timeout=1800, check=False,
                )  # fmt: skip
                if done.returncode != 0:
                    raise SystemExit(f"{which} failed:\n{done.stderr[-3000:]}")
                result = json.loads(done.stdout.strip().splitlines()[-1])
                times[which].append(result)
                line += f"; {which} " + ", ".join(f"{p} {result[p]:.2f}" for p in PHASES)
            print(line, flush=True)
    medians = {which: {p: statistics.median(r[p] for r in runs) for p in PHASES} for which, runs in times.items()}
    for which, m in medians.items():
        print(f"  median {which}: " + ", ".join(f"{p} {m[p]:.2f}" for p in PHASES) + f"; plan+claim {m['plan_s'] + m['claim_s']:.2f} s")
    before, after = (medians[w]["plan_s"] + medians[w]["claim_s"] for w in trees)
    print(f"  plan+claim: previous {before:.2f} s, this {after:.2f} s ({before / after:.2f}x)")
    return 0


def _create_databases(url: str, names: Sequence[str]) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        for name in names:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    engine.dispose()


if __name__ == "__main__":
    raise SystemExit(main())
