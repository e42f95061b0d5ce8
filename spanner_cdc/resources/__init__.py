"""Files the package ships for users to copy and edit (example streams, alert rules, dashboard, DAG file), read with importlib.resources."""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

from spanner_cdc.errors import SpannerCdcError, UsageError

# What `spanner-cdc init DIR` writes, as (path in the package's resources, path under DIR).
EXAMPLES: tuple[tuple[str, str], ...] = (
    ("streams.example.toml", "streams.toml"),
    ("prometheus/spanner_cdc_rules.yml", "prometheus/spanner_cdc_rules.yml"),
    ("prometheus/spanner_cdc_rules_test.yml", "prometheus/spanner_cdc_rules_test.yml"),
    ("grafana/spanner_cdc_dashboard.json", "grafana/spanner_cdc_dashboard.json"),
    ("dags/spanner_cdc_dags.py", "dags/spanner_cdc_dags.py"),
)


def resource(name: str) -> Traversable:
    """One shipped file, by its path under spanner_cdc/resources (slash-separated)."""
    found = files(__name__).joinpath(*name.split("/"))
    if not found.is_file():
        raise SpannerCdcError(f"spanner-cdc resource {name!r} is not in this install: reinstall spanner-cdc")
    return found


def dags_folder() -> Path:
    """The package's own DAG folder (one few-line file calling the DAG factory), for Airflow's dags_folder setting."""
    folder = files(__name__) / "dags"
    if not isinstance(folder, Path) or not folder.is_dir():  # a zipped install has no folder Airflow could scan
        raise SpannerCdcError(f"spanner-cdc's DAG folder {folder} is not a directory: install spanner-cdc unzipped (pip install)")
    return folder


def write_examples(dest: Path, *, overwrite: bool = False) -> list[Path]:
    """Copy the example config, alert rules, dashboard and DAG file under `dest`; refuse to replace a file unless asked."""
    targets = [(resource(src), dest / rel) for src, rel in EXAMPLES]
    existing = [str(path) for _, path in targets if path.exists()]
    if existing and not overwrite:
        raise UsageError(f"{', '.join(existing)} already exist: pass --force to overwrite, or choose another directory")
    for src, path in targets:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(src.read_bytes())
    return [path for _, path in targets]
