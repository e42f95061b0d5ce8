"""pyiceberg internals without a public equivalent: the snapshot producers of position deletes, folds and compaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from spanner_cdc.compat import expect, version

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile

DISTRIBUTION = "pyiceberg"
# the producers subclass pyiceberg's private snapshot producers as they are in these releases; a later release
# (with a public RowDelta / rewrite API, or other internals) is checked and this gate moved before it is allowed
CHECKED = ((0, 12),)


def row_delta_producer() -> Any:
    """pyiceberg writes data manifests only: a producer that adds one manifest of position-delete files beside them."""
    from pyiceberg.manifest import ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestWriterV2
    from pyiceberg.table.update.snapshot import _FastAppendFiles

    class DeleteManifestWriter(ManifestWriterV2):
        def content(self) -> ManifestContent:
            return ManifestContent.DELETES

        @property
        def _meta(self) -> dict[str, str]:
            return {**super()._meta, "content": "deletes"}

    class RowDelta(_FastAppendFiles):
        def __init__(self, *args: Any, delete_files: Sequence[DataFile], **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._delete_files = list(delete_files)

        def _manifests(self) -> list[Any]:
            manifests = super()._manifests()
            if not self._delete_files:
                return manifests
            meta = self._transaction.table_metadata
            writer = DeleteManifestWriter(
                meta.spec(), self.schema(), self.new_manifest_output(), self._snapshot_id, self._compression
            )
            with writer:
                for delete_file in self._delete_files:
                    writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id,
                                                       sequence_number=None, file_sequence_number=None, data_file=delete_file))  # fmt: skip
            return [writer.to_manifest_file(), *manifests]

        def _summary(self, snapshot_properties: dict[str, str] = {}) -> Any:  # noqa: B006 (pyiceberg's signature)
            # the summary collector counts a delete file by its content: the delete files are counted with the data files
            data = self._added_data_files
            self._added_data_files = [*data, *self._delete_files]
            try:
                return super()._summary(snapshot_properties)
            finally:
                self._added_data_files = data

    return RowDelta


def fold_producer() -> Any:
    """pyiceberg's overwrite rewrites data manifests only and checks every removed file is a data file: a producer
    that also drops the delete manifests (all of them: every delete file was folded) and counts their files removed."""
    from pyiceberg.manifest import DataFileContent, ManifestContent, ManifestEntry, ManifestEntryStatus
    from pyiceberg.table.update.snapshot import _SnapshotProducer

    class Fold(_SnapshotProducer[Any]):
        def _existing_manifests(self) -> list[Any]:
            kept: list[Any] = []
            snapshot = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id) if self._parent_snapshot_id else None
            for manifest in snapshot.manifests(io=self._io) if snapshot else []:
                if manifest.content == ManifestContent.DELETES:
                    self._folded += [e.data_file for e in manifest.fetch_manifest_entry(self._io, discard_deleted=True)]
                    continue
                entries = manifest.fetch_manifest_entry(self._io, discard_deleted=True)
                keep = [e for e in entries if e.data_file not in self._deleted_data_files]
                if len(keep) == len(entries):
                    kept.append(manifest)
                elif keep:
                    with self.new_manifest_writer(self.spec(manifest.partition_spec_id)) as writer:
                        for e in keep:
                            writer.add_entry(ManifestEntry.from_args(status=ManifestEntryStatus.EXISTING, snapshot_id=e.snapshot_id,
                                                                     sequence_number=e.sequence_number,
                                                                     file_sequence_number=e.file_sequence_number, data_file=e.data_file))  # fmt: skip
                    kept.append(writer.to_manifest_file())
            return kept

        def _deleted_entries(self) -> list[Any]:
            self._folded: list[Any] = []
            snapshot = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id) if self._parent_snapshot_id else None
            out = []
            for manifest in snapshot.manifests(io=self._io) if snapshot else []:
                if manifest.content != ManifestContent.DATA:
                    continue
                for e in manifest.fetch_manifest_entry(self._io, discard_deleted=True):
                    if e.data_file.content == DataFileContent.DATA and e.data_file in self._deleted_data_files:
                        out.append(ManifestEntry.from_args(status=ManifestEntryStatus.DELETED, snapshot_id=self._snapshot_id,
                                                           sequence_number=e.sequence_number,
                                                           file_sequence_number=e.file_sequence_number, data_file=e.data_file))  # fmt: skip
            return out

        def _summary(self, snapshot_properties: dict[str, str] = {}) -> Any:  # noqa: B006 (pyiceberg's signature)
            removed = self._deleted_data_files
            self._deleted_data_files = {*removed, *self._folded}
            try:
                return super()._summary(snapshot_properties)
            finally:
                self._deleted_data_files = removed

    return Fold


def replace_producer() -> Any:
    """pyiceberg has no rewrite API and sums up only append, overwrite and delete snapshots: an overwrite whose summary
    is computed as one, then named `replace` (the same rows in other files), as Iceberg's own compaction names it."""
    from pyiceberg.table.snapshots import Operation, Summary
    from pyiceberg.table.update.snapshot import _OverwriteFiles

    class Rewrite(_OverwriteFiles):
        def _summary(self, snapshot_properties: dict[str, str] = {}) -> Summary:  # noqa: B006 - pyiceberg's signature
            summary = super()._summary(snapshot_properties)
            return Summary(Operation.REPLACE, **summary.additional_properties)

    return Rewrite


def check() -> None:
    """The contract: a checked release, and the private names the producers override or read are there."""
    import inspect

    from pyiceberg.manifest import ManifestWriterV2
    from pyiceberg.table.update import snapshot

    installed = tuple(int(part) for part in version(DISTRIBUTION).split(".")[:2])
    expect(DISTRIBUTION, installed in CHECKED, f"a release the snapshot producers were checked against ({CHECKED})")
    for name in ("_SnapshotProducer", "_FastAppendFiles", "_OverwriteFiles"):
        expect(DISTRIBUTION, isinstance(getattr(snapshot, name, None), type), f"pyiceberg.table.update.snapshot.{name}")
    producer = inspect.getsource(snapshot._SnapshotProducer)
    for name in ("def _manifests(", "def _summary(", "def _existing_manifests(", "def _deleted_entries(",
                 "self._added_data_files", "self._deleted_data_files", "self._transaction", "self._snapshot_id",
                 "self._parent_snapshot_id", "self._io", "self._compression", "def new_manifest_output(",
                 "def new_manifest_writer("):  # fmt: skip
        expect(DISTRIBUTION, name in producer, f"_SnapshotProducer: {name.removeprefix('def ').rstrip('(')}")
    expect(DISTRIBUTION, "def _meta(" in inspect.getsource(ManifestWriterV2), "ManifestWriterV2._meta")
