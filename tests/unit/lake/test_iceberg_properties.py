"""pyiceberg's catalog properties: the lake's object store endpoints and the S3-compatible store's region."""

from __future__ import annotations

import pytest

from spanner_cdc.lake.iceberg import DEFAULT_S3_REGION, catalog_properties


def props(monkeypatch: pytest.MonkeyPatch, **env: str) -> dict[str, str]:
    for key in ("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION", "STORAGE_EMULATOR_HOST"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return catalog_properties("thrift://hms:9083", metadata_url=None, warehouse="s3://lake/cdc")


@pytest.mark.parametrize(
    ("env", "region"),
    [
        ({"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "us-west-2"}, "eu-west-1"),  # botocore's order
        ({"AWS_DEFAULT_REGION": "us-west-2"}, "us-west-2"),
        ({}, DEFAULT_S3_REGION),
    ],
)
def test_an_s3_compatible_endpoint_gets_the_environments_region(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], region: str
) -> None:
    found = props(monkeypatch, AWS_ENDPOINT_URL="http://minio:9000", **env)
    assert (found["s3.endpoint"], found["s3.region"]) == ("http://minio:9000", region)


def test_aws_itself_is_left_to_find_the_buckets_region(monkeypatch: pytest.MonkeyPatch) -> None:
    # no endpoint: a bucket at AWS, whose region pyiceberg looks up (the environment's may be another one's)
    found = props(monkeypatch, AWS_DEFAULT_REGION="us-west-2")
    assert "s3.region" not in found and "s3.endpoint" not in found
    assert found["type"] == "hive" and found["warehouse"] == "s3://lake/cdc"



IMPORT_AHEAD = """
import sys
from spanner_cdc.lake import iceberg
from spanner_cdc.settings import Settings

iceberg.import_ahead(Settings(iceberg_catalog=sys.argv[1], metadata_url="postgresql://u@h/db"))
print(sorted(m for m in (*iceberg.CLOSE_MODULES, "pyiceberg.catalog.sql") if m in sys.modules), iceberg._imported_ahead)
"""


@pytest.mark.parametrize(
    ("catalog", "expected"),
    [("store", "['pyiceberg.catalog', 'pyiceberg.catalog.sql', 'pyiceberg.exceptions', 'pyiceberg.expressions', "
               "'pyiceberg.io.pyarrow', 'pyiceberg.table', 'pyiceberg.table.snapshots', 'pyiceberg.table.update.snapshot', "
               "'pyiceberg.transforms'] True"),
     ("off", "[] False")],
)  # fmt: skip
def test_the_closes_iceberg_modules_are_imported_ahead_only_when_windows_go_to_iceberg(catalog: str, expected: str) -> None:
    """In a fresh process: nothing of pyiceberg is imported before (the extract's own imports do not pull it in)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", IMPORT_AHEAD, catalog], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected
