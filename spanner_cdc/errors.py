"""The project's own exception types; the CLI turns them into one stderr line and an exit code."""

from __future__ import annotations

import re
from collections.abc import Callable

_SETTING = re.compile(r"\{setting:(\w+)\}")


def setting(name: str) -> str:
    """A setting named in a message, shown as the CLI's flag there and as the setting elsewhere (Airflow, logs)."""
    return f"{{setting:{name}}}"


def as_setting(name: str) -> str:
    return name


class SpannerCdcError(Exception):
    """Base of every error a user can cause or act on; its message says what to do."""

    exit_code = 1

    def __str__(self) -> str:
        return self.message(as_setting)

    def message(self, name_setting: Callable[[str], str]) -> str:
        """The message with each setting it names written by `name_setting` (`as_flag` on the command line)."""
        return _SETTING.sub(lambda m: name_setting(m.group(1)), super().__str__())


class ConfigError(SpannerCdcError):
    """A setting has a bad value: the message names the field, the value and what is accepted."""

    exit_code = 2

    def __init__(self, field: str, value: object, accepted: str) -> None:
        self.field = field
        self.value = value
        self.accepted = accepted
        # a bare setting name is shown as the CLI's flag on the command line; labels ("--x", "X (in file)") as they are
        label = setting(field) if field.isidentifier() and field.islower() else field
        super().__init__(f"invalid {label}={value!r}: expected {accepted}")


class StoreNotConfigured(ConfigError):
    """No metadata store URL where nothing may start one: everywhere but the dev stack (the CLI, demo, up)."""

    def __init__(self, message: str) -> None:
        self.field, self.value, self.accepted = "metadata_url", None, "a Postgres URL"
        SpannerCdcError.__init__(self, message)


class UsageError(SpannerCdcError):
    """A command was called with arguments that cannot work together."""

    exit_code = 2


class SourceError(SpannerCdcError):
    """Reading from Spanner failed, or Spanner returned something the reader cannot map."""

    def __init__(self, message: str, raw: object = None) -> None:
        self.raw = raw
        super().__init__(message if raw is None else f"{message}; raw record: {raw!r}"[:2000])


class RetentionError(SourceError):
    """The requested start has left the change stream's retention period, or precedes its creation (OUT_OF_RANGE)."""

    spanner_message = ""  # Spanner's own words, when the error is its OUT_OF_RANGE: what tells the two causes apart


class StoreError(SpannerCdcError):
    """The Postgres metadata store failed or holds something inconsistent."""


class StoreUnreachable(StoreError):
    """The metadata store cannot be connected to."""


class SchemaOutdated(StoreError):
    """The metadata store's schema is missing or older than the code."""


class NotFound(SpannerCdcError):
    """A named thing (lineage, stream, token, window) does not exist."""


class ExtractError(SpannerCdcError):
    """An extract could not complete (a token failed, a window check failed)."""


class SparkStartError(SpannerCdcError):
    """Spark's driver JVM did not start (no Java, too little memory, a loaded machine)."""
