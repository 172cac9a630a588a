"""``spark-statestore pack-env``: pack the plugin for a cluster's executors.

Makes a virtualenv of the given wheels (``make dist``'s: the package and the compiled
extension's manylinux wheel) or requirements, without PySpark (the executors use their
cluster's), packs it into a ``.tar.gz`` for ``spark.archives`` and prints the settings that
ship it. See :mod:`spark_statestore.connectors.spark.shipping` and README, "Running on a
cluster".
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_pack_command"]


def _cmd_pack_env(args: argparse.Namespace) -> int:
    from spark_statestore.connectors.spark.shipping import pack_environment

    shipped = pack_environment(
        args.archive,
        args.requirements,
        python=args.python,
        name=args.name,
        with_pyspark=args.with_pyspark,
        pip_args=args.pip_arg or (),
    )
    size = shipped.archive.stat().st_size / 2**20
    print(f"packed {shipped.archive} ({size:.0f} MiB); Python {shipped.python}", flush=True)
    print("ship it with these Spark settings (every executor host needs that Python):")
    for key, value in shipped.conf.items():
        print(f"  {key}={value}")
    python = shipped.conf["spark.pyspark.python"]
    print(
        f"and, for a driver in client mode, set PYSPARK_PYTHON={python}"
        f" and run it from a directory holding ./{shipped.name} linked to its own environment "
        f"(ShippedEnvironment.link_driver(); README, Running on a cluster)",
        flush=True,
    )
    return 0


def add_pack_command(sub: Any) -> None:
    """Register ``pack-env``."""
    pack = sub.add_parser(
        "pack-env",
        help="pack the plugin and its dependencies for a cluster's executors (spark.archives)",
        description="Make a virtualenv of the given wheels or requirements (without PySpark: "
        "executors use their cluster's), pack it into ARCHIVE (.tar.gz) and print the Spark "
        "settings that ship it to every executor.",
    )
    pack.add_argument("archive", metavar="ARCHIVE", help="the .tar.gz file to write")
    pack.add_argument(
        "requirements",
        metavar="WHEEL_OR_REQUIREMENT",
        nargs="+",
        help="wheel files (make dist's) or requirement specifiers for pip",
    )
    pack.add_argument(
        "--python",
        metavar="PATH",
        default=sys.executable,
        help="the interpreter to make the virtualenv with; executors need it at the same "
        "path (default: this one)",
    )
    pack.add_argument(
        "--name",
        default="statestore-env",
        help="the directory it unpacks to on executors (default statestore-env)",
    )
    pack.add_argument(
        "--with-pyspark", action="store_true", help="keep PySpark and py4j in the archive"
    )
    pack.add_argument(
        "--pip-arg",
        metavar="ARG",
        action="append",
        help="one more argument for pip install (repeat it), e.g. --pip-arg=--find-links=dist",
    )
    pack.set_defaults(func=_cmd_pack_env)
