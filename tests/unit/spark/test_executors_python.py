"""Which interpreter a classic driver's executors run: spark.pyspark.python when Spark's configuration names one."""

from __future__ import annotations

from typing import Any

from spanner_cdc.spark.session import executors_python


class Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


class Context:
    def __init__(self, values: dict[str, str]) -> None:
        self.pythonExec = "python3"  # pyspark's default without PYSPARK_PYTHON
        self._conf = Conf(values)

    def getConf(self) -> Conf:  # noqa: N802 (pyspark's name)
        return self._conf


class Session:
    def __init__(self, values: dict[str, str]) -> None:
        self.sparkContext = Context(values)


def test_the_configured_interpreter_is_the_one_the_functions_carry() -> None:
    session = Session({"spark.pyspark.python": "/opt/cluster/bin/python"})
    executors_python(session)  # type: ignore[arg-type]
    assert session.sparkContext.pythonExec == "/opt/cluster/bin/python"


def test_without_the_setting_pysparks_choice_stands() -> None:
    session = Session({})
    executors_python(session)  # type: ignore[arg-type]
    assert session.sparkContext.pythonExec == "python3"
