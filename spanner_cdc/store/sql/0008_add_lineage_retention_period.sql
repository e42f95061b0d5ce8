-- The change stream's retention_period as the last plan of the lineage read it from the database's
-- INFORMATION_SCHEMA, in seconds (NULL until a plan has read it): what the UI and /metrics measure
-- the retention headroom against without asking Spanner on every page and scrape.

ALTER TABLE cdc_lineages ADD COLUMN retention_period_s bigint CHECK (retention_period_s > 0);
