"""One home for the state machine: every state change the store's SQL can make is an edge of lineage/rules.TRANSITIONS
(and every edge is made by some statement), every state a partition is inserted in is in rules.INITIAL."""

from __future__ import annotations

import re
from types import ModuleType

import pytest
import sqlalchemy as sa

from spanner_cdc.lineage.rules import INITIAL, TRANSITIONS, State
from spanner_cdc.store import (
    base,
    batch_sql,
    batches,
    lineages,
    liveness,
    manifest,
    snapshots,
    transition_sql,
    transitions,
)

MODULES: tuple[ModuleType, ...] = (base, batch_sql, batches, lineages, liveness, manifest, snapshots, transition_sql, transitions)
STATES = "|".join(state.value for state in State)
CTE = re.compile(r"\b(\w+)\s+AS\s+(?:MATERIALIZED\s+)?\(", re.IGNORECASE)
SET_STATE = re.compile(r"(?<![\w])(?:\w+\.)?state\s*=\s*('(?:\w+)'|CASE\b.*?\bEND)", re.IGNORECASE | re.DOTALL)
HAS_STATE = re.compile(r"(?<![\w])(?:\w+\.)?state\s*(?:=\s*'(\w+)'|IN\s*\(([^)]*)\))", re.IGNORECASE)
LITERAL = re.compile(rf"'({STATES})'")
Edge = tuple[str, str]


def closing(sql: str, opening: int) -> int:
    """The index of the parenthesis that closes the one at `opening`."""
    depth = 0
    for i in range(opening, len(sql)):
        depth += {"(": 1, ")": -1}.get(sql[i], 0)
        if depth == 0:
            return i
    raise ValueError("unbalanced parentheses")


def split_ctes(sql: str) -> tuple[dict[str, str], str]:
    """The statement's CTEs (name -> body) and what is left of it (the main statement)."""
    ctes: dict[str, str] = {}
    rest, at = sql, 0
    while (match := CTE.search(rest, at)) is not None:
        end = closing(rest, match.end() - 1)
        ctes[match.group(1).lower()] = rest[match.end() : end]
        rest = rest[: match.start()] + rest[end + 1 :]
        at = match.start()
    return ctes, rest


def states_in(condition: str) -> set[str]:
    found: set[str] = set()
    for single, listed in HAS_STATE.findall(condition):
        found |= {single} if single else set(LITERAL.findall(listed))
    return found


def sources_of(body: str, ctes: dict[str, str], seen: frozenset[str] = frozenset()) -> set[str]:
    """The states the rows of a query (or an UPDATE's WHERE and FROM) can be in: its own state conditions, else those
    of the CTEs it reads."""
    own = states_in(body)
    if own:
        return own
    found: set[str] = set()
    for name in set(re.findall(r"\w+", body.lower())) & set(ctes) - seen:
        found |= sources_of(ctes[name], ctes, seen | {name})
    return found


def edges_of(sql: str) -> set[Edge]:
    """Every (from, to) an UPDATE of cdc_partitions in `sql` can make; a state change from unknown states is (?, to)."""
    ctes, main = split_ctes(sql)
    edges: set[Edge] = set()
    for part in [*ctes.values(), main]:
        update = re.search(r"UPDATE\s+cdc_partitions\b(.*)", part, re.IGNORECASE | re.DOTALL)
        if update is None:
            continue
        body = re.split(r"\bRETURNING\b", update.group(1), flags=re.IGNORECASE)[0]
        set_clause, where = (re.split(r"\bWHERE\b", body, maxsplit=1, flags=re.IGNORECASE) + [""])[:2]
        targets = {t for expr in SET_STATE.findall(set_clause) for t in LITERAL.findall(expr)}
        if not targets:
            continue  # the update keeps the state (a lease renewal)
        from_clause = re.split(r"\bFROM\b", set_clause, maxsplit=1, flags=re.IGNORECASE)
        sources = states_in(where) or sources_of(from_clause[1] if len(from_clause) > 1 else "", ctes) or {"?"}
        edges |= {(source, target) for source in sources for target in targets}
    return edges


def inserted_states(sql: str) -> set[str]:
    """The states an INSERT INTO cdc_partitions writes."""
    insert = re.search(r"INSERT\s+INTO\s+cdc_partitions\b(.*)", sql, re.IGNORECASE | re.DOTALL)
    return set(LITERAL.findall(insert.group(1))) if insert else set()


def statements() -> dict[str, str]:
    """Every SQL text of the store by name (a statement another module imports is named once)."""
    found: dict[int, tuple[str, str]] = {}
    for module in MODULES:
        for name, value in vars(module).items():
            if isinstance(value, sa.TextClause):
                found.setdefault(id(value), (f"{module.__name__}.{name}", value.text))
    return dict(found.values())


ALLOWED = {(source.value, target.value) for source, targets in TRANSITIONS.items() for target in targets}


def test_every_transition_the_sql_makes_is_an_edge_of_the_rules() -> None:
    made = {name: edges_of(sql) for name, sql in statements().items()}
    assert {name: sorted(edges - ALLOWED) for name, edges in made.items() if edges - ALLOWED} == {}
    assert set().union(*made.values()) == ALLOWED, "an edge of TRANSITIONS that no statement makes"


def test_every_state_a_partition_is_inserted_in_is_initial() -> None:
    inserted = {name: inserted_states(sql) for name, sql in statements().items()}
    assert set().union(*inserted.values()) == {state.value for state in INITIAL}


def test_the_statements_that_change_states_are_found() -> None:
    found = {name.rsplit(".", 1)[1] for name, sql in statements().items() if edges_of(sql)}
    assert found == {"CLAIM_ANY", "CLAIM_NAMED", "SCHEDULE", "EXPIRE", "PROMOTE", "FAIL", "LAND_MANY"}


@pytest.mark.parametrize(
    ("sql", "edges", "outside_the_rules"),
    [
        # a finished partition made READY again: not an edge of TRANSITIONS, so the first test would fail on it
        ("UPDATE cdc_partitions SET state = 'READY' WHERE state = 'FINISHED'", {("FINISHED", "READY")}, True),
        ("UPDATE cdc_partitions p SET state = CASE WHEN x THEN 'FINISHED' ELSE 'CREATED' END WHERE p.state = 'RUNNING'",
         {("RUNNING", "FINISHED"), ("RUNNING", "CREATED")}, True),
        ("WITH picked AS (SELECT token FROM cdc_partitions WHERE state IN ('CREATED', 'READY') FOR UPDATE) "
         "UPDATE cdc_partitions p SET state = 'SCHEDULED' FROM picked WHERE p.token = picked.token",
         {("CREATED", "SCHEDULED"), ("READY", "SCHEDULED")}, True),
        ("UPDATE cdc_partitions SET state = 'READY' WHERE token = :token", {("?", "READY")}, True),  # from any state
        ("UPDATE cdc_partitions SET state = 'RUNNING' WHERE state IN ('READY', 'SCHEDULED')",
         {("READY", "RUNNING"), ("SCHEDULED", "RUNNING")}, False),
        ("UPDATE cdc_partitions SET lease_expires_at = now() WHERE state = 'RUNNING'", set(), False),
    ],
)  # fmt: skip
def test_the_edges_of_a_statement_are_read_from_its_text(sql: str, edges: set[Edge], outside_the_rules: bool) -> None:
    assert edges_of(sql) == edges
    assert bool(edges - ALLOWED) is outside_the_rules
