-- Key range moves between the long-lived partitions of a MUTABLE_KEY_RANGE stream: one row per
-- (source, destination, time), learnt from either side's partition event record (move-out or move-in).
-- Neither token has a foreign key: one side may be read (and its move recorded) before the lineage
-- learns about the other.

CREATE TABLE cdc_partition_moves (
    lineage_id         bigint      NOT NULL REFERENCES cdc_lineages (id) ON DELETE CASCADE,
    source_token       text        NOT NULL,
    destination_token  text        NOT NULL,
    moved_at           timestamptz NOT NULL,
    PRIMARY KEY (lineage_id, source_token, destination_token, moved_at)
);

CREATE INDEX cdc_partition_moves_by_destination ON cdc_partition_moves (lineage_id, destination_token);
