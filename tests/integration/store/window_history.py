"""A lineage with many hourly windows landed through the store as an extract does (splits, merges, a failed
attempt), and the plan+claim of its next window; `python -m tests.integration.store.window_history` measures what
metadata-store retention changes (store rows, plan+claim time) on a lineage of that shape."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from spanner_cdc.model.records import ChildPartition, ChildPartitionsRecord
from spanner_cdc.store import Claim, Completion, ManifestFile, MetadataStore

US = timedelta(microseconds=1)
HOUR = timedelta(hours=1)
T0 = datetime(2025, 6, 1, tzinfo=UTC)
LEASE = timedelta(minutes=5)
TABLES = ("cdc_partitions", "cdc_partition_parents", "cdc_attempts", "cdc_manifest", "cdc_partition_moves",
          "cdc_windows", "cdc_window_totals")  # fmt: skip


@dataclass
class History:
    """A lineage's windows as landed so far, and how its next child tokens are named."""

    store: MetadataStore
    lineage_id: int
    markers: Path
    serial: int = 0

    def window(self, n: int) -> tuple[datetime, datetime]:
        return T0 + n * HOUR, T0 + (n + 1) * HOUR

    def child(self) -> str:
        self.serial += 1
        return f"c{self.serial:06d}"

    def land(self, n: int, *, close: bool = True, fail_one: bool = False) -> None:
        """Window n: every ready token claimed; in each batch the first two merge into one child, the third splits in
        two, every other fourth ends with one child (the count of live partitions stays the same), the rest read to
        the window's end; children are read in the same window (waves). One file per landed range."""
        start, end = self.window(n)
        owner = f"run-{n}"
        self.store.open_window(self.lineage_id, start, end)
        wave = 0
        while claims := self.store.claim(self.lineage_id, window_end=end, owner=owner, lease=LEASE):
            claims.sort(key=lambda c: c.token)
            if fail_one:  # the first claims fail (FAILED attempts), and are claimed again at once
                fail_one = False
                for claim in claims:
                    self.store.fail(claim, "boom")
                continue
            at = max(c.read_from for c in claims) + (end - max(c.read_from for c in claims)) / 2
            items = []
            for i, claim in enumerate(claims):
                kids: tuple[ChildPartition, ...] = ()
                if wave == 0 and i == 0:
                    merged = ChildPartition(self.child(), (claims[0].token, claims[1].token))
                    kids = (merged,)
                elif wave == 0 and i == 1:
                    kids = (ChildPartition(merged.token, merged.parent_partition_tokens),)
                elif wave == 0 and i == 2:
                    kids = (ChildPartition(self.child(), (claim.token,)), ChildPartition(self.child(), (claim.token,)))
                elif wave == 0 and i % 4 == 3:
                    kids = (ChildPartition(self.child(), (claim.token,)),)
                items.append(self._completion(claim, start, end, kids, at))
            self.store.complete_many(items)
            wave += 1
        if close:
            files = self.store.manifest(self.lineage_id, window_start=start, window_end=end)
            marker = self.markers / f"{n:05d}.json"
            marker.write_text("{}")
            self.store.close_window(self.lineage_id, start, end, records=sum(f.rows for f in files), files=len(files),
                                    transaction_check={"ok": True}, marker_path=str(marker))  # fmt: skip

    @staticmethod
    def _completion(
        claim: Claim, start: datetime, end: datetime, kids: tuple[ChildPartition, ...], at: datetime
    ) -> Completion:
        last = at - US if kids else end - US
        path = f"lake/t=Orders/w={start:%Y%m%d%H}/{claim.token}-{claim.attempt}.parquet"
        files = (ManifestFile(path, claim.token, claim.read_from, last, start, end, 10, 1000, "Orders"),)
        children = (ChildPartitionsRecord(at, "1", kids),) if kids else ()
        return Completion(claim, last, bool(kids), children, files, 10, start, end)


def new_history(store: MetadataStore, stream: str, markers: Path, partitions: int) -> History:
    lineage = store.ensure_lineage(stream, "live")
    store.bootstrap(lineage.id, T0, [ChildPartition(f"root{i:04d}", ()) for i in range(partitions)])
    markers.mkdir(parents=True, exist_ok=True)
    return History(store, lineage.id, markers)


def row_counts(store: MetadataStore, lineage_id: int) -> dict[str, int]:
    def body(conn: sa.Connection) -> dict[str, int]:
        return {
            t: int(conn.execute(sa.text(f"SELECT count(*) FROM {t} WHERE lineage_id = :id"), {"id": lineage_id}).scalar_one())
            for t in TABLES
        }

    return store._db.transaction(body)


def plan_and_claim(store: MetadataStore, lineage_id: int, start: datetime, end: datetime) -> tuple[float, int]:
    """What a run's plan and first claim do for window [start, end) (extract.window.plan_window's store calls, then
    the tasks' claim of the planned tokens by name), timed; the claims are released again (FAILED attempts)."""
    began = time.perf_counter()
    partitions = store.partitions(lineage_id)
    assert partitions and store.window_status(lineage_id, start - HOUR, start).complete
    store.expire_leases(lineage_id)
    store.open_window(lineage_id, start, end)
    planned = [row.token for row in store.ready_tokens(lineage_id, end)]
    claims = store.claim(lineage_id, window_end=end, owner="measure", lease=LEASE, tokens=planned)
    elapsed = time.perf_counter() - began
    for claim in claims:
        store.fail(claim, "measured only")
    return elapsed, len(claims)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--windows", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5, help="plan+claim timings taken each side (the median is shown)")
    parser.add_argument("--index-cost", action="store_true",
                        help="instead: the landing rate with and without the two indexes retention adds, interleaved")  # fmt: skip
    args = parser.parse_args()

    import tempfile

    from spanner_cdc.devstack.embedded_pg import ensure_running

    with tempfile.TemporaryDirectory(prefix="spanner-cdc-pg-retention-") as tmp:
        pg = ensure_running(Path(tmp) / "pg")
        try:
            if args.index_cost:
                index_cost(pg.url(), Path(tmp), args.windows, args.partitions, args.repeat)
            else:
                measure(pg.url(), Path(tmp), args.windows, args.partitions, args.repeat)
        finally:
            pg.stop()


def measure(url: str, tmp: Path, windows: int, partitions: int, repeat: int) -> None:
    """Rows and plan+claim time of the next window, before and after retention folds every closed window."""
    import statistics

    from spanner_cdc.extract.maintain import MaintainSummary, fold_old_windows

    store = MetadataStore.connect(url)
    try:
        store.upgrade()
        history = new_history(store, "orders", tmp / "markers", partitions)
        built = time.perf_counter()
        for n in range(windows):
            history.land(n, fail_one=n % 10 == 0)
        print(f"{windows} windows x {partitions} partitions landed in {time.perf_counter() - built:.1f} s")
        next_start, next_end = history.window(windows)
        rows_before = row_counts(store, history.lineage_id)
        analyze(store)
        before = [plan_and_claim(store, history.lineage_id, next_start, next_end)[0] for _ in range(repeat)]
        summary = MaintainSummary("orders", "live")
        folding = time.perf_counter()
        fold_old_windows(store, history.lineage_id, datetime.now(UTC) + timedelta(seconds=5), summary)
        fold_s = time.perf_counter() - folding
        rows_after = row_counts(store, history.lineage_id)
        analyze(store)
        after = [plan_and_claim(store, history.lineage_id, next_start, next_end)[0] for _ in range(repeat)]
    finally:
        store.close()
    print(f"retention folded {summary.windows_folded} windows in {fold_s:.1f} s ({summary.partitions_deleted} partitions, "
          f"{summary.attempts_deleted} attempts, {summary.manifest_rows_deleted} manifest rows deleted)")  # fmt: skip
    print(f"{'table':24} {'rows before':>12} {'rows after':>12}")
    for table in TABLES:
        print(f"{table:24} {rows_before[table]:>12} {rows_after[table]:>12}")
    print(f"{'total':24} {sum(rows_before.values()):>12} {sum(rows_after.values()):>12}")
    b, a = statistics.median(before), statistics.median(after)
    print(f"plan+claim of window {windows} ({partitions} tokens), median of {repeat}: "
          f"before {b * 1000:.1f} ms, after {a * 1000:.1f} ms, after/before {a / b:.2f}")  # fmt: skip


RETENTION_INDEXES = ("cdc_attempts_by_window_end", "cdc_partitions_finished_by_end")


def index_cost(url: str, tmp: Path, windows: int, partitions: int, rounds: int) -> None:
    """Windows landed (claims, completions with splits and merges, closes) per second on two stores of one server, one
    without the indexes migration 0010 adds for retention, in interleaved rounds: what those indexes cost the extract."""
    import statistics

    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        for name in ("with_indexes", "without_indexes"):
            conn.execute(sa.text(f"CREATE DATABASE {name}"))
    admin.dispose()
    stores = {}
    for name in ("with_indexes", "without_indexes"):
        store = MetadataStore.connect(sa.make_url(url).set(database=name).render_as_string(hide_password=False))
        store.upgrade()
        stores[name] = store
    stores["without_indexes"]._db.transaction(
        lambda conn: [conn.execute(sa.text(f"DROP INDEX {index}")) for index in RETENTION_INDEXES]
    )
    rates: dict[str, list[float]] = {name: [] for name in stores}
    try:
        for n in range(rounds):
            for name, store in (stores.items() if n % 2 == 0 else reversed(stores.items())):
                history = new_history(store, f"r{n}", tmp / name / str(n), partitions)
                began = time.perf_counter()
                for w in range(windows):
                    history.land(w)
                rates[name].append(windows / (time.perf_counter() - began))
    finally:
        for store in stores.values():
            store.close()
    with_, without = statistics.median(rates["with_indexes"]), statistics.median(rates["without_indexes"])
    print(f"windows of {partitions} partitions landed per second, median of {rounds} interleaved rounds of {windows}: "
          f"with the retention indexes {with_:.2f}, without {without:.2f}, with/without {with_ / without:.2f}")  # fmt: skip


def analyze(store: MetadataStore) -> None:
    """Dead rows gone and fresh planner statistics, as autovacuum leaves a store between hourly runs (both sides)."""
    with store._db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for table in TABLES:
            conn.execute(sa.text(f"VACUUM ANALYZE {table}"))


if __name__ == "__main__":
    main()
