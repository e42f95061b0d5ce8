"""Keeps credentials of the metadata store URL out of pages, JSON and logs."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from spanner_cdc.masking import MASK, URL_PASSWORD, mask_url


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
