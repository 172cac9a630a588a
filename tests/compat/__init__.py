"""``make compat``: the README's compatibility table, filled by real test runs per Kafka
Streams, broker and PySpark version (:mod:`tests.compat.run`); outside CI."""
