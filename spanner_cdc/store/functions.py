"""The claims and the landing as server-side functions: each statement is planned once per session, not per call.

A claim and a landing are one statement each, but a large one (CTEs over four tables): Postgres planned it at every
call, which cost more than running it for one token and about a sixth of a 100-token batch (profiled with
pg_stat_statements, track_planning). A PL/pgSQL function keeps the plans of its statements for the session, as
a prepared statement would, yet needs no session state of the caller's: it works through a pooler in
transaction mode (PgBouncer), where a PREPARE made on one server session is gone on the next.

The SQL stays where it is read (transition_sql, batch_sql, which the state machine test reads); a function's name
ends in a digest of its definition, so the code always calls the body it was written with: `spanner-cdc db upgrade`
installs the functions of this code (migrations.upgrade), and a store upgraded by another release lacks them, which
says to run the upgrade (Database.translate, migrations.check) instead of running someone else's SQL.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cached_property

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from spanner_cdc.store.batch_sql import LAND_MANY
from spanner_cdc.store.transition_sql import CLAIM_ANY, CLAIM_NAMED

# the type of every parameter the statements below name (:name in their text)
PARAMETER_TYPES = {
    "lineage_id": "bigint",
    "last": "timestamptz",
    "window_end": "timestamptz",
    "named": "text[]",
    "owner": "text",
    "lease": "interval",
    "limit": "integer",
    "liveness_key": "integer",
    "batch": "json",
    "manifest": "json",
}
# a :name outside string literals (a literal is matched whole, so a colon inside it is no parameter)
PARAMETER = re.compile(r"'(?:[^']|'')*'|(?<![:\w]):(\w+)")
# The batch engine's planner settings (database.BATCH_SESSION_OPTIONS), held by the function itself: its plans are
# the same whatever session or pooler calls it.
SETTINGS = "SET enable_nestloop = off"
CLAIM_COLUMNS = (
    "token text, partition_start timestamptz, watermark timestamptz, attempts integer, lease_expires_at timestamptz, "
    "previous_attempt integer, previous_state text, holder_died boolean"
)


@dataclass(frozen=True)
class Function:
    """One statement as a set-returning PL/pgSQL function named `stem`_<digest of its definition>."""

    stem: str
    statement: sa.TextClause
    returns: str

    @cached_property
    def parameters(self) -> tuple[str, ...]:
        """The statement's parameters in order of first use: the function's arguments."""
        return tuple(dict.fromkeys(name for name in PARAMETER.findall(self.statement.text) if name))

    @cached_property
    def body(self) -> str:
        """The statement with its parameters as the function's positional arguments."""
        position = {name: f"${i}" for i, name in enumerate(self.parameters, 1)}
        return PARAMETER.sub(lambda m: position[m.group(1)] if m.group(1) else m.group(0), self.statement.text)

    @cached_property
    def name(self) -> str:
        arguments = ", ".join(PARAMETER_TYPES[p] for p in self.parameters)
        definition = "\n".join((arguments, self.returns, SETTINGS, self.body))
        return f"{self.stem}_{hashlib.sha256(definition.encode()).hexdigest()[:12]}"

    def definition(self) -> str:
        arguments = ", ".join(PARAMETER_TYPES[p] for p in self.parameters)
        # use_column: the columns of RETURNS TABLE are variables of the body, but its names mean the tables' columns
        return (
            f"CREATE OR REPLACE FUNCTION {self.name}({arguments}) RETURNS {self.returns} LANGUAGE plpgsql VOLATILE "
            f"{SETTINGS} AS $body$\n#variable_conflict use_column\nBEGIN\n    RETURN QUERY {self.body.strip()};\nEND\n$body$"
        )

    @cached_property
    def call(self) -> sa.TextClause:
        """What the store executes, with the statement's own parameters."""
        arguments = ", ".join(f"CAST(:{p} AS {PARAMETER_TYPES[p]})" for p in self.parameters)
        return sa.text(f"SELECT * FROM {self.name}({arguments})")


CLAIM_ANY_FUNCTION = Function("cdc_claim_any", CLAIM_ANY, f"TABLE ({CLAIM_COLUMNS})")
CLAIM_NAMED_FUNCTION = Function("cdc_claim_named", CLAIM_NAMED, f"TABLE ({CLAIM_COLUMNS})")
LAND_MANY_FUNCTION = Function("cdc_land_many", LAND_MANY, "SETOF text")
FUNCTIONS = (CLAIM_ANY_FUNCTION, CLAIM_NAMED_FUNCTION, LAND_MANY_FUNCTION)
UNDEFINED_FUNCTION = "42883"
MISSING_HINT = "lacks the functions of this release's claims and landings"


def missing(conn: Connection) -> list[str]:
    """The functions this code calls that the store does not have."""
    names = [f.name for f in FUNCTIONS]
    found = conn.execute(sa.text("SELECT proname FROM pg_proc WHERE proname = ANY(:names)"), {"names": names})
    have = set(found.scalars().all())
    return [name for name in names if name not in have]


def install(conn: Connection) -> list[str]:
    """Create the functions this code calls that are missing (those of other releases are left for them)."""
    absent = set(missing(conn))
    for function in FUNCTIONS:
        if function.name in absent:
            conn.exec_driver_sql(function.definition())
    return sorted(absent)
