"""SQL of the partition state machine: claim, lease, land a range, add children, promote, fail."""

from __future__ import annotations

import sqlalchemy as sa

from spanner_cdc.store.liveness import DEAD_KEYS

# A held token is stale when its lease expired, or, when RUNNING, when the run holding it is dead (its
# liveness lock is free, see liveness.DEAD_KEYS). SCHEDULED tokens were handed out by a planner that
# exits right after: only their lease counts.
STALE = (
    "(lease_expires_at < clock_timestamp() "
    "OR (state = 'RUNNING' AND liveness_key IN (SELECT liveness_key FROM dead)))"
)
HOLDER_DIED = "its run died (liveness lock free)"
LEASE_EXPIRED = "lease expired"
NOT_OWN = "AND liveness_key IS DISTINCT FROM CAST(:liveness_key AS integer)"
# The tokens of a CTE as an index condition on the primary key: joined by token alone, a lineage the planner has
# no statistics for yet (just bootstrapped, or grown since the last ANALYZE) is estimated at one row and the
# join becomes a scan of the whole lineage per picked token, quadratic in the window's partitions.
BY_KEY = "AND {alias}.token = ANY(ARRAY(SELECT token FROM {cte}))"
# A claim takes tokens whose next read starts inside the window (rules.needs_read as a range scan on
# cdc_partitions_claimable), least landed first, plus any stale ones. `stale` and `fresh` pick
# disjoint states so no row is picked twice. `dead` is MATERIALIZED so each key is probed once. `expired` ends
# the attempts taken over from a RUNNING holder, saying why (its lease expired or its run died); its rows are
# the previous attempts, never the ones `recorded` inserts. Run on the batch engine (database.BATCH_SESSION_OPTIONS).
CLAIM = """
WITH dead AS MATERIALIZED ({dead_keys}), stale AS (
    SELECT token, attempts AS previous_attempt, state AS previous_state, read_from,
           lease_expires_at >= clock_timestamp() AS holder_died FROM cdc_partitions
    WHERE lineage_id = :lineage_id AND state IN ({stale_states}) AND read_from <= :last
      AND {stale} {only_named}
    ORDER BY read_from, token
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
), fresh AS (
    SELECT token, attempts AS previous_attempt, state AS previous_state, read_from, false AS holder_died
    FROM cdc_partitions
    WHERE lineage_id = :lineage_id AND state IN ({fresh_states}) AND read_from <= :last {only_named}
    ORDER BY read_from, token
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT * FROM stale UNION ALL SELECT * FROM fresh ORDER BY read_from, token LIMIT :limit
), claimed AS (
    UPDATE cdc_partitions p
    SET state = 'RUNNING', running_at = clock_timestamp(), lease_owner = :owner,
        lease_expires_at = clock_timestamp() + CAST(:lease AS interval), attempts = p.attempts + 1,
        liveness_key = CAST(:liveness_key AS integer)
    FROM picked
    WHERE p.lineage_id = :lineage_id AND p.token = picked.token {by_key}
    RETURNING p.token, p.partition_start, p.watermark, p.read_from, p.attempts, p.lease_expires_at,
              picked.previous_attempt, picked.previous_state, picked.holder_died
), recorded AS (
    INSERT INTO cdc_attempts (lineage_id, token, attempt, owner, window_end, read_from, watermark_before)
    SELECT :lineage_id, token, attempts, :owner, CAST(:window_end AS timestamptz), read_from, watermark FROM claimed
), expired AS (
    UPDATE cdc_attempts a SET outcome = 'EXPIRED', ended_at = clock_timestamp(),
        error = CASE WHEN c.holder_died THEN '{holder_died}' ELSE '{lease_expired}' END || '; reclaimed by ' || CAST(:owner AS text)
    FROM claimed c
    WHERE a.lineage_id = :lineage_id AND a.token = c.token AND a.attempt = c.previous_attempt
      AND c.previous_state = 'RUNNING' AND a.outcome = 'RUNNING'
      AND a.token = ANY(ARRAY(SELECT token FROM claimed WHERE previous_state = 'RUNNING'))
)
SELECT token, partition_start, watermark, attempts, lease_expires_at, previous_attempt, previous_state, holder_died
FROM claimed ORDER BY read_from, token
"""
CLAIM_ANY = sa.text(
    CLAIM.format(
        dead_keys=DEAD_KEYS.format(not_own=NOT_OWN),
        stale=STALE,
        stale_states="'SCHEDULED', 'RUNNING'",
        fresh_states="'READY'",
        only_named="",
        by_key=BY_KEY.format(alias="p", cte="picked"),
        holder_died=HOLDER_DIED,
        lease_expired=LEASE_EXPIRED,
    )
)
# A task naming its tokens may take them from SCHEDULED too; then only stale RUNNING ones are stale.
CLAIM_NAMED = sa.text(
    CLAIM.format(
        dead_keys=DEAD_KEYS.format(not_own=NOT_OWN),
        stale=STALE,
        stale_states="'RUNNING'",
        fresh_states="'READY', 'SCHEDULED'",
        only_named="AND token = ANY(CAST(:named AS text[]))",
        by_key=BY_KEY.format(alias="p", cte="picked"),
        holder_died=HOLDER_DIED,
        lease_expired=LEASE_EXPIRED,
    ),
)
SCHEDULE = sa.text(
    f"""
    WITH picked AS (
        SELECT token FROM cdc_partitions
        WHERE lineage_id = :lineage_id AND state = 'READY' AND read_from <= :last
        ORDER BY read_from, token
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    )
    UPDATE cdc_partitions p
    SET state = 'SCHEDULED', scheduled_at = clock_timestamp(), lease_owner = :owner,
        lease_expires_at = clock_timestamp() + :lease, liveness_key = NULL
    FROM picked WHERE p.lineage_id = :lineage_id AND p.token = picked.token {BY_KEY.format(alias="p", cte="picked")}
    RETURNING p.token
    """
)
OURS = (
    "lineage_id = :lineage_id AND token = :token AND state = 'RUNNING' AND lease_owner = :owner AND attempts = :attempt"
)
RENEW = sa.text(
    "UPDATE cdc_partitions SET lease_expires_at = clock_timestamp() + CAST(:lease AS interval) "
    f"WHERE {OURS} RETURNING lease_expires_at",
)
EXPIRE = sa.text(
    f"""
    WITH dead AS MATERIALIZED ({DEAD_KEYS.format(not_own="")}), stale AS (
        SELECT token, lease_expires_at >= clock_timestamp() AS holder_died FROM cdc_partitions
        WHERE lineage_id = :lineage_id AND state IN ('SCHEDULED', 'RUNNING') AND {STALE}
        FOR UPDATE SKIP LOCKED
    ), released AS (
        UPDATE cdc_partitions p
        SET state = 'READY', ready_at = clock_timestamp(), lease_owner = NULL, lease_expires_at = NULL,
            liveness_key = NULL
        FROM stale WHERE p.lineage_id = :lineage_id AND p.token = stale.token
        RETURNING p.token, p.attempts, stale.holder_died
    ), closed AS (
        UPDATE cdc_attempts a SET outcome = 'EXPIRED', ended_at = clock_timestamp(),
            error = CASE WHEN r.holder_died THEN '{HOLDER_DIED}' ELSE '{LEASE_EXPIRED}' END
        FROM released r
        WHERE a.lineage_id = :lineage_id AND a.token = r.token AND a.attempt = r.attempts AND a.outcome = 'RUNNING'
    )
    SELECT count(*) FROM released
    """,
)
# ORDER BY token: concurrent parents insert (and so lock) shared children in one order.
INSERT_CHILDREN = sa.text(
    """
    INSERT INTO cdc_partitions (lineage_id, token, partition_start, read_from, state)
    SELECT CAST(:lineage_id AS bigint), c.token, c.start, c.start, 'CREATED'
    FROM unnest(CAST(:tokens AS text[]), CAST(:starts AS timestamptz[])) AS c(token, start)
    ORDER BY c.token
    ON CONFLICT (lineage_id, token) DO NOTHING
    """,
)
INSERT_EDGES = sa.text(
    """
    INSERT INTO cdc_partition_parents (lineage_id, child_token, parent_token)
    SELECT CAST(:lineage_id AS bigint), e.child, e.parent
    FROM unnest(CAST(:children AS text[]), CAST(:parents AS text[])) AS e(child, parent)
    ORDER BY e.child, e.parent
    ON CONFLICT DO NOTHING
    """,
)
# MUTABLE_KEY_RANGE: a partition start record's partitions are READY at once (no parent to wait for);
# every partition that learns of one (and the root query) inserts it if absent.
INSERT_STARTED = sa.text(
    """
    INSERT INTO cdc_partitions (lineage_id, token, partition_start, read_from, state, ready_at)
    SELECT CAST(:lineage_id AS bigint), s.token, s.start, s.start, 'READY', clock_timestamp()
    FROM unnest(CAST(:tokens AS text[]), CAST(:starts AS timestamptz[])) AS s(token, start)
    ORDER BY s.token
    ON CONFLICT (lineage_id, token) DO NOTHING
    RETURNING token
    """,
)
INSERT_MOVES = sa.text(
    """
    INSERT INTO cdc_partition_moves (lineage_id, source_token, destination_token, moved_at)
    SELECT CAST(:lineage_id AS bigint), m.source, m.destination, m.at
    FROM unnest(CAST(:sources AS text[]), CAST(:destinations AS text[]), CAST(:ats AS timestamptz[]))
        AS m(source, destination, at)
    ORDER BY m.source, m.destination, m.at
    ON CONFLICT DO NOTHING
    """,
)
# A child is promoted when none of its parents is unfinished (an unknown parent counts as unfinished). Every
# lookup names its keys as a constant array: as correlated joins, a lineage without statistics (estimated at
# one row) got a scan of all its partitions per edge, seconds per batch at 10,000 partitions.
PROMOTE = sa.text(
    """
    WITH edges AS MATERIALIZED (
        SELECT e.child_token, e.parent_token FROM cdc_partition_parents e
        WHERE e.lineage_id = :lineage_id AND e.child_token = ANY(CAST(:tokens AS text[]))
    ), finished AS MATERIALIZED (
        SELECT p.token FROM cdc_partitions p
        WHERE p.lineage_id = :lineage_id AND p.token = ANY(ARRAY(SELECT parent_token FROM edges))
          AND p.state = 'FINISHED'
    ), blocked AS (
        SELECT e.child_token FROM edges e WHERE e.parent_token NOT IN (SELECT token FROM finished)
    )
    UPDATE cdc_partitions c SET state = 'READY', ready_at = clock_timestamp()
    WHERE c.lineage_id = :lineage_id AND c.token = ANY(CAST(:tokens AS text[])) AND c.state = 'CREATED'
      AND c.token NOT IN (SELECT child_token FROM blocked)
    RETURNING c.token
    """,
)
FAIL = sa.text(
    f"""
    WITH released AS (
        UPDATE cdc_partitions
        SET state = 'READY', ready_at = clock_timestamp(), lease_owner = NULL, lease_expires_at = NULL,
            liveness_key = NULL, last_error = :error
        WHERE {OURS}
        RETURNING token
    ), closed AS (
        UPDATE cdc_attempts a SET outcome = 'FAILED', ended_at = clock_timestamp(), error = :error
        FROM released
        WHERE a.lineage_id = :lineage_id AND a.token = :token AND a.attempt = :attempt
    )
    SELECT token FROM released
    """,
)
LEASE_HOLDER = sa.text(
    "SELECT state, lease_owner, attempts FROM cdc_partitions WHERE lineage_id = :lineage_id AND token = :token"
)
