-- Checkpoint history (one row per claim of a token), windows, and the manifest of published files.

CREATE TABLE cdc_attempts (
    lineage_id        bigint      NOT NULL,
    token             text        NOT NULL,
    attempt           integer     NOT NULL,
    owner             text        NOT NULL,
    outcome           text        NOT NULL DEFAULT 'RUNNING'
        CHECK (outcome IN ('RUNNING', 'COMPLETED', 'FAILED', 'EXPIRED')),
    started_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at          timestamptz,
    window_end        timestamptz,
    read_from         timestamptz NOT NULL,
    watermark_before  timestamptz,
    watermark_after   timestamptz,
    finished          boolean     NOT NULL DEFAULT false,
    records           bigint      NOT NULL DEFAULT 0,
    files             integer     NOT NULL DEFAULT 0,
    error             text,
    PRIMARY KEY (lineage_id, token, attempt),
    FOREIGN KEY (lineage_id, token) REFERENCES cdc_partitions (lineage_id, token) ON DELETE CASCADE
);

CREATE TABLE cdc_windows (
    lineage_id         bigint      NOT NULL REFERENCES cdc_lineages (id) ON DELETE CASCADE,
    window_start       timestamptz NOT NULL,
    window_end         timestamptz NOT NULL CHECK (window_end > window_start),
    state              text        NOT NULL CHECK (state IN ('OPEN', 'COMPLETE')),
    records            bigint,
    files              integer,
    transaction_check  jsonb,
    marker_path        text,
    opened_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    closed_at          timestamptz,
    PRIMARY KEY (lineage_id, window_start, window_end)
);

-- A published file name is deterministic in (lineage, token, range), so a retry upserts by path.
CREATE TABLE cdc_manifest (
    lineage_id    bigint      NOT NULL REFERENCES cdc_lineages (id) ON DELETE CASCADE,
    path          text        NOT NULL,
    token         text        NOT NULL,
    range_start   timestamptz NOT NULL,
    range_end     timestamptz NOT NULL,
    window_start  timestamptz,
    window_end    timestamptz,
    rows          bigint      NOT NULL,
    bytes         bigint      NOT NULL,
    table_name    text,
    attempt       integer     NOT NULL,
    published_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (lineage_id, path)
);

CREATE INDEX cdc_manifest_by_window ON cdc_manifest (lineage_id, window_start, window_end);
CREATE INDEX cdc_manifest_by_token ON cdc_manifest (lineage_id, token, range_start);
