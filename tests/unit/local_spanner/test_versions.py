"""Row versions: reads at a timestamp pick the newest version at or before it; pruning keeps what the horizon needs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from spanner_cdc.local_spanner.versions import Versions

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_rows_at_each_timestamp() -> None:
    versions = Versions()
    versions.write("t", ("1",), at(10), {"k": "1", "v": "a"}, None)
    versions.write("t", ("2",), at(20), {"k": "2", "v": "b"}, None)
    versions.write("t", ("1",), at(30), {"k": "1", "v": "c"}, None)
    versions.write("t", ("2",), at(40), None, None)
    assert versions.rows_at("t", at(5)) == {}
    assert versions.rows_at("t", at(10)) == {("1",): {"k": "1", "v": "a"}}
    assert versions.rows_at("t", at(35)) == {("1",): {"k": "1", "v": "c"}, ("2",): {"k": "2", "v": "b"}}
    assert versions.rows_at("t", at(40)) == {("1",): {"k": "1", "v": "c"}}
    assert versions.last_commit("t") == at(40) and versions.last_commit("t", ("1",)) == at(30)


def test_pruning_keeps_the_version_a_read_at_the_horizon_sees() -> None:
    versions = Versions()
    for second, value in ((10, "a"), (20, "b"), (30, "c"), (40, "d")):
        versions.write("t", ("1",), at(second), {"v": value}, horizon=at(25))
    versions.write("t", ("2",), at(5), {"v": "gone"}, None)
    versions.write("t", ("2",), at(6), None, None)
    versions.sweep(at(25))
    assert [ts for ts, _ in versions.tables["t"].keys[("1",)]] == [at(20), at(30), at(40)]
    assert ("2",) not in versions.tables["t"].keys  # deleted before the horizon: nothing can read it any more
    assert versions.rows_at("t", at(25)) == {("1",): {"v": "b"}}


def test_a_sweep_keeps_single_versions_and_deletes_newer_than_the_horizon() -> None:
    versions = Versions()
    versions.write("t", ("1",), at(5), {"v": "only"}, None)
    versions.write("t", ("2",), at(5), {"v": "old"}, None)
    versions.write("t", ("2",), at(30), None, None)  # deleted after the horizon: a read at 25 still sees it
    versions.write("t", ("3",), at(5), {"v": "a"}, None)
    versions.write("t", ("3",), at(10), {"v": "b"}, None)
    versions.write("t", ("3",), at(20), None, None)
    versions.sweep(at(25))
    assert versions.tables["t"].keys == {("1",): [(at(5), {"v": "only"})], ("2",): [(at(5), {"v": "old"}), (at(30), None)]}
    assert versions.rows_at("t", at(25)) == {("1",): {"v": "only"}, ("2",): {"v": "old"}}
