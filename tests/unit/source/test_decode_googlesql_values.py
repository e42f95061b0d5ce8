"""GoogleSQL rows read straight from the protobuf values: the same records as through the client's decoding,
also when values arrive chunked over several PartialResultSets, and the client's decoding for other shapes."""

from __future__ import annotations

from typing import Any

import pytest
from google.cloud.spanner_v1 import PartialResultSet, ResultSetMetadata, StructType, Type, TypeCode
from google.cloud.spanner_v1.streamed import StreamedResultSet
from google.protobuf.struct_pb2 import ListValue, Value

from spanner_cdc.errors import SourceError
from spanner_cdc.source.decode.googlesql_values import wire_mapper
from spanner_cdc.source.decode.mapper import row_mapper
from tests.unit.source import test_decode_examples as ex

EXAMPLES = [ex.ROOTS_1, ex.TRANSFER_1, ex.HEARTBEAT, ex.TRANSFER_2, ex.NEW_ROW, ex.MERGE]


def longest_string(value: Value, path: tuple[int, ...] = ()) -> tuple[int, tuple[int, ...]]:
    """(length, index path) of the longest string inside `value` (a JSON text, a token, a timestamp)."""
    if value.HasField("list_value"):
        found = [longest_string(item, (*path, i)) for i, item in enumerate(value.list_value.values)]
        return max(found, default=(0, path))
    return (len(value.string_value), path)


def cut(value: Value, path: tuple[int, ...]) -> tuple[Value, Value]:
    """`value` cut inside the string at `path`: (what one message sends, chunked; what the next one continues with).
    At each level the cut element is in both halves, as Spanner splits a value over PartialResultSets."""
    if not path:
        middle = len(value.string_value) // 2
        return Value(string_value=value.string_value[:middle]), Value(string_value=value.string_value[middle:])
    items = list(value.list_value.values)
    head, tail = cut(items[path[0]], path[1:])
    return (Value(list_value=ListValue(values=[*items[: path[0]], head])),
            Value(list_value=ListValue(values=[tail, *items[path[0] + 1 :]])))  # fmt: skip


def chunked_messages(metadata: ResultSetMetadata, values: list[Value]) -> list[PartialResultSet]:
    """Two PartialResultSets per row value, cut inside its longest string: the first ends in a chunked value."""
    messages = []
    for index, value in enumerate(values):
        head, tail = cut(value, longest_string(value)[1])
        first = PartialResultSet(metadata=metadata if index == 0 else None, chunked_value=True, resume_token=b"a")
        PartialResultSet.pb(first).values.append(head)
        second = PartialResultSet(resume_token=b"b")
        PartialResultSet.pb(second).values.append(tail)
        messages += [first, second]
    return messages


def test_undecoded_rows_map_to_the_same_records_as_decoded_ones() -> None:
    fields, decoded_rows = ex.googlesql_rows(EXAMPLES)
    _, raw_rows = ex.googlesql_rows(EXAMPLES, lazy=True)
    assert type(raw_rows[0][0]) is Value and wire_mapper(fields) is not None
    decoded = [r for row in decoded_rows for r in row_mapper("GOOGLE_STANDARD_SQL", fields)(row)]
    assert [r for row in raw_rows for r in row_mapper("GOOGLE_STANDARD_SQL", fields)(row)] == decoded
    assert len(decoded) == len(EXAMPLES)


def test_values_chunked_over_partial_result_sets_are_merged_before_mapping() -> None:
    fields, decoded_rows = ex.googlesql_rows(EXAMPLES)
    metadata = ResultSetMetadata(row_type=StructType(fields=fields))
    values = [ex.encode([{f.name: ([body] if f.name == kind else []) for f in ex.CHANGE_RECORD_TYPE.array_element_type.struct_type.fields}],
                        ex.CHANGE_RECORD_TYPE) for example in EXAMPLES for ((kind, body),) in [example.items()]]  # fmt: skip
    results = StreamedResultSet(iter(chunked_messages(metadata, values)), lazy_decode=True)
    raw_rows = list(results)
    assert [row[0] for row in raw_rows] == values  # the client merged each chunk back into the value sent
    mapper = row_mapper("GOOGLE_STANDARD_SQL", results.fields, results.decode_row)
    expected = [r for row in decoded_rows for r in row_mapper("GOOGLE_STANDARD_SQL", fields)(row)]
    assert [r for row in raw_rows for r in mapper(row)] == expected


def undocumented_fields() -> list[Any]:
    """The documented shape but ordinal_position declared STRING: the client decodes it, as any other shape."""
    column_types = ex._array_of_struct(("name", ex.STRING), ("type", ex.JSON), ("is_primary_key", ex.BOOL), ("ordinal_position", ex.STRING))
    data_change = ex._array_of_struct(*[
        (f.name, column_types if f.name == "column_types" else f.type_) for f in ex.DATA_CHANGE_TYPE.array_element_type.struct_type.fields
    ])  # fmt: skip
    record_type = ex._array_of_struct(("data_change_record", data_change), ("heartbeat_record", ex.HEARTBEAT_TYPE))
    return [StructType.Field(name="ChangeRecord", type_=record_type)]


def test_other_metadata_shapes_are_decoded_by_the_client() -> None:
    fields = undocumented_fields()
    assert wire_mapper(fields) is None
    metadata = ResultSetMetadata(row_type=StructType(fields=fields))
    record_type = fields[0].type_
    value = ex.encode([{"data_change_record": [ex.TRANSFER_1["data_change_record"]], "heartbeat_record": []}], record_type)
    message = PartialResultSet(metadata=metadata, resume_token=b"t")
    PartialResultSet.pb(message).values.append(value)
    results = StreamedResultSet(iter([message]), lazy_decode=True)
    (row,) = list(results)
    (record,) = row_mapper("GOOGLE_STANDARD_SQL", results.fields, results.decode_row)(row)
    (expected,) = row_mapper("GOOGLE_STANDARD_SQL", *ex.googlesql_rows([ex.TRANSFER_1])[:1])(ex.googlesql_rows([ex.TRANSFER_1])[1][0])
    assert record == expected
    with pytest.raises(SourceError, match="no decoder"):
        row_mapper("GOOGLE_STANDARD_SQL", results.fields)(row)


@pytest.mark.parametrize("code", [TypeCode.STRING, TypeCode.INT64])
def test_a_field_of_another_type_than_documented_disables_the_wire_path(code: TypeCode) -> None:
    heartbeat = ex._array_of_struct(("timestamp", Type(code=code)))
    record_type = ex._array_of_struct(("heartbeat_record", heartbeat))
    assert wire_mapper([StructType.Field(name="ChangeRecord", type_=record_type)]) is None


def test_a_threads_cached_mapper_maps_each_result_set_as_a_fresh_one() -> None:
    import threading

    from spanner_cdc.source.decode import mapper as mapper_module
    from spanner_cdc.source.decode.mapper import cached_row_mapper
    from spanner_cdc.source.reader import _row_type_key

    fields, raw_rows = ex.googlesql_rows(EXAMPLES, lazy=True)
    expected = [r for row in raw_rows for r in row_mapper("GOOGLE_STANDARD_SQL", fields)(row)]
    key = _row_type_key(fields)
    assert key == _row_type_key(ex.googlesql_rows(EXAMPLES[:1], lazy=True)[0]) and key != _row_type_key(undocumented_fields())
    for _ in range(3):  # the second and third result sets reuse the first one's mapper and its caches
        assert [r for row in raw_rows for r in cached_row_mapper("GOOGLE_STANDARD_SQL", fields, key)(row)] == expected
    mine = mapper_module._local.mappers[key]
    theirs: list[Any] = []

    def other_thread() -> None:
        cached_row_mapper("GOOGLE_STANDARD_SQL", fields, key)
        theirs.append(mapper_module._local.mappers[key])

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert theirs and theirs[0][1] is not mine[1]  # a thread's caches are its own
