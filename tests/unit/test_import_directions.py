"""Imports point one way: each package of spanner_cdc may import its own layer and the layers below it, never above."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "spanner_cdc"

# Lowest floor first. docs/architecture.md draws the same floors. Packages on one floor are siblings: neither imports
# the other (each imports only its own package and the floors below), except the pairs in SIBLING_IMPORTS.
LAYERS: list[set[str]] = [
    {"errors", "names", "masking", "times", "json_text"},  # vocabulary, formats and error types: import nothing of the project
    {"settings", "stream_config"},  # configuration
    {"lineage", "model"},  # pure: the partition rules; the typed records and their dispatch
    {"source", "store"},  # adapters: the change stream (queries, decoding, the reader); Postgres (lineage, manifest)
    {"lake"},  # layout, envelope rows, publication, markers
    {"spark"},  # sessions, the data source, token jobs
    {"extract"},  # plan, waves, close
    {"orchestration"},  # Airflow task bodies and connections
    {"ui"},  # the monitoring UI inside Airflow's API server
    {"local_spanner"},  # the local Spanner server (tests and the dev stack only)
    {"devstack", "cli", "__init__", "__main__"},  # the dev stack, and the command line that starts it
]
SIBLING_IMPORTS = {
    ("stream_config", "settings"),  # a stream's table is read with the settings' validators
    ("devstack", "cli"),
    ("cli", "devstack"),
    ("__main__", "cli"),
}
RANK = {name: rank for rank, layer in enumerate(LAYERS) for name in layer}


def part_of(module: str) -> str:
    """`spanner_cdc.store.url` -> `store`; a top-level module is its own part."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imported_modules(source: str) -> list[str]:
    """Every spanner_cdc module a file imports, at any depth (lazy imports inside functions count too)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "spanner_cdc":
            if node.module == "spanner_cdc":
                found += [f"spanner_cdc.{alias.name}" for alias in node.names]
            else:
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == "spanner_cdc"]
    return found


def violations(module: str, source: str) -> list[str]:
    """`importer -> imported` for each import that points up the layers."""
    here = part_of(module)
    out = []
    for target in imported_modules(source):
        there = part_of(target)
        if there == here or (here, there) in SIBLING_IMPORTS:
            continue
        if RANK[there] > RANK[here]:
            out.append(f"{module} -> {target} ({here} may not import {there})")
        elif RANK[there] == RANK[here]:
            out.append(f"{module} -> {target} ({here} and {there} are siblings: neither imports the other)")
    return out


def project_modules() -> dict[str, str]:
    return {
        "spanner_cdc." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts): path.read_text()
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def test_every_package_has_a_layer() -> None:
    unknown = {part_of(module) for module in project_modules()} - set(RANK)
    assert not unknown, f"packages without a layer in LAYERS: {sorted(unknown)}"


def test_imports_point_down_the_layers() -> None:
    found = [line for module, source in project_modules().items() for line in violations(module, source)]
    assert found == []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("spanner_cdc.store.lineages", "from spanner_cdc.devstack.embedded_pg import ensure_running\n"),
        ("spanner_cdc.lineage.rules", "def f():\n    import spanner_cdc.store.url\n"),
        ("spanner_cdc.source.reader", "from spanner_cdc import extract\n"),
        ("spanner_cdc.names", "from spanner_cdc.settings import Settings\n"),
        ("spanner_cdc.store.batches", "from spanner_cdc.source.reader import read_partition\n"),
        ("spanner_cdc.model.records", "from spanner_cdc.lineage.rules import State\n"),
        ("spanner_cdc.model.records", "from spanner_cdc.source import queries\n"),
    ],
)
def test_a_forbidden_import_is_found(module: str, source: str) -> None:
    assert len(violations(module, source)) == 1


def test_imports_within_a_layer_or_downwards_are_allowed() -> None:
    assert violations("spanner_cdc.extract.window", "from spanner_cdc.spark.session import spark_session\n") == []
    assert violations("spanner_cdc.cli.commands.demo", "from spanner_cdc.devstack.demo import demo\n") == []
    assert violations("spanner_cdc.store.base", "from spanner_cdc.store.models import Claim\n") == []
