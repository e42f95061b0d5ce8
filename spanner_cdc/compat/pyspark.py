"""pyspark internals without a public equivalent: the driver's running SparkContext, the Popen that starts its JVM and
the interpreter its Python functions name for the executors."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from spanner_cdc.compat import expect

DISTRIBUTION = "pyspark"


def active_context() -> Any:
    """This process's running SparkContext, or None; pyspark says so only through `SparkContext._active_spark_context`
    (its public getOrCreate would start one)."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context  # type: ignore[attr-defined]


def context_running(context: Any) -> bool:
    """Whether a classic SparkContext is still up: its JVM handle (`_jsc`) is dropped by stop(); no public flag."""
    try:
        return context._jsc is not None
    except Exception:  # noqa: BLE001 - a half-made or foreign context: not running
        return False


@contextmanager
def gateway_popen(popen: Callable[..., Any]) -> Iterator[None]:
    """While pyspark launches its JVM gateway in this block, it spawns it with `popen` instead of subprocess.Popen:
    its own Popen call passes a preexec_fn, which makes Python fork() and run gRPC's fork handlers in the child."""
    from pyspark import java_gateway

    original = java_gateway.Popen
    java_gateway.Popen = popen  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        java_gateway.Popen = original  # type: ignore[misc]


def set_python_exec(context: Any, python: str) -> None:
    """The interpreter the executors start for this context's Python functions (RDD functions, UDFs, data sources):
    pyspark takes it once, from PYSPARK_PYTHON, into `SparkContext.pythonExec`, which each function carries."""
    context.pythonExec = python


def check() -> None:
    """The contract: the names above exist and mean what this module reads them as."""
    import inspect
    import subprocess

    from pyspark import SparkContext, java_gateway

    expect(DISTRIBUTION, hasattr(SparkContext, "_active_spark_context"), "SparkContext._active_spark_context")
    expect(DISTRIBUTION, "self._jsc = None" in inspect.getsource(SparkContext.stop), "SparkContext.stop() dropping _jsc")
    expect(DISTRIBUTION, getattr(java_gateway, "Popen", None) is subprocess.Popen, "pyspark.java_gateway.Popen (subprocess.Popen)")
    expect(DISTRIBUTION, "Popen(" in inspect.getsource(java_gateway.launch_gateway), "launch_gateway calling Popen")
    from pyspark.core import context, rdd
    from pyspark.sql import udf

    expect(DISTRIBUTION, 'self.pythonExec = os.environ.get("PYSPARK_PYTHON"' in inspect.getsource(context), "SparkContext.pythonExec")
    for module in (rdd, udf):
        expect(DISTRIBUTION, "sc.pythonExec" in inspect.getsource(module), f"{module.__name__} reading sc.pythonExec")
