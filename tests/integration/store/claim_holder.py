"""A process that claims tokens, reports them and its liveness key as one JSON line, then waits to be killed."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timedelta

from spanner_cdc.store import MetadataStore

LEASE = timedelta(seconds=300)  # the default lease: only liveness can free these claims in a test's time


def main(url: str, lineage_id: str, window_end: str, owner: str) -> None:
    store = MetadataStore.connect(url)
    claims = store.claim(int(lineage_id), window_end=datetime.fromisoformat(window_end), owner=owner, lease=LEASE)
    print(json.dumps({"tokens": [c.token for c in claims], "key": store._liveness.key(owner)}), flush=True)
    while True:
        time.sleep(60)  # held until SIGKILL: nothing of the store is closed


if __name__ == "__main__":
    main(*sys.argv[1:])
