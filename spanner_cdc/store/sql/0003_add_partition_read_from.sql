-- Where the next read of each partition starts (rules.read_from), kept beside the watermark so a
-- claim is a range scan over (state, read_from) that never revisits tokens already landed to the
-- window end.

ALTER TABLE cdc_partitions ADD COLUMN read_from timestamptz;
UPDATE cdc_partitions SET read_from = greatest(watermark + interval '1 microsecond', partition_start);
ALTER TABLE cdc_partitions ALTER COLUMN read_from SET NOT NULL;

DROP INDEX cdc_partitions_by_state;
CREATE INDEX cdc_partitions_claimable ON cdc_partitions (lineage_id, state, read_from, token);
