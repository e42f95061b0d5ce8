-- Metadata-store retention (`lineage_retention`, a step of `spanner-cdc lake maintain`): the partitions, attempts,
-- manifest rows and key range moves of a closed window older than the retention are deleted, and what they counted
-- is kept here, one row per folded window. The window's own row in cdc_windows stays (records, files, check, marker,
-- verify), and its files stay listed by its marker and its Iceberg snapshot. A partition is counted with the first
-- window folded whose end is after the partition's end; a re-fold of the same window adds only what it deletes.

CREATE TABLE cdc_window_totals (
    lineage_id        bigint      NOT NULL,
    window_start      timestamptz NOT NULL,
    window_end        timestamptz NOT NULL,
    partitions        bigint      NOT NULL DEFAULT 0 CHECK (partitions >= 0),  -- FINISHED partitions deleted
    attempts          bigint      NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    attempts_failed   bigint      NOT NULL DEFAULT 0 CHECK (attempts_failed >= 0),  -- FAILED or EXPIRED among them
    attempt_records   bigint      NOT NULL DEFAULT 0,  -- records the deleted attempts landed
    files             bigint      NOT NULL DEFAULT 0 CHECK (files >= 0),  -- manifest rows deleted
    rows              bigint      NOT NULL DEFAULT 0,
    bytes             bigint      NOT NULL DEFAULT 0,
    moves             bigint      NOT NULL DEFAULT 0 CHECK (moves >= 0),  -- key range moves deleted
    folded_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (lineage_id, window_start, window_end),
    FOREIGN KEY (lineage_id, window_start, window_end)
        REFERENCES cdc_windows (lineage_id, window_start, window_end) ON DELETE CASCADE
);

-- Retention deletes a window's attempts by their window end: without this, each window would scan every attempt.
CREATE INDEX cdc_attempts_by_window_end ON cdc_attempts (lineage_id, window_end);
-- ... and the finished partitions by their end (the claim's index starts with state, but not with partition_end).
CREATE INDEX cdc_partitions_finished_by_end ON cdc_partitions (lineage_id, partition_end) WHERE state = 'FINISHED';
