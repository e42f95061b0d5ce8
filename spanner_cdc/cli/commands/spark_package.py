"""`spanner-cdc spark-package OUT.zip`: build the zip of spanner_cdc that the spark_py_files setting ships to the executors."""

from __future__ import annotations

import argparse
from pathlib import Path

ORDER = 45


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "spark-package",
        help="build the zip of the package that Spark ships to the executors",
        description="Write this installation's spanner_cdc package as a zip for a cluster's executors. Name it in the "
        "spark_py_files setting (SPANNER_CDC_SPARK_PY_FILES; a path the driver reads, or an hdfs://, s3a:// or gs:// "
        "URL): classic drivers ship it with spark.submit.pyFiles, Spark Connect sessions with addArtifacts. The "
        "executors' Python must have the package's dependencies (pip install 'spanner-cdc[spark]' there, or a "
        "cluster image with them).",
    )
    parser.add_argument("out", type=Path, metavar="OUT.zip", help="where to write the zip")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from spanner_cdc.spark.shipping import ENV, build_package

    out = build_package(args.out)
    print(f"{out}: set {ENV}={out.resolve()} (or spark_py_files in the config file)")
    return 0
