"""The change stream source: queries, the result decoder, the client adapter, the partition reader and the
all-partitions workflow, producing the records of `model/`. Never imports the store, the lake or Spark."""
