"""The data lake: envelope rows, the Arrow schema of the lake contract, naming, publication and window markers."""

from spanner_cdc.lake.columns import LAKE_COLUMNS, LAKE_SCHEMA, PARTITION_COLUMN, SOURCE_SCHEMA, spark_ddl
from spanner_cdc.lake.envelope import EnvelopeBatcher, EnvelopeContext, event_uuid
from spanner_cdc.lake.layout import LakeLayout, published_files

__all__ = [
    "LAKE_COLUMNS",
    "LAKE_SCHEMA",
    "PARTITION_COLUMN",
    "SOURCE_SCHEMA",
    "EnvelopeBatcher",
    "EnvelopeContext",
    "LakeLayout",
    "event_uuid",
    "published_files",
    "spark_ddl",
]
