"""The Airflow migration stamp of the dev stack: owner-only, and without the Airflow DB URL's password."""

from __future__ import annotations

import stat
from pathlib import Path

from spanner_cdc.devstack.airflow_env import migrated_stamp, write_private

URL = "postgresql+psycopg2://airflow:Af-pw-3c9e@127.0.0.1:5432/airflow"


def test_the_stamp_names_the_version_and_a_digest_of_the_url_not_its_password() -> None:
    stamp = migrated_stamp("3.1.0", URL)
    assert stamp.startswith("3.1.0 ") and "Af-pw-3c9e" not in stamp and "airflow" not in stamp, stamp
    assert stamp == migrated_stamp("3.1.0", URL)  # the same database: no new migration
    assert stamp != migrated_stamp("3.1.0", URL.replace("5432", "5433"))
    assert stamp != migrated_stamp("3.1.1", URL)
    assert stamp.endswith("spanner_cdc_maintenance")  # a stamp made before the maintenance pool sets it up once


def test_the_stamp_file_is_readable_by_its_owner_only_even_when_it_existed(tmp_path: Path) -> None:
    path = tmp_path / ".spanner_cdc_migrated"
    path.write_text("3.0.0 " + URL)
    path.chmod(0o644)  # a stamp of an earlier version, made with the umask's mode
    write_private(path, migrated_stamp("3.1.0", URL))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == migrated_stamp("3.1.0", URL)
    fresh = tmp_path / "fresh"
    write_private(fresh, "x")
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600
