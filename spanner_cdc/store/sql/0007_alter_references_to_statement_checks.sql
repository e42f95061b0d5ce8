-- The claim inserts an attempt per token, a landing a manifest row per file: their foreign keys were checked
-- row by row (a trigger call and a key-share lock each, about a sixth of a 100-token batch's execution in Postgres).
-- The same rules, checked once per statement over the statement's new rows:
--   an attempt names a partition of the store, a manifest row a lineage (each locked FOR KEY SHARE, as a
--   foreign key locks it, so a concurrent delete waits for the inserting transaction);
--   deleting a partition deletes its attempts, deleting a lineage its manifest (ON DELETE CASCADE);
--   the keys involved never change (a foreign key let them change only to another existing key; nothing
--   in spanner-cdc updates them).
-- No percent sign in this file: it is sent as one text, which psycopg2 reads as a format string.

ALTER TABLE cdc_attempts DROP CONSTRAINT cdc_attempts_lineage_id_token_fkey;
ALTER TABLE cdc_manifest DROP CONSTRAINT cdc_manifest_lineage_id_fkey;

CREATE FUNCTION cdc_attempts_check_partitions() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    -- the lookup names its keys as constant arrays, an index condition whatever the planner estimates
    WITH locked AS (
        SELECT p.lineage_id, p.token FROM cdc_partitions p
        WHERE p.lineage_id = ANY(ARRAY(SELECT DISTINCT lineage_id FROM added))
          AND p.token = ANY(ARRAY(SELECT token FROM added))
        FOR KEY SHARE OF p
    )
    SELECT a.lineage_id, a.token INTO bad FROM added a
    WHERE NOT EXISTS (SELECT 1 FROM locked l WHERE l.lineage_id = a.lineage_id AND l.token = a.token)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation',
            MESSAGE = 'insert on table "cdc_attempts" names no partition: lineage ' || bad.lineage_id
                      || ', token ' || bad.token;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER cdc_attempts_reference_partitions AFTER INSERT ON cdc_attempts
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION cdc_attempts_check_partitions();

CREATE FUNCTION cdc_manifest_check_lineages() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad bigint;
BEGIN
    WITH locked AS (
        SELECT l.id FROM cdc_lineages l WHERE l.id = ANY(ARRAY(SELECT DISTINCT lineage_id FROM added))
        FOR KEY SHARE OF l
    )
    SELECT a.lineage_id INTO bad FROM added a WHERE a.lineage_id NOT IN (SELECT id FROM locked) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation',
            MESSAGE = 'insert on table "cdc_manifest" names no lineage: ' || bad;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER cdc_manifest_reference_lineages AFTER INSERT ON cdc_manifest
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION cdc_manifest_check_lineages();

CREATE FUNCTION cdc_delete_attempts_of_partitions() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM cdc_attempts a USING removed r WHERE a.lineage_id = r.lineage_id AND a.token = r.token;
    RETURN NULL;
END
$$;

CREATE TRIGGER cdc_partitions_cascade_attempts AFTER DELETE ON cdc_partitions
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION cdc_delete_attempts_of_partitions();

CREATE FUNCTION cdc_delete_manifest_of_lineages() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM cdc_manifest m USING removed r WHERE m.lineage_id = r.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER cdc_lineages_cascade_manifest AFTER DELETE ON cdc_lineages
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION cdc_delete_manifest_of_lineages();

CREATE FUNCTION cdc_refuse_key_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation',
        MESSAGE = 'the key of a row of ' || TG_TABLE_NAME || ' never changes (' || TG_ARGV[0] || ')';
END
$$;

-- Fired only by an UPDATE that sets a key column: spanner-cdc's own updates never do, and pay nothing.
CREATE TRIGGER cdc_attempts_keep_key BEFORE UPDATE OF lineage_id, token ON cdc_attempts FOR EACH ROW
    WHEN (OLD.lineage_id IS DISTINCT FROM NEW.lineage_id OR OLD.token IS DISTINCT FROM NEW.token)
    EXECUTE FUNCTION cdc_refuse_key_change('lineage_id, token');
CREATE TRIGGER cdc_manifest_keep_lineage BEFORE UPDATE OF lineage_id ON cdc_manifest FOR EACH ROW
    WHEN (OLD.lineage_id IS DISTINCT FROM NEW.lineage_id)
    EXECUTE FUNCTION cdc_refuse_key_change('lineage_id');
CREATE TRIGGER cdc_partitions_keep_key BEFORE UPDATE OF lineage_id, token ON cdc_partitions FOR EACH ROW
    WHEN (OLD.lineage_id IS DISTINCT FROM NEW.lineage_id OR OLD.token IS DISTINCT FROM NEW.token)
    EXECUTE FUNCTION cdc_refuse_key_change('lineage_id, token');
CREATE TRIGGER cdc_lineages_keep_id BEFORE UPDATE OF id ON cdc_lineages FOR EACH ROW
    WHEN (OLD.id IS DISTINCT FROM NEW.id)
    EXECUTE FUNCTION cdc_refuse_key_change('id');
