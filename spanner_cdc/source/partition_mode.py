"""A change stream's partition mode, asked from the database (INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS) once."""

from __future__ import annotations

import threading
from typing import Any

from google.api_core import exceptions as gexc

from spanner_cdc.errors import ConfigError, SourceError
from spanner_cdc.names import IMMUTABLE_KEY_RANGE, PARTITION_MODES, POSTGRESQL
from spanner_cdc.source.client import source_error
from spanner_cdc.source.queries import validate_dialect, validate_stream_name

GOOGLESQL_MODE = (
    "SELECT OPTION_VALUE FROM INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS "
    "WHERE CHANGE_STREAM_NAME = @name AND OPTION_NAME = 'partition_mode'"
)
POSTGRESQL_MODE = (
    "select option_value from information_schema.change_stream_options "
    "where change_stream_name = $1 and option_name = 'partition_mode'"
)
_modes: dict[tuple[str, str], str] = {}


def validate_partition_mode(mode: object, field: str = "partition_mode") -> str:
    text = str(mode).upper()
    if text not in PARTITION_MODES:
        raise ConfigError(field, mode, "one of auto, " + ", ".join(PARTITION_MODES))
    return text

_lock = threading.Lock()


def detect_partition_mode(database: Any, stream: str, dialect: str) -> str:
    """IMMUTABLE_KEY_RANGE (also when the option is not set: Spanner's default) or MUTABLE_KEY_RANGE.

    The mode cannot be altered, so one answer per database and stream holds for the process."""
    from google.cloud.spanner_v1 import param_types

    stream = validate_stream_name(stream)
    key = (str(database.name), stream)
    with _lock:
        cached = _modes.get(key)
    if cached is not None:
        return cached
    postgres = validate_dialect(dialect) == POSTGRESQL
    name = "p1" if postgres else "name"
    try:
        with database.snapshot() as snapshot:
            rows = list(
                snapshot.execute_sql(
                    POSTGRESQL_MODE if postgres else GOOGLESQL_MODE,
                    params={name: stream},
                    param_types={name: param_types.STRING},
                    timeout=30.0,
                )
            )
    except (gexc.GoogleAPICallError, gexc.RetryError) as exc:
        raise source_error(exc, f"reading the partition mode of change stream {stream}", database) from None
    mode = str(rows[0][0]).upper() if rows and rows[0][0] else IMMUTABLE_KEY_RANGE
    if mode not in PARTITION_MODES:
        raise SourceError(f"change stream {stream} has partition_mode {mode!r}: spanner-cdc reads {' and '.join(PARTITION_MODES)}")
    with _lock:
        _modes[key] = mode
    return mode
