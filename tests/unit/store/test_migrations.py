from pathlib import Path

import pytest

from spanner_cdc.errors import StoreError
from spanner_cdc.store import migrations


def test_schema_version_matches_the_newest_migration_file() -> None:
    found = migrations.discover()
    assert [m.version for m in found] == list(range(1, len(found) + 1))
    assert found[-1].version == migrations.SCHEMA_VERSION


def test_migration_files_are_named_verb_first() -> None:
    verbs = {"create", "add", "drop", "alter", "rename", "backfill", "index"}
    for migration in migrations.discover():
        verb = migration.name.split("_")[1]
        assert verb in verbs, migration.name


def test_a_badly_named_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "0001_create_things.sql").write_text("SELECT 1;")
    (tmp_path / "create_more.sql").write_text("SELECT 1;")
    with pytest.raises(StoreError, match="NNNN_verb_what"):
        migrations.discover(tmp_path)


def test_a_gap_in_versions_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "0001_create_things.sql").write_text("SELECT 1;")
    (tmp_path / "0003_add_column.sql").write_text("SELECT 1;")
    with pytest.raises(StoreError, match=r"without gaps, found \[1, 3\]"):
        migrations.discover(tmp_path)


def test_missing_directory_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="migration files not found"):
        migrations.discover(tmp_path / "nowhere")
