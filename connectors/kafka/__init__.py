"""Kafka bindings: changelog reader/writer, admin helpers and the embedded broker."""
