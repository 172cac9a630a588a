"""The ``spark-statestore`` command (broker, jars, tail, follow, demo, bench, serve, inspect,
lag, query).

:mod:`~spark_statestore.cli.main` builds the parser and runs a subcommand;
:mod:`~spark_statestore.cli.follow` is the ``follow`` command and
:mod:`~spark_statestore.cli.progress` its progress line; :mod:`~spark_statestore.cli.serve`,
:mod:`~spark_statestore.cli.inspect`, :mod:`~spark_statestore.cli.lag` and
:mod:`~spark_statestore.cli.query` (with :mod:`~spark_statestore.cli.routed` over a
changelog's replicas, both taking :mod:`~spark_statestore.cli.query_types`) are the store
commands, which reach a store through :mod:`~spark_statestore.cli.store_state`;
:mod:`~spark_statestore.cli.signals` stops the long-running ones. Subcommands import what
they need when they run, so ``spark-statestore --help`` stays fast and ``import
spark_statestore.cli`` loads no Kafka client and no Spark.
"""

from __future__ import annotations

from spark_statestore.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
