"""The project's vocabulary, each fact in one place: SQL dialects, value capture types, read methods, the identifier rule,
the names of DAGs, assets and pools, and how a partition token is shortened for people. Imports nothing."""

from __future__ import annotations

import hashlib
import re

GOOGLE_STANDARD_SQL = "GOOGLE_STANDARD_SQL"
POSTGRESQL = "POSTGRESQL"
DIALECTS: tuple[str, ...] = (GOOGLE_STANDARD_SQL, POSTGRESQL)

VALUE_CAPTURE_TYPES: tuple[str, ...] = ("OLD_AND_NEW_VALUES", "NEW_ROW", "NEW_VALUES", "NEW_ROW_AND_OLD_VALUES")

# A change stream's partition_mode option (not alterable; unset = IMMUTABLE_KEY_RANGE): splitting and merging
# partitions with child partitions records, or long-lived partitions between which key ranges move (proto records).
IMMUTABLE_KEY_RANGE = "IMMUTABLE_KEY_RANGE"
MUTABLE_KEY_RANGE = "MUTABLE_KEY_RANGE"
PARTITION_MODES: tuple[str, ...] = (IMMUTABLE_KEY_RANGE, MUTABLE_KEY_RANGE)

# The lake's read_method column: the hourly extract, and a backfill of a past range in a namespace of its own.
LIVE_READ_METHOD = "spanner-change-stream"
BACKFILL_READ_METHOD = "spanner-change-stream-backfill"
READ_METHODS: tuple[str, ...] = (LIVE_READ_METHOD, BACKFILL_READ_METHOD)
# The rows of a lineage's initial snapshot (`spanner-cdc snapshot`): every watched row at T0, as an INSERT.
SNAPSHOT_READ_METHOD = "spanner-snapshot"

# Stream, table and namespace names go into SQL text and paths: Spanner's identifier rule (at most 128 characters).
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
IDENTIFIER_ACCEPTED = "an identifier: a letter or _, then up to 127 letters, digits or _"

LIVE_NAMESPACE = "live"
HOURLY_DAG_PREFIX = "spanner_cdc_hourly__"
BACKFILL_DAG_ID = "spanner_cdc_backfill"
# The Airflow pool that bounds concurrent change stream queries across every DAG of the project.
SPANNER_POOL = "spanner_cdc_spanner_queries"
MAINTENANCE_DAG_PREFIX = "spanner_cdc_maintenance__"
# The pool of the maintenance DAGs (one slot): maintenance never takes a slot the hourly extracts need.
MAINTENANCE_POOL = "spanner_cdc_maintenance"


def maintenance_dag_id(stream_name: str) -> str:
    """The lake maintenance DAG of the configured stream `[streams.<stream_name>]`."""
    return MAINTENANCE_DAG_PREFIX + stream_name


def hourly_dag_id(stream_name: str) -> str:
    """The hourly DAG of the configured stream `[streams.<stream_name>]`."""
    return HOURLY_DAG_PREFIX + stream_name


def backfill_namespace(run_id: str) -> str:
    """A lineage namespace of its own per backfill run: readable, an identifier, unique even when truncated."""
    readable = re.sub(r"[^A-Za-z0-9_]+", "_", run_id).strip("_")[:80]
    digest = hashlib.sha1(run_id.encode()).hexdigest()[:8]
    return f"backfill_{readable}_{digest}"


def landed_asset_name(stream_name: str) -> str:
    """The asset whose events say a window of the stream's live lineage landed."""
    return f"spanner_cdc_landed__{stream_name}"


def current_state_asset_name(stream_name: str) -> str:
    """The asset whose events say a new current state of the stream's tables is written (one event per state)."""
    return f"spanner_cdc_current_state__{stream_name}"


def short_token(token: str, width: int = 10) -> str:
    """Tokens are long opaque strings whose tails tell partitions apart: the tail, marked with … when cut."""
    return token if len(token) <= width else "…" + token[-width:]

# pyspark marks a process that once made a Connect session with SPARK_CONNECT_MODE_ENABLED in os.environ, and a child
# process inherits it; SPARK_REMOTE, if a user exported it, points the same way. The project's spark_master decides.
SPARK_CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"  # the marker pyspark's remote builder sets and its functions ask
SPARK_CONNECT_MARKERS = (SPARK_CONNECT_MODE, "SPARK_REMOTE")

# The hourly DAG's default deadline callback, named by its path: Airflow imports it in the triggerer
DEADLINE_CALLBACK = "spanner_cdc.orchestration.deadline.window_missed"
