"""The ``spark-statestore`` command (broker, jars, tail, follow, demo, bench).

:mod:`~spark_statestore.cli.main` builds the parser and runs a subcommand;
:mod:`~spark_statestore.cli.follow` is the ``follow`` command and
:mod:`~spark_statestore.cli.progress` its progress line. Subcommands import what they need
when they run, so ``spark-statestore --help`` stays fast and ``import spark_statestore.cli``
loads no Kafka client and no Spark.
"""

from __future__ import annotations

from spark_statestore.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
