"""Once per reused Python worker, after its first task: Spark's jar off the import path, long-lived objects out of the cyclic GC."""

from __future__ import annotations

import gc
import sys

_settled = False


def settle() -> None:
    """Make the fixed costs of this worker's next tasks small; the first call in a process does it, later ones return.

    Both costs are paid per task, and a wave's task lands only a few small tokens (~15 ms each):

    - Spark puts its spark-core jar on the workers' `PYTHONPATH` (~6,000 entries, no Python file in it), and pyspark's
      worker calls `importlib.invalidate_caches()` at the start of every task, which makes the jar's zipimporter read
      its whole directory again: ~60 ms a task. Off `sys.path` and the importer cache, nothing reads it again.
    - pyspark's daemon runs a full `gc.collect()` after every task of a reused worker, which walks every object the
      worker holds (~150,000: pyspark, pyarrow, the Spanner client and its channel): ~50-70 ms a task. Frozen once
      they are all there (after the first task), only what a later task allocates is walked; what is frozen is what
      the worker keeps anyway (modules, the client), and an object freed by its reference count is still freed.
    """
    global _settled
    if _settled:
        return
    _settled = True
    jars = [entry for entry in sys.path if entry.endswith(".jar")]
    for jar in jars:
        sys.path.remove(jar)
    for key in [k for k in sys.path_importer_cache if any(k == jar or k.startswith(jar + "/") for jar in jars)]:
        del sys.path_importer_cache[key]
    gc.collect()  # this task's garbage first, so that nothing dead is frozen
    gc.freeze()
