import pytest

from spanner_cdc import cli
from spanner_cdc.errors import SpannerCdcError


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for command in ("local-spanner", "read", "db", "extract", "lineage", "demo"):
        assert f"    {command}" in out


def test_a_bad_setting_is_one_line_naming_the_field_and_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["read", "--stream", "s", "--start", "now", "--heartbeat-ms", "999"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert err.startswith("spanner-cdc: error: invalid --heartbeat-ms=999")
    assert "[1000, 300000]" in err


def test_debug_shows_the_traceback_instead(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SpannerCdcError):
        cli.main(["--debug", "read", "--stream", "s", "--start", "now", "--heartbeat-ms", "999"])
