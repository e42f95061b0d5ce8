"""Versioned SQL migrations from the package's `store/sql/NNNN_verb_what.sql`, applied in order and recorded in a version table."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from spanner_cdc.errors import SchemaOutdated, StoreError
from spanner_cdc.store import functions
from spanner_cdc.store.database import UPGRADE_HINT, Database

# The schema this code was written against; a unit test keeps it equal to the newest file in store/sql/.
SCHEMA_VERSION = 10
# Package data (in the wheel and in an editable checkout alike), read through importlib.resources.
SQL_DIR: Traversable = files("spanner_cdc.store") / "sql"
VERSION_TABLE = "cdc_schema_migrations"
FILE_NAME = re.compile(r"^(\d{4})_([a-z][a-z0-9_]*)\.sql$")
# Any fixed number works; it only has to be the same for every spanner-cdc process.
UPGRADE_LOCK_KEY = 0x5C0C_DB01


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    path: Traversable

    def statements(self) -> str:
        return self.path.read_text(encoding="utf-8")


def discover(sql_dir: Traversable = SQL_DIR) -> list[Migration]:
    """Every migration file in version order; a gap or a badly named file is an error, not a skip."""
    if not sql_dir.is_dir():
        raise StoreError(f"migration files not found in {sql_dir}: reinstall spanner-cdc (the package lacks store/sql/)")
    found = []
    for path in sorted((p for p in sql_dir.iterdir() if p.name.endswith(".sql")), key=lambda p: p.name):
        match = FILE_NAME.match(path.name)
        if match is None:
            raise StoreError(f"migration file {path} is not named NNNN_verb_what.sql")
        found.append(Migration(int(match.group(1)), path.name.removesuffix(".sql"), path))
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise StoreError(f"migration versions in {sql_dir} must be 1..N without gaps, found {versions}")
    return found


def _version_table_exists(conn: Connection) -> bool:
    return conn.execute(sa.text("SELECT to_regclass(:name) IS NOT NULL"), {"name": VERSION_TABLE}).scalar_one()


def current_version(conn: Connection) -> int:
    """The newest applied migration, 0 when the store has no spanner-cdc schema."""
    if not _version_table_exists(conn):
        return 0
    return int(conn.execute(sa.text(f"SELECT coalesce(max(version), 0) FROM {VERSION_TABLE}")).scalar_one())


def applied(conn: Connection) -> list[tuple[int, str, object]]:
    if not _version_table_exists(conn):
        return []
    rows = conn.execute(sa.text(f"SELECT version, name, applied_at FROM {VERSION_TABLE} ORDER BY version"))
    return [(int(r.version), str(r.name), r.applied_at) for r in rows]


def upgrade(db: Database, migrations: list[Migration] | None = None) -> list[str]:
    """Apply every pending migration in one transaction, then install this code's functions (store.functions) once
    the schema is the code's; concurrent upgrades wait for each other."""
    pending_all = discover() if migrations is None else migrations

    def body(conn: Connection) -> list[str]:
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": UPGRADE_LOCK_KEY})
        conn.execute(
            sa.text(
                f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
            )
        )
        version = current_version(conn)
        done = []
        for migration in pending_all:
            if migration.version <= version:
                continue
            # exec_driver_sql: the file holds several statements and no bind parameters
            conn.exec_driver_sql(migration.statements())
            conn.execute(
                sa.text(f"INSERT INTO {VERSION_TABLE} (version, name) VALUES (:version, :name)"),
                {"version": migration.version, "name": migration.name},
            )
            done.append(migration.name)
        if current_version(conn) == SCHEMA_VERSION:  # the functions read this schema's tables
            functions.install(conn)
        return done

    return db.transaction(body)


def check(db: Database, expected: int = SCHEMA_VERSION) -> int:
    """Refuse a store whose schema is missing or older than the code, or lacks the code's functions; return its version."""
    version = db.transaction(current_version)
    if version == 0:
        raise SchemaOutdated(f"metadata store at {db.display_url} has no spanner-cdc schema: {UPGRADE_HINT}")
    if version < expected:
        raise SchemaOutdated(
            f"metadata store at {db.display_url} has schema version {version}, this code needs {expected}: "
            f"{UPGRADE_HINT}"
        )
    if version > expected:
        raise SchemaOutdated(
            f"metadata store at {db.display_url} has schema version {version}, newer than this code's {expected}: "
            "upgrade spanner-cdc"
        )
    absent = db.transaction(functions.missing)
    if absent:
        raise SchemaOutdated(
            f"metadata store at {db.display_url} {functions.MISSING_HINT} ({', '.join(absent)}): {UPGRADE_HINT}"
        )
    return version
