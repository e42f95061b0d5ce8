"""The contract of spanner_cdc.compat.pyiceberg with the installed pyiceberg (the producers' behaviour: the Daft test
in tests/integration/extract/test_state_table_readers.py)."""

from __future__ import annotations

from spanner_cdc.compat import pyiceberg as compat


def test_the_producers_internals_are_there_in_a_checked_release() -> None:
    compat.check()


def test_the_producers_subclass_pyicebergs_own() -> None:
    from pyiceberg.table.update.snapshot import _FastAppendFiles, _OverwriteFiles, _SnapshotProducer

    assert issubclass(compat.row_delta_producer(), _FastAppendFiles)
    assert issubclass(compat.fold_producer(), _SnapshotProducer)
    assert issubclass(compat.replace_producer(), _OverwriteFiles)
