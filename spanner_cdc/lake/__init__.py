"""The data lake: envelope rows (`envelope`), the Arrow schema of the lake contract (`columns`), naming (`layout`),
object storage (`storage`), publication (`publish`), window markers (`markers`) and the Iceberg tables (`iceberg`).

Import the module you need: this package imports none of them, so a command that only names lake paths (plan, the
next wave, maintenance) does not load pyarrow for it."""
