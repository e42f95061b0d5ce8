"""Benchmark: a stream with splits and merges extracted for N consecutive hourly windows on the local server's
accelerated clock, `lake maintain` on its daily schedule; at checkpoints, how big the lake, its Iceberg metadata and
the metadata store have grown and how long planning, extracting, the UI's stream page and /metrics take."""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import figures
from bench.extract_support import INSTANCE, PROJECT, STREAM, bench_store, new_database, write_orders
from spanner_cdc.devstack.spanner_server import LocalSpanner
from spanner_cdc.settings import Settings

COMMAND = "python -m bench.bench_long_run"
HOUR = timedelta(hours=1)
FILES_TARGET = 64  # files a window lands at 1,000 partitions (issue 29; ~1,723 before)
SIZE_TARGET = 0.5  # after maintenance: median file size >= half the target size or the whole of its range's data
TIME_TARGET = 1.5  # every time at the last checkpoint within 1.5x of the same time at the first
FAST = 36_000.0  # server seconds per real second while the clock jumps to a window's end (an hour in 0.1 s)
LINEAGE_DAYS = 2  # simulated days of windows the store keeps whole: short, so its rows flatten within the run


@dataclass
class Checkpoint:
    window: int
    data_files: int = 0  # on disk: the listed ones and the originals compaction replaced, until removed
    listed_files: int = 0  # the manifest's
    median_file_bytes: float = 0.0  # of the listed files
    size_ratio: float = 0.0  # median file size / min(target, its table's bytes in its window)
    iceberg_metadata_bytes: int = 0
    snapshots: int = 0
    store_rows: dict[str, int] = field(default_factory=dict)
    plan_claim_s: float = 0.0
    extract_s: float = 0.0  # median over the windows since the previous checkpoint
    ui_page_s: float = 0.0
    metrics_s: float = 0.0
    maintain_s: float = 0.0  # the last `lake maintain` run's

    @property
    def rows(self) -> int:
        return sum(self.store_rows.values())


def checkpoints_of(windows: int, every: int) -> list[int]:
    """Windows 24, 120 and 240 of a 240-window run; proportional for another size (on the maintenance schedule)."""
    marks = [max(every, round(windows * share / every) * every) for share in (0.1, 0.5, 1.0)]
    return sorted({min(m, windows - windows % every or windows) for m in marks})


def maintenance_settings(settings: Settings, server_now: datetime, day_real_s: float) -> Settings:
    """The settings of a scheduled `lake maintain`: snapshot expiry and orphan ages are measured against real
    timestamps (Iceberg's commit times, file mtimes) while the bench passes the server's accelerated time as `now`,
    so each is widened by how far server time runs ahead of real time: the snapshots of the last simulated day
    stay (a day = `day_real_s` real seconds here), an unlisted file is removed once older than a simulated hour, and
    the store keeps the windows closed in the last LINEAGE_DAYS simulated days (their `closed_at` is real time too)."""
    ahead = server_now - datetime.now(UTC)
    return dataclasses.replace(
        settings,
        snapshot_retention=ahead + timedelta(seconds=day_real_s),
        orphan_min_age=ahead + timedelta(seconds=day_real_s / 24),
        lineage_retention=ahead + timedelta(seconds=LINEAGE_DAYS * day_real_s),  # closed_at is the store's real clock
    )


class Clock:
    """The local server's clock: written at real rate, jumped ahead to each window's end."""

    def __init__(self, server: LocalSpanner) -> None:
        self.server = server

    def now(self) -> datetime:
        from spanner_cdc.times import parse_rfc3339

        return parse_rfc3339(self.server.control.status()["now"])

    def pass_(self, when: datetime) -> None:
        """Run the clock fast until server time passes `when`, then at real time again."""
        from spanner_cdc.times import parse_rfc3339

        self.server.control.set_clock_rate(FAST)
        while (now := self.now()) <= when:
            time.sleep(min(1.0, (when - now).total_seconds() / FAST + 0.005))
        assert parse_rfc3339(self.server.control.set_clock_rate(1.0)["now"]) > when


def lake_files(settings: Settings) -> dict[str, int]:
    """The lake's data files (under table_name=*/) and their sizes."""
    from spanner_cdc.extract.window import layout_of
    from spanner_cdc.lake import storage
    from spanner_cdc.lake.layout import TABLE_KEY, published_locations

    location = layout_of(settings).location
    return {p: storage.size_of(p) for p in published_locations(location) if f"/{TABLE_KEY}=" in p[len(location) :]}


def iceberg_figures(settings: Settings) -> tuple[int, int]:
    """(bytes under the change log's metadata/ directory, snapshots the table holds)."""
    from spanner_cdc.extract.maintain import iceberg_path
    from spanner_cdc.extract.window import layout_of
    from spanner_cdc.lake import iceberg, storage

    opened = iceberg.open_changelog(settings, layout_of(settings))
    if opened is None:
        return 0, 0
    try:
        table = opened[1]
        metadata_dir = iceberg_path(table.metadata_location).rsplit("/", 1)[0]
        return sum(storage.size_of(p) for p in storage.find(metadata_dir)), len(table.snapshots())
    finally:
        iceberg.close_catalog(opened[0])


def store_rows(url: str) -> dict[str, int]:
    """Rows of each of the metadata store's cdc_* tables (the migration table aside)."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            names = conn.execute(sa.text(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
                "AND table_name LIKE 'cdc\\_%' AND table_name <> 'cdc_schema_migrations' ORDER BY table_name"
            )).scalars().all()  # fmt: skip
            return {n: int(conn.execute(sa.text(f'SELECT count(*) FROM "{n}"')).scalar_one()) for n in names}
    finally:
        engine.dispose()


def listed_sizes(settings: Settings) -> tuple[int, float, float]:
    """The manifest's files: their number, median size, and median of size / min(target, its table's bytes in its
    window) (1 when each window's table is in files of the target size, or in one file when it holds less)."""
    from spanner_cdc.extract.inputs import store_of, stream_of

    with store_of(settings) as store:
        files = store.manifest(store.get_lineage(stream_of(settings), settings.namespace).id)
    totals: dict[tuple[Any, str], int] = {}
    for f in files:
        totals[(f.window_start, f.table_name or "")] = totals.get((f.window_start, f.table_name or ""), 0) + f.bytes
    ratios = [f.bytes / min(settings.target_file_size, totals[(f.window_start, f.table_name or "")]) for f in files if f.bytes]
    return len(files), statistics.median(f.bytes for f in files) if files else 0.0, statistics.median(ratios) if ratios else 0.0


def plan_and_claim_s(settings: Settings, start: datetime, end: datetime) -> float:
    """Plan the next window and claim its ready tokens, as a run does; the probe's claims are released at once (its
    attempts are taken over by the run that extracts the window)."""
    from spanner_cdc.extract.inputs import store_of
    from spanner_cdc.extract.window import plan_window

    owner = f"bench-probe-{uuid.uuid4().hex[:6]}"
    began = time.perf_counter()
    plan = plan_window(settings, start, end)
    with store_of(settings) as store:
        claims = store.claim(plan.lineage_id, window_end=plan.window_end, owner=owner, lease=settings.lease,
                             tokens=[t.token for t in plan.ready])  # fmt: skip
        seconds = time.perf_counter() - began
        store.release_owner(owner)
        store.expire_leases(plan.lineage_id)
    if not claims:
        raise SystemExit(f"the probe claimed none of the {len(plan.ready)} ready token(s) of [{start}, {end})")
    return seconds


def ui_seconds(url: str, stream: str, namespace: str, now: datetime, rounds: int = 3) -> tuple[float, float]:
    """Median server time of the stream page and of /metrics, through the Airflow plugin's app (as bench_ui)."""
    from fastapi.testclient import TestClient

    from spanner_cdc.store import MetadataStore
    from spanner_cdc.ui.app import StoreTarget, create_app

    with MetadataStore.connect(url) as store:
        app = create_app(authorize=lambda: None, connect=lambda: StoreTarget(url=None, open=lambda: store), clock=lambda: now)
        with TestClient(app) as client:
            timings: dict[str, list[float]] = {"page": [], "metrics": []}
            for _ in range(rounds):
                for name, path in (("page", f"/streams/{stream}?namespace={namespace}"), ("metrics", "/metrics")):
                    began = time.perf_counter()
                    response = client.get(path)
                    timings[name].append(time.perf_counter() - began)
                    if response.status_code != 200:
                        raise SystemExit(f"{path}: {response.status_code} {response.text[:300]}")
    return statistics.median(timings["page"]), statistics.median(timings["metrics"])


def long_run(args: argparse.Namespace, tmp: Path, url: str) -> tuple[list[Checkpoint], dict[str, Any]]:
    from spanner_cdc.extract.maintain import maintain
    from spanner_cdc.extract.window import run_window
    from spanner_cdc.source.client import stream_metadata
    from spanner_cdc.spark.session import spark_session, stop_sessions

    marks = checkpoints_of(args.windows, args.maintain_every)
    policy = ["--policy-initial-partitions", str(args.partitions), "--policy-split-records", "100000000",
              "--policy-event-every", "none", "--policy-merge-idle", "none"]  # fmt: skip
    first = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + HOUR
    out: dict[str, Any] = {"maintenance": [], "records": 0, "written": 0}
    checkpoints: list[Checkpoint] = []
    with LocalSpanner(clock_start=first - timedelta(minutes=5), extra_args=policy, log_path=tmp / "server.log") as server:
        clock = Clock(server)
        database = new_database(server)
        created = stream_metadata(database, STREAM, "GOOGLE_STANDARD_SQL").created_at
        assert created is not None and created < first
        settings = Settings(project=PROJECT, instance=INSTANCE, stream=STREAM, metadata_url=url, output_root=tmp / "lake",
                            heartbeat_ms=300_000, home=tmp / "home", concurrency=2, spark_master="local[2]",
                            database=database.database_id, emulator_host=server.host, namespace="long",
                            target_file_size=args.target_file_size)  # fmt: skip
        spark_session(settings)
        clock.pass_(first)
        extract_s: list[float] = []
        day_began = time.monotonic()
        next_id = 0
        try:
            for n in range(1, args.windows + 1):
                start = first + (n - 1) * HOUR
                end = start + HOUR
                write_orders(database, args.transactions, first_id=next_id, lines=2, spread=2**40)
                next_id += args.transactions
                out["written"] += args.transactions * 3
                # the lineage changes every window: a split and a merge of two neighbours (as many live partitions
                # throughout, so each window has as much to read and only the history grows)
                server.control.split(database.name, STREAM)
                server.control.merge(database.name, STREAM)
                clock.pass_(end)
                summary = run_window(settings, start, end)
                if not summary.complete:
                    raise SystemExit(f"window {n} [{start}, {end}) did not complete: {summary.pending}")
                extract_s.append(summary.elapsed_s)
                out["records"] += summary.records
                if n % args.maintain_every == 0:  # the daily maintenance DAG's run, after the day's last window
                    day_real_s = time.monotonic() - day_began
                    done = maintain(maintenance_settings(settings, clock.now(), day_real_s), now=clock.now())
                    out["maintenance"].append(done.to_json())
                    day_began = time.monotonic()
                if n in marks:
                    point = Checkpoint(n)
                    point.data_files = len(lake_files(settings))
                    point.listed_files, point.median_file_bytes, point.size_ratio = listed_sizes(settings)
                    point.iceberg_metadata_bytes, point.snapshots = iceberg_figures(settings)
                    point.store_rows = store_rows(url)
                    point.plan_claim_s = statistics.median(plan_and_claim_s(settings, end, end + HOUR) for _ in range(3))
                    point.extract_s = statistics.median(extract_s)
                    point.ui_page_s, point.metrics_s = ui_seconds(url, STREAM, settings.namespace, clock.now())
                    point.maintain_s = out["maintenance"][-1]["elapsed_s"] if out["maintenance"] else 0.0
                    extract_s = []
                    checkpoints.append(point)
                    print(f"  window {n}: {_row(point)}", flush=True)
        finally:
            stop_sessions()
    if out["records"] != out["written"]:
        raise SystemExit(f"the windows landed {out['records']} rows, {out['written']} were written")
    return checkpoints, out


def files_per_window(partitions: int, tmp: Path, url: str) -> tuple[int, int, int, int]:
    """One window of a stream with `partitions` fixed partitions (as bench_scale), extracted by `spanner-cdc extract`:
    (tokens, data files landed, tables they hold, rows)."""
    from bench.extract_support import extract_with_memory, policy_args, window_after
    from spanner_cdc.source.client import stream_metadata

    transactions = 2 * partitions
    with LocalSpanner(extra_args=policy_args(partitions), log_path=tmp / "scale-server.log") as server:
        database = new_database(server)
        created = stream_metadata(database, STREAM, "GOOGLE_STANDARD_SQL").created_at
        assert created is not None
        end = window_after(write_orders(database, transactions, lines=1, spread=2**62 // transactions))
        settings = Settings(project=PROJECT, instance=INSTANCE, stream=STREAM, metadata_url=url, output_root=tmp / "scale-lake",
                            heartbeat_ms=1000, home=tmp / "home", concurrency=4, database=database.database_id,
                            emulator_host=server.host, namespace="scale")  # fmt: skip
        summary, _ = extract_with_memory(settings, created, end, PYSPARK_SUBMIT_ARGS="--driver-memory 1g pyspark-shell")
    if not summary["complete"]:
        raise SystemExit(f"the {partitions}-partition window did not complete")
    files = lake_files(settings)
    tables = {p.split("/table_name=", 1)[1].split("/", 1)[0] for p in files}
    return summary["tokens"], len(files), len(tables), summary["records"]


def _row(p: Checkpoint) -> str:
    return (f"{p.data_files} files on disk, {p.listed_files} listed (median {p.median_file_bytes / 1024:.1f} KiB, {p.size_ratio:.2f}x of its range or the target), "
            f"Iceberg metadata {p.iceberg_metadata_bytes / 1024:.0f} KiB in {p.snapshots} snapshots, store rows {p.rows:,}, "
            f"plan+claim {p.plan_claim_s:.3f} s, extract {p.extract_s:.2f} s/window, UI page {p.ui_page_s:.3f} s, "
            f"/metrics {p.metrics_s:.3f} s, last lake maintain {p.maintain_s:.1f} s")  # fmt: skip


def report(args: argparse.Namespace, points: list[Checkpoint], out: dict[str, Any], scale: tuple[int, int, int, int] | None) -> None:
    print(f"\n{COMMAND}: {args.windows} hourly windows of a stream starting with {args.partitions} partitions, a split and a "
          f"merge every window; {args.transactions} transactions (3 rows each) a window; `lake maintain` every "
          f"{args.maintain_every} windows (target file size {args.target_file_size:,} B); {out['records']:,} rows landed")  # fmt: skip
    tables = sorted({t for p in points for t in p.store_rows})
    print(f"  {'window':>6} {'on disk':>7} {'listed':>6} {'median KiB':>10} {'size/range':>10} {'ice meta KiB':>12} {'snapshots':>9} "
          f"{'store rows':>10} {'plan+claim s':>12} {'extract s':>9} {'UI page s':>9} {'metrics s':>9} {'maintain s':>10}")  # fmt: skip
    for p in points:
        print(f"  {p.window:>6} {p.data_files:>7} {p.listed_files:>6} {p.median_file_bytes / 1024:>10.1f} {p.size_ratio:>10.2f} "
              f"{p.iceberg_metadata_bytes / 1024:>12.0f} {p.snapshots:>9} {p.rows:>10,} {p.plan_claim_s:>12.3f} "
              f"{p.extract_s:>9.2f} {p.ui_page_s:>9.3f} {p.metrics_s:>9.3f} {p.maintain_s:>10.1f}")  # fmt: skip
    print("  store rows by table: " + "; ".join(f"{t} " + "/".join(str(p.store_rows.get(t, 0)) for p in points) for t in tables))
    for m in out["maintenance"]:
        print(f"    maintain: {m['windows_compacted']} window(s) compacted ({m['files_before']} -> {m['files_after']} files), "
              f"{m['snapshots_expired']} snapshot(s) expired, {len(m['orphans_removed'])} orphan(s) removed, "
              f"{len(m.get('metadata_removed', []))} Iceberg metadata file(s) removed, {m['elapsed_s']:.1f} s")  # fmt: skip
    if scale is not None:
        tokens, files, held, rows = scale
        print(f"  one window of {tokens:,} partitions ({rows:,} rows) extracted by `spanner-cdc extract`: {files} data files, "
              f"{files / max(1, held):.0f} per table ({held} tables)")  # fmt: skip
        figures.report(f"long run: files per window at {tokens:,} partitions", files, FILES_TARGET, "files", higher_is_better=False)
    if not points:
        return
    first, last = points[0], points[-1]
    figures.report(f"long run: median file size / target or range, window {last.window}", last.size_ratio, SIZE_TARGET, "x")
    for name, attr in (("plan+claim", "plan_claim_s"), ("extract per window", "extract_s"), ("UI stream page", "ui_page_s"),
                       ("/metrics", "metrics_s")):  # fmt: skip
        ratio = getattr(last, attr) / getattr(first, attr)
        figures.report(f"long run: {name} time, window {last.window} / window {first.window}", ratio, TIME_TARGET, "x", higher_is_better=False)
    if len(points) >= 2:  # flat once retention applies: the last two checkpoints, both past it
        before = points[-2]
        figures.report(f"long run: store rows, window {last.window} / window {before.window}", last.rows / max(1, before.rows), 1.1, "x",
                       higher_is_better=False)  # fmt: skip
        figures.report(f"long run: Iceberg snapshots, window {last.window} / window {before.window}",
                       last.snapshots / max(1, before.snapshots), 1.1, "x", higher_is_better=False)  # fmt: skip
        # not a target of the list, but the same bound: the change log's metadata files (every metadata.json,
        # manifest list and manifest written, as long as nothing deletes them)
        figures.report(f"long run: Iceberg metadata bytes, window {last.window} / window {before.window}",
                       last.iceberg_metadata_bytes / max(1, before.iceberg_metadata_bytes), 1.1, "x", higher_is_better=False)  # fmt: skip
    print(f"command: {COMMAND} --windows {args.windows} --partitions {args.partitions} --transactions {args.transactions} "
          f"--maintain-every {args.maintain_every} --scale-partitions {args.scale_partitions}")


def main(argv: Sequence[str] | None = None) -> int:
    from spanner_cdc.validators import byte_size

    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--windows", type=int, default=240, help="consecutive hourly windows (default 240: ten days)")
    parser.add_argument("--partitions", type=int, default=4, help="partitions the stream starts with (default 4)")
    parser.add_argument("--transactions", type=int, default=20, help="transactions a window, 3 rows each (default 20)")
    parser.add_argument("--maintain-every", type=int, default=24, help="windows between `lake maintain` runs (default 24: daily)")
    parser.add_argument("--target-file-size", type=lambda v: byte_size("--target-file-size", v), default=256 << 20,
                        help="target_file_size of the run (default 256MB)")  # fmt: skip
    parser.add_argument("--scale-partitions", type=int, default=1000,
                        help="partitions of the separate one-window measure of files per window (default 1000; 0: skip it)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.windows < args.maintain_every:
        parser.error(f"--windows {args.windows}: at least --maintain-every ({args.maintain_every}) windows are needed")
    with tempfile.TemporaryDirectory(prefix="bench-long-run-") as name:
        tmp = Path(name)
        with bench_store(tmp) as url:
            points, out = long_run(args, tmp, url)
            scale = files_per_window(args.scale_partitions, tmp, url) if args.scale_partitions else None
    report(args, points, out, scale)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
