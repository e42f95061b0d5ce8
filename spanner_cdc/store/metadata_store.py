"""The metadata store: one class over Postgres for lineages, partition states, windows, the manifest and snapshots."""

from __future__ import annotations

from spanner_cdc.store import functions, migrations
from spanner_cdc.store.database import Database
from spanner_cdc.store.lineages import LineageQueries
from spanner_cdc.store.liveness import Liveness
from spanner_cdc.store.manifest import CompactionQueries, WindowQueries
from spanner_cdc.store.retention import RetentionQueries
from spanner_cdc.store.snapshots import SnapshotQueries
from spanner_cdc.store.transitions import PartitionTransitions


class MetadataStore(
    LineageQueries, PartitionTransitions, WindowQueries, CompactionQueries, SnapshotQueries, RetentionQueries
):
    """Every method is one transaction; callers never see SQL or sessions."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._liveness = Liveness(db)

    @classmethod
    def connect(cls, url: str) -> MetadataStore:
        """Connect to the Postgres at `url`; StoreUnreachable (saying what to do) when it cannot."""
        db = Database(url)
        try:
            db.ping()
        except BaseException:
            db.dispose()
            raise
        return cls(db)

    def upgrade(self) -> list[str]:
        """Apply pending migrations; returns the names of those applied (empty when up to date)."""
        return migrations.upgrade(self._db)

    def check_schema(self) -> None:
        """SchemaOutdated when the schema is missing or older than the code."""
        migrations.check(self._db)

    def missing_functions(self) -> list[str]:
        """This release's functions (store/functions.py) the store lacks: `upgrade` installs them."""
        return self._db.transaction(functions.missing)

    def schema_version(self) -> int:
        return self._db.transaction(migrations.current_version)

    def applied_migrations(self) -> list[tuple[int, str, object]]:
        return self._db.transaction(migrations.applied)

    def close(self) -> None:
        """Release the owners' liveness locks (their unfinished claims become claimable) and the connections."""
        self._liveness.close()
        self._db.dispose()

    def __enter__(self) -> MetadataStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
