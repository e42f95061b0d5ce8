import re
from datetime import timedelta
from pathlib import Path

import pytest

from spanner_cdc.errors import ConfigError
from spanner_cdc.settings import load_settings


def test_defaults_without_any_source() -> None:
    settings = load_settings({}, env={})
    assert settings.project == "local-project"
    assert settings.heartbeat_ms == 10_000
    assert settings.spark_master == "local[*]"
    assert settings.metadata_url is None
    assert settings.output_root == Path(".local/lake")


def test_flags_beat_env_which_beats_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "cdc.toml"
    config.write_text('project = "from-file"\ninstance = "file-inst"\ndatabase = "file-db"\n')
    env = {"SPANNER_CDC_CONFIG": str(config), "SPANNER_CDC_INSTANCE": "env-inst", "SPANNER_CDC_DATABASE": "env-db"}
    settings = load_settings({"database": "flag-db", "project": None}, env=env)
    assert settings.project == "from-file"
    assert settings.instance == "env-inst"
    assert settings.database == "flag-db"


def test_streams_tables_are_kept_for_the_stream_config(tmp_path: Path) -> None:
    config = tmp_path / "cdc.toml"
    config.write_text('[streams.orders]\nchange_stream = "OrdersStream"\n')
    settings = load_settings({}, env={"SPANNER_CDC_CONFIG": str(config)})
    assert settings.streams == {"orders": {"change_stream": "OrdersStream"}}


@pytest.mark.parametrize(
    ("flags", "field", "accepted"),
    [
        ({"heartbeat_ms": "999"}, "--heartbeat-ms", "[1000, 300000]"),
        ({"heartbeat_ms": "often"}, "--heartbeat-ms", "integer"),
        ({"stream": "bad name"}, "--stream", "identifier"),
        ({"stream": "x'; DROP"}, "--stream", "identifier"),
        ({"spark_master": "mesos://h:5050"}, "--spark-master", "sc://host:port"),
        ({"metadata_url": "mysql://x"}, "--metadata-url", "Postgres URL"),
        ({"dialect": "oracle"}, "--dialect", "POSTGRESQL"),
        ({"headroom_warning": "0"}, "--headroom-warning", "(0, 1]"),
        ({"headroom_warning": "150%"}, "--headroom-warning", "50%"),
        ({"headroom_warning": "half"}, "--headroom-warning", "fraction"),
    ],
)
def test_bad_values_name_the_field_the_value_and_what_is_accepted(flags: dict, field: str, accepted: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(flags, env={})
    message = str(info.value)
    assert field in message
    assert repr(next(iter(flags.values()))) in message
    assert accepted in message
    assert info.value.exit_code == 2


def test_the_headroom_warning_is_a_fraction_or_a_percentage() -> None:
    assert load_settings({}, env={}).headroom_warning == 0.5
    assert load_settings({}, env={"SPANNER_CDC_HEADROOM_WARNING": "25%"}).headroom_warning == 0.25
    assert load_settings({"headroom_warning": "0.8"}, env={}).headroom_warning == 0.8


def test_env_values_are_validated_and_named_by_their_variable() -> None:
    with pytest.raises(ConfigError, match="SPANNER_CDC_CONCURRENCY"):
        load_settings({}, env={"SPANNER_CDC_CONCURRENCY": "0"})


def test_config_file_errors_name_the_file_and_key(tmp_path: Path) -> None:
    config = tmp_path / "cdc.toml"
    config.write_text("heartbeat_ms = 5\n")
    with pytest.raises(ConfigError, match=r"heartbeat_ms \(in .*cdc.toml\)"):
        load_settings({}, env={"SPANNER_CDC_CONFIG": str(config)})
    config.write_text("colour = 'blue'\n")
    with pytest.raises(ConfigError, match="colour"):
        load_settings({}, env={"SPANNER_CDC_CONFIG": str(config)})
    with pytest.raises(ConfigError, match="existing TOML file"):
        load_settings({}, env={"SPANNER_CDC_CONFIG": str(tmp_path / "missing.toml")})


def test_dialect_is_case_insensitive_and_canonical() -> None:
    assert load_settings({"dialect": "postgresql"}, env={}).dialect == "POSTGRESQL"


def test_the_output_root_is_checked_up_front_only_where_it_is_local(tmp_path: Path) -> None:
    from spanner_cdc.lake.layout import check_output_root

    (tmp_path / "file").write_text("x")
    for bad in (tmp_path / "file", tmp_path / "file" / "lake"):
        with pytest.raises(ConfigError, match=r"invalid output_root=.*file is a file"):
            check_output_root(bad)
    check_output_root(tmp_path / "new" / "lake")  # can be created
    assert not (tmp_path / "new").exists()  # and the check created nothing
    # object-store roots have no local directory to look at; Path() turns gs://b into gs:/b
    for url in ("gs://bucket/lake", "s3://bucket/lake", Path("gs://bucket/lake")):
        check_output_root(url)


def test_the_output_root_is_a_local_path_or_a_bucket_url() -> None:
    assert load_settings({"output_root": "~/lake"}, env={}).output_root == Path("~/lake").expanduser()
    assert load_settings({}, env={"SPANNER_CDC_OUTPUT_ROOT": "gs://my-bucket/cdc/lake/"}).output_root == "gs://my-bucket/cdc/lake"
    assert load_settings({"output_root": "S3://my.bucket"}, env={}).output_root == "s3://my.bucket"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("gcs://bucket/lake", "gcs://bucket/lake"),
        ("http://host/lake", "http://host/lake"),
        ("gs:/bucket/lake", "gs:/bucket/lake"),
        ("s3://Bad_Bucket/lake", "s3://Bad_Bucket/lake"),
        ("gs://bucket/a/../b", "gs://bucket/a/../b"),
        ("s3://AKIA:hunter2@bucket/lake", "s3://***"),
    ],
)
def test_a_bad_output_root_names_the_field_and_what_is_accepted(value: str, shown: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({"output_root": value}, env={})
    message = str(caught.value)
    assert message.startswith(f"invalid --output-root={shown!r}: expected a local path, gs://bucket/prefix or s3://bucket/prefix")
    assert "hunter2" not in message and "\n" not in message


SECRET = "s3cr3t p@ss:w/rd%"  # as typed; in the URL it is quoted
TOKEN = "sc-token-7f3a"


def test_the_repr_shows_no_password_and_no_connect_token() -> None:
    url = "postgresql://cdc:s3cr3t%20p%40ss%3Aw%2Frd%25@db.internal:5432/spanner_cdc"
    settings = load_settings({"metadata_url": url, "spark_master": f"sc://connect:15002/;user_id=cdc;token={TOKEN}"}, env={})
    shown = repr(settings)
    assert "s3cr3t" not in shown and TOKEN not in shown, shown
    assert "metadata_url='postgresql://cdc:***@db.internal:5432/spanner_cdc'" in shown, shown
    assert "spark_master='sc://connect:15002/;user_id=cdc;token=***'" in shown, shown
    assert shown.startswith("Settings(project='local-project', ") and "namespace='live'" in shown, shown
    assert load_settings({"metadata_url": url}, env={}).metadata_url == url  # only the repr hides it


def test_a_bad_spark_master_is_named_without_its_token() -> None:
    with pytest.raises(ConfigError) as error:
        load_settings({"spark_master": f"sc://connect host:15002/;token={TOKEN}"}, env={})
    assert TOKEN not in str(error.value), error.value
    assert "invalid --spark-master='sc://connect host:15002/;token=***'" in str(error.value), error.value


def test_the_iceberg_catalog_is_off_store_or_a_catalog_url() -> None:
    assert load_settings(env={}).iceberg_catalog == "store"  # on by default
    assert load_settings(env={"SPANNER_CDC_ICEBERG_CATALOG": "OFF"}).iceberg_catalog == "off"
    assert load_settings(env={"SPANNER_CDC_ICEBERG_CATALOG": "Store"}).iceberg_catalog == "store"
    assert load_settings({"iceberg_catalog": "https://catalog.example/api/"}).iceberg_catalog == "https://catalog.example/api"
    assert load_settings({"iceberg_catalog": "thrift://metastore:9083"}).iceberg_catalog == "thrift://metastore:9083"
    with pytest.raises(ConfigError) as caught:
        load_settings({"iceberg_catalog": "https://user:secret@catalog.example"})
    assert "secret" not in str(caught.value) and "--iceberg-catalog='https://***'" in str(caught.value)
    with pytest.raises(ConfigError, match=r"SPANNER_CDC_ICEBERG_CATALOG='glue'.*off, store"):
        load_settings(env={"SPANNER_CDC_ICEBERG_CATALOG": "glue"})


def test_a_subprocess_does_not_inherit_pyspark_connect_markers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A spark-submit child on a standalone master failed when it inherited this process's Connect marker."""
    from spanner_cdc.settings import Settings, subprocess_env

    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    monkeypatch.setenv("SPARK_REMOTE", "sc://elsewhere:15002")
    env = subprocess_env(Settings(spark_master="spark://127.0.0.1:7077"))
    assert "SPARK_CONNECT_MODE_ENABLED" not in env and "SPARK_REMOTE" not in env
    assert env["SPANNER_CDC_SPARK_MASTER"] == "spark://127.0.0.1:7077"


def test_lineage_retention_is_a_duration_from_a_flag_the_environment_or_the_file(tmp_path: Path) -> None:
    assert load_settings(env={}).lineage_retention == timedelta(days=30)
    assert load_settings(env={"SPANNER_CDC_LINEAGE_RETENTION": "7d"}).lineage_retention == timedelta(days=7)
    config = tmp_path / "c.toml"
    config.write_text('lineage_retention = "48h"\n')
    assert load_settings(env={"SPANNER_CDC_CONFIG": str(config)}).lineage_retention == timedelta(hours=48)
    assert load_settings({"lineage_retention": "1h"}, env={"SPANNER_CDC_LINEAGE_RETENTION": "7d"}).lineage_retention == timedelta(hours=1)
    with pytest.raises(ConfigError, match=r"SPANNER_CDC_LINEAGE_RETENTION='forever'"):
        load_settings(env={"SPANNER_CDC_LINEAGE_RETENTION": "forever"})


def test_the_target_file_size_is_a_byte_size_with_units() -> None:
    assert load_settings(env={}).target_file_size == 256 << 20
    assert load_settings(env={"SPANNER_CDC_TARGET_FILE_SIZE": "512MB"}).target_file_size == 512 << 20
    assert load_settings({"target_file_size": "64 MiB"}).target_file_size == 64 << 20
    assert load_settings({"target_file_size": 4096}).target_file_size == 4096
    assert load_settings({"target_file_size": "1gb"}).target_file_size == 1 << 30
    for bad in ("lots", "12 PB", "100", "32GB", -5, True):
        with pytest.raises(ConfigError, match=r"target.file.size.*a size in bytes from 1KB to 16GB"):
            load_settings({"target_file_size": bad})


# Each tuning knob: its default, a value it takes from the environment (as it did when read deep in extract, spark
# and lake), and values it refuses, with the variable named and what is accepted.
TUNING = [
    ("wave_group_tokens", 512, "1", 1, ("0", "x", "10001"), "an integer in [1, 10000]"),
    ("task_tokens", 0, "1", 1, ("-1", "x", "1001"), "an integer in [0, 1000]"),
    ("task_threads", 4, "1", 1, ("0", "x", "65"), "an integer in [1, 64]"),
    ("check_driver_rows", 2_000_000, "0", 0, ("-1", "many", "100000001"), "an integer in [0, 100000000]"),
    ("lake_writer", "arrow", "Spark", "spark", ("csv",), "one of arrow, spark"),
    ("liveness", "lock", "lease", "lease", ("heartbeat",), "one of lock, lease"),
    ("lease_s", 300.0, "2.5", 2.5, ("soon", "0.5", "true"), "a number of seconds >= 1"),
    ("current_state_keep", 24, "3", 3, ("0", "x"), "an integer in [1, 10000]"),
    ("state_task_memory", None, "64MB", 64 << 20, ("0", "lots", "17GB"), "a size in bytes from 1KB to 16GB"),
    ("state_driver_rows", 50_000, "0", 0, ("-1", "many", "10000001"), "an integer in [0, 10000000]"),
]


@pytest.mark.parametrize(("name", "default", "text", "value", "bad", "accepted"), TUNING)
def test_a_tuning_knob_is_a_setting_with_its_environment_name(
    name: str, default: object, text: str, value: object, bad: tuple[str, ...], accepted: str
) -> None:
    from spanner_cdc.settings import TUNING_FIELDS, env_name

    variable = env_name(name)
    assert name in TUNING_FIELDS and variable == "SPANNER_CDC_" + name.upper()
    assert getattr(load_settings({}, env={}), name) == default
    assert getattr(load_settings({}, env={variable: ""}), name) == default  # empty: unset, as before
    assert getattr(load_settings({}, env={variable: text}), name) == value
    for wrong in bad:
        with pytest.raises(ConfigError, match=f"invalid {variable}=.*expected {re.escape(accepted)}"):
            load_settings({}, env={variable: wrong})


def test_the_tuning_knobs_come_from_the_config_file_and_flags_too(tmp_path: Path) -> None:
    config = tmp_path / "cdc.toml"
    config.write_text('task_tokens = 2\nliveness = "lease"\n')
    settings = load_settings({"task_threads": 3}, env={"SPANNER_CDC_CONFIG": str(config), "SPANNER_CDC_TASK_TOKENS": "5"})
    assert (settings.task_tokens, settings.liveness, settings.task_threads) == (5, "lease", 3)
    assert load_settings({}, env={"SPANNER_CDC_CONFIG": str(config)}).task_tokens == 2


def test_a_subprocess_gets_the_tuning_of_the_settings() -> None:
    from spanner_cdc.settings import Settings, subprocess_env

    env = subprocess_env(Settings(metadata_url="postgresql://u@h/db", task_tokens=3, lake_writer="spark"))
    assert (env["SPANNER_CDC_TASK_TOKENS"], env["SPANNER_CDC_LAKE_WRITER"]) == ("3", "spark")
    assert load_settings({}, env=env).task_tokens == 3


def test_a_subprocess_gets_no_text_none_for_an_unset_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """str(None) reached the child: it refused the URL "None", and took "None" for a stream name."""
    from spanner_cdc.settings import Settings, subprocess_env

    monkeypatch.setenv("SPANNER_EMULATOR_HOST", "127.0.0.1:1")  # this process's, not what the settings say
    env = subprocess_env(Settings())
    assert "None" not in env.values()
    for unset in ("SPANNER_CDC_METADATA_URL", "SPANNER_CDC_STREAM", "SPANNER_EMULATOR_HOST"):
        assert unset not in env
    child = load_settings({}, env=env)
    assert (child.metadata_url, child.stream, child.emulator_host) == (None, None, None)

    given = Settings(stream="Orders", metadata_url="postgresql://u@h/db", emulator_host="localhost:9010")
    child = load_settings({}, env=subprocess_env(given))
    assert (child.stream, child.metadata_url, child.emulator_host) == ("Orders", "postgresql://u@h/db", "localhost:9010")


def test_the_default_lake_is_the_homes_not_the_working_directorys() -> None:
    assert load_settings({}, env={}).output_root == Path(".local/lake")
    assert load_settings({"home": "/srv/cdc"}, env={}).output_root == Path("/srv/cdc/lake")
    assert load_settings({}, env={"SPANNER_CDC_HOME": "/srv/cdc"}).output_root == Path("/srv/cdc/lake")
    assert load_settings({"home": "/srv/cdc", "output_root": "/data/lake"}, env={}).output_root == Path("/data/lake")
