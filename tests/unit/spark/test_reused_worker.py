"""A reused Python worker settled once after its first task: Spark's jar off the import path, what it holds frozen."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

# Run in a fresh interpreter: settling freezes the whole process's objects and edits its import path.
SCRIPT = """
import gc, importlib, json, sys
jar = sys.argv[1]
sys.path.insert(1, jar)
importlib.invalidate_caches()
try:
    import not_in_any_jar  # the search reaches the jar: its zipimporter is cached, as in Spark's workers
except ImportError:
    pass
cached_before = any(key.startswith(jar) for key in sys.path_importer_cache)
from spanner_cdc.spark.reused_worker import settle
cycle = []
cycle.append(cycle)  # garbage of the first task: collected before the freeze, not frozen
del cycle
settle()
frozen = gc.get_freeze_count()
kept = [object() for _ in range(1000)]
settle()  # later tasks: nothing more happens
print(json.dumps({
    "cached_before": cached_before,
    "on_path": jar in sys.path,
    "cached_after": [key for key in sys.path_importer_cache if key.startswith(jar)],
    "frozen": frozen,
    "frozen_after_second": gc.get_freeze_count(),
    "garbage_left": gc.collect(),
}))
"""


def test_the_first_settle_drops_the_jar_and_freezes_what_the_worker_holds_later_ones_do_nothing(tmp_path: Path) -> None:
    jar = tmp_path / "spark-core_2.13-4.3.0.jar"
    with zipfile.ZipFile(jar, "w") as archive:
        for n in range(50):
            archive.writestr(f"org/apache/spark/C{n}.class", b"\xca\xfe")
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(jar)], capture_output=True, text=True, timeout=120, check=True)
    out = json.loads(done.stdout)
    assert out["cached_before"] is True
    assert out["on_path"] is False
    assert out["cached_after"] == []
    assert out["frozen"] > 1_000  # the interpreter's own objects at least
    assert out["frozen_after_second"] == out["frozen"]
    assert out["garbage_left"] == 0
