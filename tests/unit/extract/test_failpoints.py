"""The failpoints: one list of every point, and every failpoint() call in the tree names a point of it."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spanner_cdc.extract import failpoints

ROOT = Path(__file__).resolve().parents[3]


def called_points(source: str) -> list[str]:
    """The first argument of each `failpoint(...)` / `x.failpoint(...)` call; a non-literal argument is `<not a literal>`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name == "failpoint":
                arg = node.args[0] if node.args else None
                found.append(arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else "<not a literal>")
    return found


def unlisted(source: str) -> list[str]:
    return [point for point in called_points(source) if point not in failpoints.FAILPOINTS]


def tree_calls() -> dict[str, list[str]]:
    files = [*sorted((ROOT / "spanner_cdc").rglob("*.py")), *sorted((ROOT / "spark_jobs").rglob("*.py"))]
    return {str(path.relative_to(ROOT)): called_points(path.read_text()) for path in files}


def test_every_failpoint_call_names_a_listed_point() -> None:
    calls = tree_calls()
    bad = {path: [p for p in points if p not in failpoints.FAILPOINTS] for path, points in calls.items()}
    assert {path: points for path, points in bad.items() if points} == {}


def test_every_listed_point_is_called_somewhere() -> None:
    called = {point for points in tree_calls().values() for point in points}
    assert set(failpoints.FAILPOINTS) - called == set()


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ('failpoint("after_commit")\n', []),
        ('failpoint("after_comit")\n', ["after_comit"]),
        ('failpoints.failpoint("state_after_marker")\n', ["state_after_marker"]),
        ("failpoint(name)\n", ["<not a literal>"]),
    ],
)
def test_an_unlisted_point_is_found(source: str, found: list[str]) -> None:
    assert unlisted(source) == found


def test_failpoints_do_nothing_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(failpoints.FAILPOINT_ENV, raising=False)
    failpoints.failpoint("after_publish")
    monkeypatch.setenv(failpoints.FAILPOINT_ENV, "after_commit:3")
    failpoints.failpoint("after_publish")  # another point: no effect
    assert "after_publish" not in failpoints._hits


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("after_commit", [("after_commit", 1, "kill")]),
        ("after_commit:3", [("after_commit", 3, "kill")]),
        ("after_claim:stop", [("after_claim", 1, "stop")]),
        ("after_job:2:stop, before_close", [("after_job", 2, "stop"), ("before_close", 1, "kill")]),
    ],
)
def test_a_spec_names_points_hits_and_actions(spec: str, parsed: list[tuple[str, int, str]]) -> None:
    assert failpoints.parse(spec) == parsed


@pytest.mark.parametrize("spec", ["after_commit:0", "after_commit:pause", "after_commit:-1"])
def test_a_bad_spec_names_the_field_and_what_is_accepted(spec: str) -> None:
    with pytest.raises(ValueError, match=r"SPANNER_CDC_FAILPOINT: .* neither a hit count .* \(kill, stop\)"):
        failpoints.parse(spec)


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def test_a_stop_failpoint_stops_the_process_at_its_hit_until_it_is_continued() -> None:
    code = (
        "from spanner_cdc.extract.failpoints import failpoint\n"
        "for n in range(3):\n"
        "    print(n, flush=True)\n"
        "    failpoint('after_job')\n"
        "print('done', flush=True)\n"
    )
    env = {**os.environ, failpoints.FAILPOINT_ENV: "after_job:2:stop"}
    child = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    try:
        assert [child.stdout.readline().strip() for _ in range(2)] == ["0", "1"]
        while _state(child.pid) != "T":  # it stops at the second hit; pytest-timeout bounds the wait
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGCONT)
        rest, _ = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 0 and rest.split() == ["2", "done"]
