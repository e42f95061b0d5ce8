-- Lineages (a stream + a namespace), their partitions with one timestamp per state, and parent edges.

CREATE TABLE cdc_lineages (
    id          bigserial   PRIMARY KEY,
    stream      text        NOT NULL,
    namespace   text        NOT NULL,
    database    text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (stream, namespace)
);

CREATE TABLE cdc_partitions (
    lineage_id        bigint      NOT NULL REFERENCES cdc_lineages (id) ON DELETE CASCADE,
    token             text        NOT NULL,
    partition_start   timestamptz NOT NULL,
    -- start_timestamp of the child partitions record that finished the partition
    partition_end     timestamptz,
    state             text        NOT NULL
        CHECK (state IN ('CREATED', 'READY', 'SCHEDULED', 'RUNNING', 'FINISHED')),
    -- highest commit timestamp up to which everything of the partition is landed; NULL: nothing yet
    watermark         timestamptz,
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    ready_at          timestamptz,
    scheduled_at      timestamptz,
    running_at        timestamptz,
    finished_at       timestamptz,
    lease_owner       text,
    lease_expires_at  timestamptz,
    attempts          integer     NOT NULL DEFAULT 0,
    last_error        text,
    PRIMARY KEY (lineage_id, token)
);

CREATE INDEX cdc_partitions_by_state ON cdc_partitions (lineage_id, state, partition_start);

-- parent_token has no foreign key on purpose: a merge child may name a parent this lineage
-- has not learnt about yet; such a parent counts as unfinished until it is known and finished.
CREATE TABLE cdc_partition_parents (
    lineage_id    bigint NOT NULL,
    child_token   text   NOT NULL,
    parent_token  text   NOT NULL,
    PRIMARY KEY (lineage_id, child_token, parent_token),
    FOREIGN KEY (lineage_id, child_token) REFERENCES cdc_partitions (lineage_id, token) ON DELETE CASCADE
);

CREATE INDEX cdc_partition_parents_by_parent ON cdc_partition_parents (lineage_id, parent_token);
