"""The change stream source: typed records, queries, the result decoder, the client adapter, the partition reader and the
all-partitions workflow. Imports only lineage-free helpers (errors, times, settings); never the store, the lake or Spark."""
