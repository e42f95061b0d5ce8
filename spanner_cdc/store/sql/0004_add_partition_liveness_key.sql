-- A RUNNING claim names the liveness key of the run that holds it: the run holds a session-level
-- advisory lock on that key for as long as it lives, so a claimer whose probe of the key succeeds
-- knows the holder is gone and takes the token over at once instead of waiting for the lease.
-- Keys come from a sequence (not a hash of the owner), so two live runs never share one; after a
-- wrap-around a reused key can only make a dead run look alive, and the lease still frees it.

CREATE SEQUENCE cdc_liveness_keys AS integer MINVALUE 1 CYCLE;
ALTER TABLE cdc_partitions ADD COLUMN liveness_key integer;
