"""docker-compose.yml without Docker: schema essentials, and every image, command, env var and file it names is real."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import zipfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from spanner_cdc.cli.main import build_parser
from spanner_cdc.lake import storage
from spanner_cdc.names import SPANNER_POOL
from spanner_cdc.orchestration import connections
from spanner_cdc.settings import CONFIG_ENV, Settings, load_settings, output_root
from spanner_cdc.stream_config import load_streams

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
VENV_BIN = Path(sys.executable).parent
REQUIRED = {
    "postgres", "airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
    "spark-master", "spark-worker-1", "spark-worker-2", "spark-connect", "local-spanner", "object-store", "lake-bucket",
}
SPARK_WORKERS = ("spark-worker-1", "spark-worker-2")
LOCAL_IMAGE = "spanner-cdc:local"
PUBLIC_IMAGE = re.compile(r"^(?:[a-z0-9.-]+\.[a-z]{2,}/)?[a-z0-9._-]+(?:/[a-z0-9._-]+)*:[A-Za-z0-9._-]+$")
# Variables read by the third-party programs the services run, documented by them, not by us.
THIRD_PARTY_ENV = {
    "POSTGRES_USER": "postgres image", "POSTGRES_PASSWORD": "postgres image",
    "SPARK_NO_DAEMONIZE": "Spark launch scripts",
    "MINIO_ROOT_USER": "minio image", "MINIO_ROOT_PASSWORD": "minio image", "MC_HOST_lake": "mc (minio client)",
}
# Read by botocore, through which the lake's storage layer reaches S3 (see spanner_cdc.lake.storage).
S3_ENV = {storage.S3_ENDPOINT_ENV, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"}
INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?-)(?P<default>[^}]*))?\}")


def interpolate(text: str) -> str:
    """Compose's ${VAR:-default} / ${VAR-default} / ${VAR} with no variable set on the host."""
    assert "$$" not in text, "no escaped dollars expected"
    result = INTERPOLATION.sub(lambda m: m.group("default") or "", text)
    assert "$" not in result, f"unsupported interpolation in {text!r}"
    return result


@cache
def compose() -> dict[str, Any]:
    return yaml.safe_load(interpolate(COMPOSE.read_text()))


def services() -> dict[str, dict[str, Any]]:
    return compose()["services"]


def env_of(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def commands() -> list[tuple[str, list[str]]]:
    """Every command line a service runs; `bash -c` scripts are split at && into their commands."""
    found = []
    for name, service in services().items():
        command = service.get("command")
        if command is None:
            continue
        argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
        if argv[:2] == ["bash", "-c"]:
            found += [(name, shlex.split(part)) for part in argv[2].split("&&")]
        else:
            found.append((name, argv))
    return found


def test_schema_essentials() -> None:
    data = compose()
    assert set(data) <= {"name", "services", "volumes", "networks"} | {k for k in data if k.startswith("x-")}
    assert REQUIRED <= set(services())
    declared_volumes = set(data.get("volumes") or {})
    for name, service in services().items():
        assert set(service) <= {
            "image", "build", "command", "environment", "volumes", "ports", "depends_on", "healthcheck",
            "restart", "profiles", "hostname",
        }, name
        assert "image" in service or "build" in service, name
        for dependency in service.get("depends_on") or {}:
            assert dependency in services(), f"{name} depends on unknown {dependency}"
        for mount in service.get("volumes") or []:
            source = mount.split(":", 1)[0]
            if not source.startswith(("./", "/")):
                assert source in declared_volumes, f"{name}: volume {source} not declared"
        for port in service.get("ports") or []:
            assert re.match(r"^\d+:\d+$", str(port)), f"{name}: port {port}"


def test_official_emulator_and_demo_workload_only_by_profile() -> None:
    emulator = services()["spanner-emulator"]
    assert emulator["profiles"] == ["emulator"]
    workload = services()["demo-workload"]
    assert workload["profiles"] == ["demo"]
    # It writes to the database and change stream of the stack's demo stream.
    command = workload["command"]
    streams = load_streams(load_settings({}, env={CONFIG_ENV: str(REPO / "config" / "streams.compose.toml")}))
    demo = streams["demo"]
    assert command[command.index("--database") + 1] == demo.database
    assert command[command.index("--stream") + 1] == demo.change_stream
    assert command[command.index("--host") + 1] == "local-spanner:9010"
    assert emulator["image"].startswith("gcr.io/cloud-spanner-emulator/emulator:")
    assert all("profiles" not in services()[name] for name in REQUIRED)


def test_the_emulator_profile_runs_the_version_and_settings_the_suite_proves_the_pipeline_against() -> None:
    from spanner_cdc.devstack.emulator import EMULATOR_FLAGS, EMULATOR_VERSION

    emulator = services()["spanner-emulator"]
    assert emulator["image"] == f"gcr.io/cloud-spanner-emulator/emulator:{EMULATOR_VERSION}"
    # the image's own command (its gateway on every interface) with the suite's flags, which the gateway hands on
    command = emulator["command"]
    assert command[:3] == ["./gateway_main", "--hostname", "0.0.0.0"] and command[3:] == list(EMULATOR_FLAGS)
    assert "9010" in [str(port).split(":")[1] for port in emulator["ports"]]  # gRPC, where SPANNER_CDC_SPANNER_HOST points


def test_images_are_built_here_or_pinned_public_ones() -> None:
    for name, service in services().items():
        image = service.get("image", "")
        if "build" in service:
            context = REPO / service["build"]["context"]
            assert (context / service["build"].get("dockerfile", "Dockerfile")).is_file(), name
            assert image == LOCAL_IMAGE
        else:
            assert PUBLIC_IMAGE.match(image), f"{name}: {image!r} is not a pinned public image"
            assert not image.endswith(":latest"), name


def test_dockerfile_copies_only_what_exists_and_starts_from_a_pinned_public_image() -> None:
    lines = [line.strip() for line in DOCKERFILE.read_text().splitlines()]
    base = [line.split()[1] for line in lines if line.startswith("FROM ")]
    assert base and all(PUBLIC_IMAGE.match(image) for image in base)
    copied = [line.split()[1:-1] for line in lines if line.startswith("COPY ")]
    assert copied
    for sources in copied:
        for source in sources:
            assert (REPO / source).exists(), f"Dockerfile copies missing {source}"


def test_spanner_cdc_commands_parse_with_the_real_cli() -> None:
    parser = build_parser()
    ran = [argv for _, argv in commands() if argv[0] == "spanner-cdc"]
    assert ran, "the stack runs the local server and migrates the store"
    for argv in ran:
        args = parser.parse_args(argv[1:])
        assert callable(args.func), argv


AIRFLOW_PARSE = """
import json, sys
from airflow.cli.cli_parser import get_parser
parser = get_parser()
for argv in json.loads(sys.argv[1]):
    parser.parse_args(argv)
print("ok")
"""


def test_airflow_commands_parse_with_airflows_cli(tmp_path: Path) -> None:
    ran = [argv[1:] for _, argv in commands() if argv[0] == "airflow"]
    assert {argv[0] for argv in ran} >= {"api-server", "scheduler", "dag-processor", "triggerer", "db", "pools"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({"AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"})
    result = subprocess.run(
        [sys.executable, "-c", AIRFLOW_PARSE, json.dumps(ran)], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    pool_commands = [argv for argv in ran if argv[:2] == ["pools", "set"]]
    assert pool_commands and pool_commands[0][2] == SPANNER_POOL


def _spark_classes() -> set[str]:
    import pyspark

    classes = set()
    for jar in (Path(pyspark.__file__).parent / "jars").glob("spark-*.jar"):
        with zipfile.ZipFile(jar) as archive:
            classes.update(n[:-6].replace("/", ".") for n in archive.namelist() if n.endswith(".class"))
    return classes


def test_spark_commands_run_classes_that_ship_with_pyspark() -> None:
    ran = [argv for _, argv in commands() if argv[0] in ("spark-class", "spark-submit")]
    assert len(ran) == 4  # the master, two workers, the Connect server
    classes = _spark_classes()
    for argv in ran:
        assert (VENV_BIN / argv[0]).exists(), argv[0]
        main = argv[1] if argv[0] == "spark-class" else argv[argv.index("--class") + 1]
        assert main in classes, main


def test_every_executable_is_installed_by_the_project() -> None:
    for name, argv in commands():
        if services()[name].get("image") != LOCAL_IMAGE:  # the object store's images run their own entrypoints
            continue
        assert argv[0] in {"spanner-cdc", "airflow", "spark-class", "spark-submit", "bash"}, (name, argv)
        if argv[0] != "bash":
            assert (VENV_BIN / argv[0]).exists(), (name, argv[0])


@cache
def airflow_options() -> set[tuple[str, str]]:
    import airflow

    config = yaml.safe_load((Path(airflow.__file__).parent / "config_templates" / "config.yml").read_text())
    return {(section, option) for section, body in config.items() for option in (body.get("options") or {})}


class _Conn:
    def __init__(self, conn_id: str, data: dict[str, Any]) -> None:
        self.conn_id = conn_id
        self.conn_type = data["conn_type"]
        self.host = data.get("host")
        self.port = data.get("port")
        self.login = data.get("login")
        self.password = data.get("password")
        self.schema = data.get("schema")
        self.extra_dejson = data.get("extra") or {}


def test_every_env_var_is_one_its_reader_knows() -> None:
    ours = {connections.METADATA_CONN_ID, connections.SPANNER_CONN_ID, connections.SPARK_CONN_ID}
    for name, service in services().items():
        for key, value in env_of(service).items():
            if key.startswith("AIRFLOW__"):
                section, option = key[len("AIRFLOW__"):].lower().split("__", 1)
                assert (section, option) in airflow_options(), f"{name}: {key} is not an Airflow option"
            elif key.startswith("AIRFLOW_CONN_"):
                conn_id = key[len("AIRFLOW_CONN_"):].lower()
                assert conn_id in ours, f"{name}: {key} is not a connection the DAGs read"
                json.loads(value)
            elif key in S3_ENV:
                assert name.startswith(("airflow", "spark")), f"{name}: {key} on a service that does not touch the lake"
            elif key.startswith("SPANNER_CDC_"):
                field = key[len("SPANNER_CDC_"):].lower()
                assert key == CONFIG_ENV or field in Settings.field_names(), f"{name}: {key}"
            else:
                assert key in THIRD_PARTY_ENV, f"{name}: unexplained variable {key}"


def test_connections_resolve_to_valid_settings_that_match_the_services() -> None:
    env = env_of(services()["airflow-scheduler"])
    conns = {
        key[len("AIRFLOW_CONN_"):].lower(): _Conn(key[len("AIRFLOW_CONN_"):].lower(), json.loads(value))
        for key, value in env.items()
        if key.startswith("AIRFLOW_CONN_")
    }
    settings = connections.apply_connections(
        Settings(),
        metadata=conns[connections.METADATA_CONN_ID],
        spanner=conns[connections.SPANNER_CONN_ID],
        spark=conns[connections.SPARK_CONN_ID],
    )
    assert settings.metadata_url == env["SPANNER_CDC_METADATA_URL"]  # the DAGs and the CLI use one store
    assert settings.spark_master == "sc://spark-connect:15002"
    assert settings.emulator_host == "local-spanner:9010"
    local_spanner = services()["local-spanner"]["command"]
    assert local_spanner[local_spanner.index("--port") + 1] == "9010"
    connect = services()["spark-connect"]["command"]
    assert "spark.connect.grpc.binding.port=15002" in connect
    assert not any("spark.python.daemon.module" in part for part in connect)  # pyspark's own daemon
    init_sql = (REPO / "docker" / "postgres" / "init-databases.sql").read_text()
    assert "CREATE DATABASE spanner_cdc OWNER cdc" in init_sql
    assert "CREATE DATABASE airflow OWNER airflow" in init_sql


def _host_path(service: dict[str, Any], container_path: str) -> Path | None:
    for mount in service.get("volumes") or []:
        source, target = mount.split(":")[:2]
        if source.startswith("./") and container_path.startswith(target.rstrip("/") + "/"):
            return REPO / source / container_path[len(target.rstrip("/")) + 1 :]
    return None


@pytest.mark.parametrize("service_name", ["airflow-scheduler", "airflow-dag-processor", "airflow-init"])
def test_streams_config_is_mounted_from_the_repo_and_valid(service_name: str) -> None:
    service = services()[service_name]
    config_path = env_of(service)[CONFIG_ENV]
    host_path = _host_path(service, config_path)
    assert host_path is not None and host_path.is_file(), f"{service_name}: {config_path} is not mounted from the repo"
    streams = load_streams(load_settings({}, env={CONFIG_ENV: str(host_path)}))
    assert streams, "the stack has at least one stream to show"


def test_every_bind_mount_source_exists() -> None:
    for name, service in services().items():
        for mount in service.get("volumes") or []:
            source = mount.split(":", 1)[0]
            if source.startswith("./"):
                assert (REPO / source).exists(), f"{name}: {source} does not exist"


def _bucket_endpoint() -> tuple[str, str, str, str]:
    """(bucket, endpoint, access key, secret key) as the object store and its bucket-creating init define them."""
    store, init = services()["object-store"], services()["lake-bucket"]
    command = store["command"]
    port = command[command.index("--address") + 1].rsplit(":", 1)[1]
    assert f"{port}:{port}" in store["ports"]
    endpoint = f"http://{store['hostname']}:{port}"
    assert init["command"][:2] == ["mb", "--ignore-existing"] and init["image"].startswith("minio/mc:")
    alias, bucket = init["command"][2].split("/", 1)
    credentials = env_of(store)
    assert env_of(init)[f"MC_HOST_{alias}"] == (
        f"http://{credentials['MINIO_ROOT_USER']}:{credentials['MINIO_ROOT_PASSWORD']}@{endpoint.split('//', 1)[1]}"
    )
    assert init["depends_on"] == {"object-store": {"condition": "service_healthy"}}
    return bucket, endpoint, credentials["MINIO_ROOT_USER"], credentials["MINIO_ROOT_PASSWORD"]


def test_the_lake_is_a_bucket_on_the_object_store_that_every_lake_process_reaches() -> None:
    bucket, endpoint, key, secret = _bucket_endpoint()
    stack = load_settings({}, env={CONFIG_ENV: str(REPO / "config" / "streams.compose.toml")})
    roots = {stack.output_root} | {s.output_root for s in load_streams(stack).values() if s.output_root is not None}
    assert {(storage.scheme_of(r), str(r).split("/")[2]) for r in roots} == {("s3", bucket)}
    lake_processes = [n for n in services() if n.startswith(("airflow", "spark"))]
    assert set(SPARK_WORKERS) | {"spark-connect", "airflow-scheduler"} <= set(lake_processes)
    for name in lake_processes:
        env = env_of(services()[name])
        assert env[storage.S3_ENDPOINT_ENV] == endpoint, name
        assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == (key, secret), name
        if name.startswith("airflow"):  # the tasks (the Spark driver's side: journals, markers, orphans)
            root = output_root("output_root", env["SPANNER_CDC_OUTPUT_ROOT"])
            assert storage.scheme_of(root) == "s3" and str(root).split("/")[2] == bucket, name
            if name != "airflow-init":  # the services that run tasks start once the bucket exists
                assert services()[name]["depends_on"]["lake-bucket"] == {"condition": "service_completed_successfully"}


def test_spark_has_two_workers_that_share_no_volume_with_the_driver_or_airflow() -> None:
    master = services()["spark-master"]["command"]
    master_url = f"spark://{services()['spark-master']['hostname']}:{master[master.index('--port') + 1]}"
    for name in SPARK_WORKERS:
        worker = services()[name]
        assert worker["command"][-1] == master_url and "volumes" not in worker, name
    assert {services()[n]["hostname"] for n in SPARK_WORKERS} == set(SPARK_WORKERS)
    connect = services()["spark-connect"]
    assert f"{master_url}" in connect["command"] and "volumes" not in connect
    # the lake's volume belongs to the object store alone: nothing else reads the lake from a disk
    for name, service in services().items():
        mounts = [m.split(":", 1)[0] for m in service.get("volumes") or []]
        assert ("lake" in mounts) == (name == "object-store"), name
