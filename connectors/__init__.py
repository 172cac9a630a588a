"""Bindings of spark-statestore to outside systems (Kafka, Spark).

Installed as ``spark_statestore.connectors``; the engine never imports this package at
module level.
"""
