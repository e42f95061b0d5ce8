"""The UI's server time against the length of a stream's window history: the stream page, the lineage index and
/metrics of a store holding `--few` closed, folded windows and of one holding `--many`, side by side in one run.

Each store's newest `--few` windows are landed through the store as an extract does (tests/integration/store/
window_history.py: claims, splits and merges, closes), then folded by metadata-store retention; the older windows of
the long history are copies of those rows (cdc_windows and cdc_window_totals, as retention leaves them) shifted back
in time, which is what months of hourly runs and daily maintenance leave behind."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from spanner_cdc.store import MetadataStore
from tests.integration.store.window_history import History, new_history

COMMAND = "python -m bench.ui_windows"
PATHS = ("/streams/orders", "/", "/metrics")


def _client(store: MetadataStore, now: datetime):  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient

    from spanner_cdc.ui.app import StoreTarget, create_app

    app = create_app(authorize=lambda: None, connect=lambda: StoreTarget(url=None, open=lambda: store), clock=lambda: now)
    return TestClient(app)


def _build(store: MetadataStore, tmp: Path, landed: int, total: int, partitions: int) -> History:
    """`landed` windows through the store, folded; then `total - landed` older copies of their rows."""
    from spanner_cdc.extract.maintain import MaintainSummary, fold_old_windows

    store.upgrade()
    history = new_history(store, "orders", tmp / "markers", partitions)
    for n in range(landed):
        history.land(n, fail_one=n % 10 == 0)
    fold_old_windows(store, history.lineage_id, datetime.now(UTC) + timedelta(seconds=5), MaintainSummary("orders", "live"))
    copies = -(-(total - landed) // landed)
    params = {"lineage_id": history.lineage_id, "copies": copies, "span": timedelta(hours=landed), "total": total - landed}

    def body(conn: sa.Connection) -> None:
        older = (
            "FROM {table} t, generate_series(1, :copies) k WHERE t.lineage_id = :lineage_id "
            "AND (k - 1) * {landed} + (SELECT count(*) FROM {table} u WHERE u.lineage_id = t.lineage_id "
            "AND u.window_start > t.window_start) < :total"
        )
        conn.execute(sa.text(
            "INSERT INTO cdc_windows (lineage_id, window_start, window_end, state, records, files, transaction_check, "
            "marker_path, opened_at, closed_at, verify) SELECT t.lineage_id, t.window_start - k * :span, "
            "t.window_end - k * :span, t.state, t.records, t.files, t.transaction_check, t.marker_path, "
            "t.opened_at - k * :span, t.closed_at - k * :span, t.verify " + older.format(table="cdc_windows", landed=landed)
        ), params)  # fmt: skip
        conn.execute(sa.text(
            "INSERT INTO cdc_window_totals (lineage_id, window_start, window_end, partitions, attempts, attempts_failed, "
            "attempt_records, files, rows, bytes, moves, folded_at) SELECT t.lineage_id, t.window_start - k * :span, "
            "t.window_end - k * :span, t.partitions, t.attempts, t.attempts_failed, t.attempt_records, t.files, t.rows, "
            "t.bytes, t.moves, t.folded_at " + older.format(table="cdc_window_totals", landed=landed)
        ), params)  # fmt: skip

    store._db.transaction(body)
    with store._db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE"))
    return history


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--few", type=int, default=100, help="closed windows of the short history (default 100)")
    parser.add_argument("--many", type=int, default=10_000, help="closed windows of the long history (default 10000)")
    parser.add_argument("--partitions", type=int, default=20, help="live partitions of each stream (default 20)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved requests per page and store; medians shown")
    args = parser.parse_args(argv)
    from spanner_cdc.devstack.embedded_pg import ensure_running

    seconds: dict[tuple[int, str], list[float]] = {}
    sizes: dict[tuple[int, str], int] = {}
    with tempfile.TemporaryDirectory(prefix="spanner-cdc-pg-ui-windows-") as tmp:
        server = ensure_running(Path(tmp) / "pg")
        stores = {}
        try:
            for total in (args.few, args.many):
                store = MetadataStore.connect(server.create_database(f"windows_{total}"))
                history = _build(store, Path(tmp) / str(total), args.few, total, args.partitions)
                stores[total] = (store, history.window(args.few)[0] + timedelta(minutes=10))
            clients = {total: _client(store, now).__enter__() for total, (store, now) in stores.items()}
            for n in range(args.rounds):
                for total in (stores if n % 2 == 0 else reversed(stores)):
                    for path in PATHS:
                        started = time.perf_counter()
                        response = clients[total].get(path)
                        seconds.setdefault((total, path), []).append(time.perf_counter() - started)
                        assert response.status_code == 200, response.text[:300]
                        sizes[(total, path)] = len(response.content)
            for client in clients.values():
                client.__exit__(None, None, None)
        finally:
            for store, _ in stores.values():
                store.close()
            server.stop()
    print(f"UI server time, median of {args.rounds} interleaved requests; a stream of {args.partitions} live partitions "
          f"whose newest {args.few} windows were landed through the store and folded")  # fmt: skip
    print(f"{'request':18} {f'{args.few} windows':>14} {f'{args.many} windows':>15} {'ratio':>6}   bytes")
    for path in PATHS:
        few, many = statistics.median(seconds[(args.few, path)]), statistics.median(seconds[(args.many, path)])
        print(f"{path:18} {few * 1000:>11.1f} ms {many * 1000:>12.1f} ms {many / few:>6.2f}   "
              f"{sizes[(args.few, path)]} / {sizes[(args.many, path)]}")  # fmt: skip
    print(f"command: {COMMAND} --few {args.few} --many {args.many} --partitions {args.partitions} --rounds {args.rounds}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
