"""Secrets kept out of what the project prints: passwords in URLs, libpq keyword strings and messages, shown as ***."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

MASK = "***"
# user:password@ inside any URL-looking text (an error message may quote a URL the UI never saw).
URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)[^\s@/]+@")

# libpq's keyword form and URL parameters can carry the password too (password=..., ?password=...).
PASSWORD_PARAM = re.compile(r"(password\s*=\s*)('[^']*'|[^&\s]*)", re.IGNORECASE)

# A Spark Connect URL carries its bearer token as a parameter: sc://host:port/;user_id=...;token=...
CONNECT_TOKEN = re.compile(r"(;\s*token\s*=)[^;]*", re.IGNORECASE)


def mask_password(text: str) -> str:
    """`text` (a URL, or anything a user typed as one) with every password in it shown as ***.

    Works on text no parser accepts: everything between the user name and the last `@` is hidden, so
    an unquoted `@` or `/` in a password hides too much rather than too little.
    """
    masked = PASSWORD_PARAM.sub(r"\1***", str(text).strip())
    head, sep, rest = masked.partition("://")
    at = rest.rfind("@")
    if not sep or at < 0:
        return masked
    user, colon, _ = rest[:at].partition(":")
    return f"{head}://{user}{':***' if colon else ''}@{rest[at + 1:]}"


def mask_url(url: str | None) -> str:
    """The URL with its password replaced by ***; anything unparsable is hidden whole."""
    if not url:
        return "embedded Postgres"
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        port = f":{parts.port}" if parts.port else ""
        return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{host}{port}"))
    except ValueError:
        return MASK


def mask_spark_master(master: str) -> str:
    """A Spark master URL with a Spark Connect token in it shown as ***."""
    return CONNECT_TOKEN.sub(rf"\1{MASK}", str(master))
