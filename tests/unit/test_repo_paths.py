"""The package finds its data through importlib.resources (the same in a wheel and a checkout), never a checkout's folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from spanner_cdc import resources
from spanner_cdc.errors import SpannerCdcError, UsageError
from spanner_cdc.store.migrations import SQL_DIR

PACKAGE = Path(resources.__file__).resolve().parents[1]


def test_migrations_are_package_data() -> None:
    assert Path(str(SQL_DIR)).resolve() == PACKAGE / "store" / "sql"
    assert any(p.name.startswith("0001_") for p in SQL_DIR.iterdir())


def test_the_dev_stack_dags_folder_is_the_packages() -> None:
    folder = resources.dags_folder()
    assert folder.resolve() == PACKAGE / "resources" / "dags"
    assert "all_dags()" in (folder / "spanner_cdc_dags.py").read_text()


def test_init_writes_every_example_and_keeps_edited_files(tmp_path: Path) -> None:
    written = resources.write_examples(tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == sorted(rel for _, rel in resources.EXAMPLES)
    assert "[streams." in (tmp_path / "streams.toml").read_text()
    (tmp_path / "streams.toml").write_text("# edited\n")
    with pytest.raises(UsageError, match="streams.toml.* already exist: pass --force"):
        resources.write_examples(tmp_path)
    assert (tmp_path / "streams.toml").read_text() == "# edited\n"
    resources.write_examples(tmp_path, overwrite=True)
    assert "[streams." in (tmp_path / "streams.toml").read_text()


def test_a_resource_missing_from_the_install_is_named() -> None:
    with pytest.raises(SpannerCdcError, match="'nothing.toml' is not in this install"):
        resources.resource("nothing.toml")
