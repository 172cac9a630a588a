"""A real Apache Kafka (KRaft) cluster as local JVM processes, and the jars it runs from."""

from spark_statestore.connectors.kafka.local.cluster import (
    KafkaNode,
    LocalKafkaCluster,
    create_topics,
    find_java,
    parse_topic_spec,
)
from spark_statestore.connectors.kafka.local.jars import (
    KAFKA_VERSION,
    JarSet,
    hdfs_minicluster_jars,
    kafka_jars,
    resolve,
    spark_avro_jars,
    spark_kafka_jars,
)

__all__ = [
    "KAFKA_VERSION",
    "JarSet",
    "KafkaNode",
    "LocalKafkaCluster",
    "create_topics",
    "find_java",
    "hdfs_minicluster_jars",
    "kafka_jars",
    "parse_topic_spec",
    "resolve",
    "spark_avro_jars",
    "spark_kafka_jars",
]
