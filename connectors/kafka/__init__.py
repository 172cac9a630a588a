"""Kafka bindings: changelog reader/writer, admin helpers and a local Kafka cluster."""
