"""A bound on the memory one task may take, enforced by the kernel: the task runs in a Python process of its own whose
private writable memory (Linux's RLIMIT_DATA) may grow by at most the bound once its modules are imported.

RLIMIT_DATA caps a process's private writable mappings (its heap, anonymous maps, thread stacks: `VmData`), which is at
least the anonymous memory it has resident: the bound is stricter than one on the task's resident size. Spark's own
`spark.executor.pyspark.memory` sets RLIMIT_AS instead, which a worker using pyarrow exceeds at once, and a reused
worker could not be bounded honestly either: pyarrow's default allocator (mimalloc) maps a 1 GB arena on its first
allocation and serves later ones from it, and memory an earlier task freed stays mapped. So the task gets a fresh
process whose Arrow allocator is the system one (`ARROW_DEFAULT_MEMORY_POOL=system`: its maps are what it uses), with
glibc's mmap threshold fixed at 128 KB: a large buffer is mapped and unmapped with its use (left dynamic, the threshold
rises after the first freed one, and the heap keeps growing with every row group read).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import subprocess
import sys

from spanner_cdc.errors import ExtractError

STATUS = "/proc/self/status"
MEMORY_EXIT = 75  # the bounded process's exit status when an allocation failed at its bound
POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"
MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=131072:glibc.malloc.trim_threshold=131072"


class TaskMemoryError(ExtractError):
    """A task needed more memory than its bound."""


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]  # fmt: skip


def data_bytes() -> int:
    """This process's `VmData`: what RLIMIT_DATA holds against its limit."""
    with open(STATUS) as status:
        for line in status:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise TaskMemoryError(f"{STATUS} names no VmData: a task memory bound needs Linux")


def _free_heap() -> int:
    """Bytes the C allocator holds free (after giving back what it can): reused without mapping more, so they count
    against the bound. 0 where the C library is not glibc 2.33 or later."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    if not hasattr(libc, "mallinfo2"):
        return 0
    libc.malloc_trim(0)
    libc.mallinfo2.restype = _MallInfo2
    return int(libc.mallinfo2().fordblks)


def limit_this_process(memory: int) -> int:
    """From now on this process may map at most `memory` bytes more (less what its allocator holds free); returns the
    limit set. Called by the bounded process once its modules are imported."""
    import pyarrow as pa

    if pa.default_memory_pool().backend_name != "system":
        raise TaskMemoryError(f"a bounded task needs {POOL_ENV}=system before pyarrow is imported")
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    limit = data_bytes() + memory - _free_heap()
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    return limit


def run_bounded(module: str, payload: str, memory: int, what: str) -> str:
    """`python -m module` with `payload` on its stdin, bounded to `memory` bytes (the module calls limit_this_process):
    its stdout. An allocation failed at the bound is a TaskMemoryError naming `what` and the bound."""
    if not os.path.exists(STATUS):
        raise TaskMemoryError(f"{what}: state_task_memory needs Linux (RLIMIT_DATA and {STATUS}); leave it unset here")
    tunables = ":".join(t for t in (os.environ.get("GLIBC_TUNABLES"), MALLOC_TUNABLES) if t)
    env = {**os.environ, POOL_ENV: "system", "GLIBC_TUNABLES": tunables, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-m", module], input=payload, capture_output=True, text=True, env=env, check=False)
    if done.returncode == MEMORY_EXIT:
        raise TaskMemoryError(
            f"{what} needed more than state_task_memory ({memory / 2**20:.0f} MB): raise it (state_task_memory, --state-task-memory, "
            f"SPANNER_CDC_STATE_TASK_MEMORY) or leave it unset ({done.stderr.strip().splitlines()[-1:]})"
        )
    if done.returncode != 0:
        tail = " / ".join(done.stderr.strip().splitlines()[-3:])
        raise ExtractError(f"{what} failed in its bounded process (exit {done.returncode}): {tail}")
    return done.stdout
