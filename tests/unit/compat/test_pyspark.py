"""The contract of spanner_cdc.compat.pyspark with the installed pyspark."""

from __future__ import annotations

import subprocess

from spanner_cdc.compat import pyspark as compat


def test_the_internals_compat_reads_are_there() -> None:
    compat.check()


def test_the_gateways_popen_is_swapped_only_inside_the_block() -> None:
    from pyspark import java_gateway

    def popen(*args: object, **kwargs: object) -> None:
        raise AssertionError("not called here")

    with compat.gateway_popen(popen):
        assert java_gateway.Popen is popen
    assert java_gateway.Popen is subprocess.Popen


def test_no_context_runs_in_a_process_that_started_none() -> None:
    assert compat.active_context() is None or compat.context_running(compat.active_context())
    assert compat.context_running(object()) is False
