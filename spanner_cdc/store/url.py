"""Metadata store URLs as users and Airflow write them: the driver chosen on purpose, the password never shown."""

from __future__ import annotations

import importlib.util
import re

from spanner_cdc.errors import StoreError, StoreNotConfigured
from spanner_cdc.masking import mask_password

SCHEME = re.compile(r"^(postgres|postgresql)(?:\+(\w+))?://", re.IGNORECASE)
# The design names psycopg2: SQLAlchemy 2.1 would connect a plain postgresql:// URL with psycopg 3 when
# that is installed, so the plain forms name psycopg2 explicitly. An explicit +psycopg is kept.
DEFAULT_DRIVER = "psycopg2"
DRIVERS = {"psycopg2": "psycopg2", "psycopg": "psycopg"}  # URL driver -> module it needs
ACCEPTED = "postgresql://, postgres://, postgresql+psycopg2:// or postgresql+psycopg:// (user:pass@host:5432/db)"



def normalise_url(url: str) -> str:
    """The SQLAlchemy URL for what the user wrote: `postgres://` and plain `postgresql://` get psycopg2.

    StoreError (one line, password masked) for another scheme, an unknown driver, or +psycopg without psycopg.
    """
    text = url.strip()
    match = SCHEME.match(text)
    if match is None:
        raise StoreError(f"metadata store URL {mask_password(text)} is not a Postgres URL: expected {ACCEPTED}")
    driver = (match.group(2) or DEFAULT_DRIVER).lower()
    if driver not in DRIVERS:
        raise StoreError(
            f"metadata store URL {mask_password(text)} names the driver {driver}: expected {ACCEPTED}"
        )
    if importlib.util.find_spec(DRIVERS[driver]) is None:
        raise StoreError(
            f"metadata store URL {mask_password(text)} needs the Python package {DRIVERS[driver]}, "
            f"which is not installed: use postgresql:// (psycopg2) or install it"
        )
    return f"postgresql+{driver}://{text[match.end():]}"


NOT_CONFIGURED = (
    "no metadata store configured: set the Airflow connection spanner_cdc_metadata or SPANNER_CDC_METADATA_URL "
    "(a Postgres URL such as postgresql://user:pass@host:5432/db)"
)


def require_metadata_url(configured: str | None) -> str:
    """The configured metadata store URL, or StoreNotConfigured: outside the dev stack nothing is started."""
    if not configured:
        raise StoreNotConfigured(NOT_CONFIGURED)
    return configured
