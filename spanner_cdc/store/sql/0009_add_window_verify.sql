-- The last `spanner-cdc verify` of a closed window (its result as JSON: when, the fraction and seed, rows
-- compared and mismatches of the state tables and of the change log); NULL until the window is verified.
-- Kept beside the window so /metrics, the UI and `lake show --json` show it without re-running it.

ALTER TABLE cdc_windows ADD COLUMN verify jsonb;
