"""pyspark's numpy converters for py4j behind session._NumpyArgument: asked only about numpy objects."""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest

from spanner_cdc.spark.session import _NumpyArgument, numpy_arguments_on_demand


class Recording:
    """A converter that records what it is asked about and says yes to everything."""

    def __init__(self) -> None:
        self.asked: list[Any] = []

    def can_convert(self, obj: Any) -> bool:
        self.asked.append(obj)
        return True

    def convert(self, obj: Any, gateway_client: Any) -> Any:
        return ("converted", obj, gateway_client)


def test_numpy_objects_are_handed_to_pyspark_s_converter_and_nothing_else_is() -> None:
    inner = Recording()
    guarded = _NumpyArgument(inner)
    scalar, array = np.int64(3), np.array([1, 2])
    assert guarded.can_convert(scalar) and guarded.can_convert(array)
    assert not guarded.can_convert("text") and not guarded.can_convert([1, 2]) and not guarded.can_convert(3)
    assert inner.asked == [scalar, array]
    assert guarded.convert(scalar, "client") == ("converted", scalar, "client")


@pytest.mark.parametrize("numpy_module", [None, types.ModuleType("numpy")], ids=["not imported", "being imported"])
def test_without_a_whole_numpy_no_argument_is_a_numpy_object(monkeypatch: pytest.MonkeyPatch, numpy_module: Any) -> None:
    inner = Recording()
    if numpy_module is None:
        monkeypatch.delitem(sys.modules, "numpy")
    else:
        monkeypatch.setitem(sys.modules, "numpy", numpy_module)  # another thread's import, not yet at its types
    assert not _NumpyArgument(inner).can_convert("text")
    assert inner.asked == []


def test_only_pyspark_s_numpy_converters_are_wrapped_once_in_py4j_s_own_list() -> None:
    from py4j import protocol
    from pyspark.sql.types import NumpyArrayConverter, NumpyScalarConverter

    numpy_arguments_on_demand()
    before = list(protocol.INPUT_CONVERTER)
    numpy_arguments_on_demand()  # again: nothing changes
    assert protocol.INPUT_CONVERTER == before
    wrapped = [c.converter for c in protocol.INPUT_CONVERTER if isinstance(c, _NumpyArgument)]
    assert sorted(type(c).__name__ for c in wrapped) == ["NumpyArrayConverter", "NumpyScalarConverter"]
    assert not any(isinstance(c, (NumpyArrayConverter, NumpyScalarConverter)) for c in protocol.INPUT_CONVERTER)
