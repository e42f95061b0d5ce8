"""Pure parts of the extract pipeline: window and argument checks, plan rules, summaries, progress, leases."""

from __future__ import annotations

import argparse
import io
import json
import os
import threading
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from spanner_cdc.cli.commands.extract import ProgressLine, describe, resolve_settings
from spanner_cdc.errors import ConfigError, ExtractError, RetentionError, SourceError, UsageError
from spanner_cdc.extract import token as extract
from spanner_cdc.extract import window as pipeline
from spanner_cdc.extract.planning import check_retention, effective_start
from spanner_cdc.settings import Settings
from spanner_cdc.store.models import Claim
from spanner_cdc.times import spelled_duration as human

S = datetime(2024, 5, 1, 10, tzinfo=UTC)
E = S + timedelta(hours=1)


def test_window_bounds_are_aware_ordered_and_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert pipeline._window(datetime(2024, 5, 1, 12, tzinfo=plus_two), E) == (S, E)
    with pytest.raises(UsageError, match="has no time zone"):
        pipeline._window(datetime(2024, 5, 1, 10), E)
    with pytest.raises(UsageError, match="window_end .* must be after window_start"):
        pipeline._window(E, S)
    with pytest.raises(ConfigError, match="read_method"):
        pipeline._read_method("dump")


def test_token_task_label_shows_the_token_tail_and_range() -> None:
    task = pipeline.TokenTask("A" * 30 + "tail123456", S, E - timedelta(microseconds=1))
    assert task.label == "…tail123456 10:00:00–10:59:59"


def test_summary_is_json() -> None:
    summary = pipeline.WindowSummary("cs", "live", S, E, True, 3, 10, 2, {"ok": True}, [], "/m.json", 1.23456, 2, 4)
    data = json.loads(json.dumps(summary.to_json()))
    assert data["window_start"] == S.isoformat() and data["elapsed_s"] == 1.235 and data["waves"] == 2
    assert "complete; 10 records in 2 files from 3 partitions (4 token jobs in 2 waves" in describe(summary)
    pending = pipeline.WindowSummary("cs", "live", S, E, False, 3, 0, 0, {}, ["t1"], None, 0.0)
    assert "NOT complete: 1 of 3 partitions pending" in describe(pending)


def test_effective_start_and_retention() -> None:
    assert effective_start("cs", None, S, E) == S
    assert effective_start("cs", S - timedelta(days=1), S, E) == S
    assert effective_start("cs", S + timedelta(minutes=5), S, E) == S + timedelta(minutes=5)
    with pytest.raises(UsageError, match="ends before change stream cs was created"):
        effective_start("cs", E, S, E)
    check_retention("cs", S, timedelta(days=1), "live", now=S + timedelta(hours=23))
    with pytest.raises(RetentionError, match=r"retention period \(7 days\).*oldest readable change is at about 2024-05-01T10:00:00"):
        check_retention("cs", S - timedelta(days=1), timedelta(days=7), "live", now=S + timedelta(days=7))
    assert (human(timedelta(hours=36)), human(timedelta(days=1)), human(timedelta(seconds=90))) == ("36 hours", "1 day", "90 seconds")


def test_progress_line_rewrites_one_line() -> None:
    out = io.StringIO()
    line = ProgressLine(out)
    line(pipeline.Progress(wave=1, done=2, running=1, waiting=3, records=12345))
    line(pipeline.Progress(wave=2, done=6, running=0, waiting=0, records=20000, failed=1))
    line.finish()
    text = out.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n")
    assert "wave 1: tokens done 2, running 1, waiting 3; 12,345 records landed" in text
    assert "failed 1; 20,000 records landed" in text


def test_a_configured_stream_supplies_its_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "cdc.toml"
    config.write_text('[streams.orders]\nchange_stream = "OrdersStream"\nstart_date = 2024-01-01\nconcurrency = 7\ndatabase = "shop"\n')
    for key in list(os.environ):
        if key.startswith("SPANNER_CDC_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("SPANNER_CDC_CONFIG", str(config))
    args = argparse.Namespace(stream="orders", concurrency=None, database=None, namespace=None)
    settings = resolve_settings(args)
    assert (settings.stream, settings.concurrency, settings.database) == ("OrdersStream", 7, "shop")
    flagged = resolve_settings(argparse.Namespace(stream="orders", concurrency=3, database=None, namespace="bf1"))
    assert (flagged.concurrency, flagged.namespace) == (3, "bf1")  # flags still win
    plain = resolve_settings(argparse.Namespace(stream="Direct", concurrency=None, database=None, namespace=None))
    assert plain.stream == "Direct"


def test_the_tuning_settings_are_flags_of_extract_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from spanner_cdc.cli.main import build_parser

    for key in list(os.environ):
        if key.startswith("SPANNER_CDC_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("SPANNER_CDC_TASK_TOKENS", "5")
    window = ["extract", "--window-start", "2024-05-01T10:00:00Z", "--window-end", "2024-05-01T11:00:00Z"]
    args = build_parser().parse_args([*window, "--task-tokens", "3", "--liveness", "lease", "--lease-s", "2.5"])
    settings = resolve_settings(args)
    assert (settings.task_tokens, settings.liveness, settings.lease_s) == (3, "lease", 2.5)  # flags beat SPANNER_CDC_*
    assert resolve_settings(build_parser().parse_args(window)).task_tokens == 5
    with pytest.raises(ConfigError, match=r"invalid --lake-writer='csv': expected one of arrow, spark"):
        resolve_settings(build_parser().parse_args([*window, "--lake-writer", "csv"]))


class FakeStore:
    def __init__(self) -> None:
        self.renewed: list[str] = []

    def renew_many(self, claims: list[Claim], lease: timedelta) -> tuple[list[Claim], list[Claim]]:
        self.renewed += [c.token for c in claims]
        return list(claims), []


def claim(token: str) -> Claim:
    return Claim(1, token, S, None, "me", 1, E)


def test_failed_tokens_do_not_stop_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_extract(job: object, c: Claim) -> extract.TokenResult:
        if c.token == "bad":
            raise SourceError("boom")
        return extract.TokenResult(c.token, 5, 1, False, E)

    monkeypatch.setattr(extract, "extract_claim", fake_extract)
    job = extract.ExtractJob(FakeStore(), None, None, 1, "cs", S, E, "spanner-change-stream", {})  # type: ignore[arg-type]
    done: list[str] = []
    results = extract.extract_claims(
        job, [claim("a"), claim("b")], concurrency=2, lease=timedelta(seconds=60), on_done=lambda c, r: done.append(c.token)
    )
    assert [r.token for r in results] == ["a", "b"] and sorted(done) == ["a", "b"]
    with pytest.raises(SourceError, match="boom"):
        extract.extract_claims(job, [claim("bad"), claim("a")], concurrency=1, lease=timedelta(seconds=60))
    with pytest.raises(ExtractError, match="2 of 3 tokens failed"):
        extract.extract_claims(job, [claim("bad"), claim("a"), claim("bad")], concurrency=2, lease=timedelta(seconds=60))


def test_lease_keeper_checks_the_liveness_lock_between_renewals(monkeypatch: pytest.MonkeyPatch) -> None:
    class Store:
        def __init__(self) -> None:
            self.checked = threading.Event()
            self.renewed: list[object] = []

        def keep_alive(self) -> None:
            self.checked.set()

        def renew_many(self, claims: list[object], lease: object) -> tuple[list[object], list[object]]:
            self.renewed += claims
            return claims, []

    monkeypatch.setattr(extract, "LIVENESS_CHECK_S", 0.01)
    store = Store()
    with extract.LeaseKeeper(store, timedelta(minutes=5)) as keeper:  # type: ignore[arg-type]
        keeper.hold(Claim(1, "t", S, None, "me", 1, E))
        assert store.checked.wait(timeout=30)
    assert store.renewed == []  # a renewal is due only every third of the lease


def test_lease_keeper_renews_every_held_claim_in_one_call_and_drops_the_lost_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Store:
        def __init__(self) -> None:
            self.calls: list[list[str]] = []
            self.twice = threading.Event()

        def keep_alive(self) -> None:
            pass

        def renew_many(self, claims: list[Claim], lease: timedelta) -> tuple[list[Claim], list[Claim]]:
            self.calls.append(sorted(c.token for c in claims))
            if len(self.calls) >= 2:
                self.twice.set()
            lost = [c for c in claims if c.token == "b"]
            return [c for c in claims if c not in lost], lost

    monkeypatch.setattr(extract, "LIVENESS_CHECK_S", 0.01)
    store = Store()
    keeper = extract.LeaseKeeper(store, timedelta(seconds=0.06))  # type: ignore[arg-type]
    for token in ("a", "b", "c"):
        keeper.hold(claim(token))  # held before the thread starts, so the first round sees all three
    with keeper:
        assert store.twice.wait(timeout=30)
    # one call per round for all three; b's lease was lost, so the next round renews only a and c
    assert store.calls[0] == ["a", "b", "c"] and store.calls[1] == ["a", "c"]


def test_the_close_checks_a_small_window_in_the_driver_and_a_large_one_with_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    from spanner_cdc.lake import check as driver_check
    from spanner_cdc.spark import check as spark_check
    from spanner_cdc.spark import session
    from spanner_cdc.store.models import ManifestFile

    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(driver_check, "driver_transaction_check", lambda paths, **_: calls.append(("driver", list(paths))) or {})
    monkeypatch.setattr(spark_check, "transaction_check", lambda spark, paths, **_: calls.append((spark, list(paths))) or {})
    monkeypatch.setattr(session, "spark_session", lambda settings: "spark")
    files = [ManifestFile(f"f{n}", "t", S, E, S, E, rows, 1) for n, rows in enumerate((3, 4))]
    # the manifest's counts, 7 rows in all, are what decides
    pipeline._transaction_check(Settings(stream="cs", check_driver_rows=7), files, S, E)
    pipeline._transaction_check(Settings(stream="cs", check_driver_rows=6), files, S, E)
    assert calls == [("driver", ["f0", "f1"]), ("spark", ["f0", "f1"])]
