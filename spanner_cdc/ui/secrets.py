"""Keeps credentials of the metadata store URL out of pages, JSON and logs."""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit, urlunsplit

MASK = "***"
# user:password@ inside any URL-looking text (an error message may quote a URL the UI never saw).
URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)[^\s@/]+@")


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


class Redactor:
    """Hides store passwords (raw and URL-decoded) and the password part of any URL in a text."""

    def __init__(self, url: str | None = None) -> None:
        self.label = mask_url(url)
        self._secrets: list[str] = []
        self.add(url)

    def add(self, url: str | None) -> None:
        """Remember the password of `url` and show `url` masked from now on."""
        self.label = mask_url(url)
        try:
            password = urlsplit(url).password if url else None
        except ValueError:
            password = None
        if password:
            self._secrets = sorted({*self._secrets, password, unquote(password)}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        text = URL_PASSWORD.sub(lambda m: m.group(1) + MASK + "@", text)
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        return text
