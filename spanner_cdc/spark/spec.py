"""What one token's Spark job needs, shipped to executors as data source options (strings)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from spanner_cdc.lake.envelope import DEFAULT_MAX_ROWS
from spanner_cdc.lake.storage import join
from spanner_cdc.spark.control_file import CONTROL_NAME

DATA_DIR = "data"
# Settings.lake_writer, carried in each spec: arrow, executors write the Parquet files with pyarrow (one pass, the
# default: measured faster); spark, executors hand the lake batches to Spark's Parquet writer (partitionBy)


@dataclass(frozen=True)
class TokenJobSpec:
    """Everything an executor needs to read one token over [read_from, read_to]; travels as data source options."""

    project: str
    instance: str
    database: str
    emulator_host: str | None
    stream: str
    dialect: str
    heartbeat_ms: int
    token: str
    read_from: datetime
    read_to: datetime
    window_start: datetime
    window_end: datetime
    read_method: str
    attempt_dir: str
    max_rows: int = DEFAULT_MAX_ROWS
    partition_mode: str = "auto"  # asked once by the driver, so an executor does not ask again per token
    # where the arrow writer lands the files itself: LakeLayout.location, and the names' lineage
    lake_root: str = ""
    lineage_id: int = 0
    # a wave task's files: their names start with file_stem (journaled by the driver); a file rolls past file_bytes
    file_stem: str = ""
    file_bytes: int = 256 << 20
    # the stream's landing policy (its JSON text, "" for none) and its HMAC key as hex: read by the driver, held in
    # memory only; "secret" in the option's name has Spark redact it wherever it shows data source options
    policy: str = ""
    policy_secret: str = field(default="", repr=False)
    read_options: str = ""  # the stream's ReadOptions as text (priority, directed reads); "" for none

    @property
    def data_dir(self) -> Path:
        return Path(self.attempt_dir) / DATA_DIR

    @property
    def control_path(self) -> str:
        return join(self.attempt_dir, CONTROL_NAME)

    def options(self) -> dict[str, str]:
        options = {}
        for key, value in asdict(self).items():
            if value is None:
                continue
            options[key] = value.isoformat() if isinstance(value, datetime) else str(value)
        return options

    @classmethod
    def from_options(cls, options: Any) -> TokenJobSpec:
        # Spark lower-cases data source option keys; every field name here is lower case already.
        get = options.get
        return cls(
            project=get("project"),
            instance=get("instance"),
            database=get("database"),
            emulator_host=get("emulator_host") or None,
            stream=get("stream"),
            dialect=get("dialect"),
            heartbeat_ms=int(get("heartbeat_ms")),
            token=get("token"),
            read_from=datetime.fromisoformat(get("read_from")),
            read_to=datetime.fromisoformat(get("read_to")),
            window_start=datetime.fromisoformat(get("window_start")),
            window_end=datetime.fromisoformat(get("window_end")),
            read_method=get("read_method"),
            attempt_dir=get("attempt_dir"),
            max_rows=int(get("max_rows") or DEFAULT_MAX_ROWS),
            partition_mode=get("partition_mode") or "auto",
            lake_root=get("lake_root") or "",
            lineage_id=int(get("lineage_id") or 0),
            file_stem=get("file_stem") or "",
            file_bytes=int(get("file_bytes") or 256 << 20),
            policy=get("policy") or "",
            policy_secret=get("policy_secret") or "",
            read_options=get("read_options") or "",
        )


