"""Batched transitions on a real Postgres: many tokens landed or renewed per statement, each a compare-and-set."""

from __future__ import annotations

import threading
from datetime import timedelta, timezone

import pytest
import sqlalchemy as sa

from spanner_cdc.store import BatchResult, Completion, LeaseLost, ManifestFile, MetadataStore, State
from tests.integration.store.test_transitions import LEASE, T0, US, W1, attempts, by_token, new_lineage, record

pytestmark = pytest.mark.integration
SPLIT_AT = T0 + timedelta(minutes=20)


def file(token: str, name: str) -> ManifestFile:
    return ManifestFile(f"lake/{token}/{name}.parquet", token, T0, W1 - US, T0, W1, 10, 100, "Orders")


def manifest(store: MetadataStore, lineage_id: int) -> dict[str, tuple[str, int]]:
    with store._db.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT path, token, attempt FROM cdc_manifest WHERE lineage_id = :l"), {"l": lineage_id})
        return {r.path: (r.token, r.attempt) for r in rows}


def test_a_batch_lands_splits_and_a_merge_and_skips_a_lost_claim(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("a", "b", "c", "d", "e"))
    claims = {c.token: c for c in store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)}
    # e's claim is lost: another worker takes it over after its lease "expired"
    with store._db.engine.begin() as conn:
        conn.execute(sa.text("UPDATE cdc_partitions SET lease_expires_at = now() - interval '1 s' WHERE token = 'e'"))
    [retaken] = store.claim(lineage_id, window_end=W1, owner="other", lease=LEASE, tokens=["e"])
    result = store.complete_many(
        [
            Completion(claims["a"], W1 - US, False, files=(file("a", "1"), file("a", "2")), records=20),
            # b splits into b1, b2; c and d merge into m (both parents in this one batch)
            Completion(claims["b"], SPLIT_AT - US, True, (record(SPLIT_AT, ("b1", ("b",)), ("b2", ("b",))),),
                       (file("b", "1"),)),
            Completion(claims["c"], SPLIT_AT - US, True, (record(SPLIT_AT, ("m", ("c", "d"))),)),
            Completion(claims["d"], SPLIT_AT - US, True, (record(SPLIT_AT, ("m", ("c", "d"))),)),
            Completion(claims["e"], W1 - US, False, (record(SPLIT_AT, ("e1", ("e",))),), (file("e", "1"),)),
        ]
    )
    assert isinstance(result, BatchResult)
    assert result.landed == ("a", "b", "c", "d")
    assert result.promoted == ("b1", "b2", "m")
    assert len(result.lost) == 1 and isinstance(result.lost[0], LeaseLost)
    assert "token e" in str(result.lost[0]) and "owner other" in str(result.lost[0])
    rows = by_token(store, lineage_id)
    assert (rows["a"].state, rows["a"].watermark) == (State.READY, W1 - US)
    assert (rows["b"].state, rows["b"].end) == (State.FINISHED, SPLIT_AT)
    assert rows["m"].parents == ("c", "d") and rows["m"].state is State.READY
    assert "e1" not in rows and (rows["e"].state, rows["e"].lease_owner) == (State.RUNNING, "other")
    assert manifest(store, lineage_id) == {
        "lake/a/1.parquet": ("a", 1), "lake/a/2.parquet": ("a", 1), "lake/b/1.parquet": ("b", 1)
    }
    done = attempts(store, lineage_id, "a")[-1]
    assert (done.outcome, done.records, done.files, done.finished) == ("COMPLETED", 20, 2, False)
    assert retaken.attempt == 2 and attempts(store, lineage_id, "e")[-1].outcome == "RUNNING"
    # replaying the same batch lands nothing twice: every claim is spent
    again = store.complete_many([Completion(claims["a"], W1 - US, False), Completion(claims["c"], SPLIT_AT - US, True)])
    assert again.landed == () and again.promoted == () and len(again.lost) == 2


def test_a_large_batch_with_lost_claims_scattered_lands_exactly_the_others(store: MetadataStore) -> None:
    """60 tokens, every 7th lost to another worker: exactly those reported, untouched; the others landed with
    their files, timestamps to the microsecond (they travel as epoch microseconds) and window defaults."""
    tokens = tuple(f"s{i:03d}" for i in range(60))
    lineage_id = new_lineage(store, tokens)
    claims = {c.token: c for c in store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)}
    lost = sorted(tokens[3::7])
    with store._db.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE cdc_partitions SET lease_expires_at = now() - interval '1 s' WHERE token = ANY(:t)"),
            {"t": lost},
        )
    assert len(store.claim(lineage_id, window_end=W1, owner="other", lease=LEASE, tokens=lost)) == len(lost)
    odd = T0 + timedelta(minutes=7, microseconds=123_457)
    items = [
        Completion(claims[t], odd + i * US, False, files=(ManifestFile(f"lake/{t}.parquet", t, T0, odd + i * US,
                   None, None, i, 10 * i, "Orders"),), records=i, window_start=T0, window_end=W1)
        for i, t in enumerate(tokens)
    ]  # fmt: skip
    result = store.complete_many(list(reversed(items)))
    assert result.landed == tuple(sorted(set(tokens) - set(lost)))
    assert sorted(str(e).split()[3].rstrip(":") for e in result.lost) == lost
    rows = by_token(store, lineage_id)
    for i, t in enumerate(tokens):
        if t in lost:
            assert (rows[t].state, rows[t].lease_owner, rows[t].watermark) == (State.RUNNING, "other", None)
        else:
            assert (rows[t].state, rows[t].watermark) == (State.READY, odd + i * US)
    files = {f.path: f for f in store.manifest(lineage_id)}
    assert sorted(files) == sorted(f"lake/{t}.parquet" for t in tokens if t not in lost)
    first = files["lake/s000.parquet"]
    assert (first.range_start, first.range_end, first.window_start, first.window_end) == (T0, odd, T0, W1)


@pytest.mark.parametrize("finishing", [False, True], ids=["land-only", "with-children"])
def test_tokens_sharing_a_file_land_together_or_are_held_back_together(store: MetadataStore, finishing: bool) -> None:
    """a and b share a file (one group), c lands alone: b's claim is lost, so a is held back (still ours, nothing
    written for it, its group's file not in the manifest) and c lands; both statement paths (with and without
    children) alike."""
    lineage_id = new_lineage(store, ("a", "b", "c"))
    claims = {c.token: c for c in store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)}
    with store._db.engine.begin() as conn:
        conn.execute(sa.text("UPDATE cdc_partitions SET lease_expires_at = now() - interval '1 s' WHERE token = 'b'"))
    assert len(store.claim(lineage_id, window_end=W1, owner="other", lease=LEASE, tokens=["b"])) == 1
    children = (record(SPLIT_AT, ("c1", ("c",))),) if finishing else ()
    result = store.complete_many([
        Completion(claims["a"], W1 - US, False, files=(file("a", "shared"),), records=10, group="g1"),
        Completion(claims["b"], W1 - US, False, records=5, group="g1"),
        Completion(claims["c"], SPLIT_AT - US if finishing else W1 - US, finishing, children, (file("c", "1"),)),
    ])  # fmt: skip
    assert result.landed == ("c",) and result.held_back == ("a",)
    assert len(result.lost) == 1 and "token b" in str(result.lost[0])
    rows = by_token(store, lineage_id)
    assert (rows["a"].state, rows["a"].lease_owner, rows["a"].watermark) == (State.RUNNING, "w", None)
    assert set(manifest(store, lineage_id)) == {"lake/c/1.parquet"}
    # the whole group holding its claims lands together
    store.fail(claims["a"], "held back: retry")
    [again] = store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE, tokens=["a"])
    both = store.complete_many([Completion(again, W1 - US, False, files=(file("a", "shared2"),), group="g2")])
    assert both.landed == ("a",) and both.held_back == ()


def test_a_batch_refuses_naive_file_timestamps(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("a",))
    [a] = store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)
    naive = ManifestFile("lake/a/n.parquet", "a", T0.replace(tzinfo=None), W1 - US, T0, W1, 1, 1)
    with pytest.raises(ValueError, match="range_start must be a timezone-aware"):
        store.complete_many([Completion(a, W1 - US, False, files=(naive,))])
    assert by_token(store, lineage_id)["a"].state is State.RUNNING


def test_a_batch_sends_each_file_timestamp_exactly_whichever_zone_and_however_often(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("a",))
    [a] = store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)
    berlin = timezone(timedelta(hours=1))
    # one instant written in two zones, and instants one microsecond apart: each file keeps its own
    ends = {"x": W1 - US, "y": (W1 - US).astimezone(berlin), "z": W1 - 2 * US}
    files = tuple(ManifestFile(f"lake/a/{n}.parquet", "a", T0 + US, end, T0, W1, 1, 1) for n, end in ends.items())
    assert store.complete_many([Completion(a, W1 - US, False, files=files)]).landed == ("a",)
    got = {f.path: (f.range_start, f.range_end) for f in store.manifest(lineage_id)}
    assert got == {f"lake/a/{n}.parquet": (T0 + US, end) for n, end in ends.items()}


def test_a_batch_refuses_mixed_lineages_repeated_tokens_and_foreign_files(store: MetadataStore) -> None:
    one, two = new_lineage(store, ("a",)), new_lineage(store, ("a",))
    [a1] = store.claim(one, window_end=W1, owner="w", lease=LEASE)
    [a2] = store.claim(two, window_end=W1, owner="w", lease=LEASE)
    with pytest.raises(ValueError, match="one lineage"):
        store.complete_many([Completion(a1, W1 - US, False), Completion(a2, W1 - US, False)])
    with pytest.raises(ValueError, match="at most once"):
        store.complete_many([Completion(a1, W1 - US, False), Completion(a1, W1 - US, False)])
    with pytest.raises(ValueError, match="belongs to token b"):
        store.complete_many([Completion(a1, W1 - US, False, files=(file("b", "1"),))])
    assert by_token(store, one)["a"].state is State.RUNNING  # nothing written by a refused batch
    assert store.complete_many([]) == BatchResult((), (), ())


def test_renew_many_extends_held_leases_and_names_the_lost_ones(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("a", "b", "c"))
    claims = store.claim(lineage_id, window_end=W1, owner="w", lease=timedelta(seconds=30))
    store.complete(claims[2], watermark=W1 - US, finished=False)
    renewed, lost = store.renew_many(claims, timedelta(hours=2))
    assert [c.token for c in renewed] == ["a", "b"] and [c.token for c in lost] == ["c"]
    rows = by_token(store, lineage_id)
    assert all(rows[c.token].lease_expires_at == c.lease_expires_at for c in renewed)
    assert renewed[0].lease_expires_at > claims[0].lease_expires_at + timedelta(hours=1)


def test_concurrent_batches_promote_each_merge_child_exactly_once(pg_url: str) -> None:
    """Two workers land batches of merge parents at once (a parent of every child in each): one promotion each."""
    setup = MetadataStore.connect(pg_url)
    setup.upgrade()
    lineage_id = new_lineage(setup, tuple(f"{side}{i:03d}" for i in range(200) for side in "xy"))
    claims = {c.token: c for c in setup.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)}
    stores = [MetadataStore.connect(pg_url) for _ in range(2)]
    promoted: list[tuple[str, ...]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def land(side: str, store: MetadataStore) -> None:
        try:
            for chunk in range(0, 200, 20):
                items = [
                    Completion(claims[f"{side}{i:03d}"], SPLIT_AT - US, True,
                               (record(SPLIT_AT, (f"m{i:03d}", (f"x{i:03d}", f"y{i:03d}"))),))
                    for i in range(chunk, chunk + 20)
                ]
                barrier.wait(timeout=30)
                promoted.append(store.complete_many(items).promoted)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=land, args=(side, s)) for side, s in zip("xy", stores, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(t for batch in promoted for t in batch) == [f"m{i:03d}" for i in range(200)]
    rows = by_token(setup, lineage_id)
    assert all(rows[f"m{i:03d}"].state is State.READY for i in range(200))
    for store in (*stores, setup):
        store.close()
