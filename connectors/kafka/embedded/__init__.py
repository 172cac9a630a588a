"""The embedded Kafka broker (librdkafka's mock cluster) used by tests and the demo."""

from spark_statestore.connectors.kafka.embedded.broker import (
    ApiKey,
    EmbeddedBroker,
    create_topics,
    parse_topic_spec,
)

__all__ = ["ApiKey", "EmbeddedBroker", "create_topics", "parse_topic_spec"]
