import pytest

from spanner_cdc.cli import main as cli
from spanner_cdc.errors import SpannerCdcError


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for command in ("local-spanner", "read", "db", "extract", "lineage", "demo", "down"):
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


def _parse_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


WINDOW = ["--window-start", "2024-05-01T10:00:00Z", "--window-end", "2024-05-01T11:00:00Z"]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["extract", *WINDOW, "--dialect", "MYSQL"],
         "invalid --dialect='MYSQL': expected one of auto, GOOGLE_STANDARD_SQL, POSTGRESQL"),
        (["read", "--stream", "s", "--start", "now", "--format", "xml"], "invalid --format='xml': expected one of jsonl, text"),
        (["lineage", "show", "--format", "svg"], "invalid --format='svg': expected one of text, json, dot"),
        (["extrct"], "invalid COMMAND='extrct': expected one of demo, up, down, read, init, db, extract, snapshot, spark-package, lineage, lake, verify, local-spanner"),
        (["local-spanner", "serve", "--port", "abc"], "invalid --port='abc': expected an integer"),
        (["extract", "--window-start", "2024-05-01T10:00:00Z"],
         "the following arguments are required: --window-end (see `spanner-cdc extract --help`)"),
        (["read", "--start", "now", "--token", "t", "--all-partitions"],
         "--all-partitions: not allowed with argument --token (see `spanner-cdc read --help`)"),
        ([], "the following arguments are required: COMMAND (see `spanner-cdc --help`)"),
    ],
)  # fmt: skip
def test_argument_errors_are_one_line_without_the_usage(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _parse_error(argv, capsys) == f"spanner-cdc: error: {line}"


def test_a_bad_flag_value_reads_like_the_same_value_through_the_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    flag = _parse_error(["extract", *WINDOW, "--dialect", "MYSQL"], capsys)
    monkeypatch.setenv("SPANNER_CDC_DIALECT", "MYSQL")
    assert cli.main(["extract", *WINDOW]) == 2
    env = capsys.readouterr().err.strip()
    assert env.replace("SPANNER_CDC_DIALECT", "--dialect") == flag


@pytest.mark.parametrize("flag", ["--heartbeat-ms", "--concurrency"])
def test_numeric_settings_flags_are_checked_by_the_settings_with_their_range(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["read", "--stream", "s", "--start", "now", flag, "often"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"spanner-cdc: error: invalid {flag}='often': expected an integer in [")


def test_the_dialect_flag_takes_any_case_like_its_variable() -> None:
    args = cli.build_parser().parse_args(["extract", *WINDOW, "--dialect", "postgresql"])
    assert args.dialect == "POSTGRESQL"


def test_help_of_a_command_still_prints_its_whole_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["extract", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: spanner-cdc extract")
    assert "--dialect {auto,GOOGLE_STANDARD_SQL,POSTGRESQL}" in out
    assert out.count("\n") > 20


def test_settings_in_core_messages_are_flags_on_the_command_line_and_names_elsewhere(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from spanner_cdc.cli.main import build_parser, flag_namer
    from spanner_cdc.errors import UsageError, setting

    error = UsageError(f"{setting('window_end')} must be after {setting('window_start')}; see {setting('no_such_flag')}")
    assert str(error) == "window_end must be after window_start; see no_such_flag"  # Airflow and logs
    namer = flag_namer(build_parser(), "extract")
    assert error.message(namer) == "--window-end must be after --window-start; see no_such_flag"
    assert flag_namer(build_parser(), "db")("metadata_url") == "--metadata-url"  # a nested subcommand's flag


def test_a_config_error_names_a_setting_or_keeps_its_label() -> None:
    from spanner_cdc.errors import ConfigError, as_setting

    assert str(ConfigError("read_method", "x", "one of a, b")) == "invalid read_method='x': expected one of a, b"
    assert ConfigError("read_method", "x", "a").message(lambda n: "--" + n) == "invalid --read_method='x': expected a"
    assert ConfigError("SPANNER_CDC_STREAM", "x y", "an identifier").message(as_setting).startswith("invalid SPANNER_CDC_STREAM=")


def test_a_bad_output_root_scheme_is_one_line_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["extract", "--stream", "s", *WINDOW, "--output-root", "gcs://bucket/lake"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.strip() == (
        "spanner-cdc: error: invalid --output-root='gcs://bucket/lake': expected a local path, gs://bucket/prefix or s3://bucket/prefix"
    )


RUN_WITH_A_THREAD_AND_A_HOOK = """
import atexit, sys, threading, time
from pathlib import Path
import spanner_cdc.cli.main as cli

def late_write():
    time.sleep(0.3)
    Path(sys.argv[1]).write_text("thread done")

threading.Thread(target=late_write).start()  # not a daemon: an interpreter's exit waits for it
atexit.register(lambda: print("hook ran"))
cli.main = lambda argv=None: (print("x" * 100_000, end=""), 3)[1]
cli.run()
"""


def test_the_command_ends_with_mains_code_after_its_threads_its_exit_hooks_and_all_its_output(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`run` (the installed command, `python -m spanner_cdc`) ends as an interpreter's exit: threads, hooks, output."""
    import os
    import subprocess
    import sys

    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # stdout to a pipe is buffered then
    done = subprocess.run([sys.executable, "-c", RUN_WITH_A_THREAD_AND_A_HOOK, str(tmp_path / "t")], capture_output=True,
                          text=True, timeout=120, env=buffered)  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert done.stdout == "x" * 100_000 + "hook ran\n"  # a pipe's buffered output flushed, after the hooks'
    assert (tmp_path / "t").read_text() == "thread done"
