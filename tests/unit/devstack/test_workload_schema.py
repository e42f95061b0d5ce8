"""The workload's change stream DDL in both dialects and both partition modes; the demo's --partition-mode flag."""

from __future__ import annotations

import pytest

from spanner_cdc.cli import main as cli
from spanner_cdc.devstack.workload_schema import ddl_statements
from spanner_cdc.errors import ConfigError


@pytest.mark.parametrize(
    ("dialect", "mode", "stream_ddl"),
    [
        ("GOOGLE_STANDARD_SQL", "IMMUTABLE_KEY_RANGE", "CREATE CHANGE STREAM s FOR ALL OPTIONS (value_capture_type = 'NEW_ROW')"),
        ("GOOGLE_STANDARD_SQL", "MUTABLE_KEY_RANGE",
         "CREATE CHANGE STREAM s FOR ALL OPTIONS (value_capture_type = 'NEW_ROW', partition_mode = 'MUTABLE_KEY_RANGE')"),
        ("POSTGRESQL", "IMMUTABLE_KEY_RANGE", "CREATE CHANGE STREAM s FOR ALL WITH (value_capture_type = 'NEW_ROW')"),
        ("POSTGRESQL", "MUTABLE_KEY_RANGE",
         "CREATE CHANGE STREAM s FOR ALL WITH (value_capture_type = 'NEW_ROW', partition_mode = 'MUTABLE_KEY_RANGE')"),
    ],
)  # fmt: skip
def test_the_stream_ddl_says_the_partition_mode_only_when_not_the_default(dialect: str, mode: str, stream_ddl: str) -> None:
    statements = ddl_statements(dialect, "s", "NEW_ROW", mode)
    assert statements[-1] == stream_ddl
    assert statements[:-1] == ddl_statements(dialect, "s", "NEW_ROW")[:-1]


def test_an_unknown_partition_mode_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError, match="partition_mode.*IMMUTABLE_KEY_RANGE \\| MUTABLE_KEY_RANGE"):
        ddl_statements("GOOGLE_STANDARD_SQL", "s", "NEW_ROW", "SOMETIMES")


def test_the_demo_refuses_an_unknown_partition_mode_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demo", "--partition-mode", "mutable"]) == 2
    err = capsys.readouterr().err
    assert err == "spanner-cdc: error: --partition-mode mutable: expected IMMUTABLE_KEY_RANGE or MUTABLE_KEY_RANGE\n"
