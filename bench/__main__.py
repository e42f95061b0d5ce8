"""Run every benchmark module bench/bench_*.py (or the ones named) and print their reports one after another."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
from collections.abc import Sequence

import bench
from bench import figures


def available() -> list[str]:
    return sorted(info.name for info in pkgutil.iter_modules(bench.__path__) if info.name.startswith("bench_"))


def main(argv: Sequence[str] | None = None) -> int:
    names = list(sys.argv[1:] if argv is None else argv)
    if any(name in ("-h", "--help") for name in names):
        print(f"usage: python -m bench [NAME ...]\n\nBenchmarks: {', '.join(available())} (default: all, with default settings)")
        return 0
    modules = [n if n.startswith("bench_") else f"bench_{n}" for n in names] or available()
    unknown = [n for n in modules if n not in available()]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; available: {', '.join(available())}", file=sys.stderr)
        return 2
    failed = []
    for name in modules:
        print(f"=== {name} ===", flush=True)
        started = time.monotonic()
        code = importlib.import_module(f"bench.{name}").main([])
        print(f"=== {name}: exit {code} after {time.monotonic() - started:.0f}s ===\n", flush=True)
        if code:
            failed.append(name)
    print("=== summary: every figure reported above, its target and the ratio (>= 1 meets it) ===")
    print(figures.render(figures.FIGURES))
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
