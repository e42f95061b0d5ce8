"""Benchmarks: each bench_*.py module has main(argv) -> exit code and prints its own report."""
