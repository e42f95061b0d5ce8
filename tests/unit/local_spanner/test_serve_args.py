"""`local-spanner serve` flags: the partition policy and the clock, validated with messages naming the flag."""

from __future__ import annotations

from datetime import timedelta

import pytest

from spanner_cdc.cli.commands.local_spanner import _policy, _serve
from spanner_cdc.cli.main import build_parser
from spanner_cdc.errors import ConfigError


def serve_args(*flags: str) -> object:
    return build_parser().parse_args(["local-spanner", "serve", *flags])


def test_policy_flags_build_the_engine_policy() -> None:
    policy = _policy(serve_args("--policy-seed", "7", "--policy-initial-partitions", "3", "--policy-event-every", "none",
                                "--policy-split-period", "90s", "--policy-merge-idle", "2h"))
    assert policy.seed == 7 and policy.initial_partitions == 3
    assert policy.event_every is None
    assert policy.split_period == timedelta(seconds=90) and policy.merge_idle == timedelta(hours=2)


def test_unset_policy_flags_keep_the_defaults() -> None:
    from spanner_cdc.local_spanner.changestream.policy import PartitionPolicy

    assert _policy(serve_args()) == PartitionPolicy()


@pytest.mark.parametrize(
    ("flags", "field", "accepted"),
    [
        (("--policy-event-every", "5x"), "--policy-event-every", "a duration such as"),
        (("--policy-split-ways", "two"), "--policy-split-ways", "an integer"),
        (("--policy-split-ways", "1"), "partition policy", "split_ways=1"),
    ],
)
def test_bad_policy_flags_name_the_flag(flags: tuple[str, ...], field: str, accepted: str) -> None:
    with pytest.raises(ConfigError) as error:
        _policy(serve_args(*flags))
    assert error.value.field == field and accepted in error.value.accepted


@pytest.mark.parametrize(
    ("flags", "field"),
    [(("--clock-start", "yesterday"), "--clock-start"), (("--clock-rate", "0"), "--clock-rate")],
)
def test_bad_clock_flags_are_refused_before_starting(flags: tuple[str, ...], field: str) -> None:
    with pytest.raises(ConfigError) as error:
        _serve(serve_args("--port", "0", *flags))  # type: ignore[arg-type]
    assert error.value.field == field


def test_the_server_process_keeps_its_long_lived_objects_out_of_full_collections() -> None:
    import gc

    from spanner_cdc.local_spanner.server import FULL_COLLECTION_EVERY, LocalSpannerServer

    before = gc.get_threshold()
    try:
        LocalSpannerServer.settle_gc()
        assert gc.get_freeze_count() > 0  # what exists now (the modules) is never walked again
        assert gc.get_threshold() == (before[0], before[1], FULL_COLLECTION_EVERY)
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_ttl_interval_flag_default_is_the_servers_and_a_negative_one_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from spanner_cdc.local_spanner.server import ServerOptions

    with pytest.raises(SystemExit):
        serve_args("--help")
    assert f"(default {ServerOptions().ttl_interval:g}; 0: never)" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(ConfigError, match="--ttl-interval"):
        _serve(serve_args("--ttl-interval", "-1"))
