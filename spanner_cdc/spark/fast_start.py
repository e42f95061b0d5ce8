"""Faster starts of a driver started here: Python workers import pyspark's compiled modules, the JVM maps a class archive.

Two costs dominate a short extract's wall time and have nothing to do with its data:
- Spark puts `$SPARK_HOME/python/lib/pyspark.zip` first on its Python workers' path. Python cannot keep compiled
  modules for a zip, so each worker and each of a Python data source's planning processes (lookup, create, plan, run:
  one after another in a job's first planning) compiles pyspark again (~1 s each). The installed package holds the
  same modules, compiled: a Spark home of links to pyspark's own files, without the zip, makes the workers import it.
- The driver JVM loads and verifies ~10,000 classes from Spark's jars at every start. A class archive (the JVM's
  application class data sharing) lets later JVMs map them instead. Writing one costs a JVM tens of seconds at its
  exit, so no run waits for it: the first driver started without one starts a writer in the background
  (`python -m spanner_cdc.spark.archive_writer`: a driver of its own, a tiny job, the archive written as its JVM
  exits),
  and the drivers started after it has finished use the archive.

Both are caches under SPANNER_CDC_SPARK_CACHE (default `$XDG_CACHE_HOME/spanner-cdc` or `~/.cache/spanner-cdc`;
`off` disables them). Nothing here may fail a run: a cache that cannot be written means a slower start, logged.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from spanner_cdc import names

log = logging.getLogger(__name__)

CACHE_ENV = "SPANNER_CDC_SPARK_CACHE"
OFF = "off"
# the JVM's own messages about the archive (a dump skipping signed jars, an archive it cannot use) go to stdout,
# where `--json` output is: the archive is an optimisation, its absence is never worth a line
QUIET = "-Xlog:cds*=off"
HOME_PREFIX = "spark-home-"
WRITER_MODULE = "spanner_cdc.spark.archive_writer"  # the background writer of a class archive
WRITE_TRIES = 3  # writers that ended without an archive before it is given up for this JVM and Spark
DUMP_WAIT_S = 600.0  # the writer's JVM writes ~150 MiB at exit: seconds idle, a minute on a busy machine


def cache_dir() -> Path | None:
    value = os.environ.get(CACHE_ENV, "").strip()
    if value.lower() == OFF:
        return None
    if value:
        return Path(value).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "spanner-cdc"


def _pyspark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _digest(*parts: object) -> str:
    return hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()[:16]


def spark_home(cache: Path) -> Path | None:
    """A Spark home for pyspark's own Spark without its zipped Python copy; None when SPARK_HOME names another Spark."""
    own = _pyspark_home()
    configured = os.environ.get("SPARK_HOME")
    if configured and Path(configured, "jars").resolve() != own / "jars":
        return None  # the user's own Spark distribution: its layout is theirs
    import pyspark

    home = cache / f"{HOME_PREFIX}{_digest(own, pyspark.__version__)}"
    if home.is_dir():
        return home
    building = cache / f".spark-home-{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    for entry in own.iterdir():
        if entry.name != "python":
            (building / entry.name).symlink_to(entry)
    try:
        building.rename(home)
    except OSError:  # another process built it first
        shutil.rmtree(building, ignore_errors=True)
    return home


def cached_spark_home() -> Path | None:
    """`spark_home` in the cache; None when the cache is off or cannot be written (logged) or SPARK_HOME is another Spark."""
    cache = cache_dir()
    if cache is None:
        return None
    try:
        cache.mkdir(parents=True, exist_ok=True)
        return spark_home(cache)
    except OSError as exc:
        log.warning("spark: no start cache in %s (%s); set %s to a writable directory or to off", cache, exc, CACHE_ENV)
        return None


def _home_key(home: Path) -> str:
    return home.name.removeprefix(HOME_PREFIX)


def _archive_home_key(archive: Path) -> str | None:
    """The Spark home an archive was written for (`driver-classes-<home>-<build>.jsa`); None for another name."""
    parts = archive.stem.split("-")
    return parts[2] if len(parts) == 4 else None


def _java_home() -> Path | None:
    configured = os.environ.get("JAVA_HOME")
    java = Path(configured) / "bin" / "java" if configured else shutil.which("java")
    return Path(java).resolve().parent.parent if java else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class ClassArchive:
    """The driver JVM's class archive for one JVM and one Spark home (their files' identities are in its name)."""

    path: Path

    @classmethod
    def for_home(cls, cache: Path, home: Path) -> ClassArchive | None:
        java_home = _java_home()
        if java_home is None:
            return None
        modules, jars = java_home / "lib" / "modules", (home / "jars").resolve()
        build = _digest(java_home, modules.stat().st_mtime_ns, home, jars.stat().st_mtime_ns)
        return cls(cache / f"driver-classes-{_home_key(home)}-{build}.jsa")

    @property
    def ready(self) -> bool:
        return self.path.exists()

    @property
    def _lock(self) -> Path:
        return self.path.with_suffix(".writing")

    @property
    def _failures(self) -> Path:
        return self.path.with_suffix(".failures")

    def _failed(self) -> int:
        try:
            return int(self._failures.read_text() or "0")
        except (OSError, ValueError):
            return 0

    def _holder(self) -> int | None:
        """The live process writing the archive, if any."""
        try:
            pid = int(self._lock.read_text() or "0")
        except (OSError, ValueError):
            return None
        return pid if pid and _alive(pid) else None

    def start_writer(self, home: Path) -> None:
        """Start the background writer unless one runs or enough have failed; never waits for it."""
        if self.ready or self._failed() >= WRITE_TRIES or self._holder() is not None:
            return
        env = {k: v for k, v in os.environ.items() if k not in names.SPARK_CONNECT_MARKERS}  # a classic driver
        env.update(SPARK_HOME=str(home), **{CACHE_ENV: str(self.path.parent)})
        logfile = self.path.with_suffix(".log")
        with logfile.open("ab") as out:
            writer = subprocess.Popen(
                [sys.executable, "-m", WRITER_MODULE, str(self.path)], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                env=env, start_new_session=True,
            )  # fmt: skip
        log.info("spark: writing a class archive for faster driver starts in the background (pid %s, once)", writer.pid)

    def prune_others(self) -> None:
        """Delete the archives no driver will map again: this Spark home's for an older JVM or Spark, and those of
        Spark homes whose files are gone (a removed virtualenv), with their homes. Another environment's archive stays:
        two virtualenvs sharing the cache would otherwise delete each other's at every start and write it again."""
        cache, ours = self.path.parent, _archive_home_key(self.path)
        for home in cache.glob(f"{HOME_PREFIX}*"):
            if home.is_dir() and not (home / "jars").exists():  # its links point into a deleted pyspark
                shutil.rmtree(home, ignore_errors=True)
        for other in cache.glob("driver-classes-*.jsa"):
            key = _archive_home_key(other)
            if other != self.path and (key is None or key == ours or not (cache / f"{HOME_PREFIX}{key}").is_dir()):
                for stale in (other, other.with_suffix(".log"), other.with_suffix(".failures")):
                    stale.unlink(missing_ok=True)

    def write(self, run_a_driver: Callable[[str], int | None]) -> bool:
        """The writer: a driver of its own (`run_a_driver`, given the JVM's options, returns its JVM's exit code) whose
        JVM records the classes it loads and writes them at its exit."""
        try:
            fd = os.open(self._lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if self._holder() is not None:
                return False
            self._lock.unlink(missing_ok=True)  # a dead writer's
            return self.write(run_a_driver)
        with os.fdopen(fd, "w") as lock:
            lock.write(str(os.getpid()))
        writing = self.path.with_name(f"{self.path.name}.{os.getpid()}")
        try:
            code = run_a_driver(f"-XX:ArchiveClassesAtExit={writing} {QUIET}")
            if code == 0 and writing.exists():
                os.replace(writing, self.path)
                self.prune_others()
                return True
            self._failures.write_text(str(self._failed() + 1))  # e.g. a non-empty directory on the class path
            return False
        finally:
            writing.unlink(missing_ok=True)
            self._lock.unlink(missing_ok=True)


@dataclass
class FastStart:
    """What a driver about to start here uses: the Spark home's environment and the JVM's options."""

    home: Path | None = None
    archive: ClassArchive | None = None

    @classmethod
    def prepare(cls, *, new_jvm: bool) -> FastStart:
        """`new_jvm`: pyspark is about to launch a JVM (not reuse this process's gateway, started with its own options)."""
        cache = cache_dir()
        home = cached_spark_home() if new_jvm else None
        if cache is None or home is None:
            return cls()
        try:
            return cls(home, ClassArchive.for_home(cache, home))
        except OSError as exc:
            log.warning("spark: no class archive in %s (%s)", cache, exc)
            return cls(home)

    def java_options(self) -> str:
        return (
            f"-XX:SharedArchiveFile={self.archive.path} {QUIET}"
            if self.archive is not None and self.archive.ready
            else ""
        )

    def started(self) -> None:
        """The driver is up (so this environment starts one): without an archive yet, one is written for the next."""
        if self.archive is not None and self.home is not None and not self.archive.ready:
            try:
                self.archive.start_writer(self.home)
            except OSError as exc:
                log.debug("spark: no class archive writer (%s)", exc)
