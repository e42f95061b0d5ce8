"""Read settings (Data Boost, priority, directed reads): validated at the edge, turned into the client's arguments."""

from __future__ import annotations

from typing import Any

import pytest
from google.cloud.spanner_v1 import DirectedReadOptions, RequestOptions

from spanner_cdc.errors import ConfigError
from spanner_cdc.read_options import DirectedRead, ReadOptions, Replica, parse_directed_read
from spanner_cdc.settings import load_settings, subprocess_env
from spanner_cdc.stream_config import parse_stream


@pytest.mark.parametrize(
    ("env", "field", "accepted"),
    [
        ({"SPANNER_CDC_REQUEST_PRIORITY": "urgent"}, "SPANNER_CDC_REQUEST_PRIORITY", "low, medium, high"),
        ({"SPANNER_CDC_DATA_BOOST": "maybe"}, "SPANNER_CDC_DATA_BOOST", "true or false"),
        ({"SPANNER_CDC_DIRECTED_READ": "us-east1"}, "SPANNER_CDC_DIRECTED_READ", "include or exclude"),
        ({"SPANNER_CDC_DIRECTED_READ": '{"include": ["x"], "exclude": ["y"]}'}, "SPANNER_CDC_DIRECTED_READ", "exactly one"),
        ({"SPANNER_CDC_DIRECTED_READ": '{"include": ["us-east1:FAST"]}'}, "SPANNER_CDC_DIRECTED_READ.include[0]", "READ_ONLY"),
        ({"SPANNER_CDC_DIRECTED_READ": '{"include": []}'}, "SPANNER_CDC_DIRECTED_READ.include", "1 to 10"),
        ({"SPANNER_CDC_DIRECTED_READ": '{"include": ["a","b","c","d","e","f","g","h","i","j","k"]}'}, "SPANNER_CDC_DIRECTED_READ.include", "1 to 10"),
        ({"SPANNER_CDC_DIRECTED_READ": '{"exclude": ["x"], "auto_failover_disabled": true}'}, "auto_failover_disabled", "include list"),
        ({"SPANNER_CDC_DIRECTED_READ": '{"region": ["x"]}'}, "SPANNER_CDC_DIRECTED_READ.region", "include, exclude"),
    ],
)
def test_bad_values_name_the_field_and_what_is_accepted(env: dict[str, str], field: str, accepted: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({}, env)
    assert field in str(caught.value) and accepted in str(caught.value)


def test_a_stream_table_sets_them_and_a_bad_one_names_its_key() -> None:
    config = parse_stream("orders", {
        "start_date": "2026-01-01T00:00:00Z", "data_boost": True, "request_priority": "MEDIUM",
        "directed_read": {"exclude": ["us-central1", {"location": "us-east4", "type": "read_write"}]},
    })  # fmt: skip
    settings = config.settings(load_settings({}, {}))
    assert settings.read_options == ReadOptions(True, "medium", DirectedRead(exclude=(Replica("us-central1"), Replica("us-east4", "READ_WRITE"))))
    with pytest.raises(ConfigError, match=r"streams\.orders\.data_boost.*true or false"):
        parse_stream("orders", {"start_date": "2026-01-01T00:00:00Z", "data_boost": "yes"})
    with pytest.raises(ConfigError, match=r"streams\.orders\.request_priority.*low, medium, high"):
        parse_stream("orders", {"start_date": "2026-01-01T00:00:00Z", "request_priority": "urgent"})


def test_options_survive_a_subprocess_and_a_job_spec() -> None:
    options = ReadOptions(True, "high", parse_directed_read("d", {"include": [":READ_ONLY"], "auto_failover_disabled": True}))
    env = subprocess_env(load_settings({"data_boost": True, "request_priority": "high", "directed_read": str(options.directed_read)}, {}))
    assert load_settings({}, env).read_options == options
    assert ReadOptions.from_text(str(options)) == options
    assert ReadOptions.from_text("") == ReadOptions() and str(ReadOptions()) == ""


def test_client_arguments() -> None:
    options = ReadOptions(True, "low", parse_directed_read("d", {"include": ["us-east1:READ_ONLY", "us-east4"]}))
    batch: dict[str, Any] = options.batch_query("SELECT 1", b"p", tag="spanner-cdc-snapshot")
    query = batch["query"]
    assert batch["partition"] == b"p" and query["data_boost_enabled"] is True
    assert query["request_options"].priority == RequestOptions.Priority.PRIORITY_LOW
    assert query["request_options"].request_tag == "spanner-cdc-snapshot"
    directed = DirectedReadOptions(query["directed_read_options"])  # the mapping is a valid DirectedReadOptions
    assert [(r.location, r.type_) for r in directed.include_replicas.replica_selections] == [
        ("us-east1", DirectedReadOptions.ReplicaSelection.Type.READ_ONLY),
        ("us-east4", DirectedReadOptions.ReplicaSelection.Type.TYPE_UNSPECIFIED),
    ]
    assert ReadOptions().query_kwargs() == {} and ReadOptions().partition_kwargs() == {"data_boost_enabled": False}
    assert ReadOptions(priority="medium").query_kwargs()["request_options"].priority == RequestOptions.Priority.PRIORITY_MEDIUM
