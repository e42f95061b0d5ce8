"""The decoders, result rows -> the typed records of `model/`: `mapper.row_mapper` is the one entry; `fields.py` holds
what they share (field names, value checks, record construction, timestamps, a malformed row's error); one module per
form a row arrives in (client-decoded GoogleSQL, PostgreSQL's JSON and its msgspec fast path, GoogleSQL's protobuf
values and their serialized bytes, MUTABLE_KEY_RANGE's protos)."""
