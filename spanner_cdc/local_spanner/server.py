"""The local Spanner server process: state restored from --data-dir, the gRPC services on one port."""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import grpc

from spanner_cdc.local_spanner import admin_service, spanner_service
from spanner_cdc.local_spanner.catalog import Catalog
from spanner_cdc.local_spanner.clock import ServerClock
from spanner_cdc.local_spanner.control import ControlService
from spanner_cdc.local_spanner.persistence import ClockMark, Journal
from spanner_cdc.local_spanner.streaming import FaultInjector
from spanner_cdc.local_spanner.ttl import DEFAULT_TTL_INTERVAL_SECONDS, TtlSweeper
from spanner_cdc.local_spanner.values import format_timestamp, parse_timestamp

log = logging.getLogger(__name__)

CLOCK_MARK_LEAD_SECONDS = 2.0  # real seconds the persisted clock mark runs ahead of server time
FULL_COLLECTION_EVERY = 1000  # young-generation (gen1) collections between two full ones; Python's default is 10
EngineFactory = Callable[[ServerClock, "Path | None", Any], Any]


@dataclass(frozen=True)
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 0  # 0: pick a free port
    data_dir: Path | None = None
    clock_start: datetime | None = None
    clock_rate: float = 1.0
    policy: Any = None  # changestream.policy.PartitionPolicy; None = the engine's default
    max_workers: int = 128
    fsync: bool = False
    ttl_interval: float = DEFAULT_TTL_INTERVAL_SECONDS  # real seconds between row deletion policy sweeps; 0: none


def _default_engine(clock: ServerClock, data_dir: Path | None, policy: Any, fsync: bool = False) -> Any:
    from spanner_cdc.local_spanner.changestream.engine import ChangeStreamEngine

    return ChangeStreamEngine(clock, data_dir, policy, fsync=fsync)


class LocalSpannerServer:
    """Builds the catalog, clock and change stream engine, and serves them over gRPC."""

    def __init__(self, options: ServerOptions, engine_factory: EngineFactory | None = None) -> None:
        self.options = options
        journal = Journal(options.data_dir, fsync=options.fsync) if options.data_dir else None
        self.catalog = Catalog(journal)
        entries = self.catalog.replay()
        self.clock_mark = ClockMark(options.data_dir) if options.data_dir else None
        not_before = self.catalog.last_timestamp
        marked = self.clock_mark.read() if self.clock_mark else None
        if marked is not None and (not_before is None or parse_timestamp(marked) > not_before):
            not_before = parse_timestamp(marked)
        self.clock = ServerClock(options.clock_start, options.clock_rate, not_before=not_before)
        # the engine keeps its change log in <data_dir>/changestreams/
        factory = engine_factory or partial(_default_engine, fsync=options.fsync)
        self.engine = factory(self.clock, options.data_dir, options.policy)
        self.catalog.attach(self.clock, self.engine)
        if entries:
            log.info("restored %d journal entries from %s; server time continues at %s",
                     entries, options.data_dir, format_timestamp(self.clock.now()))
            for database in self.catalog.databases.values():
                self.engine.update_tables(database.name, database.schema.table_infos())
        self.faults = FaultInjector()
        self.spanner = spanner_service.SpannerService(self.catalog, self.engine, self.faults)
        self.admin = admin_service.AdminService(self.catalog)
        self.control = ControlService(self.engine, self.faults, self.status, commit_lock=self.catalog.lock, clock=self.clock,
                                      sweep_ttl=self.sweep_ttl, requests=self.spanner.requests)
        self._ttl = TtlSweeper(self.sweep_ttl, options.ttl_interval) if options.ttl_interval > 0 else None
        self._server: grpc.Server | None = None
        self._stopping = threading.Event()
        self._marker: threading.Thread | None = None
        self.port = 0

    def _mark_clock(self) -> None:
        # a restart after a crash continues after any time a reader can have been told about (heartbeats)
        assert self.clock_mark is not None
        lead = timedelta(seconds=CLOCK_MARK_LEAD_SECONDS * 1.5 * self.clock.rate)
        while True:
            self.clock_mark.write(format_timestamp(self.clock.now() + lead))
            if self._stopping.wait(CLOCK_MARK_LEAD_SECONDS / 2):
                return

    def sweep_ttl(self) -> int:
        """Delete the rows row deletion policies expired by server time now; their number."""
        return self.catalog.delete_expired(self.clock.now())

    def status(self) -> dict[str, Any]:
        with self.catalog.lock:
            databases = {
                db.name: {
                    "dialect": "POSTGRESQL" if db.postgres else "GOOGLE_STANDARD_SQL",
                    "tables": {name: len(db.data.get(name, {})) for name in db.schema.tables},
                    "streams": sorted(db.schema.streams),
                }
                for db in self.catalog.databases.values()
            }
        return {
            "now": format_timestamp(self.clock.now()),
            "clock_rate": self.clock.rate,
            "data_dir": str(self.options.data_dir) if self.options.data_dir else None,
            "databases": databases,
            "pending_failures": self.faults.pending,
            "failures_injected": self.faults.injected,
            "active_reads": self.spanner.active_reads,
            "gc_frozen": gc.get_freeze_count(),  # settle_gc: objects out of the full collections
            "gc_full_every": gc.get_threshold()[2],
        }

    def start(self) -> int:
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self.options.max_workers, thread_name_prefix="local-spanner"),
            options=[
                ("grpc.max_receive_message_length", 256 << 20),
                ("grpc.max_send_message_length", 64 << 20),
                ("grpc.so_reuseport", 0),
            ],
        )
        server.add_generic_rpc_handlers([
            spanner_service.handlers(self.spanner),
            *admin_service.handlers(self.admin),
            self.control.handlers(),
        ])
        self.port = server.add_insecure_port(f"{self.options.host}:{self.options.port}")
        if not self.port:
            raise OSError(f"cannot listen on {self.options.host}:{self.options.port}")
        if self.clock_mark is not None:
            self._marker = threading.Thread(target=self._mark_clock, name="clock-mark", daemon=True)
            self._marker.start()
        server.start()
        self._server = server
        if self._ttl is not None:
            self._ttl.start()
        return self.port

    @staticmethod
    def settle_gc() -> None:
        """For the server process, once it serves: its long-lived objects out of the cyclic GC's full collections.

        The server holds every database's rows and change records (and the modules) for its whole life, none of them
        in a cycle worth collecting. With Python's default thresholds a full collection, which walks them all, ran
        about every other drain of a 10,000-record partition and took 0.1-0.2 s on a loaded machine, a stall of the
        reader's stream as long as the drain itself (and a pause no Cloud Spanner server imposes on its readers).
        What exists at startup is frozen (the modules, a replayed journal), and later full collections are 100 times
        rarer; young objects are still collected as usual, and anything is still freed by its reference count."""
        gc.collect()  # nothing dead is frozen
        gc.freeze()
        young, middle, _ = gc.get_threshold()
        gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)

    @property
    def address(self) -> str:
        return f"{self.options.host}:{self.port}"

    def wait(self, timeout: float | None = None) -> bool:
        assert self._server is not None
        return bool(self._server.wait_for_termination(timeout))

    def stop(self, grace: float = 2.0) -> None:
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None
        self._stopping.set()
        if self._ttl is not None:
            self._ttl.stop()
        if self._marker is not None:
            self._marker.join()
            self._marker = None
        if self.clock_mark is not None:
            self.clock_mark.write(format_timestamp(self.clock.now()))
        close = getattr(self.engine, "close", None)
        if callable(close):
            close()
        if self.catalog.journal is not None:
            self.catalog.journal.close()
