-- The initial snapshot of a lineage: the tables read at one timestamp (`snapshot_at`), table by table.
-- A table's files are recorded in one transaction with its row in cdc_snapshot_tables, so a re-run
-- skips the tables committed and re-reads the others at the same timestamp; COMPLETE once the
-- snapshot's marker names every file.

CREATE TABLE cdc_snapshots (
    lineage_id    bigint      PRIMARY KEY REFERENCES cdc_lineages (id) ON DELETE CASCADE,
    snapshot_at   timestamptz NOT NULL,
    state         text        NOT NULL CHECK (state IN ('RUNNING', 'COMPLETE')),
    rows          bigint,
    files         integer,
    marker_path   text,
    started_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    completed_at  timestamptz
);

CREATE TABLE cdc_snapshot_tables (
    lineage_id    bigint      NOT NULL REFERENCES cdc_snapshots (lineage_id) ON DELETE CASCADE,
    table_name    text        NOT NULL,
    rows          bigint      NOT NULL,
    committed_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (lineage_id, table_name)
);

CREATE TABLE cdc_snapshot_files (
    lineage_id    bigint      NOT NULL,
    table_name    text        NOT NULL,
    path          text        NOT NULL,
    rows          bigint      NOT NULL,
    bytes         bigint      NOT NULL,
    PRIMARY KEY (lineage_id, path),
    FOREIGN KEY (lineage_id, table_name) REFERENCES cdc_snapshot_tables (lineage_id, table_name) ON DELETE CASCADE
);
