"""Store URLs as users write them: which driver each form gets, and the password masked in every message."""

from __future__ import annotations

from pathlib import Path

import pytest

from spanner_cdc.errors import ConfigError, StoreError, StoreNotConfigured
from spanner_cdc.masking import mask_password
from spanner_cdc.settings import load_settings
from spanner_cdc.store import open_store
from spanner_cdc.store.database import Database
from spanner_cdc.store.url import normalise_url

SECRET = "p@ss:w/rd%"
QUOTED = "p%40ss%3Aw%2Frd%25"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://u:pw@h:5432/db", "postgresql+psycopg2://u:pw@h:5432/db"),
        ("postgres://u:pw@h/db", "postgresql+psycopg2://u:pw@h/db"),
        ("postgresql+psycopg2://u@h/db", "postgresql+psycopg2://u@h/db"),
        ("postgres+psycopg2://u@h/db", "postgresql+psycopg2://u@h/db"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg://u@h/db"),
        ("PostgreSQL://u@h/db", "postgresql+psycopg2://u@h/db"),
        (f"  postgresql://u:{QUOTED}@h/db?sslmode=disable ", f"postgresql+psycopg2://u:{QUOTED}@h/db?sslmode=disable"),
        ("postgresql://u:pw@/db?host=/run/postgresql&port=5433", "postgresql+psycopg2://u:pw@/db?host=/run/postgresql&port=5433"),
    ],
)
def test_each_form_gets_the_driver_chosen_on_purpose(url: str, expected: str) -> None:
    assert normalise_url(url) == expected


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("mysql://user:secret@host/db", "mysql://user:***@host/db"),
        (f"postgresql://u:{QUOTED}@h:5/db", "postgresql://u:***@h:5/db"),
        # unquoted: no parser takes it, and still nothing of the password shows
        (f"postgresql://u:{SECRET}@h:5/db", "postgresql://u:***@h:5/db"),
        ("postgresql://u@h/db?password=secret&sslmode=disable", "postgresql://u@h/db?password=***&sslmode=disable"),
        ("host=h user=u password=secret dbname=db", "host=h user=u password=*** dbname=db"),
        ("postgresql://u@h/db?sslpassword=secret", "postgresql://u@h/db?sslpassword=***"),
        ("postgresql://h/db", "postgresql://h/db"),
        ("not a url", "not a url"),
    ],
)
def test_mask_password_hides_every_form_of_password(url: str, shown: str) -> None:
    assert mask_password(url) == shown


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://user:secret@host/db", "metadata store URL mysql://user:***@host/db is not a Postgres URL: expected "),
        ("postgresql+asyncpg://user:secret@h/db", "names the driver asyncpg: expected postgresql://, postgres://"),
        (f"postgresql://u:{SECRET}@127.0.0.1:5/db", "postgresql://u:***@127.0.0.1:5/db is not a usable Postgres URL"),
    ],
)
def test_bad_urls_are_one_masked_line(url: str, message: str) -> None:
    with pytest.raises(StoreError) as raised:
        Database(url)
    text = str(raised.value)
    assert message in text
    assert "secret" not in text and "ss:w/rd" not in text and "\n" not in text


def test_a_bad_scheme_in_the_settings_is_masked() -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings({"metadata_url": "mysql://user:secret@host/db"}, env={})
    assert str(raised.value) == (
        "invalid --metadata-url='mysql://user:***@host/db': "
        "expected a Postgres URL such as postgresql://user:pass@host:5432/db"
    )


def test_open_store_without_a_url_names_the_setting_and_starts_nothing(tmp_path: Path) -> None:
    settings = load_settings({"home": str(tmp_path)}, env={})
    with pytest.raises(StoreNotConfigured) as raised:
        open_store(settings)
    assert str(raised.value).startswith(
        "no metadata store configured: set the Airflow connection spanner_cdc_metadata or SPANNER_CDC_METADATA_URL"
    )
    assert raised.value.exit_code == 2
    assert not (settings.home / "postgres").exists()
