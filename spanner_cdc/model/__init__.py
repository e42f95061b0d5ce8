"""The record model: the change stream's typed records of both partition modes, their one dispatch on kinds and their
JSON form. Pure (no I/O); imports only the vocabulary, so the store, the lake and Spark take the types from here, not
from `source/`."""
