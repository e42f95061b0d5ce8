"""SQL of the batched transitions: many tokens landed or renewed per statement, each still a compare-and-set."""

from __future__ import annotations

import sqlalchemy as sa

# Timestamps travel as microseconds since the epoch (exact; see batches._micros) and become timestamptz here.
_AT = "TIMESTAMPTZ 'epoch' + {} * INTERVAL '1 microsecond'"
# One row per completion, sent as one JSON array: the server parses it far faster than a driver adapts
# thousands of array elements one by one (psycopg2 spends ~70 µs per completion on that); `json`, not `jsonb`,
# as it is read once. Every join to a table also names the batch's tokens as an index condition (see
# transition_sql.BY_KEY), so a lineage without statistics yet is not scanned once per token. `locked` takes
# the row locks in token order, so two batches that share rows (a reclaimed token) always lock in the same
# order, and carries the completion to the update; the update repeats the compare-and-set, so a token whose
# claim was lost is left alone and reported by its absence. Completions of one `grp` (tokens whose rows share a
# file) land together or not at all: `whole` keeps the groups every token of which still holds its claim.
LAND_MANY = sa.text(
    f"""
    WITH batch AS MATERIALIZED (
        SELECT b.token, b.owner, b.attempt, {_AT.format("b.watermark")} AS watermark, b.finished,
               {_AT.format("b.partition_end")} AS partition_end, b.records, b.files, b.grp
        FROM json_to_recordset(CAST(:batch AS json)) AS b(
            token text, owner text, attempt integer, watermark bigint, finished boolean,
            partition_end bigint, records bigint, files integer, grp text)
    ), locked AS (
        SELECT b.* FROM cdc_partitions p JOIN batch b ON b.token = p.token
        WHERE p.lineage_id = :lineage_id AND p.token = ANY(ARRAY(SELECT token FROM batch)) AND p.state = 'RUNNING'
          AND p.lease_owner = b.owner AND p.attempts = b.attempt
        ORDER BY p.token
        FOR UPDATE OF p
    ), whole AS (
        SELECT b.grp FROM batch b LEFT JOIN locked l ON l.token = b.token
        GROUP BY b.grp HAVING bool_and(l.token IS NOT NULL)
    ), landed AS (
        UPDATE cdc_partitions p
        SET watermark = greatest(p.watermark, b.watermark),
            read_from = greatest(p.read_from, b.watermark + interval '1 microsecond'),
            state = CASE WHEN b.finished THEN 'FINISHED' ELSE 'READY' END,
            ready_at = CASE WHEN b.finished THEN p.ready_at ELSE clock_timestamp() END,
            finished_at = CASE WHEN b.finished THEN clock_timestamp() ELSE p.finished_at END,
            partition_end = CASE WHEN b.finished THEN b.partition_end ELSE p.partition_end END,
            lease_owner = NULL, lease_expires_at = NULL, liveness_key = NULL, last_error = NULL
        FROM locked b
        WHERE p.lineage_id = :lineage_id AND p.token = b.token AND p.token = ANY(ARRAY(SELECT token FROM batch))
          AND p.state = 'RUNNING' AND p.lease_owner = b.owner AND p.attempts = b.attempt
          AND b.grp IN (SELECT grp FROM whole)
        RETURNING p.token, p.watermark, b.attempt, b.finished, b.records, b.files
    ), closed AS (
        UPDATE cdc_attempts a
        SET outcome = 'COMPLETED', ended_at = clock_timestamp(), watermark_after = l.watermark,
            finished = l.finished, records = l.records, files = l.files
        FROM landed l
        WHERE a.lineage_id = :lineage_id AND a.token = ANY(ARRAY(SELECT token FROM batch)) AND a.token = l.token
          AND a.attempt = l.attempt
    ), published AS (
        INSERT INTO cdc_manifest (lineage_id, path, token, range_start, range_end, window_start, window_end,
                                  rows, bytes, table_name, attempt)
        SELECT :lineage_id, f.path, f.token, {_AT.format("f.range_start")}, {_AT.format("f.range_end")},
               {_AT.format("f.window_start")}, {_AT.format("f.window_end")}, f.rows, f.bytes, f.table_name, l.attempt
        FROM json_to_recordset(CAST(:manifest AS json)) AS f(
            token text, path text, range_start bigint, range_end bigint, window_start bigint,
            window_end bigint, rows bigint, bytes bigint, table_name text)
        JOIN landed l ON l.token = f.token
        ON CONFLICT (lineage_id, path) DO UPDATE
        SET token = EXCLUDED.token, range_start = EXCLUDED.range_start, range_end = EXCLUDED.range_end,
            window_start = EXCLUDED.window_start, window_end = EXCLUDED.window_end, rows = EXCLUDED.rows,
            bytes = EXCLUDED.bytes, table_name = EXCLUDED.table_name, attempt = EXCLUDED.attempt,
            published_at = clock_timestamp()
    )
    SELECT token FROM landed
    """
)
# The children of every finished parent of the batch, locked in token order (see LOCK_CREATED_CHILDREN).
LOCK_CREATED_CHILDREN_OF = sa.text(
    """
    SELECT c.token FROM cdc_partitions c
    WHERE c.lineage_id = :lineage_id AND c.state = 'CREATED' AND c.token = ANY(ARRAY(
        SELECT e.child_token FROM cdc_partition_parents e
        WHERE e.lineage_id = :lineage_id AND e.parent_token = ANY(CAST(:parents AS text[]))))
    ORDER BY c.token
    FOR UPDATE OF c
    """
)
RENEW_MANY = sa.text(
    """
    WITH batch AS (
        SELECT * FROM unnest(CAST(:tokens AS text[]), CAST(:owners AS text[]), CAST(:attempts AS integer[]))
            AS b(token, owner, attempt)
    ), locked AS (
        SELECT p.token FROM cdc_partitions p JOIN batch b ON b.token = p.token
        WHERE p.lineage_id = :lineage_id AND p.token = ANY(ARRAY(SELECT token FROM batch)) AND p.state = 'RUNNING'
          AND p.lease_owner = b.owner AND p.attempts = b.attempt
        ORDER BY p.token
        FOR UPDATE OF p
    )
    UPDATE cdc_partitions p SET lease_expires_at = clock_timestamp() + CAST(:lease AS interval)
    FROM batch b JOIN locked l ON l.token = b.token
    WHERE p.lineage_id = :lineage_id AND p.token = b.token AND p.state = 'RUNNING'
      AND p.lease_owner = b.owner AND p.attempts = b.attempt
    RETURNING p.token, p.lease_expires_at
    """
)
ANY_ATTEMPT_RUNNING = sa.text(
    """
    SELECT EXISTS (
        SELECT 1 FROM cdc_partitions p
        JOIN unnest(CAST(:tokens AS text[]), CAST(:attempts AS integer[])) AS a(token, attempt) ON a.token = p.token
        WHERE p.lineage_id = :lineage_id AND p.token = ANY(CAST(:tokens AS text[])) AND p.state = 'RUNNING'
          AND p.attempts = a.attempt
    )
    """
)
