"""`verify`, the pure part: row hashes, the buckets a fraction picks, the comparison's findings and their text."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from spanner_cdc.validators import fraction

SHOWN = 20  # mismatches kept (and printed) per verify: the first ones in key order; the counts are whole


def check_fraction(value: object) -> float:
    """`--fraction`: the share of key buckets compared, in (0, 1]."""
    return fraction("--fraction", value)


def choose_buckets(share: float, seed: int, total: int) -> list[int]:
    """The buckets a verify compares: ceil(share x total) of them (at least one), drawn with `seed`."""
    count = max(1, math.ceil(check_fraction(share) * total - 1e-9))
    return sorted(random.Random(seed).sample(range(total), min(count, total)))


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return "b64:" + base64.b64encode(value).decode()
    return str(value)


def row_hash(values: Sequence[Any]) -> str:
    """A row's hash over its values in column order (typed values: the same row read from either side, the same hash)."""
    text = json.dumps(list(values), default=_plain, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Mismatch:
    """One finding: `part` state or change_log; `problem` differs, missing in the lake, or not in the source."""

    part: str
    table: str
    key: str
    problem: str
    uuid: str | None = None

    def text(self) -> str:
        ident = f" uuid {self.uuid}" if self.uuid else ""
        return f"{self.part} {self.table}{ident} key {self.key}: {self.problem}"


@dataclass
class TableCheck:
    """A state table compared at the window's end: rows on each side (in the buckets compared) and mismatching keys."""

    table: str
    snapshot_id: int | None
    lake_rows: int = 0
    source_rows: int = 0
    mismatches: int = 0
    skipped: str | None = None  # why the table was not compared (no snapshot of the window: expired, never applied)


@dataclass
class ChangeLogCheck:
    """The window's change log compared by uuid with a fresh read of the window from the change stream."""

    checked: bool
    reason: str | None = None  # why it was not (out of the stream's retention)
    source_rows: int = 0
    lake_rows: int = 0
    missing: int = 0  # read from the stream, not in the lake
    extra: int = 0  # in the lake, not read from the stream (or there twice)
    missing_files: list[str] = field(default_factory=list)  # listed by the manifest, gone from the lake


@dataclass
class VerifyResult:
    stream: str
    namespace: str
    window_start: str
    window_end: str
    verified_at: str
    fraction: float
    seed: int
    buckets: list[int]
    tables: list[TableCheck] = field(default_factory=list)
    change_log: ChangeLogCheck | None = None
    examples: list[Mismatch] = field(default_factory=list)

    @property
    def rows_compared(self) -> int:
        state = sum(max(t.lake_rows, t.source_rows) for t in self.tables)
        log = self.change_log
        return state + (max(log.source_rows, log.lake_rows) if log and log.checked else 0)

    @property
    def mismatches(self) -> int:
        log = self.change_log
        return sum(t.mismatches for t in self.tables) + (log.missing + log.extra if log else 0)

    @property
    def ok(self) -> bool:
        return self.mismatches == 0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(rows_compared=self.rows_compared, mismatches=self.mismatches, ok=self.ok)
        return out

    def lines(self) -> list[str]:
        """The result as text: the verdict and which window first, then each part, then the first mismatches."""
        verdict = f"{self.mismatches} mismatch{'es' if self.mismatches != 1 else ''}" if self.mismatches else "clean"
        out = [
            f"verify {self.stream}/{self.namespace} window [{self.window_start}, {self.window_end}): {verdict}, "
            f"{self.rows_compared} rows compared"
        ]
        out.append(f"  state tables as of the window's end vs a stale read at end - 1 us: buckets {self.buckets} "
                   f"(fraction {self.fraction}, seed {self.seed})")  # fmt: skip
        for t in self.tables:
            if t.skipped:
                out.append(f"    {t.table}: not compared ({t.skipped})")
            else:
                out.append(
                    f"    {t.table}: {t.lake_rows} rows in the lake, {t.source_rows} in the source, {t.mismatches} mismatching keys"
                )
        if not self.tables:
            out.append("    (no current-state table holds this window)")
        log = self.change_log
        if log is None or not log.checked:
            out.append(f"  change log: not compared ({log.reason if log else 'not asked'})")
        else:
            out.append(f"  change log vs a fresh read of the window: {log.source_rows} rows read, {log.lake_rows} in the lake, "
                       f"{log.missing} missing, {log.extra} extra")  # fmt: skip
            out += [f"    file listed by the manifest is gone: {path}" for path in log.missing_files]
        if self.examples:
            shown = f"first {len(self.examples)}" if len(self.examples) < self.mismatches else "all"
            out.append(f"  mismatches ({shown}):")
            out += [f"    {m.text()}" for m in self.examples]
        return out


def compare_changes(
    source: Mapping[str, tuple[str, str]], lake: Iterable[tuple[str, str, str]]
) -> tuple[int, int, int, list[Mismatch]]:
    """Change log rows by uuid: `source` uuid -> (table, key) read from the stream; `lake` (uuid, table, key) rows.
    Returns (lake rows, missing, extra, the first SHOWN findings in (table, key, uuid) order)."""
    seen: dict[str, int] = {}
    where: dict[str, tuple[str, str]] = {}
    for uuid, table, key in lake:
        seen[uuid] = seen.get(uuid, 0) + 1
        where[uuid] = (table, key)
    found = [Mismatch("change_log", t, k, "missing in the lake", u) for u, (t, k) in source.items() if u not in seen]
    missing = len(found)
    extra = 0
    for uuid, count in seen.items():
        if uuid not in source:
            extra += count
            found.append(Mismatch("change_log", *where[uuid], "in the lake, not in the change stream", uuid))
        elif count > 1:
            extra += count - 1
            found.append(Mismatch("change_log", *where[uuid], f"in the lake {count} times", uuid))
    found.sort(key=lambda m: (m.table, m.key, m.uuid or ""))
    return sum(seen.values()), missing, extra, found[:SHOWN]


def state_problem(lake_hash: str | None, source_hash: str | None, lake_count: int, source_count: int) -> str | None:
    """What is wrong with one key of a state table (None: nothing)."""
    if lake_hash is None:
        return "missing in the lake"
    if source_hash is None:
        return "in the lake, not in the source"
    if lake_count > 1:
        return f"in the lake {lake_count} times"
    if source_count > 1:
        return f"in the source {source_count} times"
    return "values differ" if lake_hash != source_hash else None
