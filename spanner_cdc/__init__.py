"""spanner-cdc: batch extraction of Cloud Spanner change streams into a data lake."""
