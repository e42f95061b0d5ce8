"""The driver JVM the project starts runs with its compiler settings (session.JIT_OPTIONS)."""

from __future__ import annotations

from typing import Any

import pytest

from spanner_cdc.spark.session import JIT_OPTIONS

pytestmark = pytest.mark.integration


def test_the_driver_jvm_takes_methods_into_its_optimizing_compiler_later(spark: Any) -> None:
    jvm = spark.sparkContext._jvm
    arguments = set(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert set(JIT_OPTIONS.split()) <= arguments, sorted(arguments)
    flags = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(jvm.com.sun.management.HotSpotDiagnosticMXBean._java_lang_class)
    assert flags.getVMOption("Tier4InvocationThreshold").getValue() == "50000"  # the JVM took it, not only was given it
