"""Shared fixtures; integration fixtures start real services once per run; the minutes-long modules run first."""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.fixtures.postgres", "tests.fixtures.airflow_db", "tests.fixtures.airflow_ui", "tests.fixtures.spanner",
                  "tests.fixtures.spark", "tests.fixtures.object_store", "tests.fixtures.emulator"]


def _weight(item: pytest.Item) -> tuple[int, float]:
    """`heavy` modules first, longest first (its argument: the module's seconds in `make test`; a short module that
    mostly waits carries one too, to run beside the busy ones), then `slow` ones."""
    heavy = item.get_closest_marker("heavy")
    if heavy is not None:
        return 0, -float(heavy.args[0] if heavy.args else 0)
    return (1 if item.get_closest_marker("slow") else 2), 0.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # `make test` spreads whole files over two workers (pytest-xdist, --dist loadfile) in this order: the longest
    # modules start first so that the workers end together instead of one running a campaign alone at the end.
    # (Without --no-loadscope-reorder, xdist hands out the files with the most tests first whatever this order is.)
    items.sort(key=_weight)  # stable: the order within each weight is the collection order
