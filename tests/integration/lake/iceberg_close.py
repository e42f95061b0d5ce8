"""Test helper run as a subprocess: the Iceberg part of closing windows (land_window), for the kill test."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

from spanner_cdc.lake.iceberg import land_window
from spanner_cdc.lake.layout import LakeLayout
from spanner_cdc.settings import Settings
from spanner_cdc.store.models import ManifestFile


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    settings = Settings(metadata_url=spec["metadata_url"], output_root=Path(spec["output_root"]), stream=spec["stream"],
                        namespace=spec["namespace"], iceberg_catalog="store")  # fmt: skip
    layout = LakeLayout(settings.output_root, spec["stream"], spec["namespace"])
    import pyiceberg.catalog.sql  # noqa: F401  (imported before "ready": the kills fall in the commits)

    print("ready", flush=True)
    for window in spec["windows"]:
        start, end = datetime.fromisoformat(window["start"]), datetime.fromisoformat(window["end"])
        files = [ManifestFile(**{**f, **{k: datetime.fromisoformat(f[k]) for k in ("range_start", "range_end", "window_start", "window_end")}})
                 for f in window["files"]]  # fmt: skip
        land_window(settings, layout, window_start=start, window_end=end, files=files)
        print("landed", window["start"], flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
