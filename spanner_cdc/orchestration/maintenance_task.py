"""Task body of the maintenance DAG: `lake maintain` of a stream's live lineage."""

from __future__ import annotations

from typing import Any

from spanner_cdc.orchestration.connections import stream_settings
from spanner_cdc.orchestration.failures import fail_fast


@fail_fast
def maintain(stream: str) -> dict[str, Any]:
    """Compaction, snapshot expiry, orphan removal and store retention of the stream's live lineage (what `lake maintain`
    does)."""
    from spanner_cdc.extract.maintain import maintain as maintain_lineage

    _, settings = stream_settings(stream)
    return maintain_lineage(settings).to_json()
