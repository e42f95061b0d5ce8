import psycopg
import psycopg2
import pytest
import sqlalchemy as sa

from spanner_cdc.errors import SchemaOutdated, StoreError, StoreUnreachable
from spanner_cdc.store.database import RETRYABLE_PGCODES, Database, _pgcode, _reason, display_url, normalise_url


def test_display_url_hides_the_password() -> None:
    shown = display_url("postgresql://alice:s3cret@db.example:5432/meta")
    assert "s3cret" not in shown
    assert shown == "postgresql://alice:***@db.example:5432/meta"


def test_postgres_scheme_alias_is_accepted() -> None:
    assert normalise_url("postgres://a@h/db") == "postgresql+psycopg2://a@h/db"
    assert normalise_url("postgres+psycopg2://a@h/db") == "postgresql+psycopg2://a@h/db"
    # SQLAlchemy 2.1 would pick psycopg 3 for a plain URL when it is installed: the store names psycopg2.
    assert normalise_url("postgresql://a@h/db") == "postgresql+psycopg2://a@h/db"


def test_reason_drops_libpq_preamble() -> None:
    error = sa.exc.OperationalError(
        "SELECT 1",
        {},
        psycopg2.OperationalError(
            'connection failed: connection to server at "127.0.0.1", port 1 failed: Connection refused\n'
            "\tIs the server running on that host and accepting TCP/IP connections?"
        ),
    )
    assert _reason(error) == "Connection refused"


def test_translate_maps_driver_errors_to_project_errors() -> None:
    db = Database("postgresql://bob:pw@127.0.0.1:1/x")
    unreachable = db.translate(sa.exc.OperationalError("SELECT 1", {}, psycopg2.OperationalError("timeout expired")))
    assert isinstance(unreachable, StoreUnreachable)
    assert str(unreachable) == (
        "metadata store at postgresql://bob:***@127.0.0.1:1/x is unreachable (timeout expired): "
        "start it, or point to another with metadata_url (or SPANNER_CDC_METADATA_URL)"
    )

    class UndefinedTable(psycopg2.ProgrammingError):
        pgcode = "42P01"

    missing = db.translate(sa.exc.ProgrammingError("SELECT", {}, UndefinedTable('relation "cdc_partitions" does not exist')))
    assert isinstance(missing, SchemaOutdated)
    assert "run `spanner-cdc db upgrade`" in str(missing)

    class Other(psycopg2.DataError):
        pgcode = "22007"

    other = db.translate(sa.exc.DataError("SELECT", {}, Other("invalid datetime")))
    assert type(other) is StoreError
    assert "invalid datetime" in str(other)
    db.dispose()


def test_psycopg_3_errors_are_known_by_their_sqlstate() -> None:
    """psycopg 3 has no `pgcode`: without its `sqlstate` a deadlock was not retried, a missing schema not named."""
    db = Database("postgresql+psycopg://bob:pw@127.0.0.1:1/x")
    missing = db.translate(sa.exc.ProgrammingError("SELECT", {}, psycopg.errors.UndefinedTable('relation "x" does not exist')))
    assert isinstance(missing, SchemaOutdated)
    deadlock = sa.exc.OperationalError("UPDATE", {}, psycopg.errors.DeadlockDetected("deadlock detected"))
    assert _pgcode(deadlock) in RETRYABLE_PGCODES  # so Database.transaction runs it again
    db.dispose()


def test_a_non_postgres_url_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="not a Postgres URL"):
        Database("nosuchdb://x/y")
